"""The chart's RBAC on the fake API server, for every test that talks to it: the chart rendered (once per set of
values) with the policy the test runs, its Roles and bindings and its ValidatingAdmissionPolicies loaded into
FakeCluster, and tokens for the chart's ServiceAccounts and for a person with cluster-admin.

So the chart is the one source of truth for permissions: a test fails with 403 when the code makes an API call
the chart does not grant (FakeCluster.forbidden lists each denied request).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from gpuhealth.remediator.policy import Policy, parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.fakes.apiserver.admission import Identity
from tests.support.chart_render import NAMESPACE, render

REMEDIATOR_SA, EXPORTER_SA = "gpuhealth-remediator", "gpuhealth-exporter"
CLEANUP_SA = "gpuhealth-cleanup"  # the pre-delete hook's (templates/cleanup-hook.yaml)
REMEDIATOR_TOKEN = "remediator-sa-token"
CLEANUP_TOKEN = "cleanup-sa-token"
ADMIN_TOKEN = "cluster-admin-token"


def policy_values(policy: Policy) -> dict[str, Any]:
    """The chart values that grant what this policy needs (the chart derives its RBAC from remediator.policy)."""
    # jobs: the Roles' namespace, and what the Jobs' admission policy admits (image, ServiceAccount)
    p: dict[str, Any] = {"jobs": {"namespace": policy.jobs.namespace, "image": policy.jobs.image,
                                  "service_account": policy.jobs.service_account},
                         "leader": {"namespace": policy.leader.namespace, "name": policy.leader.name}}
    # and what it pins the Jobs' pods to: their PriorityClass, RuntimeClass, pull secrets and resources, as this policy
    # renders them (remediator.jobs.* cleared, so a class the policy leaves unset is unset in the chart too)
    jobs: dict[str, Any] = {"runtimeClassName": "", "priorityClassName": "", "resources": None,
                            "imagePullSecrets": [{"name": n} for n in policy.jobs.image_pull_secrets]}
    for key, value in (("runtime_class_name", policy.jobs.runtime_class_name),
                       ("priority_class_name", policy.jobs.priority_class_name)):
        if value:
            p["jobs"][key] = value
    if policy.jobs.resources:
        p["jobs"]["resources"] = policy.jobs.resources
    # the diagnostic Job's images, which the Jobs' admission policy admits (the chart's own image as the judge's when
    # the policy names none)
    p["diagnose"] = {"image": policy.diagnose.image}
    if policy.diagnose.judge_image:
        p["diagnose"]["judge_image"] = policy.diagnose.judge_image
    if policy.drain.on_timeout == "force":
        p["drain"] = {"on_timeout": "force"}
    if policy.replace.method != "nodeclaim":  # nodes/status only for method condition
        p["replace"] = {"method": policy.replace.method}
    if not policy.dra.enabled:  # no resource.k8s.io grants
        p["dra"] = {"enabled": False}
    if not policy.evidence.enabled:  # no pods/log or configmaps grants
        p["evidence"] = {"enabled": False}
    if policy.workloads.enabled:
        p["workloads"] = {"enabled": True, "namespaces": list(policy.workloads.namespaces)}
    return {"remediator": {"policy": p, "jobs": jobs}}


def chart_policy(values: dict[str, Any] | None = None) -> Policy:
    """The remediator's policy file as the chart renders it (its ConfigMap): Jobs rendered with it are admitted."""
    config = next(d for d in render(values) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == REMEDIATOR_SA)
    return parse_policy(config["data"]["policy.yaml"], "chart ConfigMap")


def enforce(cluster: FakeCluster, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Load the chart's RBAC and admission policies (rendered with `values`) into the cluster, with the tokens of the
    remediator's ServiceAccount, of the cleanup hook's and of a cluster admin; the rendered manifests."""
    docs = render(values)
    cluster.load_rbac(docs)
    cluster.load_admission(docs)  # the node-action Jobs' policy: the remediator's Jobs must be of the templates' shape
    cluster.add_service_account_token(REMEDIATOR_TOKEN, NAMESPACE, REMEDIATOR_SA, pod="gpuhealth-remediator-0")
    cluster.add_service_account_token(CLEANUP_TOKEN, NAMESPACE, CLEANUP_SA, pod="gpuhealth-cleanup-x7k2p")
    add_admin(cluster)
    return docs


def add_admin(cluster: FakeCluster) -> str:
    """A person with cluster-admin (system:masters) on this cluster; their bearer token."""
    cluster.add_token(ADMIN_TOKEN, Identity("kubernetes-admin", ("system:masters", "system:authenticated")))
    return ADMIN_TOKEN


def configuration(cluster: FakeCluster, token: str = REMEDIATOR_TOKEN) -> client.Configuration:
    """The kubernetes client's configuration for the fake API server with a bearer token (default: the
    remediator's service account)."""
    config = client.Configuration(host=cluster.url)
    config.api_key = {"authorization": f"Bearer {token}"}
    return config


def admin(cluster: FakeCluster) -> client.ApiClient:
    """A person's kubeconfig with cluster-admin, for a test that reads or writes as itself."""
    return client.ApiClient(configuration(cluster, ADMIN_TOKEN))


def kubeconfig(cluster: FakeCluster, token: str = REMEDIATOR_TOKEN) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": cluster.url}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "users": [{"name": "fake", "user": {"token": token}}]}
