"""A reset or a reboot is validated by the diagnostic Job before the node returns to service (decide/validation.py):
passed, it returns; failed, the ladder climbs from the repair; broken (no verdict), it fails closed; never started
(gpuhealth's own breakage), the node stays out for a person and nothing climbs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from gpuhealth.remediator.cli import main
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import Harness

NS = "gpuhealth"
POLICY = """
budget: {max_disrupted: 2, max_cordoned: 4}
return_to_service: {healthy_delay: 10m}
diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}
evidence: {enabled: false}  # evidence before a rung: tests/remediator/evidence/
"""


@pytest.fixture
def cluster() -> FakeCluster:
    with FakeCluster() as c:
        for i in range(4):
            c.add_node(f"gpu-{i}")
        chart_rbac.enforce(c, chart_rbac.policy_values(parse_policy(POLICY)))  # the Jobs' admission policy on
        yield c


def jobs(cluster: FakeCluster, component: str) -> list[str]:
    return sorted(name for (_, name), job in cluster.jobs.items()
                  if job["metadata"]["labels"]["app.kubernetes.io/component"] == component)


def judge_ends(cluster: FakeCluster, job: str, verdict: DiagnosticReport | None, exit_code: int | None = None) -> None:
    """The diagnostic Job's pod ends: its judge wrote `verdict` (None: no verdict, e.g. killed at its deadline)."""
    code = exit_code if exit_code is not None else (0 if verdict is not None and verdict.passed else 1)
    pod = cluster.job_pod(NS, job, exit_code=code)
    if verdict is not None:
        def write(p: dict[str, Any]) -> None:
            p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = verdict.to_json()
        cluster.update_pod(NS, pod["metadata"]["name"], write)


def reset_then_resolve(h: Harness, cluster: FakeCluster, node: str = "gpu-1") -> None:
    """A reset alert, its Job succeeds, the alert resolves: the repair is done and the episode settles."""
    h.fire(node, "reset_gpu", alertname="GPUXidFatal", gpu="1", labels={"max_rung": "replace"})
    h.step()
    (reset,) = jobs(cluster, "reset-gpu")
    cluster.jobs[(NS, reset)]["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    assert h.state(node).rung == "reset_gpu" and h.state(node).rung_status == "done"
    h.resolve(node, "reset_gpu", alertname="GPUXidFatal", gpu="1", labels={"max_rung": "replace"})


def test_a_reset_whose_validation_passes_returns_the_node_after_the_healthy_delay(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    reset_then_resolve(h, cluster)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("diagnose", "execute")]
    (validate,) = jobs(cluster, "diagnose")
    assert validate == h.state("gpu-1").diagnostic.job and validate.startswith("gpuhealth-validate-gpu-1-")
    spec = cluster.jobs[(NS, validate)]["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-1" and "--level" in spec["containers"][0]["command"]
    assert spec["containers"][0]["command"][spec["containers"][0]["command"].index("--level") + 1] == "1"
    assert "Diagnose" in cluster.reasons("gpu-1")
    h.advance(minutes=11)  # past the healthy delay, but the validation has not ended: the node stays out
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "deferred")]
    judge_ends(cluster, validate, DiagnosticReport(level=1))
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "execute")]
    assert "DiagnosticPassed" in cluster.reasons("gpu-1")
    assert jobs(cluster, "diagnose") == [validate]  # one validation, not one per pass
    assert h.metric("gpuhealth_remediator_diagnostics_total", result="passed") == 1
    assert h.metric("gpuhealth_remediator_actions_total", action="diagnose", result="executed") == 1


