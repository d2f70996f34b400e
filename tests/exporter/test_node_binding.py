"""Each exporter writes only its own Node: the chart's ValidatingAdmissionPolicy, enforced by the fake API
server with the rendered policy's own CEL, against the exporter's real NodeConditionWriter over HTTP.

The exporter's ClusterRole grants nodes/status patch on every Node (RBAC cannot name "the node this pod
runs on"); the policy narrows it to the Node named in the pod's service-account token.
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
from gpuhealth.exporter.node_status import KubeError, NodeConditionWriter
from gpuhealth.exporter.node_watch import NodeWatch
from tests.fakes.apiserver import FakeCluster
from tests.fakes.apiserver.admission import AdmissionPolicies, Attributes, Identity, service_account
from tests.support.chart_render import render

NAMESPACE = "gpuhealth"
EXPORTER, REMEDIATOR = "gpuhealth-exporter", "gpuhealth-remediator"
POLICY = "gpuhealth-exporter-own-node"
HEALTHY = [Condition("GpuhealthGPUHealthy", "True", "GPUsHealthy", "8 of 8 GPUs healthy")]
FAULTY = [Condition("GpuhealthGPUHealthy", "False", "XidFatal", "Xid 79 on GPU 3")]


# replace.method condition: the remediator's ClusterRole then grants nodes/status too (the one write below that
# the exporters' policy must leave alone); with the default method it has no such grant.
MANIFESTS = render({"remediator": {"policy": {"replace": {"method": "condition"}}}})


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for node in ("gpu-a", "gpu-b"):
            c.add_node(node)
        c.add_service_account_token("token-a", NAMESPACE, EXPORTER, node="gpu-a", pod="exporter-a")
        c.add_service_account_token("token-b", NAMESPACE, EXPORTER, node="gpu-b", pod="exporter-b")
        c.add_service_account_token("token-remediator", NAMESPACE, REMEDIATOR, pod="remediator-0")
        c.load_admission(MANIFESTS)
        c.load_rbac(MANIFESTS)
        yield c


def writer(cluster: FakeCluster, node: str, token: str, tmp_path: Path) -> NodeConditionWriter:
    sa_dir = tmp_path / token
    sa_dir.mkdir(exist_ok=True)
    (sa_dir / "token").write_text(token + "\n")
    return NodeConditionWriter(cluster.url, node, sa_dir=str(sa_dir))


def conditions(cluster: FakeCluster, node: str) -> dict[str, str]:
    return {c["type"]: c["status"] for c in cluster.node(node)["status"]["conditions"]}


def kube(cluster: FakeCluster, token: str) -> client.CoreV1Api:
    config = client.Configuration(host=cluster.url)
    config.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(config))


def test_an_exporter_writes_its_own_nodes_conditions(cluster: FakeCluster, tmp_path: Path) -> None:
    own = writer(cluster, "gpu-a", "token-a", tmp_path)
    assert own.sync(HEALTHY)
    assert own.sync(FAULTY)  # and changes them when the fault appears
    assert conditions(cluster, "gpu-a")["GpuhealthGPUHealthy"] == "False"


def test_an_exporter_gets_403_writing_another_nodes_conditions(cluster: FakeCluster, tmp_path: Path) -> None:
    before = cluster.node("gpu-b")
    intruder = writer(cluster, "gpu-b", "token-a", tmp_path)  # node A's token, aimed at node B
    with pytest.raises(KubeError, match="HTTP 403") as denied:
        intruder.sync(FAULTY)
    assert "is forbidden" in str(denied.value)
    assert cluster.node("gpu-b") == before  # nothing was written
    # B's own exporter still can
    assert writer(cluster, "gpu-b", "token-b", tmp_path).sync(HEALTHY)
    assert conditions(cluster, "gpu-b")["GpuhealthGPUHealthy"] == "True"


def test_the_denial_is_shaped_like_the_api_servers(cluster: FakeCluster) -> None:
    with pytest.raises(ApiException) as denied:
        kube(cluster, "token-a").patch_node_status("gpu-b", {"status": {"conditions": [
            {"type": "GpuhealthGPUHealthy", "status": "False", "reason": "Forged", "message": "x"}]}})
    assert denied.value.status == 403
    status = json.loads(denied.value.body or "{}")
    binding = one_binding()["metadata"]["name"]
    assert status["kind"] == "Status" and status["status"] == "Failure" and status["reason"] == "Forbidden"
    assert status["message"] == (
        f'nodes "gpu-b" is forbidden: ValidatingAdmissionPolicy \'{POLICY}\' with binding \'{binding}\' denied '
        "request: the gpuhealth exporter may write only its own Node: its token is bound to node gpu-a, the "
        "request is for node gpu-b")
    assert status["details"]["name"] == "gpu-b" and status["details"]["kind"] == "nodes"


def test_a_token_that_names_no_node_is_refused_even_on_its_own_node(cluster: FakeCluster, tmp_path: Path) -> None:
    # A legacy Secret token, or a cluster without ServiceAccountTokenPodNodeInfo: fail closed.
    cluster.add_service_account_token("token-legacy", NAMESPACE, EXPORTER, node=None)
    with pytest.raises(KubeError, match="HTTP 403"):
        writer(cluster, "gpu-a", "token-legacy", tmp_path).sync(HEALTHY)
    with pytest.raises(ApiException) as denied:
        kube(cluster, "token-legacy").patch_node_status("gpu-a", {"status": {}}, _preload_content=False)
    message = json.loads(denied.value.body or "{}")["message"]
    assert "its token is bound to no node, the request is for node gpu-a" in message


def test_the_remediator_may_still_write_any_node(cluster: FakeCluster) -> None:
    core = kube(cluster, "token-remediator")
    core.patch_node("gpu-b", {"spec": {"unschedulable": True}}, _preload_content=False)  # cordon
    replace = {"type": "AcceleratedHardwareReady", "status": "False", "reason": "GpuhealthReplace", "message": "x"}
    core.patch_node_status("gpu-b", {"status": {"conditions": [replace]}}, _preload_content=False)
    assert cluster.node("gpu-b")["spec"]["unschedulable"] is True
    assert conditions(cluster, "gpu-b")["AcceleratedHardwareReady"] == "False"


def test_reads_are_not_admission_checked(cluster: FakeCluster, tmp_path: Path) -> None:
    # Admission never sees reads: the exporter can still list and watch any Node (its ClusterRole allows that).
    sa_dir = tmp_path / "token-a"
    sa_dir.mkdir()
    (sa_dir / "token").write_text("token-a\n")
    watch = NodeWatch(cluster.url, "gpu-b", sa_dir=str(sa_dir))
    watch.list()
    node = watch.node()
    assert node is not None and "karpenter.sh/nodepool" in node["metadata"]["labels"]


def test_an_unknown_or_missing_token_gets_401(cluster: FakeCluster, tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="HTTP 401"):
        writer(cluster, "gpu-a", "not-a-token", tmp_path).sync(HEALTHY)
    with pytest.raises(KubeError, match="HTTP 401"):
        NodeConditionWriter(cluster.url, "gpu-a", sa_dir=str(tmp_path / "no-such-dir")).sync(HEALTHY)


def one_binding() -> dict[str, Any]:
    (binding,) = [d for d in MANIFESTS if d["kind"] == "ValidatingAdmissionPolicyBinding"
                  and d["spec"]["policyName"] == POLICY]
    return binding


def _policy() -> dict[str, Any]:
    (policy,) = [d for d in MANIFESTS if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == POLICY]
    return copy.deepcopy(policy)


def test_the_fake_server_enforces_the_rendered_expression_not_its_own(tmp_path: Path) -> None:
    # The same request, under the rendered policy and under that policy with one expression changed.
    policy = _policy()
    request_b = ("gpu-b", "token-a")
    loosened = copy.deepcopy(policy)
    loosened["spec"]["validations"][0]["expression"] = "true"
    other_account = copy.deepcopy(policy)
    other_account["spec"]["matchConditions"][0]["expression"] = "request.userInfo.username == 'someone-else'"
    outcomes: dict[str, bool | str] = {}
    for label, manifests in (("rendered", [policy, one_binding()]), ("loosened", [loosened, one_binding()]),
                             ("other account", [other_account, one_binding()]), ("unbound", [policy])):
        with FakeCluster() as c:
            c.add_node("gpu-b")
            c.add_service_account_token("token-a", NAMESPACE, EXPORTER, node="gpu-a")
            c.load_admission(manifests)
            try:
                outcomes[label] = writer(c, *request_b, tmp_path).sync(HEALTHY)
            except KubeError as exc:
                outcomes[label] = "403" if "HTTP 403" in str(exc) else str(exc)
    assert outcomes == {"rendered": "403", "loosened": True, "other account": True, "unbound": True}


def test_the_policy_binds_the_daemonsets_own_service_account() -> None:
    (ds,) = [d for d in MANIFESTS if d["kind"] == "DaemonSet"]
    account = ds["spec"]["template"]["spec"]["serviceAccountName"]
    condition = _policy()["spec"]["matchConditions"][0]["expression"]
    assert f"'system:serviceaccount:{ds['metadata']['namespace']}:{account}'" in condition
    spec = _policy()["spec"]
    assert spec["failurePolicy"] == "Fail"  # an error in the policy refuses, never admits
    assert one_binding()["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}


def test_a_policy_the_fake_cannot_evaluate_is_refused_not_ignored() -> None:
    policy = _policy()
    policy["spec"]["matchConstraints"]["objectSelector"] = {"matchLabels": {"a": "b"}}
    with pytest.raises(ValueError, match="objectSelector"):
        AdmissionPolicies([policy, one_binding()])
    broken = _policy()
    broken["spec"]["validations"][0]["expression"] = "variables.tokenNode =="
    with pytest.raises(ValueError, match="does not compile"):
        AdmissionPolicies([broken])


def test_an_error_in_the_policy_refuses_the_request() -> None:
    # failurePolicy: Fail. A policy reading a field the request lacks errors, and the write is refused.
    policy = _policy()
    policy["spec"]["validations"][0]["expression"] = "request.userInfo.nothing == 'x'"
    admission = AdmissionPolicies([policy, one_binding()])
    attrs = Attributes("UPDATE", "", "v1", "nodes", "status", "", "gpu-a")
    denial = admission.admit(attrs, service_account(NAMESPACE, EXPORTER, node="gpu-a"), {}, {})
    assert denial is not None and denial.code == 422 and "resulted in error" in denial.status["message"]
    assert admission.admit(attrs, Identity("system:serviceaccount:gpuhealth:gpuhealth-remediator"), {}, {}) is None


@pytest.mark.parametrize("metadata", [
    {"finalizers": ["example.com/hold-forever"]},  # the Node could never be deleted (a replacement stuck)
    {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "exporter-a",  # garbage-collected with a pod
                          "uid": "00000000-0000-0000-0000-000000000001"}]},
])
def test_an_exporter_may_not_set_its_own_nodes_finalizers_or_owners(
        cluster: FakeCluster, metadata: dict[str, Any]) -> None:
    # nodes/status keeps the request's metadata (the API server's status strategy resets only spec); the exporter's
    # ClusterRole has no patch on nodes itself
    before = cluster.node("gpu-a")
    with pytest.raises(ApiException) as denied:
        kube(cluster, "token-a").patch_node_status("gpu-a", {"metadata": metadata}, _preload_content=False)
    assert denied.value.status == 403
    assert "may not change its Node's labels, annotations, finalizers or owner references" in str(denied.value.body)
    after = cluster.node("gpu-a")
    assert after["metadata"].get("finalizers") == before["metadata"].get("finalizers")
    assert after["metadata"].get("ownerReferences") == before["metadata"].get("ownerReferences")
