"""Write the shared part of every runbook (docs/runbooks/<Alert>.md) from one source.

    python docs/runbooks/generate.py           # rewrite the shared blocks of every alert's runbook (make runbooks)
    python docs/runbooks/generate.py --check   # exit 1, naming each runbook whose blocks are stale

What gpuhealth does for an alert, and how a person takes a node over, follow from two things only: the alert's
labels in rules/ (`remediation`, `component`, `node="*"` for a fleet alert, a summary that names `$labels.gpu` for
an alert about one GPU, an expression that another alert holds back) and the remediator's policy defaults, read
with remediator.policy's own loader from gpuhealth/remediator/policy.example.yaml
(tests/remediator/test_remediator_policy.py checks that file against the built-in defaults). No number is written here
by hand: every timeout, delay and budget comes from the policy, every annotation and taint name from the remediator's
code.

A runbook keeps its own text (what the alert means, what on-call does, anything particular to the alert) outside
two marked blocks, which this script owns:

    ## What gpuhealth does
    <!-- BEGIN shared:what-gpuhealth-does ... -->   the ladder for the alert's remediation, GPU scope, return,
    <!-- END shared:what-gpuhealth-does -->           budgets (text of the page's own may follow)
    ...
    <!-- BEGIN shared:on-call ... -->               holds (the CLI and its exact kubectl annotate), silences,
    <!-- END shared:on-call -->                       a person's cordon (node alerts); where the lasting record is

A runbook without the blocks gets them: the first after its `## What gpuhealth does` heading (the heading is added
before `## What on-call does` when missing), the second in place of a `## Take over, or keep gpuhealth quiet`
section, or at the end. An alert without a runbook page is an error: the page's own text is a person's to write.
tests/docs/test_runbooks.py fails while any block is stale, and checks the blocks against what the ladder does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the project's packages come from the checkout
    sys.path.insert(0, str(ROOT))

from docs.runbooks.safeguards import dur, safeguards  # noqa: E402  (evidence, validation, diagnosis, offenders)
from gpuhealth.remediator.decide.history import NOT_HARDWARE_COMPONENTS  # noqa: E402
from gpuhealth.remediator.decide.nodestate import (  # noqa: E402
    DO_NOT_DISRUPT_ANNOTATION,
    HOLD_ANNOTATION,
    LAST_EPISODE_ANNOTATION,
    RUNGS,
    STATE_ANNOTATION,
    TAINT_EFFECT,
    TAINT_KEY,
    max_rung_of,
    rung_index,
)
from gpuhealth.remediator.policy import Policy, load_policy  # noqa: E402

RUNBOOKS = ROOT / "docs" / "runbooks"
RULE_FILES = sorted([*(ROOT / "rules").glob("alerts/*.yaml"), *(ROOT / "rules").glob("recording/*.yaml")])
POLICY_DEFAULTS = ROOT / "gpuhealth" / "remediator" / "policy.example.yaml"
BLOCKS = ("what-gpuhealth-does", "on-call")
GENERATOR = "docs/runbooks/generate.py"
GPU_SCOPE_RUNGS = ("cordon", "drain", "reset_gpu")  # what a fault on one GPU can stay within (docs/remediation.md)
# An alert another alert holds back: `... unless on (...) ALERTS{alertname="X"...}`
HELD_BACK_BY = re.compile(r'unless\b[^{]*?ALERTS\{alertname="(\w+)"', re.S)


@dataclass(frozen=True)
class AlertFacts:
    """What the shared text depends on, read from the alert's rule."""

    name: str
    remediation: str
    max_rung: str | None  # how far its fault may climb (its label, as the remediator reads it; None: no label)
    component: str
    own: bool  # about gpuhealth itself (component probe): it climbs no Ready node, max_rung is its own rung here
    fleet: bool  # node="*": about the fleet, no node
    one_gpu: bool  # its summary names $labels.gpu: an alert about one GPU
    held_back_by: tuple[str, ...]  # alerts that hold this one back in Prometheus while they are pending or firing
    not_ready_rung: str | None = None  # an own alert's max_rung label: how far it climbs on a NotReady node

    @classmethod
    def of(cls, rule: dict[str, Any]) -> AlertFacts:
        labels, annotations = rule.get("labels") or {}, rule.get("annotations") or {}
        remediation, component = labels.get("remediation", "none"), labels.get("component", "")
        own = component in NOT_HARDWARE_COMPONENTS and remediation in RUNGS
        return cls(name=rule["alert"], remediation=remediation,
                   max_rung=remediation if own else max_rung_of(labels.get("max_rung"), remediation),
                   component=component, own=own, not_ready_rung=max_rung_of(labels.get("max_rung"), remediation)
                   if own else None, fleet=labels.get("node") == "*",
                   one_gpu="$labels.gpu" in annotations.get("summary", ""),
                   held_back_by=tuple(dict.fromkeys(HELD_BACK_BY.findall(str(rule.get("expr", ""))))))


