"""The exporter's token cannot rewrite its Node's labels or annotations through nodes/status.

On a real API server the nodes/status strategy (pkg/registry/core/node/strategy.go,
nodeStatusStrategy.PrepareForUpdate: `newNode.Spec = oldNode.Spec`, nothing else) resets only spec from the request:
metadata changes sent with a status patch are kept. The exporter's ClusterRole grants nodes/status patch, so without
the chart's admission policy its token could rewrite gpuhealth's state and hold annotations, the pool label and the GPU
Operator's operand labels on its own Node. The fake API server keeps metadata on a status patch as the real one does,
and evaluates the chart's rendered ValidatingAdmissionPolicy with its own CEL; the exporter's writes go through its
real NodeConditionWriter and the official kubernetes client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.exporter.conditions import Condition
from gpuhealth.exporter.node_status import NodeConditionWriter
from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION, STATE_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.chart_render import NAMESPACE, render

EXPORTER = chart_rbac.EXPORTER_SA
POLICY = "gpuhealth-exporter-own-node"
NODE = "gpu-a"
STATE = '{"v":1,"alerts":{},"rung":"drain","cordoned":true}'
OPERAND = "nvidia.com/gpu.deploy.device-plugin"
MANIFESTS = render()


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node(NODE, pool="training", labels={OPERAND: "true"}, annotations={STATE_ANNOTATION: STATE})
        c.load_rbac(MANIFESTS)
        c.load_admission(MANIFESTS)
        c.add_service_account_token("token-a", NAMESPACE, EXPORTER, node=NODE, pod="exporter-a")
        chart_rbac.add_admin(c)
        yield c


def core(cluster: FakeCluster, token: str) -> client.CoreV1Api:
    return client.CoreV1Api(client.ApiClient(chart_rbac.configuration(cluster, token)))


def condition(status: str = "True") -> dict[str, str]:
    return {"type": "GpuhealthGPUHealthy", "status": status, "reason": "GPUsHealthy", "message": "8 of 8 GPUs"}


def refused(cluster: FakeCluster, body: dict[str, Any]) -> dict[str, Any]:
    """The Status the exporter's status patch is refused with; the Node unchanged."""
    before = cluster.node(NODE)
    with pytest.raises(ApiException) as denied:
        core(cluster, "token-a").patch_node_status(NODE, body, _preload_content=False)
    assert cluster.node(NODE) == before, "a refused write changed the Node"
    assert denied.value.status in (403, 422)
    status: dict[str, Any] = json.loads(denied.value.body or "{}")
    return status


@pytest.mark.parametrize("metadata", [
    {"annotations": {STATE_ANNOTATION: None}},  # the state gone: the node looks like nobody's
    {"annotations": {STATE_ANNOTATION: '{"v":1,"alerts":{}}'}},
    {"annotations": {HOLD_ANNOTATION: '{"reason":"forged"}'}},  # a hold: gpuhealth stops acting on the node
    {"labels": {"karpenter.sh/nodepool": "inference"}},  # moved to another pool's budget
    {"labels": {OPERAND: "false"}},  # the device plugin stopped
    {"labels": {"example.com/new": "x"}},
], ids=["state-removed", "state-rewritten", "hold-set", "pool-label", "operand-label", "label-added"])
def test_the_exporter_cannot_change_its_nodes_labels_or_annotations_through_status(
        cluster: FakeCluster, metadata: dict[str, Any]) -> None:
    status = refused(cluster, {"metadata": metadata, "status": {"conditions": [condition()]}})
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    binding = next(d for d in MANIFESTS if d["kind"] == "ValidatingAdmissionPolicyBinding"
                   and d["spec"]["policyName"] == POLICY)["metadata"]["name"]
    assert status["message"] == (
        f'nodes "{NODE}" is forbidden: ValidatingAdmissionPolicy \'{POLICY}\' with binding \'{binding}\' denied '
        "request: the gpuhealth exporter may not change its Node's labels, annotations, finalizers or owner "
        "references: it writes only status conditions")


def test_the_exporters_condition_updates_still_pass(cluster: FakeCluster, tmp_path: Path) -> None:
    sa_dir = tmp_path / "sa"
    sa_dir.mkdir()
    (sa_dir / "token").write_text("token-a\n")
    writer = NodeConditionWriter(cluster.url, NODE, sa_dir=str(sa_dir))
    assert writer.sync([Condition("GpuhealthGPUHealthy", "True", "GPUsHealthy", "8 of 8 GPUs healthy")])
    assert writer.sync([Condition("GpuhealthGPUHealthy", "False", "XidFatal", "Xid 79 on GPU 3")])
    node = cluster.node(NODE)
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["GpuhealthGPUHealthy"] == "False"
    assert node["metadata"]["annotations"] == {STATE_ANNOTATION: STATE}
    # metadata sent unchanged (a client that echoes what it read) is no change
    labels = dict(node["metadata"]["labels"])
    core(cluster, "token-a").patch_node_status(NODE, {"metadata": {"labels": labels},
                                                      "status": {"conditions": [condition()]}},
                                               _preload_content=False)


def test_a_status_patch_keeps_metadata_changes_and_resets_spec_as_the_api_server_does(cluster: FakeCluster) -> None:
    # A cluster admin (the policy is the exporter's only) patches nodes/status with metadata, spec and status.
    body = {"metadata": {"labels": {"example.com/team": "a"}, "annotations": {HOLD_ANNOTATION: "by hand"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [condition("False")]}}
    core(cluster, chart_rbac.ADMIN_TOKEN).patch_node_status(NODE, body, _preload_content=False)
    node = cluster.node(NODE)
    assert node["metadata"]["labels"]["example.com/team"] == "a"
    assert node["metadata"]["annotations"] == {STATE_ANNOTATION: STATE, HOLD_ANNOTATION: "by hand"}
    assert node["spec"] == {}  # spec is the main resource's: a status write leaves it as it was
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["GpuhealthGPUHealthy"] == "False"


def test_the_fake_refuses_by_the_rendered_expression(tmp_path: Path) -> None:
    # The metadata check is the chart's CEL, evaluated as written: loosened to "true", the same write is admitted.
    loosened = copy.deepcopy(MANIFESTS)
    policy = next(d for d in loosened if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == POLICY)
    (metadata_check,) = [v for v in policy["spec"]["validations"] if "oldObject.metadata.labels" in v["expression"]]
    metadata_check["expression"] = "true"
    with FakeCluster() as c:
        c.add_node(NODE)
        c.load_rbac(loosened)
        c.load_admission(loosened)
        c.add_service_account_token("token-a", NAMESPACE, EXPORTER, node=NODE)
        core(c, "token-a").patch_node_status(NODE, {"metadata": {"labels": {"karpenter.sh/nodepool": "x"}}},
                                             _preload_content=False)
        assert c.node(NODE)["metadata"]["labels"]["karpenter.sh/nodepool"] == "x"
