"""The workload watcher: as leader, classify the workload pods that end and record what it found.

Pods come from a watch cache (gpuhealth/remediator/clients/watch_cache.py's WatchCache, or anything with `items()`):
every pass looks at the ended pods of the policy's namespaces (GPU pods, or those the selector picks)
that carry no `gpuhealth.io/ended` annotation yet (ended_pods.py). For each:
- Succeeded: annotated `gpuhealth.io/ended: Succeeded` and counted (the success ratio's denominator);
- Failed: classified (classify.py) from the pod and its node's gpuhealth signals (node_evidence.py: the
  Node's state and last-episode annotations, gpuhealth's Events on the Node). An infra verdict is
  recorded at once; app and unknown wait until `workloads.look_ahead` has passed since the failure
  (a node alert may still come and make it infra). Then: the pod's annotations (`gpuhealth.io/ended`
  and `gpuhealth.io/failure`, the verdict as JSON), an Event on the pod, a log line, the metrics and
  the restart-loop guard (loop_guard.py). The restart-loop and node-suspect gauges are worked out each
  pass from the pods' annotations (gauges.py), so a restarted remediator reports what the last one did.

Idempotent across restarts and replicas: only the leader writes, the pod's annotation is written
(with its resourceVersion) before anything is counted, and an annotated pod is never counted again.
A crash between the annotation and the count loses that count rather than doubling it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawPod
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.nodestate import fmt_time
from gpuhealth.remediator.metrics import Metrics
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import (
    APP,
    NODE_SUSPECT_REASONS,
    PodClassification,
    Settings,
    classify,
    pod_facts,
)
from gpuhealth.remediator.workloads.ended_pods import (
    ENDED_ANNOTATION,
    ENDED_SELECTOR,
    FAILURE_ANNOTATION,
    EndedPods,
    PodSource,
    Sources,
    workload_of,
)
from gpuhealth.remediator.workloads.gauges import WorkloadGauges
from gpuhealth.remediator.workloads.loop_guard import RestartLoopGuard
from gpuhealth.remediator.workloads.node_evidence import NodeEvidence

log = logging.getLogger("gpuhealth.remediator")


def settings_of(policy: Policy) -> Settings:
    w = policy.workloads
    return Settings(app_exit_codes=w.app_exit_codes, look_behind=w.look_behind, look_ahead=w.look_ahead)


def start_watcher(kube: Kube, policy: Policy, metrics: Metrics, stop: threading.Event, interval: float, *,
                  clock: Callable[[], datetime], dry_run: bool, is_leader: Callable[[], bool]) -> WorkloadWatcher:
    """serve, when workloads.enabled: a WatchCache of the ended pods of each namespace, and the watcher's loop."""
    from functools import partial

    from gpuhealth.remediator.clients.watch_cache import WatchCache

    caches: dict[str, WatchCache[RawPod]] = {
        ns: WatchCache(partial(kube.core.list_namespaced_pod, ns), field_selector=ENDED_SELECTOR,
                       label_selector=policy.workloads.selector, name=f"pods-{ns}", request_timeout=kube.timeout)
        for ns in policy.workloads.namespaces}
    watcher = WorkloadWatcher(kube, policy, metrics, Sources(caches), clock=clock, dry_run=dry_run,
                              is_leader=is_leader)
    for cache in caches.values():
        cache.on_change = watcher.on_change
        cache.start(stop)
    threading.Thread(target=watcher.run_forever, args=(stop, interval), name="workloads", daemon=True).start()
    return watcher


@dataclass
class PodResult:
    namespace: str
    pod: str
    phase: str
    verdict: PodClassification | None = None
    recorded: bool = False  # False: waiting for the look-ahead, or the write failed (next pass retries)


