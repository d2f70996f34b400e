"""The disruption budget and the circuit breaker, counted from the cluster, under storms and at random."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhealth.remediator.decide.nodestate import TAINT_KEY
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness


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


def test_breaker_is_reported_once_when_it_opens_not_every_pass(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    for i in range(10):
        h.fire(f"gpu-{i:02d}", "reboot")
    for _ in range(10):
        h.step()
        h.advance(seconds=30)
    assert [e["reason"] for e in cluster.events].count("CircuitBreakerOpen") == 1
    assert h.metric("gpuhealth_remediator_breaker_open", pool="gpu") == 1
    for i in range(10):  # the storm ends; after the cool-down the breaker closes, and a new storm reports again
        h.resolve(f"gpu-{i:02d}", "reboot")
    h.advance(minutes=31)
    h.step()
    assert h.metric("gpuhealth_remediator_breaker_open", pool="gpu") == 0
    for i in range(10, 20):
        h.fire(f"gpu-{i:02d}", "cordon", starts=h.now)
    h.step()
    assert [e["reason"] for e in cluster.events].count("CircuitBreakerOpen") == 2


def test_events_go_to_the_involved_objects_namespace(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    for i in range(10):
        h.fire(f"gpu-{i:02d}", "reboot")
    h.step()
    by_kind = {(e["involvedObject"]["kind"], e["metadata"]["namespace"]) for e in cluster.events}
    assert by_kind == {("Node", "default"), ("Lease", "gpuhealth")}


def test_fake_api_rejects_an_event_outside_its_objects_namespace(cluster: FakeCluster) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    event = {"metadata": {"name": "x"}, "involvedObject": {"kind": "Node", "name": "gpu-00"}, "reason": "R"}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_event("gpuhealth", event)
    assert err.value.status == 422
    lease_event = {"metadata": {"name": "y"}, "reason": "R",
                   "involvedObject": {"kind": "Lease", "name": "l", "namespace": "gpuhealth"}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_event("default", lease_event)
    assert err.value.status == 422
    core.create_namespaced_event("default", event)
    core.create_namespaced_event("gpuhealth", lease_event)


def test_fake_field_selector_not_equal_excludes_matches(cluster: FakeCluster) -> None:
    from kubernetes import client

    cluster.add_pod("gpu-00", "a")
    cluster.add_pod("gpu-01", "b")
    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    names = [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=gpu-00").items]
    assert names == ["b"]
    names = [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName==gpu-00").items]
    assert names == ["a"]


def test_a_node_with_an_unreadable_state_counts_as_disrupted_and_is_left_alone(cluster: FakeCluster) -> None:
    h = Harness(cluster, "budget: {max_disrupted: 1}")
    cluster.update_node("gpu-00", lambda n: n["metadata"]["annotations"].update(
        {"gpuhealth.io/state": '{"v": 99, "rung": "reboot"}'}))
    h.fire("gpu-01", "drain")
    plans = h.step()
    assert ("gpu-00", "none", "skipped") in h.decisions(plans)
    assert ("gpu-01", "drain", "deferred") in h.decisions(plans)  # the budget of 1 is taken by gpu-00
    assert cluster.annotations("gpu-00")["gpuhealth.io/state"] == '{"v": 99, "rung": "reboot"}'
    assert not cluster.taints("gpu-00")


def test_unknown_keys_in_alert_records_are_ignored() -> None:
    from gpuhealth.remediator.decide.nodestate import NodeState

    text = ('{"v": 1, "episode": "2026-12-02T10:00:00Z", "future": 1, "alerts": {"fp": {"name": "A", '
            '"remediation": "cordon", "status": "firing", "starts_at": "2026-12-02T10:00:00Z", '
            '"last_seen": "2026-12-02T10:00:00Z", "new_field": true}}}')
    assert NodeState.from_json(text).alerts["fp"].name == "A"
    for broken in ('{"alerts": {"fp": {"name": "A"}}}', '[1]', '{"v": 99}', "{nope"):
        with pytest.raises(ValueError):
            NodeState.from_json(broken)


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
    # the cordons alone: a cordon that does not climb takes no more of the cap when the hour is over
    h = Harness(cluster, "budget: {max_actions_per_hour: 3, max_cordoned: 10}\n"
                         "ladder: {cordon: {escalate_after: null}}")
    for i in range(5):
        h.fire(f"gpu-{i:02d}", "cordon")
    plans = h.step()
    assert len(tainted(cluster)) == 3
    assert any("rate cap" in d.reason for d in h.decided(plans) if d.decision == "deferred")
    h.advance(minutes=61)
    h.step()
    assert len(tainted(cluster)) == 5


WEBHOOK = st.tuples(st.integers(0, 7), st.sampled_from(["none", "cordon", "drain", "reset_gpu", "reboot", "replace"]),
                    st.sampled_from(["firing", "firing", "resolved"]), st.integers(0, 40),
                    st.sampled_from(["a", "b"]),  # the replica the webhook lands on
                    st.sampled_from(["", "", "restart", "jobs_fail", "jobs_succeed", "handover"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WEBHOOK, min_size=1, max_size=12))
def test_no_sequence_of_webhooks_disrupts_more_nodes_than_the_budget(
        steps: list[tuple[int, str, str, int, str, str]]) -> None:
    """Two replicas; webhooks land on either; replicas restart, Jobs fail or succeed, leadership moves.
    Whatever happens: never more than the budget disrupted or tainted, no eviction or Job on a node
    outside the budget, and no Job while evictable pods are on its node."""
    policy = "budget: {max_disrupted: 1, max_cordoned: 2}\nreturn_to_service: {healthy_delay: 5m}"
    with FakeCluster() as cluster:
        for i in range(8):
            cluster.add_node(f"n{i}")
            cluster.add_pod(f"n{i}", f"w{i}", labels={"app": f"w{i}"})
        cluster.add_pdb("default", {"app": "w3"}, 0)
        cluster.nodeclaims["c5"] = {"metadata": {"name": "c5"}, "status": {"nodeName": "n5"}}
        replicas = {"a": Harness(cluster, policy, identity="a"), "b": Harness(cluster, policy, identity="b")}
        now = replicas["a"].now
        seen_evictions = 0
        for node, remediation, status, minutes, where, event in steps:
            h = replicas[where]
            h.now = now
            if status == "firing":
                h.fire(f"n{node}", remediation, gpu=str(node), alertname=f"A{remediation}")
            else:
                h.resolve(f"n{node}", remediation, gpu=str(node), alertname=f"A{remediation}")
            if event == "restart":  # a replica restarts: nothing in memory survives
                replicas[where] = h = Harness(cluster, policy, identity=f"{where}-{len(cluster.requests)}")
            for r in replicas.values():
                r.now = now
                r.step()
            if event in ("jobs_fail", "jobs_succeed"):
                for job in cluster.jobs.values():
                    job["status"] = {"failed": 1} if event == "jobs_fail" else {"succeeded": 1}
            now += timedelta(minutes=minutes, seconds=20 if event == "handover" else 0)
            for r in replicas.values():
                r.now = now
                r.step()
            states = {n: replicas["a"].state(n) for n in cluster.nodes}
            disrupted_now = [n for n, s in states.items() if s.active and s.rung in DISRUPTIVE]
            assert len(disrupted_now) <= 1
            assert len(tainted(cluster)) <= 2
            new_evictions = cluster.evictions()[seen_evictions:]
            seen_evictions += len(new_evictions)
            evicted_nodes = {f"n{e.split('/')[1][1:]}" for e in new_evictions}  # pod wK runs on nK
            assert evicted_nodes <= set(disrupted_now)  # evictions only on the node holding the budget
            for job in cluster.jobs.values():
                node = job["spec"]["template"]["spec"]["nodeName"]
                if job.get("status", {}).get("active"):
                    assert not [p for p in cluster.pods_on(node) if p["metadata"]["name"].startswith("w")
                                and not p["metadata"].get("deletionTimestamp")]
        holders = {lease["spec"]["holderIdentity"] for lease in cluster.leases.values()}
        assert len(holders) <= 1
