"""The acts: what the executor (act/executor.py) does for each action a plan executes, after the plan's state is on
the Node, as one table (ACTS), the way the simulator's effects are one (gpuhealth/simulator/cluster.py EFFECTS).

The state's write does a cordon, a return to service's Node, the operands' labels and the burn-in taint itself: their
acts here only say so, or release what lives outside the Node (DeviceTaintRules). Each act returns what it did, in
words for the Event and the audit line, and raises when it failed (the executor counts, audits and reports that).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from gpuhealth.remediator.act.diagnose_job import render_diagnose_job
from gpuhealth.remediator.act.drain import drain_pass, held_now
from gpuhealth.remediator.act.evidence_job import EvidenceStore
from gpuhealth.remediator.act.node_jobs import render_job
from gpuhealth.remediator.act.pass_guard import PassGuard
from gpuhealth.remediator.act.replace import replace_node
from gpuhealth.remediator.clients.device_taints import DeviceTaints
from gpuhealth.remediator.clients.errors import Forbidden, KubeError, Rejected
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.decide.decision import NOT_STARTED, Decision, NodePlan
from gpuhealth.remediator.decide.diagnosis import provisioned
from gpuhealth.remediator.decide.nodestate import RESET_REQUEST_ANNOTATION, TAINT_KEY
from gpuhealth.remediator.decide.views import NodeView, evictable_pods
from gpuhealth.remediator.decide.vocabulary import Action, Purpose, RungStatus, Scope
from gpuhealth.remediator.policy import Policy


@dataclass(frozen=True)
class Tools:
    """What the acts act with: the executor's."""

    kube: Kube
    policy: Policy
    guard: PassGuard
    taints: DeviceTaints
    evidence: EvidenceStore


@dataclass(frozen=True)
class Deed:
    """One executed decision and what its act reads: the node's view, its Node as the state's write left it."""

    d: Decision
    view: NodeView
    node: RawNode
    plan: NodePlan
    now: datetime


class JobRefused(Exception):
    """The API server refused a reset or reboot Job (403, 422): it never started (decide/job_start.py's kin)."""


def _status_message(exc: KubeError) -> str:
    """The message of the API server's Status in an error's body (its reason when there is none)."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


# --- the acts the state's write did ----------------------------------------------------------------------------


def written(t: Tools, s: Deed) -> str:
    """Cordon: the state write did it all."""
    return ""


def burn_in_ended(t: Tools, s: Deed) -> str:
    """The state write took the burn-in taint off."""
    return f"removed taint {t.policy.burn_in.taint}"


def returned(t: Tools, s: Deed) -> str:
    """Return to service (uncordon, release_gpu): the state write did the Node; here, gpuhealth's DeviceTaintRules for
    this node, and only those."""
    if not s.plan.base_state.gpu_scope.devices or s.view.taint_api is None:
        return ""
    released = t.taints.release(s.view.taint_api, s.plan.node)
    return f"removed device taint rule(s) {', '.join(released)}" if released else ""


def clients_stopped(t: Tools, s: Deed) -> str:
    """The state write paused the operands and asked the exporter to let go."""
    st = s.plan.final_state
    return f"paused {', '.join(st.reset.paused) or 'no operand label'}; {RESET_REQUEST_ANNOTATION}={st.reset_request}"


def clients_restored(t: Tools, s: Deed) -> str:
    """The state write restored what the reset paused."""
    labels = ", ".join(s.plan.base_state.reset.paused) or "no operand label"
    return f"restored {labels}; removed {RESET_REQUEST_ANNOTATION}"


# --- the acts outside the Node ------------------------------------------------------------------------------


def collect_evidence(t: Tools, s: Deed) -> str:
    """Before the rung past drain (decide/evidence.py)."""
    return t.evidence.collect(s.d, s.plan)


def store_evidence(t: Tools, s: Deed) -> str:
    """Never raises: the rung goes on."""
    return t.evidence.store(s.d, s.plan, s.now)


def quarantine(t: Tools, s: Deed) -> str:
    """One DeviceTaintRule per device, in the version the cluster serves (the ladder chose GPU scope only where one
    does); kube-controller-manager evicts for NoExecute. Not quarantined: the rung fails, and the next pass hands the
    fault to the node ladder."""
    d, view = s.d, s.view
    try:
        assert view.devices is not None and view.taint_api is not None and d.effect is not None
        names = t.taints.taint(view.taint_api, d.node, view.devices.driver, view.devices.pool, d.devices,
                               t.policy.dra.taint_key, d.effect, d.reason)
    except Exception:
        fail_rung(t, s)
        raise
    pods = f"; pods on it: {', '.join(d.pods)}" if d.pods else "; no pod holds it"
    return f"{d.effect} device taint on {', '.join(d.devices)} (DeviceTaintRule {', '.join(names)}){pods}"


def drain(t: Tools, s: Deed) -> str:
    """One drain pass over the pods on the node now (not as listed), within the plan's GPU pods if it has them."""
    d, plan, now, kube, policy = s.d, s.plan, s.now, t.kube, t.policy
    pods = evictable_pods(kube.pods_on(d.node))
    if plan.drain_only is not None:
        pods = [p for p in pods if plan.drain_only.includes(p)]
    # as Karpenter's drain: a pod with an active karpenter.sh/do-not-disrupt stays (unless forced at timeout)
    spare = (lambda p: p.protected(now)) if policy.drain.honor_pod_do_not_disrupt and not d.force else None
    result = drain_pass(kube, pods, policy.drain.eviction_backoff, t.guard.sleep, d.force,
                        guard=t.guard.check, spare=spare, stop=lambda: held_now(kube, d.node))
    if result.errors and not result.evicted and not result.blocked:
        raise RuntimeError(f"drain pass failed: {result.summary()}")
    return result.summary() if (result.evicted or result.errors or result.stopped or d.new) else ""


