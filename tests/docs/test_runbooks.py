"""The runbooks say what gpuhealth does, from one source: docs/runbooks/generate.py renders each alert's shared
blocks from the alert's labels in rules/ and the remediator's policy defaults (remediator.policy's loader). These
tests fail while a block is stale, while a runbook states a rung timeout, a climb or a policy value the policy does
not have, and while the ladder the runbooks describe is not the one the remediator climbs."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import re
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuhealth.remediator.decide.nodestate import RUNGS, rung_index
from gpuhealth.remediator.policy import Policy, parse_duration, parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support import paths
from tests.support.remediator_harness import Harness

ROOT = paths.REPO
RUNBOOKS = ROOT / "docs" / "runbooks"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runbooks_generate", RUNBOOKS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = _generator()
ALERTS = {facts.name: facts for facts in gen.alerts()}


def _pages() -> list[Path]:
    return sorted(RUNBOOKS / f"{name}.md" for name in ALERTS if (RUNBOOKS / f"{name}.md").is_file())


def test_every_alerts_runbook_carries_the_shared_blocks_the_generator_writes() -> None:
    assert gen.stale() == {}, "run `make runbooks` (python docs/runbooks/generate.py)"


def test_the_check_mode_fails_on_a_stale_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = (RUNBOOKS / "GPUXidFatal.md").read_text()
    copy = tmp_path / "GPUXidFatal.md"
    copy.write_text(page.replace("30m after the reset_gpu rung", "45m after the reset_gpu rung"))
    monkeypatch.setattr(gen, "RUNBOOKS", tmp_path)
    monkeypatch.setattr(gen, "alerts", lambda: [ALERTS["GPUXidFatal"]])
    assert gen.main(["--check"]) == 1
    gen.write()
    assert gen.main(["--check"]) == 0 and copy.read_text() == page


# --- what the pages claim, against the policy ------------------------------------------------------------------
def _setting(policy: Policy, key: str) -> Any:
    """policy value at a policy file key (ladder.<rung>.timeout, budget.max_cordoned, ...)."""
    section, _, rest = key.partition(".")
    if section == "ladder" and rest.count(".") == 1:
        rung, field = rest.split(".")
        return getattr(policy.rung(rung), field)
    value: Any = policy
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _as_written(value: Any) -> str:
    return gen.dur(value) if isinstance(value, timedelta) else str(value)


# A value stated beside the policy key it comes from, in one clause: "after 1h (`ladder.drain.timeout`)".
STATED = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:ms|[smhd%])?)(?![\w.%])[^()`;:\n]{0,80}?"
                    r"\(`((?:ladder|budget|return_to_service|episode|breaker)\.[a-z_.]+)`\)")
TIMES_OUT = re.compile(r"\b(cordon|drain|reset_gpu|reboot|replace) rung(?:'s)? (?:times? out|timeout)")
CLIMBS = re.compile(r"[Cc]limbs\** to (\w+) when the alert still fires (\S+) after the (\w+) rung")
STAYS = re.compile(r"Does not climb from (\w+)")


def _claims_against(policy: Policy, text: str) -> list[str]:
    wrong = []
    for value, key in STATED.findall(text):
        if _as_written(_setting(policy, key)) != value:
            wrong.append(f"says {value} for {key}, the policy has {_as_written(_setting(policy, key))}")
    for rung in TIMES_OUT.findall(text):
        if rung == "cordon" or policy.rung(rung).timeout is None:  # a cordon is done at once: nothing to time out
            wrong.append(f"says the {rung} rung times out; ladder.{rung}.timeout is {policy.rung(rung).timeout}")
    for to, after, rung in CLIMBS.findall(text):
        escalate = policy.rung(rung).escalate_after
        if escalate is None or parse_duration(after) != escalate or rung_index(to) != rung_index(rung) + 1:
            wrong.append(f"says {rung} climbs to {to} after {after}; ladder.{rung}.escalate_after is {escalate}")
    for rung in STAYS.findall(text):
        capped = f"the alert's `max_rung` label is {rung}" in text or (  # the alert's own ceiling, not the policy's
            "the alert is about gpuhealth itself" in text)  # or gpuhealth's own alert on a Ready node (its own rung)
        if policy.rung(rung).escalate_after is not None and rung != policy.ladder.max_rung and not capped:
            wrong.append(f"says {rung} does not climb; ladder.{rung}.escalate_after is "
                         f"{policy.rung(rung).escalate_after}")
    if "never undone by gpuhealth" in text:  # a kubectl cordon after gpuhealth's is undone (docs/remediation.md)
        wrong.append("says a person's cordon is never undone")
    return wrong


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_no_runbook_contradicts_the_policy_defaults(page: Path) -> None:
    assert _claims_against(gen.policy_defaults(), page.read_text()) == []


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_no_runbook_retells_the_ladder_outside_its_shared_blocks(page: Path) -> None:
    own = gen.outside_blocks(page.read_text())
    retold = [p for p in (r"rung(?:'s)? time", r"never undone", r"climbs the ladder", r"return delay",
                          r"uncordons only if", r"`remediation=\w+`\.") if re.search(p, own)]
    assert retold == [], "the shared block says this; keep only the alert's own text outside it"


def test_the_shared_block_follows_the_policy_it_is_rendered_from() -> None:
    cordon = ALERTS["GPUThermalViolation"]  # remediation cordon, max_rung replace
    default = gen.what_gpuhealth_does(cordon, gen.policy_defaults())
    assert "**Climbs** to drain when the alert still fires 30m after the cordon rung" in default
    assert "times out" not in default
    changed = parse_policy("ladder: {cordon: {escalate_after: 2h}, drain: {escalate_after: 45m}}\n"
                           "return_to_service: {healthy_delay: 40m}\n")
    text = gen.what_gpuhealth_does(cordon, changed)
    assert "**Climbs** to drain when the alert still fires 2h after the cordon rung" in text
    assert "**Climbs** to reset_gpu when the alert still fires 45m after the drain rung" in text
    assert "resolved for 40m (`return_to_service.healthy_delay`)" in text
    assert _claims_against(changed, text) == [] and _claims_against(gen.policy_defaults(), text) != []


def test_an_alert_whose_max_rung_is_its_own_rung_says_it_stays_whatever_the_policy() -> None:
    unknown = ALERTS["GPUXidUnknown"]  # remediation cordon, max_rung cordon
    for policy in (gen.policy_defaults(), parse_policy("ladder: {cordon: {escalate_after: 2h}}\n")):
        text = gen.what_gpuhealth_does(unknown, policy)
        assert "**Does not climb from cordon** (the alert's `max_rung` label is cordon" in text
        assert "**Climbs**" not in text and _claims_against(policy, text) == []


def test_a_runbook_says_what_the_default_policy_does_around_a_reset_a_reboot_and_a_replacement() -> None:
    """Evidence before the first destroying rung, validation before return, the diagnosis before replace and repeat
    offenders (issue 34, section 5): the defaults do all four for a GPU fault that climbs to replace."""
    text = gen.what_gpuhealth_does(ALERTS["GPUXidFatal"], gen.policy_defaults())  # reset_gpu, may climb to replace
    assert "**Evidence first:** before the episode's first reset, reboot or replacement" in text
    assert "at most 3m (`evidence.max_wait`)" in text
    assert "**Validated before it returns:** after a reset or a reboot, the diagnostic Job (`dcgmi diag -r 1`" in text
    assert "**Diagnosed before it is replaced:**" in text and "(`dcgmi diag -r 2`, `diagnose.level`)" in text
    assert "when this is the node's 3rd hardware episode started within 7d" in text


def test_the_safeguards_follow_the_policy_and_the_alerts_climb() -> None:
    off = parse_policy("evidence: {enabled: false}\ndiagnose: {enabled: false}\nrepeat_offenders: {enabled: false}\n")
    text = gen.what_gpuhealth_does(ALERTS["GPUXidFatal"], off)
    assert not any(s in text for s in ("Evidence first", "Validated before", "Diagnosed before", "Repeat offenders"))
    changed = parse_policy("evidence: {max_wait: 5m}\nrepeat_offenders: {episodes: 2, window: 28d}\n")
    text = gen.what_gpuhealth_does(ALERTS["GPUXidFatal"], changed)
    assert "at most 5m (`evidence.max_wait`)" in text and "node's 2nd hardware episode started within 28d" in text
    probe = gen.what_gpuhealth_does(ALERTS["GpuhealthProbeFailing"], gen.policy_defaults())  # max_rung cordon
    assert not any(s in probe for s in ("Evidence first", "Validated before", "Diagnosed before", "Repeat offenders"))
    host = gen.what_gpuhealth_does(ALERTS["HostMachineCheck"], gen.policy_defaults())  # not what dcgmi diag tests
    assert "Diagnosed before" not in host


@pytest.mark.parametrize("name", ["GpuhealthExporterDown", "GpuhealthProbeFailing"])
def test_an_alert_about_gpuhealth_itself_says_a_ready_node_stays_at_its_rung_whatever_its_max_rung(name: str) -> None:
    text = gen.what_gpuhealth_does(ALERTS[name], gen.policy_defaults())
    assert "**Does not climb from cordon** (the alert is about gpuhealth itself, component `probe`: on a node whose " \
        "kubelet reports Ready it climbs no further, whatever its `max_rung`)" in text
    assert "**Climbs**" not in text and _claims_against(gen.policy_defaults(), text) == []
    not_ready = "**On a NotReady node** (its kubelet stopped reporting too: the host is down, not only gpuhealth) " \
        "the alert climbs as its `max_rung` label lets it, up to replace"
    assert (not_ready in text) == (name == "GpuhealthExporterDown")  # max_rung replace; the probe's is cordon


def test_a_runbook_that_says_the_cordon_times_out_is_caught() -> None:
    old = ("If the alert is still firing when the cordon rung times out, the remediator climbs the ladder "
           "(drain → reset_gpu → reboot → replace, within the pool's disruption budget).")
    assert _claims_against(gen.policy_defaults(), old) != []


# --- the ladder the runbooks describe is the one the remediator climbs ------------------------------------------
def _complete_running_rung(h: Harness, cluster: FakeCluster, node: str, boot: list[int]) -> None:
    """What the cluster does with the rung under way: a reset Job succeeds, a rebooted node comes back."""
    for key, job in cluster.jobs.items():
        if "reset" in key[1] and not (job.get("status") or {}).get("succeeded"):
            job["status"] = {"succeeded": 1}
        if "reboot" in key[1] and not (job.get("status") or {}).get("succeeded"):
            job["status"] = {"succeeded": 1}
            boot[0] += 1
            cluster.update_node(node, lambda n: n["status"]["nodeInfo"].update(bootID=f"boot-{boot[0]}"))


@pytest.mark.parametrize(("remediation", "max_rung"), [*((r, None) for r in RUNGS), ("cordon", "drain"),
                                                       ("drain", "reboot"), ("cordon", "cordon")])
def test_the_remediator_climbs_the_ladder_the_runbooks_describe(cluster: FakeCluster, remediation: str,
                                                                max_rung: str | None) -> None:
    policy = dataclasses.replace(Policy(), budget=dataclasses.replace(Policy().budget, max_actions_per_hour=1000))
    steps, _ = gen.climb(policy, remediation, max_rung)
    target = rung_index(steps[0].rung)
    passed = [r for r in ("cordon", "drain") if rung_index(r) < target]  # passed through, never reset_gpu
    expected = [*passed, *(s.rung for s in steps)]
    h = Harness(cluster, policy)
    node, boot, started = "gpu-1", [1], {}
    tick = timedelta(minutes=5)
    for _ in range(int(timedelta(hours=5) / tick)):
        h.fire(node, remediation, gpu="0", labels={"max_rung": max_rung} if max_rung else None)  # it persists
        for d in h.decided(h.step()):
            rung = "reset_gpu" if d.action == "stop_gpu_clients" else d.action
            if d.decision == "execute" and rung in RUNGS and d.new:
                started.setdefault(rung, h.now)
        _complete_running_rung(h, cluster, node, boot)
        if "replace" in started:
            break
        h.advance(minutes=5)
    assert sorted(started, key=lambda r: started[r]) == expected
    for before, step in itertools.pairwise(steps):  # climbs only after escalate_after, not before
        waited = started[step.rung] - started[before.rung]
        assert step.after <= waited <= step.after + 3 * tick, (step.rung, waited)
