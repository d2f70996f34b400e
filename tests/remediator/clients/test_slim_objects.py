"""What the remediator keeps of a Node or a Pod of real size (clients/fleet_cache.py: slim_node, node_metadata,
slim_pod): every field a decision reads, so a slimmed object decides exactly as the whole one, at a fraction of its
size; and the Nodes a fresh list brings (Kube.list_nodes) come slimmed, in pages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpuhealth.contract.names import EXPORTER_CONDITION
from gpuhealth.remediator.clients.fleet_cache import node_metadata, slim_node, slim_pod
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide.diagnosis import provisioned
from gpuhealth.remediator.decide.node_patches import claim_do_not_disrupt, cordon_body, with_gpu_clients
from gpuhealth.remediator.decide.nodestate import (
    DO_NOT_DISRUPT_ANNOTATION,
    HOLD_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_KEY,
    AlertRecord,
    NodeState,
)
from gpuhealth.remediator.decide.state_records import Reset
from gpuhealth.remediator.decide.undo import undo_conditions, undo_node
from gpuhealth.remediator.decide.views import evictable_pods, gpu_work, node_view
from gpuhealth.remediator.decide.vocabulary import Rung, RungStatus
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.fakes.apiserver.real_objects import json_size, real_node, real_pod

POLICY = parse_policy("alertmanager: {url: none}\n")
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _node_in_an_episode() -> dict[str, Any]:
    """A real-size Node that gpuhealth cordoned and paused GPU clients on, with a person's do-not-disrupt, a hold, its
    exporter's condition and a Karpenter-watched condition another agent set False."""
    node = real_node("pool-03-gpu-00042", "pool-03", 16)
    state = NodeState(alerts={"fp": AlertRecord("GPUFallenOffBus", "reboot", "firing", starts_at=NOW, last_seen=NOW,
                                                gpu="all")}, episode=NOW, rung=Rung.DRAIN,
                      rung_status=RungStatus.RUNNING, rung_started=NOW, cordoned=True,
                      reset=Reset(paused=("nvidia.com/gpu.deploy.dcgm",), pause_value="paused-for-gpuhealth"))
    node["metadata"]["annotations"].update({STATE_ANNOTATION: state.to_json(), DO_NOT_DISRUPT_ANNOTATION: "true",
                                            HOLD_ANNOTATION: json.dumps({"reason": "rma", "by": "ops", "at": "x"})})
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.dcgm"] = "paused-for-gpuhealth"
    node["spec"].update(unschedulable=True)
    node["spec"]["taints"].append({"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    node["status"]["conditions"] += [
        {"type": EXPORTER_CONDITION, "status": "False", "reason": "ProbeFailed", "message": "dcgm: timeout"},
        {"type": "AcceleratedHardwareReady", "status": "False", "reason": "NvidiaXID79Error", "message": "Xid 79",
         "lastTransitionTime": "2026-12-07T11:50:00Z"}]
    return node


def test_a_slim_node_decides_undoes_and_patches_exactly_as_the_whole_node_at_under_a_third_of_its_size() -> None:
    whole = _node_in_an_episode()
    slim = slim_node(json.loads(json.dumps(whole)))
    assert node_view(slim, POLICY) == node_view(whole, POLICY)
    assert undo_node(slim, POLICY) == undo_node(whole, POLICY)
    assert undo_conditions(slim, POLICY) == undo_conditions(whole, POLICY)
    assert provisioned(slim) == provisioned(whole)
    before = NodeState.from_json(whole["metadata"]["annotations"][STATE_ANNOTATION])
    after = NodeState(cordoned=True, do_not_disrupt=True)
    assert cordon_body(slim, after) == cordon_body(whole, after)
    assert claim_do_not_disrupt(slim, NodeState(), after) == claim_do_not_disrupt(whole, NodeState(), after)
    assert with_gpu_clients({}, slim, before, NodeState()) == with_gpu_clients({}, whole, before, NodeState())
    assert json_size(slim) * 3 < json_size(whole)
    assert "images" not in slim["status"] and "managedFields" not in slim["metadata"]
    assert "csi.volume.kubernetes.io/nodeid" not in slim["metadata"]["annotations"]


def test_the_receivers_node_keeps_the_state_and_the_hold_and_no_one_elses_annotations() -> None:
    whole = _node_in_an_episode()
    kept = node_metadata(whole)["metadata"]
    assert kept["annotations"] == {k: whole["metadata"]["annotations"][k]
                                   for k in (STATE_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, HOLD_ANNOTATION)}
    assert kept["resourceVersion"] == whole["metadata"]["resourceVersion"] and set(kept) == {
        "name", "resourceVersion", "annotations"}


def test_a_slim_pod_of_real_size_drains_and_sweeps_as_the_whole_pod() -> None:
    pods = [real_pod("pool-03-gpu-00042", f"worker-{i:06d}-0", 11) for i in range(3)]
    pods[1]["metadata"]["annotations"][DO_NOT_DISRUPT_ANNOTATION] = "true"
    pods[2]["metadata"]["deletionTimestamp"] = "2026-12-07T11:59:00Z"
    slim = [slim_pod(json.loads(json.dumps(p))) for p in pods]
    assert evictable_pods(slim) == evictable_pods(pods)
    assert gpu_work(slim, POLICY.sweep.idle_for, NOW) == gpu_work(pods, POLICY.sweep.idle_for, NOW)
    assert all(json_size(s) * 20 < json_size(p) for s, p in zip(slim, pods, strict=True))


def test_a_fresh_list_of_the_nodes_comes_in_pages_each_node_slimmed() -> None:
    with FakeCluster() as cluster:
        for i in range(25):
            with cluster.lock:
                node = real_node(f"gpu-{i:02d}", "a", 16)
                node["metadata"]["resourceVersion"] = cluster._next_rv()
                cluster.nodes[node["metadata"]["name"]] = node
        kube = Kube(client.ApiClient(client.Configuration(host=cluster.url)))
        kube.page_size = 10
        nodes = kube.list_nodes()
        assert [n["metadata"]["name"] for n in nodes] == [f"gpu-{i:02d}" for i in range(25)]
        assert nodes == [slim_node(n) for n in cluster.nodes.values()]
        lists = [q for method, path, q in cluster.queries if path == "/api/v1/nodes"]
        assert [q.get("limit") for q in lists] == ["10"] * 3
