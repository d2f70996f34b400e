"""The disruption budget and the circuit breaker, counted from the cluster, under storms and at random."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_cluster import FakeCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remediator_harness import Harness

from remediator.nodestate import DISRUPTIVE, TAINT_KEY


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for i in range(20):
            c.add_node(f"gpu-{i:02d}")
        yield c


def disrupted(h: Harness, cluster: FakeCluster) -> list[str]:
    return [n for n in cluster.nodes if h.state(n).active and h.state(n).rung in DISRUPTIVE]


def tainted(cluster: FakeCluster) -> list[str]:
    return [n for n in cluster.nodes if any(t["key"] == TAINT_KEY for t in cluster.taints(n))]


def test_storm_on_half_a_pool_opens_the_breaker_and_keeps_to_the_cordon_cap(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    for i in range(10):
        h.fire(f"gpu-{i:02d}", "reboot")
    h.step()
    assert disrupted(h, cluster) == []  # breaker: 10/20 firing is more than 30%
    assert len(tainted(cluster)) == 4  # max(1, ceil(20% of 20))
    assert h.metric("gpuhealth_remediator_breaker_open", pool="gpu") == 1
    lease_events = [e for e in cluster.events if e["involvedObject"]["kind"] == "Lease"]
    assert [e["reason"] for e in lease_events] == ["CircuitBreakerOpen"]
    h.advance(minutes=5)
    h.step()
    assert disrupted(h, cluster) == [] and len(tainted(cluster)) == 4


def test_breaker_closes_by_itself_after_the_cooldown(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    for i in range(10):
        h.fire(f"gpu-{i:02d}", "drain")
    h.step()
    for i in range(2, 10):  # it was a monitoring glitch for most of them
        h.resolve(f"gpu-{i:02d}", "drain")
    h.advance(minutes=10)
    h.step()
    assert disrupted(h, cluster) == []  # still cooling down
    h.fire("gpu-00", "drain")
    h.fire("gpu-01", "drain")
    h.advance(minutes=25)
    h.step()
    assert h.metric("gpuhealth_remediator_breaker_open", pool="gpu") == 0
    assert sorted(disrupted(h, cluster)) == ["gpu-00", "gpu-01"]


def test_budget_holds_below_the_breaker_and_across_a_restart(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    for i in range(5):  # 25%: below the breaker
        h.fire(f"gpu-{i:02d}", "reboot")
    h.step()
    assert len(disrupted(h, cluster)) == 2  # max(1, ceil(10% of 20))
    assert len(tainted(cluster)) == 4
    h2 = Harness(cluster)  # budgets come from the cluster, not memory
    h2.now = h.now
    for i in range(5):
        h2.fire(f"gpu-{i:02d}", "reboot")
    h2.step()
    assert len(disrupted(h2, cluster)) == 2 and len(tainted(cluster)) == 4
    assert h2.metric("gpuhealth_remediator_budget_in_use", pool="gpu", budget="disrupted") == 2


def test_pools_have_their_own_budgets(cluster: FakeCluster) -> None:
    cluster.add_node("cpu-0", pool="cpu")
    h = Harness(cluster, "budget: {max_disrupted: 1}")
    h.fire("gpu-00", "drain")
    h.fire("gpu-01", "drain")
    h.fire("cpu-0", "drain")
    h.step()
    assert sorted(disrupted(h, cluster)) == ["cpu-0", "gpu-00"]


def test_actions_per_hour_cap(cluster: FakeCluster) -> None:
    h = Harness(cluster, "budget: {max_actions_per_hour: 3, max_cordoned: 10}")
    for i in range(5):
        h.fire(f"gpu-{i:02d}", "cordon")
    plans = h.step()
    assert len(tainted(cluster)) == 3
    assert any("rate cap" in d.reason for d in h.decided(plans) if d.decision == "deferred")
    h.advance(minutes=61)
    h.step()
    assert len(tainted(cluster)) == 5


WEBHOOK = st.tuples(st.integers(0, 7), st.sampled_from(["none", "cordon", "drain", "reset_gpu", "reboot", "replace"]),
                    st.sampled_from(["firing", "firing", "resolved"]), st.integers(0, 40))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WEBHOOK, min_size=1, max_size=12))
def test_no_sequence_of_webhooks_disrupts_more_nodes_than_the_budget(
        steps: list[tuple[int, str, str, int]]) -> None:
    with FakeCluster() as cluster:
        for i in range(8):
            cluster.add_node(f"n{i}")
            cluster.add_pod(f"n{i}", f"w{i}", labels={"app": f"w{i}"})
        cluster.add_pdb("default", {"app": "w3"}, 0)
        cluster.nodeclaims["c5"] = {"metadata": {"name": "c5"}, "status": {"nodeName": "n5"}}
        h = Harness(cluster, "budget: {max_disrupted: 1, max_cordoned: 2}\nreturn_to_service: {healthy_delay: 5m}")
        for node, remediation, status, minutes in steps:
            if status == "firing":
                h.fire(f"n{node}", remediation, gpu=str(node), alertname=f"A{remediation}")
            else:
                h.resolve(f"n{node}", remediation, gpu=str(node), alertname=f"A{remediation}")
            h.step()
            for job in cluster.jobs.values():  # jobs finish, some fail
                job["status"] = {"succeeded": 1} if len(job["metadata"]["name"]) % 2 else {"failed": 1}
            h.advance(minutes=minutes)
            h.step()
            assert len(disrupted(h, cluster)) <= 1
            assert len(tainted(cluster)) <= 2
