"""What the Prometheus Operator makes of a rendered PodMonitor, ServiceMonitor and PrometheusRule, for the e2e's
real Prometheus.

The operator turns each monitor endpoint into a scrape job over Kubernetes service discovery. Here the
targets are known (the e2e's pods), so each becomes a static target carrying the `__meta_kubernetes_*`
labels Kubernetes SD would give it; the operator's own relabelings (the `namespace`, `pod`, `container`,
`service`, `endpoint` and `job` target labels) come first, then the monitor's `relabelings`, translated
field by field, so the chart's relabelings run in Prometheus itself. Fields this translation does not know
fail, never pass silently. Meta labels are dropped by Prometheus after relabeling, as in a cluster.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]

_RELABEL_FIELDS = {"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
                   "regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action"}
_POD_ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "relabelings", "honorLabels", "scheme"}
_POD_MONITOR = {"selector", "namespaceSelector", "podMetricsEndpoints", "attachMetadata", "jobLabel"}
_SERVICE_MONITOR = {"selector", "namespaceSelector", "endpoints", "attachMetadata", "jobLabel"}


class UnknownField(ValueError):
    pass


def _only(where: str, obj: Obj, allowed: set[str]) -> None:
    unknown = set(obj) - allowed
    if unknown:
        raise UnknownField(f"{where}: {sorted(unknown)} not translated for the e2e (add them, do not drop them)")


def sanitize(name: str) -> str:
    """A Kubernetes label name as a Prometheus meta label suffix (karpenter.sh/nodepool → karpenter_sh_nodepool)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def relabelings(where: str, items: list[Obj]) -> list[Obj]:
    out = []
    for i, item in enumerate(items):
        _only(f"{where}.relabelings[{i}]", item, set(_RELABEL_FIELDS))
        rule = {_RELABEL_FIELDS[k]: v for k, v in item.items()}
        if "action" in rule:
            rule["action"] = str(rule["action"]).lower()
        out.append(rule)
    return out


