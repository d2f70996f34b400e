"""The workload watcher's gauges: which workloads are in a restart loop, and which nodes are suspects (workloads
failing on them for node reasons), worked out each pass from the ended pods' annotations, so a restarted
remediator reports what the last one did. A series that no longer holds is removed."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from gpuhealth.remediator.decide.nodestate import parse_time
from gpuhealth.remediator.metrics import Metrics
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import pod_facts
from gpuhealth.remediator.workloads.ended_pods import (
    ENDED_ANNOTATION,
    FAILURE_ANNOTATION,
    EndedPods,
    Workload,
    workload_of,
)


class WorkloadGauges:
    def __init__(self, metrics: Metrics, policy: Policy) -> None:
        self.metrics, self.policy = metrics, policy
        self._series: dict[str, set[tuple[str, str]]] = {}  # the series each gauge holds now

    def refresh(self, pods: EndedPods, now: datetime) -> None:
        newest: dict[Workload, tuple[float, dict[str, Any] | None]] = {}
        suspects: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (node, pool) -> workloads
        window = self.policy.workloads.node_suspect_window
        for pod in pods.all():
            annotations = pods.annotations(pod)
            if ENDED_ANNOTATION not in annotations:
                continue
            record = _failure(annotations)
            at = (_when(record.get("failed_at")) if record else None) or pod_facts(pod).failed_at
            key = workload_of(pod)
            stamp = at.timestamp() if at else 0.0
            if key not in newest or stamp >= newest[key][0]:
                newest[key] = (stamp, record)
            if record and record.get("node_suspect") and at is not None and now - at < window:
                where = (str(record.get("node")), str(record.get("pool") or self.policy.pools.default))
                suspects.setdefault(where, set()).add((key.namespace, f"{key.kind}/{key.name}"))
        threshold = self.policy.workloads.restart_loop_threshold
        loops = {(k.namespace, k.name): 1.0 if record and int(record.get("loop") or 0) >= threshold else 0.0
                 for k, (_, record) in newest.items()}
        self._set(self.metrics.workload_restart_loop, "loops", {k: v for k, v in loops.items() if v or k in
                                                                 self._series.get("loops", set())})
        self._set(self.metrics.workload_node_suspect, "suspects", {k: float(len(v)) for k, v in suspects.items()})

    def clear(self) -> None:
        """Another replica reports them."""
        self._set(self.metrics.workload_restart_loop, "loops", {})
        self._set(self.metrics.workload_node_suspect, "suspects", {})

    def _set(self, gauge: Any, name: str, values: dict[tuple[str, str], float]) -> None:
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        for gone in self._series.get(name, set()) - set(values):
            gauge.remove(*gone)
        self._series[name] = set(values)


def _failure(annotations: dict[str, str]) -> dict[str, Any] | None:
    """The failure annotation's record (the verdict and where it happened), None when there is none readable."""
    try:
        value = json.loads(annotations.get(FAILURE_ANNOTATION) or "null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _when(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None