def test_a_reset_whose_validation_fails_climbs_to_a_reboot(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    reset_then_resolve(h, cluster)
    h.step()
    (validate,) = jobs(cluster, "diagnose")
    judge_ends(cluster, validate, DiagnosticReport(
        (Failure(Check.GPU_DIAG, "dcgmi diag: Memory failed on GPU 1", ("1",)),), level=1))
    h.advance(seconds=30)
    assert ("gpu-1", "reboot", "execute") in h.decisions(h.step())
    assert "DiagnosticFailed" in cluster.reasons("gpu-1")
    assert h.state("gpu-1").rung == "reboot" and jobs(cluster, "reboot")
    # the reboot is validated in its turn, by a Job of its own
    cluster.update_node("gpu-1", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    h.advance(minutes=2)
    decided = h.decided(h.step())  # the reboot is done, and its validation starts in the same pass
    assert ("diagnose", "execute") in [(d.action, d.decision) for d in decided]
    assert len(jobs(cluster, "diagnose")) == 2 and h.state("gpu-1").diagnostic.job != validate


def test_a_validation_that_ends_without_a_verdict_fails_closed_and_climbs(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    reset_then_resolve(h, cluster)
    h.step()
    (validate,) = jobs(cluster, "diagnose")
    judge_ends(cluster, validate, None, exit_code=137)  # killed at its deadline: no verdict
    h.advance(seconds=30)
    assert ("gpu-1", "reboot", "execute") in h.decisions(h.step())
    failed = next(e for e in cluster.events if e["reason"] == "DiagnosticFailed")
    assert "tool_error" in failed["message"] and "without a verdict" in failed["message"]


def test_a_validation_that_never_starts_keeps_the_node_out_for_a_person_and_climbs_nothing(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    reset_then_resolve(h, cluster)
    h.step()
    (validate,) = jobs(cluster, "diagnose")
    cluster.job_pod(NS, validate, waiting="ImagePullBackOff", message="Back-off pulling image")
    h.advance(minutes=4)  # jobs.start_timeout is 5m: the kubelet may still pull it
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "deferred")]
    h.advance(minutes=2)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
    assert "DiagnosticNotStarted" in cluster.reasons("gpu-1")
    h.advance(hours=2)
    assert h.decisions(h.step()) == [("gpu-1", "none", "skipped")]
    assert h.state("gpu-1").rung == "reset_gpu" and not jobs(cluster, "reboot")
    assert cluster.node("gpu-1")["spec"]["unschedulable"] is True


def _reset_at_its_ceiling_then_resolved(cluster: FakeCluster) -> Harness:
    """gpu-2's GPU reset (its alert's max_rung) succeeds and the alert resolves: the validation is under way."""
    h = Harness(cluster, POLICY)
    h.fire("gpu-2", "reset_gpu", alertname="GPUXidFatal", gpu="1", labels={"max_rung": "reset_gpu"})
    h.step()
    (reset,) = jobs(cluster, "reset-gpu")
    cluster.jobs[(NS, reset)]["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    h.resolve("gpu-2", "reset_gpu", alertname="GPUXidFatal", gpu="1", labels={"max_rung": "reset_gpu"})
    h.step()
    return h


def test_a_failed_validation_at_the_alerts_ceiling_stops_for_a_person(cluster: FakeCluster) -> None:
    h = _reset_at_its_ceiling_then_resolved(cluster)
    (validate,) = jobs(cluster, "diagnose")
    judge_ends(cluster, validate, DiagnosticReport((Failure(Check.GPU_COUNT, "7 of 8 GPUs"),), level=1))
    h.advance(seconds=30)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
    assert "needs a person" in decided[0].reason and not jobs(cluster, "reboot")


def test_without_a_judge_image_no_validation_is_asked_for_and_the_node_returns_as_before(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY.replace('diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}', ""))
    reset_then_resolve(h, cluster)
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "execute")]
    assert jobs(cluster, "diagnose") == []


def test_a_dry_run_decides_the_validation_and_creates_no_job(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    reset_then_resolve(h, cluster)
    dry = Harness(cluster, POLICY, identity="replica-b", dry_run=True)
    dry.now = h.now
    decided = dry.decided(dry.step())
    assert ("diagnose", "execute") in [(d.action, d.decision) for d in decided]
    assert jobs(cluster, "diagnose") == []


def failed(what: str = "dcgmi diag: Memory failed on GPU 1") -> DiagnosticReport:
    return DiagnosticReport((Failure(Check.GPU_DIAG, what, ("1",)),), level=1)


def test_a_reboot_whose_validation_fails_stays_out_while_the_replacement_waits_for_its_diagnosis(
        cluster: FakeCluster) -> None:
    """The alerts resolved long ago: the climb to replace waits for its diagnosis Job, and the node that failed its
    validation twice is never returned meanwhile, whatever return_to_service.healthy_delay says (issue 35, item 3)."""
    h = Harness(cluster, POLICY)
    reset_then_resolve(h, cluster)
    h.step()
    judge_ends(cluster, h.state("gpu-1").diagnostic.job or "", failed())
    h.advance(seconds=30)
    assert ("gpu-1", "reboot", "execute") in h.decisions(h.step())
    cluster.update_node("gpu-1", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    h.advance(minutes=2)
    h.step()  # the reboot is done; its validation starts
    judge_ends(cluster, h.state("gpu-1").diagnostic.job or "", failed())
    h.advance(seconds=30)
    h.step()  # the reboot did not repair: replace, after the drained node's diagnosis
    assert h.state("gpu-1").diagnostic.purpose == "diagnose"
    for _ in range(3):  # well past the healthy delay (10m) with every alert resolved
        h.advance(minutes=6)
        decided = h.decisions(h.step())
        assert ("gpu-1", "uncordon", "execute") not in decided, decided
        assert cluster.node("gpu-1")["spec"]["unschedulable"] is True
    judge_ends(cluster, h.state("gpu-1").diagnostic.job or "", failed())
    h.advance(seconds=30)
    assert ("gpu-1", "replace", "execute") in h.decisions(h.step())


def test_a_reset_whose_validation_fails_stays_out_while_the_rate_cap_defers_its_reboot(cluster: FakeCluster) -> None:
    """budget.max_actions_per_hour spent by the cordon, the drain and the reset: the reboot waits for the cap, and
    the node waits with it, out of service (issue 35, item 3)."""
    h = Harness(cluster, POLICY.replace("max_cordoned: 4}", "max_cordoned: 4, max_actions_per_hour: 3}"))
    reset_then_resolve(h, cluster)
    h.step()
    judge_ends(cluster, h.state("gpu-1").diagnostic.job or "", failed())
    h.advance(seconds=30)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided][-1] == ("reboot", "deferred"), decided
    for _ in range(4):  # past the healthy delay (10m), the alerts resolved
        h.advance(minutes=6)
        decided = h.decided(h.step())
        assert [(d.action, d.decision) for d in decided] == [("reboot", "deferred")], decided
        assert cluster.node("gpu-1")["spec"]["unschedulable"] is True
    h.advance(minutes=40)  # an hour after the first actions: the cap lets the reboot go
    assert ("gpu-1", "reboot", "execute") in h.decisions(h.step())
    assert h.state("gpu-1").validation_failed is None  # a later rung ends the hold: its own validation follows


def test_a_failed_validation_at_the_alerts_ceiling_holds_the_node_until_a_person_releases_it(
        cluster: FakeCluster, tmp_path: Path) -> None:
    h = _reset_at_its_ceiling_then_resolved(cluster)
    judge_ends(cluster, h.state("gpu-2").diagnostic.job or "", failed())
    h.advance(seconds=30)
    h.step()
    h.advance(hours=2)  # nothing fires, and the node stays out for its person
    assert h.decisions(h.step()) == [("gpu-2", "none", "skipped")]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(chart_rbac.kubeconfig(cluster, chart_rbac.ADMIN_TOKEN)))
    assert main(["release", "gpu-2", "--kubeconfig", str(kubeconfig)], lambda: h.now) == 0
    h.step()
    h.advance(minutes=11)  # the person is done: returned after the healthy delay
    assert h.decisions(h.step()) == [("gpu-2", "uncordon", "execute")]
