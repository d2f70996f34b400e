"""The remediator reads the fleet from its watch cache: no LIST of the Nodes per pass, no GET per alert,
and the same decisions."""

from __future__ import annotations

from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness


def test_passes_read_the_fleet_from_the_cache_and_a_new_leader_lists_once(cluster: FakeCluster) -> None:
    a = Harness(cluster, identity="replica-a")
    lists = cluster.calls[("list", "nodes")]
    a.fire("gpu-1", "cordon")
    for _ in range(4):
        a.step()
        a.advance(seconds=10)
    assert cluster.taints("gpu-1")
    assert cluster.calls[("list", "nodes")] == lists + 1  # on taking the Lease, not per pass
    b = Harness(cluster, identity="replica-b")
    lists = cluster.calls[("list", "nodes")]
    b.now = a.now
    b.step()  # sees a's Lease
    b.advance(seconds=30)  # a is gone
    assert b.step() is not None
    b.advance(seconds=10)
    b.step()
    assert cluster.calls[("list", "nodes")] == lists + 1


def test_recording_reads_nodes_from_the_cache_not_one_get_per_alert(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    gets = cluster.calls[("get", "nodes")]
    for i in range(5):
        h.fire(f"gpu-{i}", "cordon")
    assert cluster.calls[("get", "nodes")] == gets
    assert all(h.state(f"gpu-{i}").active for i in range(5))


def test_a_stale_cache_costs_a_conflict_and_a_fresh_read_not_a_lost_write(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    h.fire("gpu-1", "cordon", alertname="A")
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", 409, reason="Conflict")  # as if the cache lagged a write
    h.fire("gpu-1", "drain", alertname="B")
    assert set(h.state("gpu-1").alerts) == {"fp-gpu-1-A", "fp-gpu-1-B"}


def test_the_same_alerts_seen_again_within_a_minute_are_not_written_again(cluster: FakeCluster) -> None:
    h = Harness(cluster)

    def node_patches() -> int:
        return sum(1 for method, path in cluster.writes() if method == "PATCH" and path.endswith("/gpu-1"))

    h.fire("gpu-1", "cordon")
    h.advance(seconds=30)
    h.fire("gpu-1", "cordon")  # an HA Alertmanager's duplicate, or a repeat
    assert node_patches() == 1
    h.advance(seconds=40)
    h.fire("gpu-1", "cordon")  # a minute after the write: last_seen moves on the Node
    assert node_patches() == 2
    h.resolve("gpu-1", "cordon")  # anything new is written at once
    assert node_patches() == 3 and h.state("gpu-1").alerts["fp-gpu-1-GPUFault"].status == "resolved"


def test_a_pass_lists_the_jobs_once_not_a_get_per_node_at_a_job_rung(cluster: FakeCluster) -> None:
    h = Harness(cluster, 'budget: {max_disrupted: 5, max_cordoned: 5}\nbreaker: {threshold: "100%"}\n'
                         'evidence: {enabled: false}')
    for i in range(3):
        h.fire(f"gpu-{i}", "reset_gpu", gpu="0")
    h.step()  # cordon, drain (nothing to evict), the reset Jobs
    assert len(cluster.jobs) == 3
    lists, gets = cluster.calls[("list", "jobs")], cluster.calls[("get", "jobs")]
    next(iter(cluster.jobs.values()))["status"] = {"succeeded": 1}
    h.advance(seconds=30)
    h.step()
    assert cluster.calls[("list", "jobs")] == lists + 1 and cluster.calls[("get", "jobs")] == gets
    assert sorted(h.state(f"gpu-{i}").rung_status or "" for i in range(3)) == ["done", "running", "running"]