def alerts() -> list[AlertFacts]:
    """Every alert in rules/ (alerts/ and the recording files that hold the SLO and workload alerts)."""
    out = []
    for path in RULE_FILES:
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups") or []:
            out += [AlertFacts.of(rule) for rule in group.get("rules") or [] if "alert" in rule]
    return out


def policy_defaults() -> Policy:
    return load_policy(POLICY_DEFAULTS)


# --- the ladder, as the policy sets it ------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """A rung the ladder reaches for an alert whose fault persists: `after` the previous rung was done (None: the
    rung the alert asks for, reached without waiting)."""

    rung: str
    after: timedelta | None


def climb(policy: Policy, remediation: str, max_rung: str | None = None) -> tuple[list[Step], str]:
    """The rungs an actionable alert's fault goes through while it keeps firing and every rung succeeds, and why
    it stops where it does. Cordon and drain are passed through on the way to the rung the alert asks for; the climb
    stops at the alert's max_rung (its ceiling) or `ladder.max_rung`, the lower."""
    top = rung_index(policy.ladder.max_rung)
    target = min(rung_index(remediation), top)
    ceiling = rung_index(max_rung) if max_rung is not None else top
    steps = [Step(RUNGS[target], None)]
    while True:
        rung = RUNGS[rung_index(steps[-1].rung)]
        if rung == "replace":
            return steps, "replace is the last rung"
        if rung_index(rung) >= top:
            return steps, f"the ladder stops at `ladder.max_rung` ({policy.ladder.max_rung})"
        if rung_index(rung) >= ceiling:
            return steps, f"the alert's `max_rung` label is {max_rung}: gpuhealth takes it no further, a person does"
        after = policy.rung(rung).escalate_after
        if after is None:
            return steps, f"`ladder.{rung}.escalate_after` is unset"
        steps.append(Step(RUNGS[rung_index(rung) + 1], after))


