"""Idle-node sweeps (decide/sweep.py) through the real remediator on the fake cluster: an idle node due for a sweep is
cordoned and runs the deep diagnostic; passed, it returns at once and is not swept again before sweep.interval;
failed, it stays out and climbs like a fault an alert raised; never started, it returns unswept. A node with GPU work
is never swept; the per-pool limit and the cordon budget hold; dry run decides and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from gpuhealth.remediator.decide.nodestate import LAST_SWEEP_ANNOTATION, TAINT_KEY
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import T0, Harness

NS = "gpuhealth"
POLICY = """
budget: {max_disrupted: 2, max_cordoned: 4}
return_to_service: {healthy_delay: 10m}
diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}
evidence: {enabled: false}  # evidence before a rung: tests/remediator/evidence/
sweep: {enabled: true, interval: 7d, max_per_pool: 1, level: 3, idle_for: 1h}
"""


def cluster_of(nodes: int) -> Any:
    with FakeCluster() as c:
        for i in range(nodes):
            c.add_node(f"gpu-{i}")
        values = chart_rbac.policy_values(parse_policy(POLICY))
        values["remediator"]["jobs"]["admissionPolicy"] = {"enabled": False}  # it does not know the diagnostic Job
        chart_rbac.enforce(c, values)
        yield c


@pytest.fixture
def cluster() -> Any:
    yield from cluster_of(1)


@pytest.fixture
def fleet() -> Any:
    yield from cluster_of(3)


def sweeps(cluster: FakeCluster) -> list[str]:
    return sorted(name for (_, name), job in cluster.jobs.items()
                  if job["metadata"]["labels"]["app.kubernetes.io/component"] == "diagnose"
                  and name.startswith("gpuhealth-sweep-"))


def tainted(cluster: FakeCluster, node: str) -> bool:
    return any(t["key"] == TAINT_KEY for t in cluster.node(node)["spec"].get("taints") or [])


def judge_ends(cluster: FakeCluster, job: str, verdict: DiagnosticReport) -> None:
    pod = cluster.job_pod(NS, job, exit_code=0 if verdict.passed else 1)

    def write(p: dict[str, Any]) -> None:
        p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = verdict.to_json()
    cluster.update_pod(NS, pod["metadata"]["name"], write)


DIAG_FAILS = DiagnosticReport((Failure(Check.GPU_DIAG, "dcgmi diag -r 3: Memory test failed on GPU 3", ("3",)),),
                              level=3)


def test_an_idle_nodes_sweep_that_finds_a_diag_failure_keeps_it_out_and_climbs_to_the_reset(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("cordon", "execute"), ("diagnose", "execute")]
    (job,) = sweeps(cluster)
    command = cluster.jobs[(NS, job)]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--level") + 1] == "3"
    assert tainted(cluster, "gpu-0") and cluster.node("gpu-0")["spec"]["unschedulable"] is True
    assert cluster.node("gpu-0")["metadata"]["annotations"][LAST_SWEEP_ANNOTATION].startswith(T0.strftime("%Y-%m-%d"))
    assert "SweepStarted" in cluster.reasons("gpu-0")
    h.advance(minutes=5)
    assert h.decisions(h.step()) == [("gpu-0", "uncordon", "deferred")]  # the sweep runs: the node stays out
    judge_ends(cluster, job, DIAG_FAILS)
    h.advance(minutes=25)
    decided = h.decided(h.step())
    assert ("reset_gpu", "execute") in [(d.action, d.decision) for d in decided]  # drained (nothing) and reset
    reset = next(d for d in decided if d.action == "reset_gpu")
    assert reset.gpu == "3"
    assert "SweepFailed" in cluster.reasons("gpu-0") and tainted(cluster, "gpu-0")
    assert h.state("gpu-0").sweep_rung == "reset_gpu"
    assert h.metric("gpuhealth_remediator_sweeps_total", result="failed") == 1


def test_a_failed_sweep_whose_reset_does_not_repair_climbs_to_a_reboot(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.step()
    (job,) = sweeps(cluster)
    judge_ends(cluster, job, DIAG_FAILS)
    h.advance(minutes=30)
    h.step()
    (reset,) = [name for (_, name) in cluster.jobs if name.startswith("gpuhealth-reset-")]
    cluster.jobs[(NS, reset)]["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    decided = h.decided(h.step())  # the reset is done: validated before the node returns
    assert ("diagnose", "execute") in [(d.action, d.decision) for d in decided]
    validate = h.state("gpu-0").diagnostic.job
    assert validate is not None and validate.startswith("gpuhealth-validate-")
    judge_ends(cluster, validate, DiagnosticReport((Failure(Check.GPU_DIAG, "still failing", ("3",)),), level=1))
    h.advance(minutes=1)
    assert ("gpu-0", "reboot", "execute") in h.decisions(h.step())


def test_a_passing_sweep_returns_the_node_at_once_and_is_not_repeated_before_the_interval(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.step()
    (job,) = sweeps(cluster)
    judge_ends(cluster, job, DiagnosticReport(level=3))
    h.advance(minutes=30)
    assert h.decisions(h.step()) == [("gpu-0", "uncordon", "execute")]  # no healthy delay: no alert fired
    assert not tainted(cluster, "gpu-0") and not cluster.node("gpu-0")["spec"].get("unschedulable")
    assert "SweepPassed" in cluster.reasons("gpu-0") and not h.state("gpu-0").active
    h.advance(days=6, hours=23)
    assert h.decisions(h.step()) == [] and sweeps(cluster) == [job]  # swept 7d ago less an hour: not yet
    h.advance(hours=1)
    assert ("gpu-0", "cordon", "execute") in h.decisions(h.step()) and len(sweeps(cluster)) == 2


def test_a_node_with_a_gpu_pod_is_never_swept_and_one_without_is(fleet: FakeCluster) -> None:
    fleet.add_pod("gpu-0", "trainer-0", gpus=8)
    fleet.add_pod("gpu-1", "web-0", gpus=0)  # a pod that asks for no GPU does not keep a node from its sweep
    h = Harness(fleet, POLICY.replace("max_per_pool: 1", "max_per_pool: 3"))
    nodes = {n for n, action, _ in h.decisions(h.step()) if action == "cordon"}
    assert nodes == {"gpu-1", "gpu-2"} and not tainted(fleet, "gpu-0")


def test_a_gpu_pod_that_finished_within_idle_for_keeps_the_node_from_a_sweep(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    cluster.add_pod("gpu-0", "trainer-0", gpus=8)
    cluster.update_pod("default", "trainer-0", lambda p: p["status"].update(phase="Succeeded"))
    h.advance(minutes=59)
    assert h.decisions(h.step()) == []
    h.advance(minutes=2)
    assert ("gpu-0", "cordon", "execute") in h.decisions(h.step())


def test_the_per_pool_sweep_limit_holds_across_passes(fleet: FakeCluster) -> None:
    h = Harness(fleet, POLICY)
    assert [a for _, a, _ in h.decisions(h.step())] == ["cordon", "diagnose"]
    h.advance(minutes=5)
    assert [d for d in h.decisions(h.step()) if d[1] == "cordon"] == []  # one at a time: the others wait
    assert len(sweeps(fleet)) == 1


def test_the_cordon_budget_holds_sweeps_back(fleet: FakeCluster) -> None:
    h = Harness(fleet, POLICY.replace("max_cordoned: 4", "max_cordoned: 1").replace("max_per_pool: 1",
                                                                                        "max_per_pool: 3"))
    h.fire("gpu-0", "cordon", alertname="GPUThermalViolation", gpu="0")
    h.step()  # the fault's cordon takes the pool's one
    assert tainted(fleet, "gpu-0") and sweeps(fleet) == []
    assert not tainted(fleet, "gpu-1") and not tainted(fleet, "gpu-2")


def test_a_sweep_that_never_starts_returns_the_node_unswept(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.step()
    (job,) = sweeps(cluster)
    cluster.job_pod(NS, job, waiting="ImagePullBackOff", message="Back-off pulling image")
    h.advance(minutes=4)
    assert h.decisions(h.step()) == [("gpu-0", "uncordon", "deferred")]
    h.advance(minutes=2)
    assert h.decisions(h.step()) == [("gpu-0", "uncordon", "execute")]
    assert "SweepNotStarted" in cluster.reasons("gpu-0") and not tainted(cluster, "gpu-0")
    assert h.metric("gpuhealth_remediator_sweeps_total", result="not_started") == 1
    h.advance(hours=1)
    assert h.decisions(h.step()) == []  # not retried before the interval


def test_a_gpu_pod_that_comes_during_the_sweep_ends_it_unjudged(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.step()
    cluster.add_pod("gpu-0", "tolerates-all", gpus=8)
    h.advance(minutes=1)
    assert h.decisions(h.step()) == [("gpu-0", "uncordon", "execute")]
    assert "SweepAbandoned" in cluster.reasons("gpu-0") and "tolerates-all" in str(cluster.events[-1])
    assert next(p for p in cluster.pods.values() if p["metadata"]["name"] == "tolerates-all")["metadata"].get(
        "deletionTimestamp") is None  # never evicted


def test_dry_run_decides_the_sweep_and_writes_nothing(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY, dry_run=True)
    assert h.decisions(h.step()) == [("gpu-0", "cordon", "execute"), ("gpu-0", "diagnose", "execute")]
    assert sweeps(cluster) == [] and not tainted(cluster, "gpu-0")
    assert LAST_SWEEP_ANNOTATION not in cluster.node("gpu-0")["metadata"]["annotations"]


def test_sweeps_are_off_by_default(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY.replace("enabled: true, ", ""))
    assert h.decisions(h.step()) == [] and sweeps(cluster) == []
