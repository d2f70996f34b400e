"""Burn-in of new nodes (decide/burn_in.py) through the real remediator on the fake cluster: a node that registers
with the burn-in taint runs the diagnostic Job before its first pod; passed, the taint comes off; failed, gpuhealth's
taint and cordon replace it and the ladder climbs; a diagnostic that never starts, or none configured, takes the taint
off untested (gpuhealth's own breakage never keeps capacity out). It waits for Ready and the GPUs up to
burn_in.ready_within, takes no budget, and dry run decides and writes nothing."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from gpuhealth.remediator.decide.nodestate import TAINT_KEY, fmt_time
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.remediator.scenarios.test_validation_before_return import judge_ends
from tests.support import chart_rbac
from tests.support.remediator_harness import T0, Harness

NS = "gpuhealth"
BURN_IN = "gpuhealth.io/burn-in"
POLICY = """
budget: {max_disrupted: 1, max_cordoned: 1}
return_to_service: {healthy_delay: 10m}
diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}
evidence: {enabled: false}  # evidence before a rung: tests/remediator/evidence/
burn_in: {level: 2, ready_within: 20m}
"""
GPUS = {"nvidia.com/gpu": "8"}


@pytest.fixture
def cluster() -> Any:
    with FakeCluster() as c:
        values = chart_rbac.policy_values(parse_policy(POLICY))
        values["remediator"]["jobs"]["admissionPolicy"] = {"enabled": False}  # its own tests: tests/chart/
        chart_rbac.enforce(c, values)
        yield c


def new_node(cluster: FakeCluster, name: str, ready: bool = True, capacity: dict[str, str] | None = None) -> None:
    """A node as Karpenter makes it with the NodePool's startupTaints: the burn-in taint, created now."""
    cluster.add_node(name, taints=[{"key": BURN_IN, "effect": "NoSchedule"}], created=fmt_time(T0), ready=ready,
                     capacity=GPUS if capacity is None else capacity)


def taints(cluster: FakeCluster, node: str) -> set[str]:
    return {t["key"] for t in cluster.node(node)["spec"].get("taints") or []}


def burn_ins(cluster: FakeCluster) -> list[str]:
    return sorted(name for (_, name) in cluster.jobs if name.startswith("gpuhealth-burn-in-"))


GPU_MISSING = DiagnosticReport((Failure(Check.GPU_COUNT, "7 GPUs on the bus, 8 expected", ()),), level=2)


def test_a_new_node_that_passes_its_burn_in_loses_the_taint_and_nothing_else(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]
    (job,) = burn_ins(cluster)
    command = cluster.jobs[(NS, job)]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--level") + 1] == "2" and command[command.index("--gpus-expected") + 1] == "8"
    assert "BurnInStarted" in cluster.reasons("gpu-new") and taints(cluster, "gpu-new") == {BURN_IN}
    h.advance(minutes=2)
    assert h.decisions(h.step()) == [("gpu-new", "end_burn_in", "deferred")]
    judge_ends(cluster, job, DiagnosticReport(level=2))
    h.advance(minutes=1)
    assert h.decisions(h.step()) == [("gpu-new", "end_burn_in", "execute")]
    assert taints(cluster, "gpu-new") == set() and not cluster.node("gpu-new")["spec"].get("unschedulable")
    assert "BurnInPassed" in cluster.reasons("gpu-new") and not h.state("gpu-new").diagnostic.job
    assert h.metric("gpuhealth_remediator_burn_ins_total", result="passed") == 1
    h.advance(minutes=1)
    assert h.decisions(h.step()) == []  # burnt in once


def test_a_new_node_missing_a_gpu_fails_its_burn_in_and_climbs_to_a_reboot(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY)
    h.step()
    (job,) = burn_ins(cluster)
    judge_ends(cluster, job, GPU_MISSING)
    h.advance(minutes=3)
    assert h.decisions(h.step()) == [("gpu-new", "cordon", "execute"), ("gpu-new", "end_burn_in", "execute")]
    assert taints(cluster, "gpu-new") == {TAINT_KEY} and cluster.node("gpu-new")["spec"]["unschedulable"] is True
    assert "BurnInFailed" in cluster.reasons("gpu-new")
    assert h.state("gpu-new").sweep_rung == "reboot" and h.state("gpu-new").active
    assert h.metric("gpuhealth_remediator_burn_ins_total", result="failed") == 1
    h.advance(minutes=1)
    decided = h.decisions(h.step())  # nothing to drain: the climb goes on at once
    assert ("gpu-new", "drain", "execute") in decided and ("gpu-new", "reboot", "execute") in decided