def _rung_work(policy: Policy, rung: str) -> str:
    """What one rung does, and when it is done or failed."""
    timeout = policy.rung(rung).timeout
    if rung == "cordon":
        return (f"gpuhealth's taint `{TAINT_KEY}:{TAINT_EFFECT}` and `spec.unschedulable: true` on the Node. Running "
                "pods keep running; nothing new is scheduled there")
    if rung == "drain":
        karpenter = (f"; the Node gets `{DO_NOT_DISRUPT_ANNOTATION}: \"true\"` (`drain.karpenter_do_not_disrupt`), so "
                     "Karpenter does not consolidate it mid-ladder" if policy.drain.karpenter_do_not_disrupt else "")
        return ("the node's pods are evicted through the Eviction API (PodDisruptionBudgets respected, a "
                "refused eviction is tried again every pass; DaemonSet, mirror and finished pods stay), and it is done "
                f"when none is left, none terminating{karpenter}")
    if rung == "reset_gpu":
        operands = ", ".join(o.name for o in policy.reset.operands) or "none"
        return ("gpuhealth first stops the GPU's clients (the GPU Operator "
                f"operands {operands} are paused through their `nvidia.com/gpu.deploy.*` labels, gpuhealth's "
                "exporter releases NVML), then a privileged Job runs `nvidia-smi --gpu-reset -i <gpu>` on the GPU the "
                "alert's `gpu` label names (every GPU of the node for `all` or `unknown`, when the alerts name "
                f"several GPUs, or where the node's GPUs reset only together: `reset.scope: {policy.reset.scope}`), "
                "checks that the GPU is back with the same UUID, and restores the clients whatever the outcome. The "
                "rung fails when the Job fails" + (f" or is not done within {dur(timeout)} "
                                                   "(`ladder.reset_gpu.timeout`)" if timeout else ""))
    if rung == "reboot":
        deadline = (f", and fails when that takes longer than {dur(timeout)} (`ladder.reboot.timeout`)" if timeout
                    else "")
        return ("a privileged Job runs `systemctl reboot` on the host; the rung is done when the node is back with a "
                f"new boot id and Ready{deadline}")
    method = policy.replace.method
    how = {"nodeclaim": "deletes the node's Karpenter NodeClaim (`replace.method: nodeclaim`): Karpenter terminates "
                        "the node and brings capacity back when pods need it",
           "condition": f"sets the Node condition `{policy.replace.condition_type}` to False (`replace.method: "
                        "condition`) for Karpenter's node repair to replace the node",
           "hook": "calls the configured hook (`replace.method: hook`, `replace.hook_url`)"}.get(method, method)
    deadline = (f"; not replaced within {dur(timeout)} (`ladder.replace.timeout`): `ReplaceTimedOut` is reported and "
                "the node stays out of service for a person" if timeout else "")
    return f"gpuhealth {how}{deadline}"


def _start(facts: AlertFacts, policy: Policy) -> str:
    target = climb(policy, facts.remediation, facts.max_rung)[0][0].rung
    capped = (f" (the alert asks for {facts.remediation}; `ladder.max_rung` stops the ladder at {target})"
              if target != facts.remediation else "")
    if target == "cordon":
        return f"**Starts** at the cordon rung{capped}, done at once: {_rung_work(policy, 'cordon')}."
    passes = "cordon, then drain" if target != "drain" else "cordon"
    return (f"**Starts** at the {target} rung{capped}, passing through {passes} in the same pass "
            f"(each as far as the budgets below allow). Then {_titled(target)}: {_rung_work(policy, target)}.")


def _titled(rung: str) -> str:
    name = {"drain": "the drain", "reset_gpu": "the GPU reset", "reboot": "the reboot",
            "replace": "the replacement"}[rung]
    return name if rung == "drain" else f"{name}, once the node is drained"


def _drain_timeout(policy: Policy) -> str:
    timeout = policy.rung("drain").timeout
    if timeout is None:
        return "The drain has no time limit (`ladder.drain.timeout` is unset): it waits for the PodDisruptionBudgets."
    on_timeout = policy.drain.on_timeout
    then = {"wait": "gpuhealth keeps evicting as the PodDisruptionBudgets allow, and nothing above the drain starts "
                    "until the node is empty",
            "force": "the pods left are deleted, PodDisruptionBudgets ignored (they still terminate gracefully)",
            "escalate": "the drain counts as failed; after a failed drain the ladder never climbs above the alerts' "
                        "own rung"}[on_timeout]
    return (f"A drain still under way after {dur(timeout)} (`ladder.drain.timeout`) is reported once "
            f"(`DrainTimedOut`), then `drain.on_timeout: {on_timeout}`: {then}.")


STAYS = {"cordon": "cordoned", "drain": "cordoned and drained", "reset_gpu": "cordoned and drained",
         "reboot": "cordoned and drained"}


