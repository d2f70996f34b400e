"""Where the chart places gpuhealth's own pods and what it grants them (issue 34, section 5): the exporter and the
remediator rank at least as high as the node-action Jobs they watch and make, the remediator keeps off the GPU nodes
it acts on, the diagnostic Job's collect image has a value of its own (mirror-only fleets), and GPU scope's
resource.k8s.io grants follow remediator.rbac.dra."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from gpuhealth.remediator.act.diagnose_job import render_diagnose_job
from gpuhealth.remediator.decide.diagnosis import Provisioned
from gpuhealth.remediator.decide.vocabulary import Purpose
from gpuhealth.remediator.policy.integrations import DiagnoseSettings
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.chart_render import granted, render, render_fresh

NS = "gpuhealth"
# The built-in PriorityClasses' values (k8s.io/api/scheduling/v1: SystemCriticalPriority and the +1000 of
# system-node-critical); a class of no name is priority 0.
BUILTIN_PRIORITY = {"": 0, "system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
DCGM_MIRROR = "registry.example.com/mirror/dcgm@sha256:" + "ef" * 32
DRA_GROUP = "resource.k8s.io"

# Nodes as the default affinities see them: GPU feature discovery's label, Karpenter's AWS label, a CPU node.
GFD_GPU_NODE = {"nvidia.com/gpu.present": "true"}
KARPENTER_GPU_NODE = {"karpenter.k8s.aws/instance-gpu-count": "8", "karpenter.sh/nodepool": "gpu"}
KARPENTER_CPU_NODE = {"karpenter.k8s.aws/instance-gpu-count": "0", "karpenter.sh/nodepool": "system"}
PLAIN_NODE = {"kubernetes.io/os": "linux"}


def _pod_spec(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = next(d for d in docs if d["kind"] == kind)["spec"]["template"]["spec"]
    return spec


def _requirement_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    """One nodeSelectorRequirement, as the scheduler reads it (k8s.io/component-helpers nodeaffinity)."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    assert op in ("Gt", "Lt") and len(values) == 1, expr
    if key not in labels or not labels[key].lstrip("-").isdigit():
        return False
    return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])


def _term_holds(term: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(_requirement_holds(e, labels) for e in term["matchExpressions"])


def test_the_exporter_and_the_remediator_rank_at_least_as_high_as_their_node_action_jobs() -> None:
    docs = render()
    jobs_class = chart_rbac.chart_policy().jobs.priority_class_name or ""
    for kind in ("DaemonSet", "Deployment"):
        own = _pod_spec(docs, kind).get("priorityClassName", "")
        assert BUILTIN_PRIORITY[own] >= BUILTIN_PRIORITY[jobs_class], f"{kind} {own!r} below the Jobs' {jobs_class!r}"


def test_a_priority_class_can_be_set_for_each_program_or_none() -> None:
    docs = render({"exporter": {"priorityClassName": "gpu-agents"}, "remediator": {"priorityClassName": ""}})
    assert _pod_spec(docs, "DaemonSet")["priorityClassName"] == "gpu-agents"
    assert "priorityClassName" not in _pod_spec(docs, "Deployment")


def test_the_exporter_runs_on_the_gpu_nodes_the_remediator_prefers_to_avoid() -> None:
    """The default: the remediator prefers every node the exporter's affinity does not select."""
    docs = render()
    exporter_terms = _pod_spec(docs, "DaemonSet")["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    preferred = _pod_spec(docs, "Deployment")["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    for labels in (GFD_GPU_NODE, KARPENTER_GPU_NODE, KARPENTER_CPU_NODE, PLAIN_NODE):
        gpu = any(_term_holds(t, labels) for t in exporter_terms)
        assert any(_term_holds(p["preference"], labels) for p in preferred) is not gpu, labels
    assert "podAntiAffinity" in _pod_spec(docs, "Deployment")["affinity"]  # replicas still spread over nodes


def test_the_remediator_can_be_kept_off_gpu_nodes_or_left_anywhere() -> None:
    required = render({"remediator": {"offGPUNodes": "required"}})
    deployment = next(d for d in required if d["kind"] == "Deployment")
    kubernetes_validate.validate(deployment, "1.30", strict=True)
    terms = _pod_spec(required, "Deployment")["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    allowed = [labels for labels in (GFD_GPU_NODE, KARPENTER_GPU_NODE, KARPENTER_CPU_NODE, PLAIN_NODE)
               if any(_term_holds(t, labels) for t in terms)]
    assert allowed == [KARPENTER_CPU_NODE, PLAIN_NODE]
    assert "nodeAffinity" not in _pod_spec(render({"remediator": {"offGPUNodes": "none"}}), "Deployment")["affinity"]
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "role", "operator": "In", "values": ["control"]}]}]}}}
    assert _pod_spec(render({"remediator": {"affinity": own}}), "Deployment")["affinity"] == own  # used as is


def test_the_collect_image_defaults_to_the_remediators_own() -> None:
    assert chart_rbac.chart_policy().diagnose.image == DiagnoseSettings().image


def test_a_mirrored_collect_image_runs_in_the_diagnostic_job_and_is_admitted() -> None:
    values = {"remediator": {"jobs": {"collectImage": DCGM_MIRROR}}}
    policy = chart_rbac.chart_policy(values)
    job = render_diagnose_job("gpuhealth-diagnose-gpu-0-1a2b3c4d", "gpu-0", Purpose.DIAGNOSE,
                              Provisioned(gpus=8, efa=32, instance_type="p5.48xlarge"), policy)
    assert job["spec"]["template"]["spec"]["initContainers"][0]["image"] == DCGM_MIRROR
    with FakeCluster() as cluster:
        cluster.add_node("gpu-0")
        chart_rbac.enforce(cluster, values)
        batch = client.BatchV1Api(client.ApiClient(chart_rbac.configuration(cluster)))
        batch.create_namespaced_job(NS, job)
        assert (NS, job["metadata"]["name"]) in cluster.jobs


def test_the_policys_own_collect_image_wins_over_the_value() -> None:
    values = {"remediator": {"jobs": {"collectImage": "registry.example.com/dcgm:1"},
                             "policy": {"diagnose": {"image": DCGM_MIRROR}}}}
    assert chart_rbac.chart_policy(values).diagnose.image == DCGM_MIRROR


def _dra_grants(values: dict[str, Any]) -> set[str]:
    return {resource for (_, group, resource) in granted(render(values), chart_rbac.REMEDIATOR_SA)
            if group == DRA_GROUP}


@pytest.mark.parametrize("dra", [False, "auto"])
def test_without_device_taint_rules_served_the_remediator_holds_no_dra_grant_and_keeps_to_the_node(dra: object) -> None:
    """auto: Helm's own API versions (a render with no cluster) serve no DeviceTaintRule, as EKS 1.34 does not."""
    values = {"remediator": {"rbac": {"dra": dra}}}
    assert _dra_grants(values) == set()
    assert chart_rbac.chart_policy(values).dra.enabled is False


def test_with_the_dra_grants_on_gpu_scope_keeps_its_grants() -> None:
    assert _dra_grants({"remediator": {"rbac": {"dra": True}}}) == {"resourceslices", "resourceclaims",
                                                                    "devicetaintrules"}
    assert chart_rbac.chart_policy().dra.enabled is True


def test_gpu_scope_asked_for_without_its_grants_fails_the_render_naming_both_values() -> None:
    with pytest.raises(Exception, match=r"remediator\.policy\.dra\.enabled is true but remediator\.rbac\.dra"):
        render_fresh({"remediator": {"rbac": {"dra": False}, "policy": {"dra": {"enabled": True}}}})