def test_a_diagnostic_killed_at_its_deadline_keeps_the_new_node_out_for_a_person(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY)
    h.step()
    (job,) = burn_ins(cluster)
    cluster.job_pod(NS, job, exit_code=137)  # killed at activeDeadlineSeconds: no verdict
    h.advance(minutes=20)
    assert h.decisions(h.step()) == [("gpu-new", "cordon", "execute"), ("gpu-new", "end_burn_in", "execute")]
    assert taints(cluster, "gpu-new") == {TAINT_KEY}  # fail closed: tool_error is no pass
    failed = next(e for e in cluster.events if e["reason"] == "BurnInFailed")
    assert "tool_error" in failed["message"] and "stays cordoned for a person" in failed["message"]
    h.advance(minutes=30)
    assert h.decisions(h.step()) == [("gpu-new", "none", "skipped")]  # nothing climbs on no evidence


def test_a_burn_in_that_never_starts_takes_the_taint_off_untested(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY)
    h.step()
    (job,) = burn_ins(cluster)
    cluster.job_pod(NS, job, waiting="ImagePullBackOff", message="Back-off pulling image")
    h.advance(minutes=4)
    assert h.decisions(h.step()) == [("gpu-new", "end_burn_in", "deferred")]
    h.advance(minutes=2)
    assert h.decisions(h.step()) == [("gpu-new", "end_burn_in", "execute")]
    assert taints(cluster, "gpu-new") == set() and "BurnInNotStarted" in cluster.reasons("gpu-new")
    assert h.metric("gpuhealth_remediator_burn_ins_total", result="not_started") == 1


def test_without_a_diagnostic_the_taint_comes_off_at_once_with_a_warning(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY.replace('diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}',
                                        'diagnose: {enabled: false}'))
    assert h.decisions(h.step()) == [("gpu-new", "end_burn_in", "execute")]
    assert taints(cluster, "gpu-new") == set() and burn_ins(cluster) == []
    assert "BurnInSkipped" in cluster.reasons("gpu-new")


def test_the_burn_in_waits_for_the_gpus_until_ready_within_then_starts_anyway(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new", ready=False, capacity={})
    h = Harness(cluster, POLICY)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "deferred")]
    cluster.update_node("gpu-new", lambda n: n["status"]["conditions"][0].update(status="True"))
    h.advance(minutes=19)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "deferred")]  # Ready, but no GPU advertised yet
    h.advance(minutes=1)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]  # 20m: the diagnostic judges what is there
    started = next(e for e in cluster.events if e["reason"] == "BurnInStarted")
    assert "started without its GPUs advertised, 1200s after the node was made" in started["message"]


def test_a_ready_node_with_its_gpus_starts_at_once(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new", ready=False)
    h = Harness(cluster, POLICY)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "deferred")]
    cluster.update_node("gpu-new", lambda n: n["status"]["conditions"][0].update(status="True"))
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]