def _climbing(facts: AlertFacts, policy: Policy) -> list[str]:
    steps, why = climb(policy, facts.remediation, facts.max_rung)
    first, last = steps[0].rung, steps[-1].rung
    lines = []
    if rung_index(last) >= rung_index("drain"):
        lines.append(_drain_timeout(policy))
    for before, step in itertools.pairwise(steps):
        assert step.after is not None
        lines.append(f"**Climbs** to {step.rung} when the alert still fires {dur(step.after)} after the "
                     f"{before.rung} rung was done (`ladder.{before.rung}.escalate_after`): {_titled(step.rung)}: "
                     f"{_rung_work(policy, step.rung)}.")
    if facts.own:
        why = ("the alert is about gpuhealth itself, component `probe`: on a node whose kubelet reports Ready it "
               "climbs no further, whatever its `max_rung`")
    if last != "replace":
        lines.append(f"**Does not climb from {last}** ({why}): while the alert keeps firing the node stays "
                     f"{STAYS[last]}, and nothing more disruptive happens unless another alert on the node asks for "
                     "more.")
    if facts.not_ready_rung and rung_index(facts.not_ready_rung) > rung_index(last):
        lines.append(f"**On a NotReady node** (its kubelet stopped reporting too: the host is down, not only "
                     f"gpuhealth) the alert climbs as its `max_rung` label lets it, up to {facts.not_ready_rung}, each "
                     "rung `escalate_after` after the last ([docs/remediation.md](../remediation.md#gpuhealths-own-"
                     "breakage)).")
    jobs = [r for r in ("reset_gpu", "reboot") if rung_index(first) <= rung_index(r) <= rung_index(last)]
    if jobs:
        what = " or a ".join("reset" if r == "reset_gpu" else r for r in jobs)
        lines.append(f"A {what} that fails (its Job failed, or its timeout passed) climbs to the next rung without "
                     f"waiting for `escalate_after`, up to `ladder.max_rung` ({policy.ladder.max_rung}); a rung that "
                     "fails at `ladder.max_rung` waits for a person.")
    return lines


def _gpu_scoped(facts: AlertFacts) -> bool:
    """An alert about one GPU that asks for no more than a GPU's rungs can do."""
    return facts.one_gpu and facts.remediation in GPU_SCOPE_RUNGS


def _budget(facts: AlertFacts, policy: Policy) -> str:
    b, br = policy.budget, policy.breaker
    text = (f"**Within budgets** (per pool, `{policy.pools.label}`): at most {b.max_cordoned} of a pool's nodes "
            f"carry gpuhealth's taint at once (`budget.max_cordoned`), and {b.max_actions_per_hour} actions start in "
            "an hour fleet-wide (`budget.max_actions_per_hour`)")
    climbs = len(climb(policy, facts.remediation, facts.max_rung)[0]) > 1
    if rung_index(facts.remediation) >= rung_index("drain") or climbs:
        text += (f"; at most {b.max_disrupted} of a pool's nodes in drain or beyond (`budget.max_disrupted`), and no "
                 f"new drain or rung above it in a pool where more than {br.threshold:g}% of the nodes (and at least "
                 f"{br.min_nodes}) have actionable alerts firing: the circuit breaker, open for {dur(br.cooldown)} "
                 "after it last tripped")
    return text + ". A step over a budget is deferred and tried again every pass, oldest episode first."


def _gpu_scope(facts: AlertFacts, policy: Policy) -> str | None:
    if not _gpu_scoped(facts):
        return None
    if not policy.dra.enabled:
        return "**One GPU:** `dra.enabled` is false, so the fault takes the node as above."
    effects = "NoSchedule" + (", then NoExecute for the drain (kube-controller-manager evicts exactly the pods whose "
                              "claims use the GPU)" if facts.remediation != "cordon" else "")
    reset = "; the reset waits only for that GPU's pods" if facts.remediation == "reset_gpu" else ""
    narrow = ("" if facts.remediation == "cordon" else
              ", except that the drain evicts only the pods the alert's `gpu_pods` annotation names and the node's GPU "
              "pods created since shortly before the alert (the whole node when it says `unknown`)")
    return ("**One GPU, where the cluster can quarantine it.** The alert names one GPU (`gpu`). Where the DRA driver "
            f"`{policy.dra.driver}` publishes the node's GPUs and the API server serves DeviceTaintRule, gpuhealth "
            f"quarantines that GPU instead of the node (GPU scope): a device taint `{policy.dra.taint_key}` with "
            f"effect {effects}{reset}; the node stays in service for its other GPUs, within "
            f"`budget.max_quarantined_gpus` ({policy.budget.max_quarantined_gpus} of the pool's GPUs). A fault that "
            "outgrows the GPU (a reboot, another GPU, a GPU step that fails) takes the node ladder. With the device "
            f"plugin (no DRA) the node ladder applies{narrow}. [docs/remediation.md](../remediation.md#node-scope-and-"
            "gpu-scope).")