def diagnose(t: Tools, s: Deed) -> str:
    """The diagnostic Job (decide/validation.py). One the API server refuses is retried on later passes; not made
    within jobs.start_timeout, the ladder reports it as not started (gpuhealth's own breakage)."""
    d, plan = s.d, s.plan
    assert d.job is not None and plan.final_state.diagnostic.purpose is not None
    manifest = render_diagnose_job(d.job, d.node, Purpose(plan.final_state.diagnostic.purpose), provisioned(s.node),
                                   t.policy)
    created = t.kube.create_job(manifest)
    return f"job {t.policy.jobs.namespace}/{d.job} {'created' if created else 'already exists'}"


def rung_job(t: Tools, s: Deed) -> str:
    """reset_gpu, reboot: the Job, on a node (or GPU) still gpuhealth's. One the API server refuses fails the rung as
    not started (gpuhealth's own breakage)."""
    still_ours(t, s)
    d, policy = s.d, t.policy
    assert d.job is not None
    try:
        created = t.kube.create_job(render_job(d.action, d.job, d.node, policy, d.gpu))
    except (Forbidden, Rejected) as exc:
        if isinstance(exc, Rejected) and exc.throttled:
            raise
        why = f"the API server refused the Job ({exc}: {_status_message(exc)})"
        fail_rung(t, s, not_started=why)
        raise JobRefused(f"{NOT_STARTED}: job {policy.jobs.namespace}/{d.job}: {why}. It touched no GPU: "
                         "gpuhealth's own breakage (its RBAC, its Jobs' admission policy, a chart and an "
                         "image of different releases), not the node's; the ladder does not climb for "
                         "it") from exc
    return f"job {policy.jobs.namespace}/{d.job} {'created' if created else 'already exists'}"


def replacement(t: Tools, s: Deed) -> str:
    """The node replaced (act/replace.py), if it is still gpuhealth's; failed, the rung fails."""
    still_ours(t, s)
    try:
        return replace_node(t.kube, s.d.node, t.policy, s.now, s.d.reason)
    except Exception:
        fail_rung(t, s)
        raise


def still_ours(t: Tools, s: Deed) -> None:
    """Before a Job rung or a replacement: gpuhealth's taint (at GPU scope, its device taints) still there."""
    at_gpu_scope = s.plan.final_state.scope == Scope.GPU and s.d.action == Action.RESET_GPU
    tainted = any(taint.get("key") == TAINT_KEY for taint in api_objects.taints(s.node))
    if not at_gpu_scope and not tainted:
        raise RuntimeError("gpuhealth's taint is not on the node: a person took over; not starting")
    if at_gpu_scope and s.view.taint_api is not None and not t.taints.ours(s.view.taint_api, s.d.node):
        raise RuntimeError("gpuhealth's device taints are gone from the GPU: a person took over; not starting")


def fail_rung(t: Tools, s: Deed, not_started: str | None = None) -> None:
    """The step that started the plan's rung failed: the rung is failed, written on our own write's
    resourceVersion (the Node exactly as this plan left it). not_started: its Job never could (why)."""
    failed = replace(s.plan.final_state, rung_status=RungStatus.FAILED, rung_done=s.now,
                     not_started=not_started, pending=())  # nothing of a failed rung is done again
    t.guard.check()
    t.kube.write_state(s.plan.node, failed, api_objects.resource_version(s.node))


# One act per action a plan executes (every Action but NONE, which is never executed); a test holds this table and
# the simulator's EFFECTS to that.
ACTS: dict[Action, Callable[[Tools, Deed], str]] = {
    Action.CORDON: written,
    Action.DRAIN: drain,
    Action.RESET_GPU: rung_job,
    Action.REBOOT: rung_job,
    Action.REPLACE: replacement,
    Action.UNCORDON: returned,
    Action.QUARANTINE_GPU: quarantine,
    Action.RELEASE_GPU: returned,
    Action.STOP_GPU_CLIENTS: clients_stopped,
    Action.RESTORE_GPU_CLIENTS: clients_restored,
    Action.DIAGNOSE: diagnose,
    Action.COLLECT_EVIDENCE: collect_evidence,
    Action.STORE_EVIDENCE: store_evidence,
    Action.END_BURN_IN: burn_in_ended,
}
