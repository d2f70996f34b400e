"""End to end with Prometheus sharded by node (docs/scaling.md, "Sharding Prometheus by node"): two shards each
evaluate the chart's node rule groups over their half of the nodes, a global Prometheus evaluates the fleet groups
over what both shards remote-write to it, an HA pair of Alertmanagers, and the remediator. Real processes: Debian's
Prometheus and Alertmanager, the exporter and the remediator, the fake API server (tests/e2e/sharded_stack.py says
what each is and which settings are the test's own). Rule durations are divided by stack.TIME_SCALE (30).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.operator_prometheus import hashmod
from tests.e2e.sharded_stack import SHARDS, ShardedStack
from tests.e2e.stack import http_json, print_logs_if_failed, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# Two pools of two nodes: a fault on one node of each pool stays under the breaker and the cordon budget. Their
# names hash (on node) to shards 0, 1, 0, 1 (checked below against what the shards scrape).
POOLS = {"pool-a": 2, "pool-b": 2}


@pytest.fixture
def sharded(request: pytest.FixtureRequest) -> Iterator[ShardedStack]:
    with ShardedStack(pools=POOLS) as s:
        yield s
        parts = (*s.remediators, "alertmanager", "alertmanager-1", "prometheus", "shard-0", "shard-1")
        print_logs_if_failed(request.node, s, parts)


# A node's two scrape families on one shard: its dcgm-exporter's GPU temperature and its exporter's `up`.
JOINED = 'count by (node) (DCGM_FI_DEV_GPU_TEMP) and on (node) count by (node) (up{job="gpuhealth-exporter"})'


def _alert_names(url: str, node: str | None = None) -> set[str]:
    alerts = http_json(f"{url}/api/v2/alerts?active=true")
    return {a["labels"]["alertname"] for a in alerts if node is None or a["labels"].get("node") == node}


def test_each_shard_evaluates_its_nodes_and_the_global_ruler_the_fleet(sharded: ShardedStack) -> None:
    stack = sharded
    # Sharded by node: each node's exporter and its dcgm-exporter (two targets, two addresses) on the one shard its
    # name hashes to, and on no other; by address the two would have split on some node.
    shards = [stack.shard_nodes(i) for i in range(SHARDS)]
    assert all(shards) and sorted(shards[0] + shards[1]) == sorted(stack.nodes)
    for index, nodes in enumerate(shards):
        assert all(hashmod(node, SHARDS) == index for node in nodes)
        # both families of each of its nodes meet here (dcgm-exporter is its own target: its first scrape may come a
        # second after the exporter's, which is all the stack waited for)
        wait_for(f"both families of shard {index}'s nodes on shard {index}", lambda i=index, n=nodes: sorted(
            r["metric"]["node"] for r in stack.shard_query(i, JOINED)) == n, timeout=20)
    # By address instead, a node's two targets (its exporter at the pod IP, dcgm-exporter at the host IP's port 9400)
    # would split across the shards for some node. The stack's loopback block is drawn afresh each run, and with four
    # nodes one run in sixteen keeps every pair together by chance: so the layout is checked over every block.
    def by_address(block: int) -> list[str]:
        def moved(ip: str) -> str:
            return ".".join([ip.split(".")[0], str(block), *ip.split(".")[2:]])
        return [n.name for n in stack.nodes.values()
                if hashmod(f"{moved(n.pod_ip)}:{n.port}", SHARDS) != hashmod(f"{moved(n.host_ip)}:9400", SHARDS)]
    split = [block for block in range(1, 255) if by_address(block)]
    assert len(split) > 200, "hashing by address would have kept every node's two targets together: the check " \
        "proves nothing"

    # A fault on one node of each shard (in different pools): its dcgmi fails, so the node's dcgm probe fails and
    # GpuhealthProbeFailing fires on that node's shard alone; both Alertmanagers have it; the remediator cordons
    # both nodes. Its max_rung is cordon: the nodes stay unhealthy (a fatal Xid would reboot them mid-test).
    faulty = [stack.nodes[shards[0][0]], next(stack.nodes[n] for n in shards[1]
                                              if stack.nodes[n].pool != stack.nodes[shards[0][0]].pool)]
    for node in faulty:
        node.dcgmi("fail")
    for index, node in enumerate(faulty):
        wait_for(f"GpuhealthProbeFailing on shard {index}", lambda i=index, n=node.name: stack.shard_query(
            i, f'ALERTS{{alertname="GpuhealthProbeFailing",alertstate="firing",node="{n}"}}'), timeout=60)
        assert not stack.shard_query(1 - index, f'ALERTS{{node="{node.name}"}}')  # the other shard never sees it
    for node in faulty:
        wait_for(f"{node.name} cordoned by the remediator", lambda n=node.name: stack.cordoned(n), timeout=30)
        wait_for(f"{node.name}'s alert at both Alertmanagers", lambda n=node.name: all(
            "GpuhealthProbeFailing" in _alert_names(stack.alertmanager_url(am), n) for am in (0, 1)), timeout=10)

    # What the fleet groups read reaches the global ruler as the shards' records, not as raw series: each shard's
    # record of its failing probe (what GpuhealthMonitoringFault counts), and no probe series at all.
    failing = "node_probe_reason:gpuhealth_probe_success:avg10m"
    wait_for("both shards' failing-probe records at the global ruler", lambda: sorted(
        r["metric"]["node"] for r in stack.query(failing)) == sorted(n.name for n in faulty), timeout=20)
    assert not stack.query("gpuhealth_probe_success") and not stack.query("gpuhealth_probe_error")

    # The fleet's SLO, computed once over both shards: the global ruler counts every node and both unhealthy ones,
    # and its burn-rate alert fires and reaches both Alertmanagers.
    wait_for("the fleet SLO over both shards", lambda: stack.query_value("fleet:gpuhealth_nodes:count") == 4
             and stack.query_value("fleet:gpuhealth_nodes_unhealthy:count") == 2, timeout=30)
    wait_for("GPUFleetAvailabilityBudgetBurnFast firing", lambda: stack.firing("GPUFleetAvailabilityBudgetBurnFast"),
             timeout=30)
    wait_for("the burn-rate alert at both Alertmanagers", lambda: all(
        "GPUFleetAvailabilityBudgetBurnFast" in _alert_names(stack.alertmanager_url(am)) for am in (0, 1)), timeout=20)
    for index in range(SHARDS):  # no shard evaluates a fleet group, nor could it alone
        assert not stack.shard_query(index, "fleet:gpuhealth_nodes:count")
        assert len(stack.shard_query(index, 'up{job="gpuhealth-exporter"}')) < len(stack.nodes)
    # the remediator's own series reach the fleet ruler (it scrapes the remediator): its leader's count of actions
    assert stack.query_value('sum(gpuhealth_remediator_leader)') == 1

    # A training job with a rank on every node, so on both shards, the one on the node of shard 0 that is already
    # cordoned twice as slow (no other node is taken out): each shard records its ranks' 5-minute step times
    # (gpuhealth-training-ranks), the global ruler gets those records alone and scores the job over both shards.
    ranks = [(name, 0.4 if name == faulty[0].name else 0.2) for name in sorted(stack.nodes)]
    stack.start_training_job("llm", ranks)
    record = "namespace_job_rank_node:gpuhealth_training_step_seconds:avg5m"
    wait_for("every rank's record at the global ruler", lambda: sorted(
        r["metric"]["node"] for r in stack.query(record)) == sorted(stack.nodes), timeout=60)
    for index, nodes in enumerate(shards):  # each shard records its own nodes' ranks only
        assert sorted(r["metric"]["node"] for r in stack.shard_query(index, record)) == nodes
    assert not stack.query("gpuhealth_training_step_seconds")  # the raw step times stay on the shards
    # each shard counts its nodes' ranks of the job; the global ruler sums the forwarded counts over both shards
    wait_for("the job's ranks counted over both shards", lambda: stack.query_value(
        'namespace_job:gpuhealth_training_ranks:count{job="llm"}') == len(stack.nodes), timeout=30)
    wait_for("TrainingRankSlow on the slow rank's node, from the global ruler", lambda: stack.firing(
        "TrainingRankSlow", faulty[0].name), timeout=90)
    assert [a["labels"]["node"] for a in stack.firing("TrainingRankSlow")] == [faulty[0].name]