def _returning(facts: AlertFacts, policy: Policy) -> str:
    steps = climb(policy, facts.remediation, facts.max_rung)[0]
    if steps[0].rung == "replace":
        return "**Never returned to service:** the node is replaced."
    dra = (", and removes the DeviceTaintRules it made (GPU scope)" if _gpu_scoped(facts) and policy.dra.enabled
           else "")
    karpenter = (f", removes `{DO_NOT_DISRUPT_ANNOTATION}` if it set it" if policy.drain.karpenter_do_not_disrupt
                 and rung_index(steps[-1].rung) >= rung_index("drain") else "")
    replaced = " A node that reached replace never returns." if steps[-1].rung == "replace" else ""
    return (f"**Back in service** when every alert on the node has been resolved for "
            f"{dur(policy.return_to_service.healthy_delay)} (`return_to_service.healthy_delay`) and no reset or reboot "
            "is under way: gpuhealth removes its taint, makes the node schedulable again only if it was gpuhealth "
            f"that made it unschedulable{karpenter}{dra}; the `ReturnedToService` Event says so.{replaced}")


def what_gpuhealth_does(facts: AlertFacts, policy: Policy) -> str:
    if facts.fleet:
        return (f"`remediation={facts.remediation}`, `node=\"*\"`: a fleet alert. It names no node (`*` is no "
                "node's name), so the remediator takes no action for it even where it is sent one. It is for a "
                "person.")
    if facts.remediation == "none":
        return ("`remediation=none`: information. The remediator records the alert on the Node (the job classifier "
                "reads it) and takes no action for it; another alert on the same node that asks for an action gets "
                "its own ladder.")
    parts = [f"`remediation={facts.remediation}`. The ladder (cordon → drain → reset_gpu → reboot → replace) for "
             "this alert, with the policy's defaults (`remediator.policy` in the chart's values changes them; "
             "[docs/remediation.md](../remediation.md#the-ladder)):", "",
             f"- {_start(facts, policy)}"]
    parts += [f"- {line}" for line in _climbing(facts, policy)]
    gpu = _gpu_scope(facts, policy)
    if gpu:
        parts.append(f"- {gpu}")
    steps = climb(policy, facts.remediation, facts.max_rung)[0]
    ceiling = min(facts.max_rung or policy.ladder.max_rung, policy.ladder.max_rung, key=rung_index)
    parts += [f"- {line}" for line in safeguards(policy, facts.remediation, facts.component,
                                                 [s.rung for s in steps], ceiling)]
    parts += [f"- {_budget(facts, policy)}", f"- {_returning(facts, policy)}",
              f"- **Quiet episodes:** a firing alert that is neither resent nor resolved for "
              f"{dur(policy.episode.quiet_timeout)} (`episode.quiet_timeout`; a silence does that) stops the "
              "escalation: the node stays as it is (`EpisodeQuiet` Event) until `gpuhealth-remediator release`."]
    if facts.component == "job":
        parts.append("- **Not evidence against the hardware:** alerts of component `job` never count as a node fault "
                     "for the job classifier, so this cordon cannot make the next failure look like the node's.")
    for other in facts.held_back_by:
        parts.append(f"- **Held back while [{other}]({other}.md) is pending or firing** for the node's pool: then "
                     "this alert does not fire at all (the rule says `unless ... ALERTS{alertname=\"" + other +
                     "\"}`), so a cause on many nodes of a pool at once pages a person instead of cordoning them.")
    return "\n".join(parts)