class WorkloadWatcher:
    def __init__(self, kube: Kube, policy: Policy, metrics: Metrics, pods: PodSource, *,
                 clock: Callable[[], datetime], dry_run: bool = False,
                 is_leader: Callable[[], bool] = lambda: True) -> None:
        self.kube, self.policy, self.metrics = kube, policy, metrics
        self.clock, self.dry_run, self.is_leader = clock, dry_run, is_leader
        self.settings = settings_of(policy)
        self.wake = threading.Event()
        self.ended = EndedPods(kube, policy, pods, clock=clock, dry_run=dry_run)
        self.guard = RestartLoopGuard(kube, policy, dry_run=dry_run, event=self._event)
        self.gauges = WorkloadGauges(metrics, policy)
        self.evidence = NodeEvidence(kube, policy)  # this pass's reads of the failed pods' nodes
        metrics.init_workloads(policy.workloads.namespaces)

    # --- the watch cache's callback: something changed, look soon -----------------------------
    def on_change(self, event_type: str, obj: Any, old_obj: Any = None) -> None:
        """A pod that ended and is deleted before a pass saw it is kept, as last seen, until it is counted."""
        if event_type == "DELETED":
            self.ended.deleted(obj)
        self.wake.set()

    # --- the pass ------------------------------------------------------------------------------
    def run_once(self) -> list[PodResult]:
        if not self.is_leader():
            self.gauges.clear()  # another replica reports them
            return []
        now = self.clock()
        outcomes = []
        self.evidence = NodeEvidence(self.kube, self.policy)
        for pod in self.ended.pending():
            if not self.is_leader():  # lost the Lease mid-pass: the next leader carries on
                break
            try:
                outcome = self._handle(pod, now)
                outcomes.append(outcome)
                if outcome.recorded:
                    self.ended.counted(pod)
            except Exception as exc:
                self.metrics.api_errors.labels("workloads").inc()
                meta = api_objects.meta(pod)
                log.warning("workload pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
        self.gauges.refresh(self.ended, now)
        return outcomes

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            try:
                self.run_once()
            except Exception as exc:
                log.warning("workload watcher pass: %s", exc)
            self.wake.wait(interval)
            self.wake.clear()

    # --- one pod -------------------------------------------------------------------------------
    def _handle(self, pod: RawPod, now: datetime) -> PodResult:
        meta = api_objects.meta(pod)
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        phase = str(api_objects.phase(pod))
        if phase != "Succeeded":
            return self._failed(pod, ns, name, phase, now)
        if not self.ended.annotate(pod, {ENDED_ANNOTATION: "Succeeded"}):
            return PodResult(ns, name, phase)
        self.metrics.workload_pods_ended.labels(ns, phase).inc()
        audit(AuditKind.WORKLOAD_ENDED, namespace=ns, pod=name, phase=phase, dry_run=self.dry_run)
        return PodResult(ns, name, phase, recorded=True)

    def _failed(self, pod: RawPod, ns: str, name: str, phase: str, now: datetime) -> PodResult:
        facts = pod_facts(pod)
        node, signals = self.evidence.of(facts.node)
        verdict = classify(pod, signals, self.settings, now, self.evidence.pod_gpus(pod, facts.node, node))
        if not verdict.final:
            return PodResult(ns, name, phase, verdict)
        workload = workload_of(pod)
        suspect = verdict.reason in NODE_SUSPECT_REASONS and bool(facts.node)
        loop = self.guard.count(pod, workload, verdict, now)
        record = {**verdict.to_json(), "node": facts.node, "pool": self.evidence.pool(node),
                  "workload": f"{workload.kind}/{workload.name}",
                  "failed_at": fmt_time(verdict.failed_at) if verdict.failed_at else None,
                  "classified_at": fmt_time(now), "node_suspect": suspect, "loop": loop.count,
                  "cause": verdict.cause}
        if not self.ended.annotate(pod, {ENDED_ANNOTATION: "Failed",
                                         FAILURE_ANNOTATION: json.dumps(record, sort_keys=True)}):
            return PodResult(ns, name, phase, verdict)
        m = self.metrics
        m.workload_failures.labels(verdict.cls, verdict.reason, ns).inc()
        m.workload_pods_ended.labels(ns, phase).inc()
        if verdict.failed_at and facts.started and verdict.failed_at > facts.started:
            m.workload_lost_seconds.labels(verdict.cls, ns).inc((verdict.failed_at - facts.started).total_seconds())
        message = f"{verdict.cls} ({verdict.reason}): " + "; ".join(verdict.evidence)
        audit(AuditKind.WORKLOAD_FAILURE, namespace=ns, pod=name, node=facts.node, workload=record["workload"],
              **{"class": verdict.cls}, reason=verdict.reason, evidence=list(verdict.evidence),
              node_suspect=suspect, dry_run=self.dry_run)
        self._event(name, ns, "Pod", "v1", EventReason.WORKLOAD_FAILURE_CLASSIFIED, message, now,
                    verdict.cls != APP)
        return PodResult(ns, name, phase, verdict, recorded=True)

    def _event(self, name: str, namespace: str, kind: str, api_version: str, reason: str, message: str,
               now: datetime, warning: bool) -> None:
        if self.dry_run:
            return
        try:
            self.kube.event(name, reason, message, now, warning=warning, kind=kind, namespace=namespace,
                            api_version=api_version)
        except Exception as exc:
            log.warning("event %s on %s %s/%s: %s", reason, kind, namespace, name, exc)
