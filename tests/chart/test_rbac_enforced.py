"""The fake API server enforces the chart's RBAC as a real one does (tests/fakes/apiserver/rbac.py), so a call the chart
does not grant fails a test with 403 instead of passing unnoticed."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.act.node_jobs import job_statuses, render_job
from gpuhealth.remediator.clients.errors import Forbidden, KubeError, Unauthorized
from gpuhealth.remediator.clients.kube import Kube
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import Harness

SA = "system:serviceaccount:gpuhealth:gpuhealth-remediator"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node("gpu-0")
        c.add_pod("gpu-0", "train-0", namespace="ml")
        chart_rbac.enforce(c)
        yield c


def _remediator(cluster: FakeCluster) -> client.ApiClient:
    return client.ApiClient(chart_rbac.configuration(cluster))


def _forbidden(call: object, *args: object, **kwargs: object) -> dict[str, object]:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)  # type: ignore[operator]
    assert err.value.status == 403
    body: dict[str, object] = json.loads(err.value.body)
    return body


def test_what_the_chart_does_not_grant_is_403_in_the_api_servers_status_shape(cluster: FakeCluster) -> None:
    core = client.CoreV1Api(_remediator(cluster))
    status = _forbidden(core.list_namespaced_secret, "gpuhealth")
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 403,
                      "reason": "Forbidden", "details": {"kind": "secrets"},
                      "message": f'secrets is forbidden: User "{SA}" cannot list resource "secrets" in API group "" '
                                 'in the namespace "gpuhealth"'}
    # pods delete is granted only with drain.on_timeout: force (the default policy evicts, never deletes)
    status = _forbidden(core.delete_namespaced_pod, "train-0", "ml")
    assert status["details"] == {"kind": "pods", "name": "train-0"}
    assert cluster.forbidden == [(SA, "GET", "/api/v1/namespaces/gpuhealth/secrets"),
                                 (SA, "DELETE", "/api/v1/namespaces/ml/pods/train-0")]
    # what it does grant passes: pods list and watch cluster-wide, the Eviction subresource
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["train-0"]


def test_a_role_grants_only_in_its_namespace_and_resource_names_limit_what_they_name(cluster: FakeCluster) -> None:
    batch = client.BatchV1Api(_remediator(cluster))
    job = render_job("reboot", "x", "gpu-0", chart_rbac.chart_policy())  # a Job the chart's admission policy admits
    batch.create_namespaced_job("gpuhealth", copy.deepcopy(job))  # the jobs Role's namespace
    _forbidden(batch.create_namespaced_job, "ml", copy.deepcopy(job))
    leases = client.CoordinationV1Api(_remediator(cluster))
    status = _forbidden(leases.read_namespaced_lease, "someone-elses-lease", "gpuhealth")
    assert status["details"] == {"kind": "leases", "group": "coordination.k8s.io", "name": "someone-elses-lease"}
    assert "cannot get resource \"leases\" in API group \"coordination.k8s.io\"" in str(status["message"])


def test_the_exporter_may_write_node_status_but_not_the_node(cluster: FakeCluster) -> None:
    cluster.add_service_account_token("exp", "gpuhealth", "gpuhealth-exporter", node="gpu-0", pod="exporter-0")
    core = client.CoreV1Api(client.ApiClient(chart_rbac.configuration(cluster, "exp")))
    core.patch_node_status("gpu-0", {"status": {"conditions": [{"type": "GpuhealthGPUHealthy", "status": "True"}]}},
                          _preload_content=False)
    status = _forbidden(core.patch_node, "gpu-0", {"spec": {"unschedulable": True}})
    assert 'cannot patch resource "nodes" in API group "" at the cluster scope' in str(status["message"])


def test_a_request_without_a_token_is_401_once_rbac_is_on(cluster: FakeCluster) -> None:
    anonymous = client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))
    with pytest.raises(ApiException) as err:
        anonymous.list_node()
    assert err.value.status == 401


def test_a_token_the_api_server_does_not_know_is_unauthorized_worth_a_retry_not_forbidden(cluster: FakeCluster) -> None:
    """A rotated or not-yet-valid token (401) is not the chart refusing the call (403): callers that give up on a
    refusal (the Job start: a rung not started for good) must not give up on it."""
    kube = Kube(client.ApiClient(chart_rbac.configuration(cluster, "a-token-rotated-away")))
    with pytest.raises(KubeError) as err:
        job_statuses(kube, "gpuhealth")
    assert err.value.status == 401 and isinstance(err.value, Unauthorized) and err.value.transient
    assert not isinstance(err.value, Forbidden)


def _with_the_old_jobs_role() -> list[dict[str, Any]]:
    """Today's chart, with the jobs Role as it was before enforcement found the missing list."""
    docs = chart_rbac.render()
    for doc in docs:
        if doc["kind"] == "Role" and doc["metadata"]["name"] == "gpuhealth-remediator-jobs":
            doc["rules"] = [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
    return docs


def test_the_old_charts_jobs_role_would_have_hidden_every_reset_outcome() -> None:
    """The chart granted jobs create and get, but each pass LISTs the Jobs (gpuhealth/remediator/act/node_jobs.py): in a
    cluster the list was forbidden, and a reset could never be seen to finish. Enforcement catches it."""
    docs = _with_the_old_jobs_role()
    with FakeCluster() as c:
        c.load_rbac(docs)
        c.add_service_account_token(chart_rbac.REMEDIATOR_TOKEN, "gpuhealth", "gpuhealth-remediator")
        with pytest.raises(Forbidden) as err:
            job_statuses(Kube(_remediator(c)), "gpuhealth")
        assert err.value.status == 403
        chart_rbac.enforce(c)  # today's chart
        assert job_statuses(Kube(_remediator(c)), "gpuhealth") == {}


def test_the_remediator_tests_run_under_the_charts_rbac(cluster: FakeCluster) -> None:
    with FakeCluster() as fresh:
        fresh.add_node("gpu-0")
        Harness(fresh)
        assert fresh.rbac is not None
        assert ("GET", "/api/v1/nodes") in fresh.requests and fresh.forbidden == []


def test_a_forbidden_job_list_leaves_the_reset_unknown_and_is_counted_not_read_as_done() -> None:
    """Under the old chart's jobs Role, a reset Job is created but its outcome cannot be listed: the rung stays
    unknown (it neither succeeds nor fails on a guess) and every failed list is counted."""
    docs = _with_the_old_jobs_role()
    with FakeCluster() as c:
        for i in range(10):
            c.add_node(f"gpu-{i}")
        c.load_rbac(docs)
        c.add_service_account_token(chart_rbac.REMEDIATOR_TOKEN, "gpuhealth", "gpuhealth-remediator")
        h = Harness(c, "evidence: {enabled: false}")  # the reset itself (evidence: tests/remediator/evidence/)
        h.fire("gpu-3", "reset_gpu", gpu="3")
        h.step()
        assert len(c.jobs) == 1  # create is granted
        next(iter(c.jobs.values()))["status"] = {"succeeded": 1}
        h.advance(minutes=1)
        h.step()
        assert h.state("gpu-3").rung_status != "done"  # the success cannot be seen
        assert h.metric("gpuhealth_remediator_api_errors_total", operation="list_jobs") >= 1
        assert any(p.endswith("/jobs") for _, _, p in c.forbidden)


def test_only_a_policy_that_replaces_by_condition_may_write_node_status() -> None:
    """nodes/status is the condition Karpenter's node repair acts on: a remediator that replaces by deleting the
    NodeClaim (the default) cannot write it, and one that replaces by condition can, and does."""
    with FakeCluster() as c:
        c.add_node("gpu-6")
        h = Harness(c, "evidence: {enabled: false}")  # replace.method: nodeclaim
        core = client.CoreV1Api(_remediator(c))
        _forbidden(core.patch_node_status, "gpu-6", {"status": {"conditions": [
            {"type": "AcceleratedHardwareReady", "status": "False"}]}})
        assert h.policy.replace.method == "nodeclaim"
    with FakeCluster() as c:
        c.add_node("gpu-6")
        h = Harness(c, "evidence: {enabled: false}\nreplace: {method: condition}")
        h.fire("gpu-6", "replace")
        h.step()
        conditions = {x["type"]: x["status"] for x in c.node("gpu-6")["status"]["conditions"]}
        assert conditions["AcceleratedHardwareReady"] == "False"
        assert c.forbidden == []


def test_with_gpu_scope_off_the_remediator_reads_no_dra_object_and_is_granted_none() -> None:
    """dra.enabled: false renders no resource.k8s.io grant; the remediator then takes the node ladder for a one-GPU
    fault without asking for ResourceSlices, ResourceClaims or DeviceTaintRules (each would be a 403)."""
    with FakeCluster() as c:
        c.add_node("gpu-1")
        c.dra.publish_gpus("gpu-1")
        h = Harness(c, "dra: {enabled: false}")
        h.fire("gpu-1", "cordon", gpu="00000000:64:00.0")
        (decision,) = h.decided(h.step())
        assert decision.action == "cordon" and c.taints("gpu-1")
        assert c.forbidden == [] and not [p for _, p in c.requests if "resource.k8s.io" in p]
        resource = client.CustomObjectsApi(_remediator(c))
        _forbidden(resource.list_cluster_custom_object, "resource.k8s.io", "v1", "resourceslices")


def test_a_watch_is_authorized_as_a_watch_however_the_parameter_is_spelled() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "lister"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "lister"}, "roleRef": {"kind": "ClusterRole", "name": "lister"},
               "subjects": [{"kind": "ServiceAccount", "namespace": "ns", "name": "sa"}]}
    with FakeCluster() as cluster:
        cluster.add_node("gpu-0")
        cluster.load_rbac([role, binding])
        cluster.add_service_account_token("t", "ns", "sa")

        def status(query: str) -> int:
            req = urllib.request.Request(f"{cluster.url}/api/v1/nodes?{query}", headers={"Authorization": "Bearer t"})
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return int(resp.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        assert status("watch=false") == 200  # a list
        for spelled in ("true", "1", "True", "yes"):  # the API server's bool: anything but 0, f, false
            assert status(f"watch={spelled}&timeoutSeconds=1") == 403, spelled