def hold_command(node: str, reason: str, by: str) -> str:
    """The exact `kubectl annotate` that holds a node as `gpuhealth-remediator hold` does
    (gpuhealth/remediator/clients/kube.py set_hold writes this value: JSON with reason, by, and at, which may be left
    out)."""
    value = json.dumps({"reason": reason, "by": by}, sort_keys=True)
    return f"kubectl annotate node {node} {HOLD_ANNOTATION}='{value}'"


def release_command(node: str) -> str:
    return f"kubectl annotate node {node} {HOLD_ANNOTATION}-"


def on_call(facts: AlertFacts, policy: Policy) -> str:
    """How a person takes a node over (node alerts), and where the lasting record is."""
    lines: list[str] = []
    if not facts.fleet:
        lines += [
            "## Take over, or keep gpuhealth quiet", "",
            "- **Hold the node** (gpuhealth starts nothing and undoes nothing on it, whatever its alerts say): "
            "`gpuhealth-remediator hold <node> --reason \"<ticket>\"`; hand it back with `gpuhealth-remediator "
            "release <node>`. The hold is one annotation on the Node, and `kubectl annotate` sets and removes it "
            f"just as well: `{HOLD_ANNOTATION}` with any value holds; the CLI writes JSON whose `reason` and `by` go "
            "into gpuhealth's decisions and audit lines:",
            "",
            "  ```",
            f"  {hold_command('<node>', '<ticket>', '<you>')}",
            f"  {release_command('<node>')}",
            "  ```",
            "",
            "  The CLI also writes a `HoldSet` or `HoldReleased` Event, and `release` also hands back an episode that "
            "went quiet (its unresolved alerts are dropped); removing the annotation does neither.",
            f"- **Silence the alert** in Alertmanager (gpuhealth checks silences before every disruptive step): "
            f"`amtool silence add alertname={facts.name} node=<node> --duration 4h --comment \"<ticket>\"`.",
            "- **A cordon of your own:** a node a person cordoned *before* gpuhealth acted is left alone entirely. A "
            "`kubectl cordon` *after* gpuhealth's cordon changes nothing gpuhealth can see, so it is undone at "
            "return to service: hold the node instead. Removing gpuhealth's taint also tells it a person took over.",
        ]
    if lines:
        lines.append("")
    lines += ["## The lasting record", "",
              "Kubernetes Events expire (an hour by default: kube-apiserver `--event-ttl`). What lasts:", ""]
    if not facts.fleet:
        lines += [
            f"- On the Node: `{STATE_ANNOTATION}` (the episode under way: alerts by fingerprint, rung, its status and "
            f"times) and `{LAST_EPISODE_ANNOTATION}` (the last finished episode: its alerts, last rung and end): "
            f"`kubectl get node <node> -o jsonpath='{{.metadata.annotations.{_jsonpath(STATE_ANNOTATION)}}}'`.",
            "- The remediator's audit log: one JSON line per decision, action and recording (`event`, `node`, "
            "`action`, `decision`, `reason`, `dry_run`), kept as long as your log store keeps the pod's logs: "
            "`kubectl logs -n <namespace> -l app.kubernetes.io/component=remediator --tail=-1 --prefix | grep "
            "'\"node\": \"<node>\"'` (every replica: the leader acts).",
        ]
    lines += [
        "- Metrics, for Prometheus' retention: `ALERTS{alertname=\"" + facts.name + "\"}`"
        + ("" if facts.fleet else ", `gpuhealth_remediator_actions_total{action,result}`, "
           "`gpuhealth_remediator_rung_timeouts_total{rung}`") + ".",
    ]
    if not facts.fleet:
        lines += ["- What it would do now: `gpuhealth-remediator plan` "
                  "([docs/remediation.md](../remediation.md#on-call))."]
    return "\n".join(lines)


def _jsonpath(annotation: str) -> str:
    return annotation.replace(".", "\\.")


# --- the pages --------------------------------------------------------------------------------------------------
def _begin(block: str) -> str:
    return f"<!-- BEGIN shared:{block} (written by {GENERATOR}, `make runbooks`: edit the generator, not this) -->"


def _end(block: str) -> str:
    return f"<!-- END shared:{block} -->"


