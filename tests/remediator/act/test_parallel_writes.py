"""A pass writes several nodes' plans at once (policy kube_api.parallel_writes, act/parallel.py): the budgets hold at
every moment whatever the order the writes land in, a pass done again writes nothing more, and one node's failed
or slow write holds up no other node. Real parts: the official client against the fake API server (with a round
trip's latency, so that writes really overlap), the ladder through the receiver."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, TAINT_KEY, NodeState
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness

POOLS = ("a", "b")
PER_POOL = 20  # budgets at the defaults: 20% cordoned (4), 10% disrupted (2) of each pool
POLICY = "kube_api: {parallel_writes: 8}\nevidence: {enabled: false}\n"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for pool in POOLS:
            for i in range(PER_POOL):
                c.add_node(f"{pool}-{i:02d}", pool=pool)
                c.add_pod(f"{pool}-{i:02d}", f"train-{pool}-{i:02d}", gpus=8)
        c.latency = 0.005
        yield c


def storm(h: Harness, per_pool: int, remediation: str = "reboot") -> None:
    """`per_pool` nodes of each pool alerting at once (25% of a pool: under the breaker's 30%)."""
    for pool in POOLS:
        for i in range(per_pool):
            h.fire(f"{pool}-{i:02d}", remediation)


def peaks(cluster: FakeCluster) -> dict[tuple[str, str], int]:
    """Replayed from every committed Node change, in order: the most nodes of each pool at once (cordoned: our
    taint on it; disrupted: an episode at a disruptive rung)."""
    members: dict[tuple[str, str], set[str]] = defaultdict(set)
    worst: dict[tuple[str, str], int] = defaultdict(int)
    with cluster.lock:
        history = [json.loads(e.new) for e in cluster.history if e.kind == "nodes"]
    for node in history:
        name, pool = node["metadata"]["name"], name_pool(node)
        state = NodeState.from_json((node["metadata"].get("annotations") or {}).get(STATE_ANNOTATION))
        now_in = {"cordoned": any(t.get("key") == TAINT_KEY for t in node["spec"].get("taints") or []),
                  "disrupted": state.active and state.rung in DISRUPTIVE}
        for budget, inside in now_in.items():
            (members[pool, budget].add if inside else members[pool, budget].discard)(name)
            worst[pool, budget] = max(worst[pool, budget], len(members[pool, budget]))
    return dict(worst)


def name_pool(node: dict[str, object]) -> str:
    return str(node["metadata"]["labels"]["karpenter.sh/nodepool"])  # type: ignore[index]


def node_writes(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [w for w in cluster.writes() if "/leases" not in w[1]]


def test_parallel_writes_never_put_more_nodes_out_than_the_budgets_allow(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    storm(h, 5)
    with cluster.lock:
        cluster.peak_in_flight = 0  # the intake's two workers recorded the alerts side by side: not the pass's
    for _ in range(4):  # cordons, drains, reboot Jobs: each pass's writes side by side
        h.step()
        h.advance(minutes=1)
    assert cluster.peak_in_flight > 1, "the pass's writes never overlapped: nothing was tested"
    assert cluster.peak_in_flight <= 8  # at most parallel_writes at once
    worst = peaks(cluster)
    for pool in POOLS:
        assert worst[pool, "cordoned"] == 4, worst  # reached, never passed: 20% of 20
        assert worst[pool, "disrupted"] == 2, worst  # 10% of 20
    assert len(cluster.jobs) == 4  # the disrupted nodes' reboot Jobs, and no more


def test_a_pass_done_again_writes_nothing_more(cluster: FakeCluster) -> None:
    h = Harness(cluster, "kube_api: {parallel_writes: 8}\nevidence: {enabled: false}\n")
    storm(h, 4, "cordon")
    h.step()
    tainted = sorted(n for n in cluster.nodes if cluster.taints(n))
    assert tainted == [f"{p}-{i:02d}" for p in POOLS for i in range(4)]
    writes, events = len(node_writes(cluster)), len(cluster.events)
    h.step()  # the same decisions again, with nothing new: already done, nothing written twice
    h.step()
    assert len(node_writes(cluster)) == writes and len(cluster.events) == events
    assert all(cluster.reasons(n) == ["Cordoned"] for n in tainted)


def test_one_nodes_failed_write_does_not_stop_the_others(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    storm(h, 4, "cordon")
    cluster.fail("PATCH", "/api/v1/nodes/a-02$", 500, times=1)  # the cordon's write of one node fails
    h.step()
    tainted = sorted(n for n in cluster.nodes if cluster.taints(n))
    assert tainted == sorted(f"{p}-{i:02d}" for p in POOLS for i in range(4) if (p, i) != ("a", 2))
    assert h.metric("gpuhealth_remediator_api_errors_total", operation="execute") == 1  # counted, as before
    h.step()  # the next pass decides it again
    assert cluster.taints("a-02") and cluster.reasons("a-02") == ["Cordoned"]


def test_a_slow_node_holds_up_no_other(cluster: FakeCluster) -> None:
    # two at a time: the slow node (the first in the pass's order) is asked for among the first two, so the other
    # seven are asked for while it is slow, however the machine schedules the threads (with eight at once, a loaded
    # machine could send the slow one last, and the test would say nothing)
    h = Harness(cluster, POLICY.replace("parallel_writes: 8", "parallel_writes: 2"), timeout=10.0)
    storm(h, 4, "cordon")
    cluster.delay("PATCH", "/api/v1/nodes/a-00$", 1.0)  # one node's write takes a second to answer
    asked = len(cluster.requests)
    h.step()
    patches = [path.rsplit("/", 1)[1] for method, path in cluster.requests[asked:] if method == "PATCH"]
    with cluster.lock:
        committed = [json.loads(e.new)["metadata"]["name"] for e in cluster.history if e.kind == "nodes"]
    cordoned = [n for n in committed if n in patches]
    assert set(cordoned) == {f"{p}-{i:02d}" for p in POOLS for i in range(4)}  # the slow one too, in this pass
    after_slow = patches[patches.index("a-00") + 1:]
    assert after_slow, "every other write was asked for before the slow one: nothing was tested"
    # one after another, a write asked for after the slow one would land after it; side by side, they all land first
    assert cordoned[-1] == "a-00"


def test_a_pass_that_loses_its_lease_starts_no_further_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, "kube_api: {parallel_writes: 2}\nevidence: {enabled: false}\n", timeout=10.0)
    storm(h, 4, "cordon")  # 8 cordons, 2 at a time, each a PATCH and an Event of 0.1 s
    cluster.latency = 0.1
    passing = threading.Thread(target=h.step)
    passing.start()
    while not any(cluster.taints(n) for n in cluster.nodes):  # the first writes landed: the Lease is lost now
        assert passing.is_alive(), "the pass ended before any write"
        time.sleep(0.005)
    h.advance(minutes=1)  # the loop's clock past the renew deadline: this replica no longer counts as leader
    passing.join(30)
    aborted = sum(h.metric("gpuhealth_remediator_passes_aborted_total", reason=r)
                  for r in ("lost the Lease", "pass ran past its deadline"))
    assert aborted == 1
    cordoned = [n for n in cluster.nodes if cluster.taints(n)]
    assert 1 <= len(cordoned) <= 4  # the first two and at most the two in flight then; none started after
    cluster.latency = 0.0
    h.step()  # the next pass, leading again, writes the rest
    assert len([n for n in cluster.nodes if cluster.taints(n)]) == 8
