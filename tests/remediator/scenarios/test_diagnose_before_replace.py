"""A GPU fault that persists through the reset and the reboot is replaced only if the diagnostic Job fails on the
drained node (decide/diagnose_step.py): failed, replaced; passed while the alert fires, on probation (replaced if it
still fires when that ends); not started, replaced as before; a host fault the diagnostic does not test is replaced
without it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.remediator.scenarios.test_validation_before_return import jobs, judge_ends
from tests.support import chart_rbac
from tests.support.remediator_harness import Harness, webhook

POLICY = """
budget: {max_disrupted: 2, max_cordoned: 4}
replace: {method: condition}
diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}
evidence: {enabled: false}  # evidence before a rung: tests/remediator/evidence/
"""
NODE = "gpu-1"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for i in range(4):
            c.add_node(f"gpu-{i}")
        chart_rbac.enforce(c, chart_rbac.policy_values(parse_policy(POLICY)))  # the Jobs' admission policy on
        yield c


def fire(h: Harness, alertname: str = "GPUThermalViolation", component: str = "thermal") -> None:
    h.fire(NODE, "cordon", alertname=alertname, gpu=None, labels={"component": component, "max_rung": "replace"})


def climb_to_the_replace(h: Harness, cluster: FakeCluster, **kw: str) -> list[tuple[str, str, str]]:
    """The fault persists: cordon, 30m, drain, 30m, the reboot (no GPU named: no reset), the node back, 30m."""
    fire(h, **kw)
    h.step()
    decisions: list[tuple[str, str, str]] = []
    for minutes in (31, 31, 2, 31):
        h.advance(minutes=minutes)
        fire(h, **kw)
        if minutes == 2:
            cluster.update_node(NODE, lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
        decisions = h.decisions(h.step())
    return decisions


def test_a_thermal_fault_climbs_is_diagnosed_and_is_replaced_when_the_diagnostic_fails(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    assert climb_to_the_replace(h, cluster) == [(NODE, "diagnose", "execute"), (NODE, "replace", "deferred")]
    (diag,) = jobs(cluster, "diagnose")
    assert diag.startswith("gpuhealth-diagnose-gpu-1-") and jobs(cluster, "reboot")
    command = cluster.jobs[("gpuhealth", diag)]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--level") + 1] == "2"  # diagnose.level
    h.advance(minutes=1)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "replace", "deferred")]  # under way: no replacement yet
    judge_ends(cluster, diag, DiagnosticReport(
        (Failure(Check.GPU_DIAG, "dcgmi diag: Targeted Stress failed on GPU 2", ("2",)),), level=2))
    h.advance(minutes=1)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "replace", "execute")]
    failed = next(e for e in cluster.events if e["reason"] == "DiagnosticFailed")
    assert "confirms the fault (gpu_diag" in failed["message"]
    assert h.metric("gpuhealth_remediator_diagnostics_total", result="failed") == 1


def test_a_diagnostic_that_passes_while_the_alert_fires_keeps_the_node_out_on_probation(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    climb_to_the_replace(h, cluster)
    (diag,) = jobs(cluster, "diagnose")
    judge_ends(cluster, diag, DiagnosticReport(level=2))
    for _ in range(3):  # the alert keeps firing: nothing more happens, and the Event is said once
        h.advance(minutes=10)
        fire(h)
        decided = h.decided(h.step())
        assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
        assert "not replaced" in decided[0].reason
    assert [e["reason"] for e in cluster.events].count("DiagnosticContradictsAlert") == 1
    assert h.metric("gpuhealth_remediator_diagnostics_total", result="contradicts") == 1
    assert cluster.node(NODE)["spec"]["unschedulable"] is True and h.state(NODE).rung == "reboot"
    assert not any(c["type"] == "AcceleratedHardwareReady" for c in cluster.node(NODE)["status"]["conditions"])


def test_a_node_whose_alert_still_fires_when_its_probation_ends_is_replaced_without_a_second_diagnosis(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    climb_to_the_replace(h, cluster)
    (diag,) = jobs(cluster, "diagnose")
    judge_ends(cluster, diag, DiagnosticReport(level=2))
    h.advance(minutes=1)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "none", "skipped")]  # on probation (diagnose.probation: 1h)
    h.advance(minutes=61)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "replace", "execute")]
    assert jobs(cluster, "diagnose") == [diag]  # no second diagnosis
    failed = next(e for e in cluster.events if e["reason"] == "DiagnosticProbationFailed")
    assert "GPUThermalViolation still fire 1h after it" in failed["message"]
    assert h.metric("gpuhealth_remediator_diagnostics_total", result="probation_failed") == 1


def test_a_diagnostic_that_never_starts_does_not_hold_the_replacement_back(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    climb_to_the_replace(h, cluster)
    (diag,) = jobs(cluster, "diagnose")
    cluster.job_pod("gpuhealth", diag, waiting="ErrImagePull", message="pull access denied")
    h.advance(minutes=4)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "replace", "deferred")]  # jobs.start_timeout (5m): still pulling
    h.advance(minutes=2)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "replace", "execute")]
    assert "DiagnosticNotStarted" in cluster.reasons(NODE)


def test_a_host_fault_the_diagnostic_does_not_test_is_replaced_without_it(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    decisions = climb_to_the_replace(h, cluster, alertname="HostHungTask", component="kernel")
    assert decisions == [(NODE, "replace", "execute")] and jobs(cluster, "diagnose") == []


def test_without_a_judge_image_the_replacement_goes_on_as_before(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY.replace('diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}\n', ""))
    assert climb_to_the_replace(h, cluster) == [(NODE, "replace", "execute")]
    assert jobs(cluster, "diagnose") == []


# --- replace off (ladder.max_rung reboot): the node is left for a person, diagnosed first ------------------------

NO_REPLACE = POLICY + "ladder: {max_rung: reboot}\n"


def climb_to_the_top(h: Harness, cluster: FakeCluster) -> list[tuple[str, str, str]]:
    """As climb_to_the_replace, with replace off: the reboot is the top, and the fault persists 30m past it."""
    return climb_to_the_replace(h, cluster)


def test_with_replace_off_a_persisting_fault_is_diagnosed_before_the_node_is_left_for_a_person(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, NO_REPLACE)
    assert climb_to_the_top(h, cluster) == [(NODE, "diagnose", "execute")]
    (diag,) = jobs(cluster, "diagnose")
    h.advance(minutes=1)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "none", "deferred")]  # under way
    judge_ends(cluster, diag, DiagnosticReport((Failure(Check.GPU_DIAG, "dcgmi diag: Memory failed on GPU 2", ("2",)),),
                                      level=2))
    for _ in range(2):  # the verdict is kept for the person; said once
        h.advance(minutes=1)
        fire(h)
        decided = h.decided(h.step())
        assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
        assert "diagnostic: failed: gpu_diag" in decided[0].reason
    failed = [e for e in cluster.events if e["reason"] == "DiagnosticFailed"]
    assert len(failed) == 1 and "stays out of service for a person" in failed[0]["message"]
    assert jobs(cluster, "diagnose") == [diag] and not jobs(cluster, "replace")


def test_with_replace_off_a_passing_diagnostic_pages_that_the_signal_is_suspect(cluster: FakeCluster) -> None:
    h = Harness(cluster, NO_REPLACE)
    climb_to_the_top(h, cluster)
    (diag,) = jobs(cluster, "diagnose")
    judge_ends(cluster, diag, DiagnosticReport(level=2))
    h.advance(minutes=1)
    fire(h)
    decided = h.decided(h.step())
    assert "diagnostic: passed while the alerts fire" in decided[0].reason
    assert "DiagnosticContradictsAlert" in cluster.reasons(NODE)
    assert h.metric("gpuhealth_remediator_diagnostics_total", result="contradicts") == 1


def test_with_replace_off_the_diagnostic_waits_for_escalate_after_at_the_top(cluster: FakeCluster) -> None:
    h = Harness(cluster, NO_REPLACE)
    fire(h)
    h.step()
    for minutes in (31, 31, 2, 29):  # 29 minutes after the reboot: not yet persisting past reboot's escalate_after
        h.advance(minutes=minutes)
        fire(h)
        if minutes == 2:
            cluster.update_node(NODE, lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
        decided = h.decided(h.step())
    assert jobs(cluster, "diagnose") == [] and [d.action for d in decided] == ["none"]
    h.advance(minutes=2)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "diagnose", "execute")]


def test_with_replace_off_a_host_fault_is_left_for_a_person_undiagnosed(cluster: FakeCluster) -> None:
    h = Harness(cluster, NO_REPLACE)
    decided = climb_to_the_replace(h, cluster, alertname="HostHungTask", component="kernel")
    assert [a for _, a, _ in decided] == ["none"] and jobs(cluster, "diagnose") == []


def test_with_replace_off_a_node_drained_of_one_gpus_pods_only_is_not_diagnosed(cluster: FakeCluster) -> None:
    cluster.add_pod(NODE, "train-a", namespace="ml", gpus=1)  # on the faulty GPU
    cluster.add_pod(NODE, "train-b", namespace="ml", gpus=1)  # on another GPU: it keeps running
    h = Harness(cluster, POLICY + "ladder: {max_rung: reset_gpu}\n")

    def fire_xid() -> None:
        body = webhook(NODE, "reset_gpu", alertname="GPUXidFatal", gpu="2",
                       labels={"component": "gpu", "max_rung": "replace"})
        body["alerts"][0]["annotations"]["gpu_pods"] = "ml/train-a"
        assert h.post(body).status_code == 202
    fire_xid()
    h.step()
    h.advance(minutes=1)
    fire_xid()
    h.step()  # train-a gone: the GPU's reset
    (reset,) = jobs(cluster, "reset-gpu")
    cluster.jobs[("gpuhealth", reset)]["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    fire_xid()
    h.step()  # the reset done
    assert h.state(NODE).rung == "reset_gpu" and h.state(NODE).rung_status == "done"
    h.advance(minutes=31)
    fire_xid()
    decided = h.decided(h.step())  # the fault persists past the top: left for a person, not diagnosed
    assert [(d.action, d.decision) for d in decided] == [("none", "skipped")], decided
    assert jobs(cluster, "diagnose") == [] and "ml/train-b" in {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in cluster.pods_on(NODE)}


def test_a_validation_waits_for_the_diagnostic_still_running_on_the_gpus(cluster: FakeCluster) -> None:
    h = Harness(cluster, NO_REPLACE)
    climb_to_the_top(h, cluster)
    (diag,) = jobs(cluster, "diagnose")
    h.resolve(NODE, "cordon", alertname="GPUThermalViolation", gpu=None,
              labels={"component": "thermal", "max_rung": "replace"})
    h.advance(minutes=1)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("uncordon", "deferred")]
    assert f"diagnostic job {diag} still runs" in decided[0].reason and jobs(cluster, "diagnose") == [diag]
    judge_ends(cluster, diag, DiagnosticReport(level=2))
    h.advance(minutes=1)
    assert (NODE, "diagnose", "execute") in h.decisions(h.step())  # now the validation of the reboot
    assert len(jobs(cluster, "diagnose")) == 2