def _block_re(block: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- BEGIN shared:{block}\b[^\n]*-->\n.*?<!-- END shared:{block} -->", re.S)


def render_blocks(facts: AlertFacts, policy: Policy) -> dict[str, str]:
    bodies = {"what-gpuhealth-does": what_gpuhealth_does(facts, policy), "on-call": on_call(facts, policy)}
    return {name: f"{_begin(name)}\n{body}\n{_end(name)}" for name, body in bodies.items()}


def blocks_of(page: str) -> dict[str, str]:
    """The page's shared blocks as they stand (a missing one is absent)."""
    return {name: m.group(0) for name in BLOCKS if (m := _block_re(name).search(page))}


def outside_blocks(page: str) -> str:
    """The page's own text: everything but the shared blocks."""
    for name in BLOCKS:
        page = _block_re(name).sub("", page)
    return page


def render_page(page: str, facts: AlertFacts, policy: Policy) -> str:
    """The page with its shared blocks as they should be (added where missing)."""
    blocks = render_blocks(facts, policy)
    does, take = blocks["what-gpuhealth-does"], blocks["on-call"]
    if _block_re("what-gpuhealth-does").search(page):
        page = _block_re("what-gpuhealth-does").sub(lambda _: does, page)
    elif "\n## What gpuhealth does\n" in page:
        page = page.replace("\n## What gpuhealth does\n", f"\n## What gpuhealth does\n{does}\n\n", 1)
    elif "\n## What on-call does\n" in page:
        page = page.replace("\n## What on-call does\n", f"\n## What gpuhealth does\n{does}\n\n## What on-call does\n",
                            1)
    else:
        page = page.rstrip("\n") + f"\n\n## What gpuhealth does\n{does}\n"
    if _block_re("on-call").search(page):
        page = _block_re("on-call").sub(lambda _: take, page)
    else:
        legacy = re.compile(r"^## Take over, or keep gpuhealth quiet\n.*?(?=^## |\Z)", re.S | re.M)
        if legacy.search(page):
            page = legacy.sub(lambda _: take + "\n\n", page, count=1)
        else:
            page = page.rstrip("\n") + f"\n\n{take}\n"
    page = re.sub(r"\n{3,}", "\n\n", page)
    return page.rstrip("\n") + "\n"


def stale(policy: Policy | None = None) -> dict[str, str]:
    """Runbooks whose shared blocks differ from what the generator writes: {alert: why}."""
    policy = policy or policy_defaults()
    out = {}
    for facts in alerts():
        path = RUNBOOKS / f"{facts.name}.md"
        if not path.is_file():
            out[facts.name] = f"no runbook page {path.relative_to(ROOT)}"
            continue
        have, want = blocks_of(path.read_text()), render_blocks(facts, policy)
        missing = [name for name in BLOCKS if name not in have]
        if missing:
            out[facts.name] = f"no shared block {', '.join(missing)}"
        elif have != want:
            out[facts.name] = "shared blocks stale: " + ", ".join(n for n in BLOCKS if have[n] != want[n])
    return out


def write(policy: Policy | None = None) -> list[str]:
    """Rewrite every alert's runbook blocks; returns the pages changed. An alert without a page is an error."""
    policy = policy or policy_defaults()
    missing = [f.name for f in alerts() if not (RUNBOOKS / f"{f.name}.md").is_file()]
    if missing:
        raise SystemExit(f"{GENERATOR}: no runbook page for {', '.join(missing)}: write docs/runbooks/<Alert>.md "
                         "(title, header row, What it means, What on-call does) first")
    changed = []
    for facts in alerts():
        path = RUNBOOKS / f"{facts.name}.md"
        page = path.read_text()
        new = render_page(page, facts, policy)
        if new != page:
            path.write_text(new)
            changed.append(path.name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when a runbook's shared blocks are stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for name, why in sorted(problems.items()):
            hint = "write it, then run `make runbooks`" if why.startswith("no runbook page") else "run `make runbooks`"
            print(f"docs/runbooks/{name}.md: {why} ({hint})")
        return 1 if problems else 0
    for name in write():
        print(f"wrote docs/runbooks/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