def _selected(selector: Obj, labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise UnknownField(f"selector {selector}: only matchLabels is translated")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def pod_monitor(monitor: Obj, pods: list[Any], node_labels: Callable[[str], dict[str, str]],
                scale: Callable[[str], str]) -> list[Obj]:
    """Scrape jobs for a PodMonitor over `pods` (chart_pods.Pod); `scale` turns an interval into the e2e's."""
    name, namespace = monitor["metadata"]["name"], monitor["metadata"]["namespace"]
    spec = monitor["spec"]
    _only(f"PodMonitor {name}", spec, _POD_MONITOR)
    chosen = spec.get("namespaceSelector") or {}
    _only(f"PodMonitor {name}.namespaceSelector", chosen, {"matchNames", "any"})
    namespaces = chosen.get("matchNames") or [namespace]
    picked = [p for p in pods if (chosen.get("any") or p.namespace in namespaces)
              and _selected(spec["selector"], p.labels)]
    if not picked:
        raise UnknownField(f"PodMonitor {name}: its selector picks none of the pods")
    jobs = []
    for i, ep in enumerate(spec["podMetricsEndpoints"]):
        _only(f"PodMonitor {name}.podMetricsEndpoints[{i}]", ep, _POD_ENDPOINT)
        targets = []
        for pod in picked:
            if ep["port"] not in pod.ports:
                raise UnknownField(f"PodMonitor {name}: pod {pod.name} has no port named {ep['port']!r}")
            meta = {"__meta_kubernetes_namespace": pod.namespace, "__meta_kubernetes_pod_name": pod.name,
                    "__meta_kubernetes_pod_node_name": pod.node, "__meta_kubernetes_pod_ip": pod.ip,
                    "__meta_kubernetes_pod_container_name": pod.container["name"],
                    "__meta_kubernetes_pod_container_port_name": ep["port"]}
            meta |= {f"__meta_kubernetes_pod_label_{sanitize(k)}": v for k, v in pod.labels.items()}
            if (spec.get("attachMetadata") or {}).get("node"):
                meta |= {f"__meta_kubernetes_node_label_{sanitize(k)}": v for k, v in node_labels(pod.node).items()}
            targets.append({"targets": [f"{pod.ip}:{pod.ports[ep['port']]}"], "labels": meta})
        operator = [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{namespace}/{name}"},
            {"target_label": "endpoint", "replacement": ep["port"]},
        ]
        jobs.append(_job(f"podMonitor/{namespace}/{name}/{i}", ep, targets,
                         operator + relabelings(f"PodMonitor {name}", ep.get("relabelings") or []), scale))
    return jobs


def service_monitor(monitor: Obj, service: Obj, pods: list[Any], scale: Callable[[str], str]) -> list[Obj]:
    """Scrape jobs for a ServiceMonitor whose selector picks `service`, over the service's pods."""
    name, namespace = monitor["metadata"]["name"], monitor["metadata"]["namespace"]
    spec = monitor["spec"]
    _only(f"ServiceMonitor {name}", spec, _SERVICE_MONITOR)
    if not _selected(spec["selector"], service["metadata"].get("labels") or {}):
        raise UnknownField(f"ServiceMonitor {name}: its selector does not pick Service {service['metadata']['name']}")
    selector = service["spec"].get("selector") or {}
    backends = [p for p in pods if all(p.labels.get(k) == v for k, v in selector.items())]
    jobs = []
    for i, ep in enumerate(spec["endpoints"]):
        _only(f"ServiceMonitor {name}.endpoints[{i}]", ep, _POD_ENDPOINT)
        port = next((p for p in service["spec"]["ports"] if p.get("name") == ep["port"]), None)
        if port is None:
            raise UnknownField(f"ServiceMonitor {name}: Service {service['metadata']['name']} has no port "
                               f"named {ep['port']!r}")
        target = port.get("targetPort", port["port"])
        targets = []
        for pod in backends:
            number = pod.ports[target] if isinstance(target, str) else int(target)
            targets.append({"targets": [f"{pod.ip}:{number}"], "labels": {
                "__meta_kubernetes_namespace": pod.namespace, "__meta_kubernetes_pod_name": pod.name,
                "__meta_kubernetes_service_name": service["metadata"]["name"],
                "__meta_kubernetes_pod_container_name": pod.container["name"]}})
        operator = [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
            {"target_label": "endpoint", "replacement": ep["port"]},
        ]
        jobs.append(_job(f"serviceMonitor/{namespace}/{name}/{i}", ep, targets,
                         operator + relabelings(f"ServiceMonitor {name}", ep.get("relabelings") or []), scale))
    return jobs


def _job(name: str, ep: Obj, targets: list[Obj], relabel: list[Obj], scale: Callable[[str], str]) -> Obj:
    job: Obj = {"job_name": name, "metrics_path": ep.get("path", "/metrics"), "scheme": ep.get("scheme", "http"),
                "honor_labels": bool(ep.get("honorLabels", False)), "static_configs": targets,
                "relabel_configs": relabel}
    if "interval" in ep:
        job["scrape_interval"] = scale(ep["interval"])
    if "scrapeTimeout" in ep:
        job["scrape_timeout"] = scale(ep["scrapeTimeout"])
    return job


def rule_groups(rule: Obj) -> list[Obj]:
    """A PrometheusRule's groups, as the operator writes them into Prometheus's rule files."""
    spec = rule["spec"]
    _only(f"PrometheusRule {rule['metadata']['name']}", spec, {"groups"})
    return list(spec["groups"])


def shard(jobs: list[Obj], shards: int, index: int) -> list[Obj]:
    """The scrape jobs as shard `index` of a Prometheus with `shards` shards runs them: the operator appends, after
    the monitor's relabelings, its sharding rules (prometheus-operator pkg/prometheus promcfg.go,
    appendShardingRelabelingWithLabel): __tmp_hash is the target's address unless a relabeling set it, hashed modulo
    the shard count, and the shard keeps the targets whose hash is its number ($(SHARD), here substituted) or that
    set __tmp_disable_sharding."""
    rules = [
        {"source_labels": ["__address__", "__tmp_hash"], "target_label": "__tmp_hash", "regex": "(.+);",
         "replacement": "$1", "action": "replace"},
        {"source_labels": ["__tmp_hash"], "target_label": "__tmp_hash", "modulus": shards, "action": "hashmod"},
        {"source_labels": ["__tmp_hash", "__tmp_disable_sharding"], "regex": f"{index};|.+;.+", "action": "keep"},
    ]
    return [{**job, "relabel_configs": [*job.get("relabel_configs", []), *rules]} for job in jobs]


def hashmod(value: str, modulus: int) -> int:
    """Prometheus' relabel action hashmod: the MD5 of the value, its last 8 bytes as a big-endian integer, modulo."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus
