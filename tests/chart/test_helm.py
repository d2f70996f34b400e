"""The Helm chart (helm/gpuhealth): lints and renders through the Helm 4 SDK in-process
(helm-python-sdk, no helm binary, no cluster), with default and non-default values.

- Built-in kinds are validated with kubernetes-validate (strict: unknown fields fail) for every
  supported Kubernetes version. The Prometheus Operator kinds (PrometheusRule, PodMonitor,
  ServiceMonitor, AlertmanagerConfig) have no schema in kubernetes-validate: they are validated here
  against structural JSON schemas of the fields the chart uses (unknown fields fail), and the
  PrometheusRule's groups go through `promtool check rules` and must equal rules/.
- RBAC: no wildcard, and no verb beyond those docs/remediation.md and docs/metrics.md need; pods delete
  only for a policy that force-deletes; every request the remediator's caches and the exporter make is
  granted. Each exporter patching only its own Node (the ValidatingAdmissionPolicy): test_node_binding.py.
- The exporter's securityContext is the narrowest the enabled probes need; the NetworkPolicy (on by default)
  admits only Prometheus to the metrics ports and only Alertmanager to the remediator's webhook port.
- The rendered exporter config and remediator policy load with the programs' own parsers, and the
  flags the chart passes exist in their CLIs (read at test time: flags may change).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from gpuhealth.exporter import cli as exporter_cli
from gpuhealth.exporter.conditions import Condition
from gpuhealth.exporter.config import DEFAULT_PROBES, load_file
from gpuhealth.exporter.node_status import NodeConditionWriter
from gpuhealth.exporter.node_watch import NodeWatch
from gpuhealth.remediator import cli as remediator_cli
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.policy import load_policy
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac, paths
from tests.support.chart_render import granted, render_fresh, rules_by_role

ROOT = paths.REPO
CHART = ROOT / "helm" / "gpuhealth"
RULE_FILES = sorted([*ROOT.glob("rules/alerts/*.yaml"), *ROOT.glob("rules/recording/*.yaml")])
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
KUBE_VERSIONS = ["1.30.0", "1.31.0", "1.32.0", "1.33.0"]  # Chart.yaml kubeVersion: >=1.30 (VAP v1)
RELEASE, NAMESPACE = "gpuhealth", "gpuhealth"

# Every monitoring object on, a token from an existing Secret, policy overrides that move the Jobs and
# force-delete pods a drain could not evict, other scheduling and exporter privileges, a dry run, the
# NetworkPolicy.
CUSTOM: dict[str, Any] = {
    "image": {"repository": "registry.example/gpuhealth", "tag": "0.1.0-rc1"},
    "exporter": {
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
        "affinity": {},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "runtimeClassName": "nvidia",
        "priorityClassName": "system-node-critical",
        "extraEnv": [{"name": "INSTANCE_TYPE", "value": "p5.48xlarge"}],
        "config": {"instance_type": "p5.48xlarge", "fault_window": 600,
                   "probes": {"kmsg": {"interval": 2}, "dcgm": {"enabled": True}, "diag": {"enabled": False}}},
        "securityContext": {"privileged": False, "runAsUser": 0, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"], "add": ["SYSLOG"]}},
    },
    "remediator": {
        "replicas": 3, "dryRun": True, "interval": 10,
        "alertmanagerURL": "https://kps-alertmanager.monitoring.svc:9093",
        "alertmanager": {"bearerTokenSecret": {"name": "am-reader"}, "caSecret": {"name": "am-ca", "key": "root.pem"}},
        "webhookToken": {"existingSecret": "gpuhealth-webhook"},
        "rbac": {"karpenter": False},
        "policy": {"jobs": {"namespace": "gpuhealth-jobs"}, "budget": {"max_disrupted": 2},
                   "drain": {"on_timeout": "force"},
                   "pools": {"label": "eks.amazonaws.com/nodegroup", "default": "unpooled"},
                   "workloads": {"enabled": True, "namespaces": ["ml", "research"],
                                 "restart_loop": {"suspend": True}}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]}}},
    },
    "monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "alertmanagerConfig": {"enabled": True, "labels": {"alertmanagerConfig": "gpuhealth"}},
    },
    "dashboards": {"namespace": "monitoring", "annotations": {"grafana_folder": "GPU fleet"}},
    "networkPolicy": {"enabled": True, "prometheus": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus", "prometheus": "k8s"}}}},
}
# The exporter's kernel log from a device plugin (no hostPath /dev/kmsg), and with the kernel log off.
KMSG_INJECTED: dict[str, Any] = {"exporter": {"kmsg": {"hostPath": False}}}
KMSG_OFF: dict[str, Any] = {"exporter": {"config": {"probes": {"kmsg": {"enabled": False}}}}}
VALUES = {"default": None, "custom": CUSTOM, "kmsg-injected": KMSG_INJECTED, "kmsg-off": KMSG_OFF}

# RBAC the programs need (docs/remediation.md, docs/metrics.md): (apiGroup, resource) -> verbs.
REMEDIATOR_CLUSTER = {
    ("", "nodes"): {"get", "list", "watch", "patch"},
    ("", "nodes/status"): {"patch"},  # only with replace.method: condition
    ("", "pods"): {"list", "watch", "delete"},  # delete only with drain.on_timeout: force
    ("", "pods/eviction"): {"create"},
    ("karpenter.sh", "nodeclaims"): {"list", "delete"},
    # GPU scope (dra.enabled, the default): a pass lists the GPUs and claims, and makes and removes device taints
    ("resource.k8s.io", "resourceslices"): {"list"},
    ("resource.k8s.io", "resourceclaims"): {"list"},
    ("resource.k8s.io", "devicetaintrules"): {"create", "list", "delete"},
}
REMEDIATOR_NAMESPACED = {
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("batch", "jobs"): {"create", "list"},  # list: one LIST per pass of the Jobs' outcomes
    # evidence.enabled: the evidence pod's log, and its summary's ConfigMaps (create; list and delete: retention)
    ("", "pods/log"): {"get"},
    ("", "configmaps"): {"create", "list", "delete"},
    ("", "events"): {"create"},
}
# workloads.enabled (docs/jobs.md), in each of workloads.namespaces only: a cache of the pods that end
# (list, watch), the verdict on the pod (patch: an annotation; events create), and the restart-loop count
# on the owning Job (get, patch: an annotation, and spec.suspend when workloads.restart_loop.suspend). In
# remediator.eventsNamespace: events list, the classifier reads gpuhealth's own Events on a pod's Node.
WORKLOADS_NAMESPACED = {
    ("", "pods"): {"list", "watch", "patch"},
    ("", "events"): {"create", "list"},
    ("batch", "jobs"): {"get", "patch"},
}
# list and watch: its own Node, by a metadata.name field selector (gpuhealth/exporter/node_watch.py)
EXPORTER_CLUSTER = {("", "nodes"): {"get", "list", "watch"}, ("", "nodes/status"): {"patch"}}


@pytest.fixture(scope="module", autouse=True)
def _quiet_helm() -> Iterator[None]:
    helm.disable_logging()  # the loader logs each symlink it follows (files/rules, files/dashboards)
    yield


def render(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    return render_fresh(values, with_template=True)


RENDERED = {key: render(values) for key, values in VALUES.items()}


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "__template"}


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in kinds(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


# --- lint and render ---

@pytest.mark.parametrize("key", sorted(VALUES))
def test_chart_lints_strictly(key: str) -> None:
    for kube in ("v1.30.0", "v1.33.0"):
        report = helm.lint(CHART, VALUES[key], strict=True, namespace=NAMESPACE, kube_version=kube)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not report["errors"] and not problems, report


def test_default_render_has_every_part_and_no_operator_objects() -> None:
    docs = RENDERED["default"]
    found = {d["kind"] for d in docs}
    assert {"DaemonSet", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Secret", "ServiceAccount",
            "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} <= found
    # gated on values: helm-python-sdk (like `helm template`) cannot answer .Capabilities.APIVersions
    assert not found & {"PrometheusRule", "PodMonitor", "ServiceMonitor", "AlertmanagerConfig"}


def test_custom_render_has_the_operator_objects() -> None:
    found = {d["kind"] for d in RENDERED["custom"]}
    assert {"PrometheusRule", "PodMonitor", "ServiceMonitor", "AlertmanagerConfig"} <= found


def test_no_duplicate_keys_in_rendered_yaml() -> None:
    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: Strict, node: yaml.MappingNode) -> dict[Any, Any]:
        keys = [loader.construct_object(k) for k, _ in node.value]
        assert len(keys) == len(set(keys)), f"duplicate keys at line {node.start_mark.line + 1}: {keys}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    for values in VALUES.values():
        with helm.Chart.load(CHART) as chart:
            for name, text in chart.render(values, name=RELEASE, namespace=NAMESPACE).items():
                if name.endswith(".yaml"):
                    list(yaml.load_all(text, Loader=Strict))


def test_values_schema_rejects_unknown_and_wrong_values() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(CUSTOM)
        for bad in ({"exporter": {"tolerance": []}}, {"remediator": {"replicas": "two"}},
                    {"monitoring": {"podMonitor": {"enabled": "yes"}}}, {"dashboards": {"labels": {"a": 1}}},
                    {"monitoring": {"release": "not a label value"}},
                    {"monitoring": {"prometheusRule": {"namespaceLabel": "yes"}}},
                    {"monitoring": {"alertmanagerConfig": {"informational": {"groupWait": "soon"}}}}):
            with pytest.raises(helm.HelmValuesError, match="schema"):
                chart.render(bad, name=RELEASE, namespace=NAMESPACE)


# --- Kubernetes schemas ---

BUILTIN = ("v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "admissionregistration.k8s.io/v1",
           "networking.k8s.io/v1")


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("key", sorted(VALUES))
def test_builtin_manifests_validate(key: str, version: str) -> None:
    checked = 0
    for doc in RENDERED[key]:
        if doc["apiVersion"] in BUILTIN:
            kubernetes_validate.validate(_clean(doc), version, strict=True)
            checked += 1
        else:
            assert doc["apiVersion"].startswith("monitoring.coreos.com/"), doc["apiVersion"]
    assert checked >= 15


# Structural schemas of the Prometheus Operator fields the chart uses (monitoring.coreos.com v1 and
# v1alpha1 CRDs); additionalProperties: false, so a misspelt field fails.
_STR = {"type": "string"}
_STRMAP = {"type": "object", "additionalProperties": _STR}
_META = {"type": "object", "required": ["name", "namespace"], "properties": {
    "name": _STR, "namespace": _STR, "labels": _STRMAP, "annotations": _STRMAP}, "additionalProperties": False}
_DURATION = {"type": "string", "pattern": r"^(([0-9]+)(ms|s|m|h|d|w|y))+$"}
_RELABEL = {"type": "object", "additionalProperties": False, "properties": {
    "action": {"enum": ["replace", "Replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"]},
    "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
    "separator": _STR, "targetLabel": _STR, "regex": _STR, "modulus": {"type": "integer"}, "replacement": _STR}}
_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {"matchLabels": _STRMAP}}
_NSSELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchNames": {"type": "array", "items": _STR}, "any": {"type": "boolean"}}}


def _crd(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
            "properties": {"apiVersion": _STR, "kind": _STR, "metadata": _META, "spec": spec}}


_ENDPOINT = {"type": "object", "additionalProperties": False, "required": ["port"], "properties": {
    "port": _STR, "path": _STR, "interval": _DURATION, "scrapeTimeout": _DURATION, "honorLabels": {"type": "boolean"},
    "relabelings": {"type": "array", "items": _RELABEL}}}
_RULE = {"type": "object", "additionalProperties": False, "required": ["expr"], "properties": {
    "record": _STR, "alert": _STR, "expr": {"type": ["string", "integer"]}, "for": _DURATION,
    "keep_firing_for": _DURATION, "labels": _STRMAP, "annotations": _STRMAP},
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}]}
_MATCHER = {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
    "name": _STR, "value": _STR, "matchType": {"enum": ["=", "!=", "=~", "!~"]}}}
_CREDENTIALS = {"type": "object", "additionalProperties": False, "required": ["name", "key"],
                "properties": {"name": _STR, "key": _STR}}
_AUTHORIZATION = {"type": "object", "additionalProperties": False, "required": ["credentials"],
                  "properties": {"type": {"const": "Bearer"}, "credentials": _CREDENTIALS}}
_WEBHOOK = {"type": "object", "additionalProperties": False, "properties": {
    "url": {"type": "string", "pattern": "^https?://"}, "sendResolved": {"type": "boolean"},
    "maxAlerts": {"type": "integer", "minimum": 0},
    "httpConfig": {"type": "object", "additionalProperties": False, "properties": {"authorization": _AUTHORIZATION}}}}
_RECEIVER = {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
    "name": _STR, "webhookConfigs": {"type": "array", "items": _WEBHOOK}}}
_CHILD_ROUTE = {"type": "object", "additionalProperties": False, "properties": {
    "receiver": _STR, "groupBy": {"type": "array", "items": _STR}, "groupWait": _DURATION,
    "groupInterval": _DURATION, "repeatInterval": _DURATION, "continue": {"type": "boolean"},
    "matchers": {"type": "array", "items": _MATCHER}}}
_ROUTE = {**_CHILD_ROUTE, "required": ["receiver"], "properties": {
    **_CHILD_ROUTE["properties"], "routes": {"type": "array", "items": _CHILD_ROUTE}}}
_AMC_SPEC = {"type": "object", "additionalProperties": False, "properties": {
    "route": _ROUTE, "receivers": {"type": "array", "items": _RECEIVER}}}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "monitoring.coreos.com/v1/PodMonitor": _crd({"type": "object", "additionalProperties": False, "properties": {
        "selector": _SELECTOR, "namespaceSelector": _NSSELECTOR, "jobLabel": _STR,
        "attachMetadata": {"type": "object", "additionalProperties": False,
                           "properties": {"node": {"type": "boolean"}}},
        "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}},
        "required": ["selector", "podMetricsEndpoints"]}),
    "monitoring.coreos.com/v1/ServiceMonitor": _crd({"type": "object", "additionalProperties": False, "properties": {
        "selector": _SELECTOR, "namespaceSelector": _NSSELECTOR,
        "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}, "required": ["selector", "endpoints"]}),
    "monitoring.coreos.com/v1/PrometheusRule": _crd({"type": "object", "additionalProperties": False, "properties": {
        "groups": {"type": "array", "minItems": 1, "items": {"type": "object", "additionalProperties": False,
                                                            "required": ["name", "rules"], "properties": {
            "name": _STR, "interval": _DURATION, "limit": {"type": "integer"}, "query_offset": _DURATION,
            "labels": _STRMAP, "rules": {"type": "array", "items": _RULE}}}}}}),
    "monitoring.coreos.com/v1alpha1/AlertmanagerConfig": _crd(_AMC_SPEC),
}


def test_operator_objects_validate_structurally() -> None:
    docs = [d for d in RENDERED["custom"] if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {f"{d['apiVersion']}/{d['kind']}" for d in docs} == set(CRD_SCHEMAS)
    for doc in docs:
        jsonschema.validate(_clean(doc), CRD_SCHEMAS[f"{doc['apiVersion']}/{doc['kind']}"])


def test_structural_schema_catches_a_misspelt_field() -> None:
    doc = _clean(one(RENDERED["custom"], "PodMonitor"))
    doc["spec"]["podMetricsEndpoints"][0]["relabelling"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, CRD_SCHEMAS["monitoring.coreos.com/v1/PodMonitor"])


# --- the PrometheusRule is rules/ ---

# What monitoring.prometheusRule.namespaceLabel (on by default) adds to every alert rule, nothing else.
ALERT_NAMESPACE_LABELS = {"namespace": NAMESPACE, "exported_namespace": "{{ $labels.namespace }}"}


def _without_namespace_labels(group: dict[str, Any]) -> dict[str, Any]:
    rules = []
    for r in group["rules"]:
        if "alert" in r:
            labels = dict(r["labels"])
            for key, value in ALERT_NAMESPACE_LABELS.items():
                assert labels.pop(key) == value, f"{r['alert']}: label {key}"
            r = {**r, "labels": labels}
        rules.append(r)
    return {**group, "rules": rules}


def test_prometheusrule_groups_equal_rules_files() -> None:
    expected = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    plain = render({"monitoring": {"prometheusRule": {"enabled": True, "namespaceLabel": False}}})
    for rule, strip in ((one(RENDERED["custom"], "PrometheusRule"), True), (one(plain, "PrometheusRule"), False)):
        groups = [_without_namespace_labels(g) if strip else g for g in rule["spec"]["groups"]]
        by_name = {g["name"]: g for g in groups}
        assert len(by_name) == len(groups) == len(expected)
        for group in expected:
            assert by_name[group["name"]] == group, f"group {group['name']} differs from rules/"
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_prometheusrule_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: install Debian's prometheus package (make test does)")
    rule = one(RENDERED["custom"], "PrometheusRule")
    path = tmp_path / "rendered-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- RBAC ---

@pytest.mark.parametrize("key", sorted(VALUES))
def test_rbac_has_no_wildcard_and_no_verb_beyond_the_list(key: str) -> None:
    docs = RENDERED[key]
    allowed: dict[tuple[str, str], set[str]] = {}
    for grants in (REMEDIATOR_CLUSTER, REMEDIATOR_NAMESPACED, WORKLOADS_NAMESPACED):
        for resource, verbs in grants.items():
            allowed.setdefault(resource, set()).update(verbs)
    for (kind, _, name), rules in rules_by_role(docs).items():
        for rule in rules:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in json.dumps(rule.get(field, [])), f"{kind} {name}: wildcard in {field}"
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    extra = set(rule["verbs"]) - allowed.get((group, resource), set())
                    assert not extra, f"{kind} {name}: {extra} on {group or 'core'}/{resource} is not needed"
                    if kind == "ClusterRole":
                        assert (group, resource) not in REMEDIATOR_NAMESPACED, (
                            f"{name}: {resource} must be granted by a Role in its namespace")
                        extra = set(rule["verbs"]) - REMEDIATOR_CLUSTER.get((group, resource), set())
                        assert not extra, f"{name}: {extra} on {resource} only in the workload namespaces"


def test_exporter_may_only_read_and_watch_nodes_and_patch_their_status() -> None:
    grants = granted(RENDERED["default"], "gpuhealth-exporter")
    assert grants == {("*", g, r): v for (g, r), v in EXPORTER_CLUSTER.items()}


def test_remediator_holds_exactly_what_it_needs() -> None:
    grants = granted(RENDERED["default"], "gpuhealth-remediator")
    expected = {("*", g, r): v for (g, r), v in REMEDIATOR_CLUSTER.items() if r != "nodes/status"}
    expected[("*", "", "pods")] = {"list", "watch"}  # drain.on_timeout: wait (the default) deletes no pod
    expected[(NAMESPACE, "coordination.k8s.io", "leases")] = {"get", "create", "update"}
    expected[(NAMESPACE, "batch", "jobs")] = {"create", "list"}
    expected[(NAMESPACE, "", "pods/log")] = {"get"}  # evidence.enabled (the default): the evidence pod's log
    expected[(NAMESPACE, "", "configmaps")] = {"create", "list", "delete"}  # and its summary's ConfigMaps
    expected[("default", "", "events")] = {"create"}  # Events about Nodes
    expected[(NAMESPACE, "", "events")] = {"create"}  # CircuitBreakerOpen on the Lease
    assert grants == expected


def test_roles_follow_the_policy_namespaces() -> None:
    docs = RENDERED["custom"]
    grants = granted(docs, "gpuhealth-remediator")
    assert grants[("gpuhealth-jobs", "batch", "jobs")] == {"create", "list"}
    assert ("*", "karpenter.sh", "nodeclaims") not in grants  # rbac.karpenter: false
    node_action = [d for d in kinds(docs, "ServiceAccount") if d["metadata"]["name"] == "gpuhealth-node-action"]
    assert node_action[0]["metadata"]["namespace"] == "gpuhealth-jobs"
    assert node_action[0]["automountServiceAccountToken"] is False
    assert not granted(docs, "gpuhealth-node-action")


def test_workload_classification_is_granted_in_its_namespaces_only() -> None:
    grants = granted(RENDERED["custom"], "gpuhealth-remediator")
    for ns in ("ml", "research"):
        assert grants[(ns, "", "pods")] == {"list", "watch", "patch"}
        assert grants[(ns, "", "events")] == {"create"}
        assert grants[(ns, "batch", "jobs")] == {"get", "patch"}
    assert grants[("default", "", "events")] == {"create", "list"}
    assert grants[("*", "", "pods")] == REMEDIATOR_CLUSTER[("", "pods")]  # no cluster-wide patch
    default = granted(RENDERED["default"], "gpuhealth-remediator")  # workloads off: nothing of it
    assert not {k for k in default if k[0] in ("ml", "research")} and default[("default", "", "events")] == {"create"}


def test_pods_delete_is_granted_only_when_the_policy_force_deletes() -> None:
    # gpuhealth/remediator/act/drain.py deletes pods only for drain.on_timeout: force; wait and escalate only evict.
    assert granted(RENDERED["default"], "gpuhealth-remediator")[("*", "", "pods")] == {"list", "watch"}
    assert granted(RENDERED["custom"], "gpuhealth-remediator")[("*", "", "pods")] == {"list", "watch", "delete"}
    escalate = render({"remediator": {"policy": {"drain": {"on_timeout": "escalate"}}}})
    assert granted(escalate, "gpuhealth-remediator")[("*", "", "pods")] == {"list", "watch"}


@pytest.mark.parametrize("method", ["nodeclaim", "hook"])
def test_node_status_is_granted_only_when_the_policy_replaces_by_condition(method: str) -> None:
    # gpuhealth/remediator/act/replace.py patches nodes/status only to set the condition of replace.method: condition.
    policy = {"replace": {"method": method, "hook_url": "http://repair.example"}}
    assert ("*", "", "nodes/status") not in granted(render({"remediator": {"policy": policy}}), "gpuhealth-remediator")
    condition = render({"remediator": {"policy": {"replace": {"method": "condition"}}}})
    assert granted(condition, "gpuhealth-remediator")[("*", "", "nodes/status")] == {"patch"}
    assert ("*", "", "nodes/status") not in granted(RENDERED["default"], "gpuhealth-remediator")


def test_the_dra_objects_are_granted_only_with_gpu_scope() -> None:
    dra = {("*", "resource.k8s.io", r) for r in ("resourceslices", "resourceclaims", "devicetaintrules")}
    assert dra <= set(granted(RENDERED["default"], "gpuhealth-remediator"))  # dra.enabled: true, the default
    off = render({"remediator": {"policy": {"dra": {"enabled": False}}}})
    grants = granted(off, "gpuhealth-remediator")
    assert not {k for k in grants if k[1] == "resource.k8s.io"}
    assert grants[("*", "", "nodes")] == REMEDIATOR_CLUSTER[("", "nodes")]  # the node ladder keeps its grants


def test_every_request_of_the_remediators_watch_caches_is_granted() -> None:
    # The remediator keeps Nodes and Pods in watch caches (gpuhealth/remediator/clients/fleet_cache.py): list, then
    # watch.
    grants = granted(RENDERED["default"], "gpuhealth-remediator")
    with FakeCluster() as cluster:
        cluster.add_node("gpu-a")
        cluster.add_pod("gpu-a", "job-0")
        stop = threading.Event()
        cluster.on_close.append(stop.set)
        chart_rbac.enforce(cluster)
        kube = Kube(client.ApiClient(chart_rbac.configuration(cluster)), request_timeout=2.0)
        assert kube.start_cache(stop).wait_synced(10)
        deadline = time.monotonic() + 10
        while not {("watch", "nodes"), ("watch", "pods")} <= set(cluster.calls) and time.monotonic() < deadline:
            time.sleep(0.02)
        calls = set(cluster.calls)
    assert {("list", "nodes"), ("watch", "nodes"), ("list", "pods"), ("watch", "pods")} <= calls
    for verb, resource in calls:
        assert verb in grants.get(("*", "", resource), set()), f"the remediator's {verb} {resource} is not granted"


def test_lease_get_and_update_are_limited_to_the_lease() -> None:
    role = one(RENDERED["default"], "Role", "gpuhealth-remediator-lease")
    limited = [r for r in role["rules"] if "resourceNames" in r]
    policy = yaml.safe_load(one(RENDERED["default"], "ConfigMap", "gpuhealth-remediator")["data"]["policy.yaml"])
    assert limited and limited[0]["resourceNames"] == [policy["leader"]["name"]]
    assert set(limited[0]["verbs"]) == {"get", "update"}


# --- the exporter DaemonSet ---

def _exporter(key: str) -> dict[str, Any]:
    return one(RENDERED[key], "DaemonSet")


def test_exporter_mounts_kmsg_sysfs_read_only_and_the_state_dir() -> None:
    spec = _exporter("default")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert volumes["kmsg"]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert mounts["kmsg"]["mountPath"] == "/dev/kmsg"
    assert volumes["sys"]["hostPath"]["path"] == "/sys" and mounts["sys"]["readOnly"] is True
    assert volumes["state"]["hostPath"] == {"path": "/var/lib/gpuhealth", "type": "DirectoryOrCreate"}
    assert mounts["state"]["mountPath"] == "/var/lib/gpuhealth" and not mounts["state"].get("readOnly")
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))


def test_exporter_mounts_the_kubelets_pod_resources_read_only_and_reads_its_socket() -> None:
    spec = _exporter("default")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert volumes["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    assert mounts["pod-resources"] == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                                       "readOnly": True}
    config = yaml.safe_load(one(RENDERED["default"], "ConfigMap", "gpuhealth-exporter")["data"]["exporter.yaml"])
    assert config["pod_resources_socket"] == "/var/lib/kubelet/pod-resources/kubelet.sock"  # the file, not a default
    elsewhere = render({"exporter": {"podResources": {"hostPath": "/var/lib/k0s/kubelet/pod-resources"}}})
    volume = next(v for v in one(elsewhere, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "pod-resources")
    assert volume["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"  # mounted at the same container path


def test_exporter_runs_only_on_gpu_nodes_and_tolerates_taints() -> None:
    spec = _exporter("default")["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "karpenter.k8s.aws/instance-gpu-count"}
    assert {"operator": "Exists"} in spec["tolerations"]  # incl. gpuhealth.io/unhealthy on cordoned nodes
    container = spec["containers"][0]
    assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {}))  # takes no GPU from workloads


def test_exporter_gets_its_node_name_from_the_downward_api() -> None:
    env = {e["name"]: e for e in _exporter("default")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_exporter_runs_under_the_nvidia_runtime_class_unless_told_not_to() -> None:
    """GPU Operator v25.10+ defaults to CDI and no longer makes `nvidia` containerd's default runtime: without the
    RuntimeClass (which the operator always creates) NVML fails with missing_tool on every node."""
    assert _exporter("default")["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    unset = one(render({"exporter": {"runtimeClassName": ""}}), "DaemonSet")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in unset  # nodes whose default runtime is NVIDIA's and that have no RuntimeClass


def _security(key: str) -> dict[str, Any]:
    context: dict[str, Any] = _exporter(key)["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    return context


def _mounts(key: str) -> set[str]:
    spec = _exporter(key)["spec"]["template"]["spec"]
    mounts = {m["name"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts == {v["name"] for v in spec["volumes"]}
    return mounts


def test_exporter_is_privileged_only_for_the_kernel_log_from_a_host_path() -> None:
    # The default: /dev/kmsg from the host, which an unprivileged container cannot open.
    assert _security("default") == {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True}
    assert "kmsg" in _mounts("default")


def test_exporter_with_an_injected_kmsg_device_holds_cap_syslog_only() -> None:
    assert _security("kmsg-injected") == {
        "privileged": False, "allowPrivilegeEscalation": False, "runAsUser": 0, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["SYSLOG"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    assert _mounts("kmsg-injected") == {"config", "sys", "state", "pod-resources"}  # no hostPath /dev/kmsg


def test_exporter_without_the_kernel_log_runs_with_no_capability_and_as_non_root_without_pod_resources() -> None:
    # The kubelet's pod-resources socket is root's: with it on (the default) the exporter is root, with no capability.
    context = _security("kmsg-off")
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["runAsUser"] == 0 and "runAsNonRoot" not in context
    assert context["capabilities"] == {"drop": ["ALL"]} and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert _mounts("kmsg-off") == {"config", "sys", "pod-resources"}  # no /dev/kmsg, no kernel-log state on the host
    # With it off too: user 65532, no pod-resources mount, and the exporter told not to read it.
    off = render({"exporter": {"config": {"probes": {"kmsg": {"enabled": False}}}, "podResources": {"enabled": False}}})
    pod = one(off, "DaemonSet")["spec"]["template"]["spec"]
    context = pod["containers"][0]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert {v["name"] for v in pod["volumes"]} == {"config", "sys"}
    settings = yaml.safe_load(one(off, "ConfigMap", "gpuhealth-exporter")["data"]["exporter.yaml"])
    assert settings["pod_resources"] is False


def test_exporter_security_context_given_in_values_is_used_as_is() -> None:
    assert _security("custom") == CUSTOM["exporter"]["securityContext"]
    template = (CHART / "templates" / "exporter-daemonset.yaml").read_text()
    for reason in ("privileged:", "CAP_SYSLOG", "runAsUser 0", "readOnlyRootFilesystem"):
        assert reason in template, f"the DaemonSet must justify {reason}"


def test_install_doc_says_what_each_probe_needs() -> None:
    doc = (ROOT / "docs" / "install.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in doc.splitlines() if line.startswith("| `")}
    assert set(DEFAULT_PROBES) <= rows, f"docs/install.md has no row for {set(DEFAULT_PROBES) - rows}"
    for need in ("CAP_SYSLOG", "privileged", "kernel.dmesg_restrict", "NVIDIA_VISIBLE_DEVICES"):
        assert need in doc


# --- each exporter patches only its own Node (behaviour: test_node_binding.py) ---

def test_exporter_node_binding_is_rendered_by_default_and_can_be_turned_off() -> None:
    name = "gpuhealth-exporter-own-node"
    policy = one(RENDERED["default"], "ValidatingAdmissionPolicy", name)
    binding = one(RENDERED["default"], "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert any("nodes/status" in r["resources"] and "UPDATE" in r["operations"] for r in rules)
    off = render({"exporter": {"nodeBinding": {"enabled": False}}})
    assert not [d for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
                for d in kinds(off, kind) if d["metadata"]["name"] == name]


def test_every_request_the_exporter_makes_is_granted(tmp_path: Path) -> None:
    grants = granted(RENDERED["default"], "gpuhealth-exporter")
    (tmp_path / "token").write_text("t")
    with FakeCluster(token="t") as cluster:
        cluster.add_node("gpu-a")
        watch = NodeWatch(cluster.url, "gpu-a", sa_dir=str(tmp_path), watch_seconds=(1, 1))
        watch.list()  # the Node: its labels, EFA capacity and the GPU reset marker (gpuhealth/exporter/node_watch.py)
        watch.watch_once(threading.Event())
        # the conditions it wrote, read with a GET while the watch has not read the Node
        writer = NodeConditionWriter(cluster.url, "gpu-a", sa_dir=str(tmp_path), read_node=lambda: None)
        assert writer.sync([Condition("GpuhealthGPUHealthy", "True", "GPUsHealthy", "ok")])
        calls = set(cluster.calls)
    assert calls == {("get", "nodes"), ("list", "nodes"), ("watch", "nodes"), ("patch", "nodes/status")}
    for verb, resource in calls:
        assert verb in grants.get(("*", "", resource), set()), f"the exporter's {verb} {resource} is not granted"


@pytest.mark.parametrize("key", sorted(VALUES))
def test_exporter_config_and_flags_are_what_the_exporter_accepts(key: str, tmp_path: Path) -> None:
    config = one(RENDERED[key], "ConfigMap", "gpuhealth-exporter")["data"]["exporter.yaml"]
    (tmp_path / "exporter.yaml").write_text(config)
    settings = load_file(str(tmp_path / "exporter.yaml"))
    assert settings.state_file.startswith("/var/lib/gpuhealth/")
    assert settings.sysfs_root == "/host"
    container = _exporter(key)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gpuhealth-exporter"]
    known = {opt for action in exporter_cli.build_parser()._actions for opt in action.option_strings}
    for arg in container["args"]:
        assert arg.split("=")[0] in known, f"exporter flag {arg} does not exist"
    assert container["ports"][0]["containerPort"] == 9842


# --- the remediator ---

def _remediator(key: str) -> dict[str, Any]:
    return one(RENDERED[key], "Deployment")


def _serve_flags() -> set[str]:
    parser = remediator_cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    serve = sub.choices["serve"]  # type: ignore[attr-defined]
    return {opt for action in serve._actions for opt in action.option_strings}


@pytest.mark.parametrize("key", sorted(VALUES))
def test_remediator_flags_exist_in_serve(key: str) -> None:
    container = _remediator(key)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gpuhealth-remediator"] and container["args"][0] == "serve"
    flags = _serve_flags()
    for arg in container["args"][1:]:
        assert arg.split("=")[0] in flags, f"serve has no flag {arg}"
    if key == "custom":
        assert "--dry-run" in container["args"] and "--interval=10" in container["args"]


@pytest.mark.parametrize("key", sorted(VALUES))
def test_remediator_policy_loads(key: str, tmp_path: Path) -> None:
    text = one(RENDERED[key], "ConfigMap", "gpuhealth-remediator")["data"]["policy.yaml"]
    (tmp_path / "policy.yaml").write_text(text)
    policy = load_policy(str(tmp_path / "policy.yaml"))
    assert policy.leader.namespace == NAMESPACE and policy.leader.name == "gpuhealth-remediator"
    assert policy.jobs.namespace == ("gpuhealth-jobs" if key == "custom" else NAMESPACE)
    assert policy.alertmanager.url
    if hasattr(policy, "check_serve"):
        policy.check_serve(10.0)


@pytest.mark.parametrize("key", sorted(VALUES))
def test_the_alertmanager_token_and_ca_the_policy_names_are_mounted_there(key: str, tmp_path: Path) -> None:
    text = one(RENDERED[key], "ConfigMap", "gpuhealth-remediator")["data"]["policy.yaml"]
    (tmp_path / "policy.yaml").write_text(text)
    policy = load_policy(str(tmp_path / "policy.yaml"))
    pod = _remediator(key)["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    files = {}
    for volume, secret in secrets.items():
        for item in secret.get("items", []):
            files[f"{mounts[volume]}/{item['path']}"] = (secret["secretName"], item["key"])
    if key != "custom":
        assert policy.alertmanager.bearer_token_file is None and policy.alertmanager.ca_file is None
        return
    assert files[str(policy.alertmanager.bearer_token_file)] == ("am-reader", "token")
    assert files[str(policy.alertmanager.ca_file)] == ("am-ca", "root.pem")


def test_remediator_runs_two_replicas_with_a_pdb_and_a_service() -> None:
    docs = RENDERED["default"]
    dep = _remediator("default")
    assert dep["spec"]["replicas"] == 2
    selector = dep["spec"]["selector"]["matchLabels"]
    assert one(docs, "PodDisruptionBudget")["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    svc = one(docs, "Service", "gpuhealth-remediator")
    assert svc["spec"]["selector"] == selector and svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["ports"][1]["targetPort"] == "metrics"
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_webhook_token_comes_from_a_secret() -> None:
    docs = RENDERED["default"]
    secret = one(docs, "Secret", "gpuhealth-remediator")
    assert len(base64.b64decode(secret["data"]["token"])) >= 32
    pod = _remediator("default")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "gpuhealth-remediator"
    assert "--token-file=/var/run/secrets/gpuhealth/token" in pod["containers"][0]["args"]
    # an existing Secret: none rendered, and both the pod and Alertmanager read it
    custom = RENDERED["custom"]
    assert not kinds(custom, "Secret")
    volumes = {v["name"]: v for v in _remediator("custom")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "gpuhealth-webhook"
    webhook = one(custom, "AlertmanagerConfig")["spec"]["receivers"][0]["webhookConfigs"][0]
    assert webhook["httpConfig"]["authorization"]["credentials"] == {"name": "gpuhealth-webhook", "key": "token"}
    assert webhook["url"] == "http://gpuhealth-remediator.gpuhealth.svc:8080/alerts" and webhook["sendResolved"]


def test_token_value_is_used_when_given() -> None:
    docs = render({"remediator": {"webhookToken": {"value": "s3cret-token"}}})
    assert base64.b64decode(one(docs, "Secret")["data"]["token"]) == b"s3cret-token"


def _token(docs: list[dict[str, Any]]) -> str:
    return base64.b64decode(one(docs, "Secret", "gpuhealth-remediator")["data"]["token"]).decode()


def test_a_render_without_a_cluster_makes_a_new_token_each_time() -> None:
    """No token given: `lookup` finds the Secret only against a cluster (helm install/upgrade); here, as under
    `helm template`, Argo CD or Flux, each render makes a new one. That is why GitOps sets existingSecret (or
    value) with generate: false; and why the remediator re-reads the mounted token rather than 401 until it
    restarts (test_rendered_tokens_are_taken_in_turn_without_a_restart)."""
    assert _token(render(None)) != _token(render(None))


def test_an_existing_secret_renders_the_same_twice_and_no_secret() -> None:
    values = {"remediator": {"webhookToken": {"existingSecret": "gpuhealth-webhook", "generate": False}}}
    first, second = render(values), render(values)
    assert [_clean(d) for d in first] == [_clean(d) for d in second]
    assert not kinds(first, "Secret")
    volumes = {v["name"]: v for v in _remediator_of(first)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "gpuhealth-webhook"
    assert "subPath" not in json.dumps(_remediator_of(first))  # a subPath mount never sees the kubelet's updates
    valued = {"remediator": {"webhookToken": {"value": "from-a-secret-manager", "generate": False}}}
    assert _token(render(valued)) == _token(render(valued)) == "from-a-secret-manager"


def test_generate_false_without_a_token_fails_the_render() -> None:
    with pytest.raises(Exception, match="existingSecret"):
        render({"remediator": {"webhookToken": {"generate": False}}})


def _remediator_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")


def test_rendered_tokens_are_taken_in_turn_without_a_restart(tmp_path: Path) -> None:
    """Render twice (a GitOps sync each), mount each token as the kubelet does, post with each: the same
    receiver takes the second within a second and refuses the first after it."""
    from tests.remediator.http.test_remediator_token import KubeletSecretDir, app_with_token_file, status, wait_for
    from tests.support.remediator_harness import Harness

    first, second = _token(render(None)), _token(render(None))
    assert first != second
    with FakeCluster() as cluster:
        cluster.add_node("gpu-1")
        h = Harness(cluster)
        secret = KubeletSecretDir(tmp_path / "vol", first)
        app_with_token_file(h, secret.path)
        assert status(h, first) == 202 and status(h, second) == 401
        secret.swap(second)
        wait_for(h, second, 202)
        assert status(h, first) == 401


# --- monitoring ---

def test_podmonitor_relabels_node_pool_and_job() -> None:
    pm = one(RENDERED["custom"], "PodMonitor")
    assert pm["spec"]["attachMetadata"] == {"node": True}
    relabel = pm["spec"]["podMetricsEndpoints"][0]["relabelings"]
    by_target: dict[str, list[dict[str, Any]]] = {}
    for r in relabel:
        by_target.setdefault(r["targetLabel"], []).append(r)
    assert by_target["node"] == [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                  "targetLabel": "node"}]
    # the policy's pools.label and pools.default (custom: eks.amazonaws.com/nodegroup, unpooled)
    assert by_target["pool"][0]["replacement"] == "unpooled"
    assert by_target["pool"][1]["sourceLabels"] == ["__meta_kubernetes_node_label_eks_amazonaws_com_nodegroup"]
    assert by_target["job"][0]["replacement"] == "gpuhealth-exporter"
    default_meta = render({"monitoring": {"podMonitor": {"enabled": True}}})
    pool = [r for r in one(default_meta, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["relabelings"]
            if r["targetLabel"] == "pool"]
    assert pool[1]["sourceLabels"] == ["__meta_kubernetes_node_label_karpenter_sh_nodepool"]


def test_network_policy_is_on_by_default_and_can_be_turned_off() -> None:
    assert {d["metadata"]["name"] for d in kinds(RENDERED["default"], "NetworkPolicy")} == {
        "gpuhealth-exporter", "gpuhealth-remediator"}
    assert not kinds(render_fresh({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def _pod_of(doc: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    template = doc["spec"]["template"]
    return template["metadata"]["labels"], {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}


def test_network_policy_admits_only_prometheus_to_the_exporters_metrics() -> None:
    docs = RENDERED["custom"]
    policy = one(docs, "NetworkPolicy", "gpuhealth-exporter")["spec"]
    labels, ports = _pod_of(one(docs, "DaemonSet"))
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"namespaceSelector": CUSTOM["networkPolicy"]["prometheus"]["namespaceSelector"],
                             "podSelector": CUSTOM["networkPolicy"]["prometheus"]["podSelector"]}]
    assert [p["port"] for p in rule["ports"]] == ["metrics"] and "metrics" in ports


def test_network_policy_admits_alertmanager_to_the_webhook_and_prometheus_to_the_remediators_metrics() -> None:
    docs = RENDERED["custom"]
    policy = one(docs, "NetworkPolicy", "gpuhealth-remediator")["spec"]
    labels, ports = _pod_of(one(docs, "Deployment"))
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    webhook, scrape, _helm_test = policy["ingress"]  # the third: tests/chart/test_chart_helm_test.py
    # the chart's defaults match kube-prometheus-stack's Alertmanager pods in namespace monitoring
    alertmanager = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "alertmanager"}}}
    assert webhook == {"from": [alertmanager], "ports": [{"port": "http", "protocol": "TCP"}]}
    assert scrape == {"from": [{"namespaceSelector": CUSTOM["networkPolicy"]["prometheus"]["namespaceSelector"],
                                "podSelector": CUSTOM["networkPolicy"]["prometheus"]["podSelector"]}],
                      "ports": [{"port": "metrics", "protocol": "TCP"}]}
    assert {"http", "metrics"} <= ports
    # the Service port Alertmanager posts to reaches the webhook's; the ServiceMonitor's scrape the metrics port
    service = {p["name"]: p["targetPort"] for p in one(docs, "Service", "gpuhealth-remediator")["spec"]["ports"]}
    assert service == {"http": "http", "metrics": "metrics"}
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"


def test_rules_expect_the_job_the_podmonitor_sets() -> None:
    assert any('job="gpuhealth-exporter"' in p.read_text() for p in RULE_FILES)


def test_dashboards_are_configmaps_for_grafanas_sidecar() -> None:
    for key in VALUES:
        cms = [d for d in kinds(RENDERED[key], "ConfigMap") if "-dashboard-" in d["metadata"]["name"]]
        assert len(cms) == len(DASHBOARDS)
        for cm in cms:
            assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
            ((name, text),) = cm["data"].items()
            assert json.loads(text) == json.loads((ROOT / "dashboards" / "json" / name).read_text())
            assert cm["metadata"]["namespace"] == ("monitoring" if key == "custom" else NAMESPACE)


def test_alertmanagerconfig_routes_node_alerts_grouped_by_node() -> None:
    route = one(RENDERED["custom"], "AlertmanagerConfig")["spec"]["route"]
    assert route["groupBy"] == ["node"]
    # every alert that names a node and a remediation (routing under kube-prometheus-stack's defaults:
    # tests/chart/test_kube_prometheus_stack.py)
    assert {m["name"]: (m["matchType"], m["value"]) for m in route["matchers"]} == {
        "remediation": ("=~", ".+"), "node": ("=~", ".+")}
    # Actionable and informational alerts in routes, so groups, of their own: a fatal fault must not wait behind
    # the group_interval of a node's informational alerts, which the workload classifier still gets.
    actionable, informational = route["routes"]
    assert set(actionable["matchers"][0]["value"].split("|")) == {"cordon", "drain", "reset_gpu", "reboot", "replace"}
    assert informational["matchers"] == [{"name": "remediation", "matchType": "=", "value": "none"}]
    assert (actionable["groupWait"], actionable["groupInterval"]) == ("10s", "30s")
    assert (informational["groupWait"], informational["groupInterval"]) == ("30s", "5m")


# --- image ---

def test_dockerfile_builds_the_package_with_both_programs() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "gpuhealth-exporter --version" in text and "gpuhealth-remediator --help" in text
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"gpuhealth-exporter", "gpuhealth-remediator"} <= set(scripts)


def test_an_umbrella_charts_global_values_are_accepted() -> None:
    # Helm hands every subchart the parent's `global:` values; a schema that refuses unknown top-level keys must
    # still take them, or gpuhealth cannot be a dependency of a platform's umbrella chart.
    assert any(d["kind"] == "DaemonSet" for d in render({"global": {"imageRegistry": "registry.example.com"}}))