def test_a_scale_up_is_burnt_in_at_once_whatever_the_budgets(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-old")
    h = Harness(cluster, POLICY)
    h.fire("gpu-old", "cordon", alertname="GPUThermalViolation", gpu="0")
    h.step()  # the pool's one cordon is taken
    for i in range(4):
        new_node(cluster, f"gpu-new-{i}")
    h.advance(seconds=30)
    started = [n for n, action, verdict in h.decisions(h.step()) if (action, verdict) == ("diagnose", "execute")]
    assert sorted(started) == [f"gpu-new-{i}" for i in range(4)] and len(burn_ins(cluster)) == 4


def test_a_node_without_the_taint_is_never_burnt_in(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-0", created=fmt_time(T0), capacity=GPUS)
    h = Harness(cluster, POLICY)
    assert h.decisions(h.step()) == [] and burn_ins(cluster) == []


def test_the_taint_key_is_the_policys(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-new", taints=[{"key": "example.com/burn-in", "effect": "NoExecute"}], created=fmt_time(T0),
                     capacity=GPUS)
    h = Harness(cluster, POLICY.replace("burn_in: {", 'burn_in: {taint: "example.com/burn-in", '))
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]


def test_a_held_new_node_keeps_its_taint_and_is_not_burnt_in(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    cluster.update_node("gpu-new", lambda n: n["metadata"]["annotations"].update(
        {"gpuhealth.io/hold": '{"reason": "vendor check", "by": "alice"}'}))
    h = Harness(cluster, POLICY)
    assert h.decisions(h.step()) == [("gpu-new", "none", "skipped")]
    assert burn_ins(cluster) == [] and taints(cluster, "gpu-new") == {BURN_IN}


def test_dry_run_decides_the_burn_in_and_writes_nothing(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY, dry_run=True)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]
    assert burn_ins(cluster) == [] and taints(cluster, "gpu-new") == {BURN_IN}
    assert "gpuhealth.io/state" not in cluster.node("gpu-new")["metadata"]["annotations"]


def test_dry_run_warns_once_per_node_that_it_never_removes_the_burn_in_taint(
        cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    new_node(cluster, "gpu-new")
    cluster.add_node("gpu-old")
    h = Harness(cluster, POLICY, dry_run=True)
    with caplog.at_level(logging.INFO, logger="gpuhealth.remediator"):
        h.step()
        h.advance(minutes=1)
        h.step()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and BURN_IN in r.getMessage()]
    assert len(warned) == 1 and "gpu-new" in warned[0] and "never removes" in warned[0]
    assert "startupTaints" in warned[0] and f"kubectl taint node gpu-new {BURN_IN}-" in warned[0]
    kept = [json.loads(r.getMessage()) for r in caplog.records if '"burn_in_kept"' in r.getMessage()]
    assert kept == [{"event": "burn_in_kept", "node": "gpu-new", "taint": BURN_IN, "dry_run": True}]
    assert taints(cluster, "gpu-new") == {BURN_IN}  # still nothing written


def test_an_alert_during_the_burn_in_is_the_ladders_and_the_burn_in_starts_afresh_after(
        cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY)
    h.step()
    (first,) = burn_ins(cluster)
    h.fire("gpu-new", "cordon", alertname="GPUThermalViolation", gpu="0")
    h.advance(seconds=30)
    assert ("gpu-new", "cordon", "execute") in h.decisions(h.step())
    h.resolve("gpu-new", "cordon", alertname="GPUThermalViolation", gpu="0")
    h.advance(minutes=11)
    assert ("gpu-new", "uncordon", "execute") in h.decisions(h.step())
    assert taints(cluster, "gpu-new") == {BURN_IN}  # the episode's undo leaves the burn-in's taint
    h.advance(minutes=1)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]
    assert len(burn_ins(cluster)) == 2 and first in burn_ins(cluster)


def test_a_burn_in_whose_job_is_gone_unread_starts_again_and_gives_up_after_three(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    h = Harness(cluster, POLICY)
    h.step()
    for restarts in (1, 2):  # its Job deleted (its TTL after a long hold, a person) before the result was read
        (job,) = burn_ins(cluster)
        cluster.jobs.pop((NS, job))
        h.advance(minutes=6)  # past jobs.start_timeout
        assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]
        assert h.state("gpu-new").burn_in_restarts == restarts and taints(cluster, "gpu-new") == {BURN_IN}
    assert "is gone before its result was read" in [e for e in cluster.events
                                                    if e["reason"] == "BurnInStarted"][-1]["message"]
    (job,) = burn_ins(cluster)
    cluster.jobs.pop((NS, job))
    h.advance(minutes=6)  # the third gone too: gpuhealth's own breakage must not keep the node out forever
    assert h.decisions(h.step()) == [("gpu-new", "end_burn_in", "execute")]
    assert taints(cluster, "gpu-new") == set() and "BurnInNotStarted" in cluster.reasons("gpu-new")


def test_a_new_node_a_person_cordoned_keeps_its_taint_and_is_not_burnt_in(cluster: FakeCluster) -> None:
    new_node(cluster, "gpu-new")
    cluster.update_node("gpu-new", lambda n: n["spec"].update(unschedulable=True))
    h = Harness(cluster, POLICY)
    (decided,) = h.decided(h.step())
    assert (decided.action, decided.decision) == ("none", "skipped") and "cordoned by a person" in decided.reason
    assert burn_ins(cluster) == [] and taints(cluster, "gpu-new") == {BURN_IN}
    cluster.update_node("gpu-new", lambda n: n["spec"].pop("unschedulable"))
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "execute")]
