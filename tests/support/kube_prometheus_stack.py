"""The kube-prometheus-stack defaults that decide what a default install does with gpuhealth's objects, recorded
from prometheus-community/helm-charts charts/kube-prometheus-stack 88.5.3 (operator v0.93.1, Alertmanager
v0.34.0): values.yaml and templates/{prometheus/prometheus.yaml, alertmanager/alertmanager.yaml}, and the
Grafana chart's dashboard sidecar (grafana/helm-charts charts/grafana values.yaml) as kube-prometheus-stack
sets it.

- ALERTMANAGER_CONFIG: `alertmanager.config`, verbatim: the base configuration the operator adds every selected
  AlertmanagerConfig to (tests/support/operator_alertmanager.py).
- selects(): which Prometheus Operator objects its Prometheus and Alertmanager pick up. With the
  `*SelectorNilUsesHelmValues: true` defaults, Prometheus selects PrometheusRules, ServiceMonitors and PodMonitors
  labelled `release: <its release name>` in every namespace (`*NamespaceSelector: {}`); its Alertmanager's
  `alertmanagerConfigSelector: {}` and `alertmanagerConfigNamespaceSelector: {}` select every AlertmanagerConfig
  in every namespace, with the operator's default matcher strategy (alertmanagerConfigMatcherStrategy: {}, so
  OnNamespace).
- GRAFANA_SIDECAR and dashboard_folders(): the dashboard sidecar loads ConfigMaps labelled `grafana_dashboard: "1"`
  from every namespace (searchNamespace: ALL); a folder comes from an annotation only when both
  `sidecar.dashboards.folderAnnotation` names it and `sidecar.dashboards.provider.foldersFromFilesStructure` is
  true (the Grafana chart's defaults: null and false; kube-prometheus-stack sets neither).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

CHART_VERSION = "88.5.3"
RELEASE = "kube-prometheus-stack"  # the release name docs/install.md assumes
NAMESPACE = "monitoring"
MATCHER_STRATEGY = "OnNamespace"  # alertmanagerConfigMatcherStrategy: {} -> the operator's default

ALERTMANAGER_CONFIG: dict[str, Any] = yaml.safe_load("""
global:
  resolve_timeout: 5m
inhibit_rules:
  - source_matchers:
      - 'severity = critical'
    target_matchers:
      - 'severity =~ warning|info'
    equal:
      - 'namespace'
      - 'alertname'
  - source_matchers:
      - 'severity = warning'
    target_matchers:
      - 'severity = info'
    equal:
      - 'namespace'
      - 'alertname'
  - source_matchers:
      - 'alertname = InfoInhibitor'
    target_matchers:
      - 'severity = info'
    equal:
      - 'namespace'
  - target_matchers:
      - 'alertname = InfoInhibitor'
route:
  group_by: ['namespace']
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 12h
  receiver: 'null'
  routes:
  - receiver: 'null'
    matchers:
      - alertname = "Watchdog"
receivers:
- name: 'null'
templates:
- '/etc/alertmanager/config/*.tmpl'
""")

# kind -> (object selector, namespace selector) as kube-prometheus-stack renders them for release RELEASE;
# a selector is matchLabels only ({} selects everything).
SELECTORS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "PrometheusRule": ({"release": RELEASE}, {}),
    "ServiceMonitor": ({"release": RELEASE}, {}),
    "PodMonitor": ({"release": RELEASE}, {}),
    "AlertmanagerConfig": ({}, {}),
}

GRAFANA_SIDECAR: dict[str, Any] = {
    "label": "grafana_dashboard", "labelValue": "1", "searchNamespace": "ALL",
    "folderAnnotation": None, "provider": {"foldersFromFilesStructure": False},
}


def base_config() -> dict[str, Any]:
    return copy.deepcopy(ALERTMANAGER_CONFIG)


def selects(obj: dict[str, Any], namespace_labels: dict[str, str] | None = None) -> bool:
    """Whether a default kube-prometheus-stack picks up this Prometheus Operator object."""
    selector, namespace_selector = SELECTORS[obj["kind"]]
    labels = obj["metadata"].get("labels") or {}
    return (all(labels.get(k) == v for k, v in selector.items())
            and all((namespace_labels or {}).get(k) == v for k, v in namespace_selector.items()))


def dashboard_folders(configmaps: list[dict[str, Any]], sidecar: dict[str, Any] | None = None,
                      sidecar_namespace: str = NAMESPACE) -> dict[str, str]:
    """ConfigMap name -> the Grafana folder its dashboards land in ("" = the provider's default folder), for the
    ConfigMaps the sidecar loads; the others are left out."""
    s = {**GRAFANA_SIDECAR, **(sidecar or {})}
    s["provider"] = {**GRAFANA_SIDECAR["provider"], **((sidecar or {}).get("provider") or {})}
    searched = s["searchNamespace"]  # ALL, a list (or a comma-separated string), or none: the sidecar's own
    namespaces = None if searched == "ALL" else (
        [sidecar_namespace] if not searched else searched.split(",") if isinstance(searched, str) else list(searched))
    out = {}
    for cm in configmaps:
        meta = cm["metadata"]
        labels = meta.get("labels") or {}
        if s["label"] not in labels or (s["labelValue"] and labels[s["label"]] != s["labelValue"]):
            continue  # labelValue "": any value
        if namespaces is not None and meta.get("namespace") not in namespaces:
            continue
        folder = ""
        if s["folderAnnotation"] and s["provider"]["foldersFromFilesStructure"]:
            folder = (meta.get("annotations") or {}).get(s["folderAnnotation"], "")
        out[meta["name"]] = folder
    return out
