"""The workload watcher: as leader, classify the workload pods that end and record what it found.

Pods come from a watch cache (remediator/clients/watch_cache.py's WatchCache, or anything with `items()`):
every pass looks at the ended pods of the policy's namespaces (GPU pods, or those the selector picks)
that carry no `gpuhealth.io/ended` annotation yet. For each:
- Succeeded: annotated `gpuhealth.io/ended: Succeeded` and counted (the success ratio's denominator);
- Failed: classified (remediator/workloads/classify.py) from the pod and its node's gpuhealth signals (the
  Node's state and last-episode annotations, gpuhealth's Events on the Node). An infra verdict is
  recorded at once; app and unknown wait until `workloads.look_ahead` has passed since the failure
  (a node alert may still come and make it infra). Then: the pod's annotations (`gpuhealth.io/ended`
  and `gpuhealth.io/failure`, the verdict as JSON), an Event on the pod, a log line, the metrics and
  the restart-loop guard. The restart-loop and node-suspect gauges are worked out each pass from the
  pods' annotations, so a restarted remediator reports what the last one did.

Idempotent across restarts and replicas: only the leader writes, the pod's annotation is written
(with its resourceVersion) before anything is counted, and an annotated pod is never counted again.
A crash between the annotation and the count loses that count rather than doubling it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediator.clients.kube import MERGE_PATCH, Kube, read_or_none
from remediator.decide.devices import ClaimIndex, NodeDevices, claim_index, devices_by_node
from remediator.decide.event_reasons import EventReason
from remediator.decide.nodestate import fmt_time, parse_time
from remediator.metrics import Metrics
from remediator.policy import Policy
from remediator.workloads.classify import (
    APP,
    GPUS_ANNOTATION,
    NODE_SUSPECT_REASONS,
    Settings,
    Verdict,
    asks_for_gpu,
    classify,
    pod_facts,
    pod_gpus,
)
from remediator.workloads.evidence import signals_from_events, signals_from_node
from remediator.workloads.restart_loop import LOOP_ANNOTATION, LoopState, count_failure, in_loop, job_of

log = logging.getLogger("gpuhealth.remediator")

ENDED_ANNOTATION = "gpuhealth.io/ended"
FAILURE_ANNOTATION = "gpuhealth.io/failure"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
NODE_EVENTS_NAMESPACE = "default"  # where Kube.event puts Events about Nodes
HISTORY = timedelta(hours=1)  # older endings are not classified: Events (1 h TTL) and node state have moved on


def settings_of(policy: Policy) -> Settings:
    w = policy.workloads
    return Settings(app_exit_codes=w.app_exit_codes, look_behind=w.look_behind, look_ahead=w.look_ahead)


def audit(event: str, **fields: Any) -> None:
    log.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))


@dataclass(frozen=True)
class Workload:
    namespace: str
    kind: str  # JobSet | Job | <controller kind> | Pod
    name: str


def workload_of(pod: dict[str, Any]) -> Workload:
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "default")
    jobset = (meta.get("labels") or {}).get(JOBSET_LABEL)
    if jobset:
        return Workload(ns, "JobSet", str(jobset))
    refs = meta.get("ownerReferences") or []
    owner = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if owner:
        return Workload(ns, str(owner.get("kind")), str(owner.get("name")))
    return Workload(ns, "Pod", str(meta.get("name")))


class PodSource(Protocol):
    def items(self) -> Any: ...


class Sources:
    """Several pod caches (one per namespace) read as one; `apply` puts our own write in the right one."""

    def __init__(self, caches: dict[str, Any]) -> None:
        self.caches = caches

    def items(self) -> list[Any]:
        return [o for c in self.caches.values() for o in c.items()]

    def apply(self, obj: dict[str, Any]) -> None:
        cache = self.caches.get(str((obj.get("metadata") or {}).get("namespace")))
        if cache is not None and hasattr(cache, "apply"):
            cache.apply(obj)


# Only pods that ended are kept in the cache: a field selector the API server applies.
ENDED_SELECTOR = "status.phase!=Running,status.phase!=Pending"


def start_watcher(kube: Kube, policy: Policy, metrics: Metrics, stop: threading.Event, interval: float, *,
                  clock: Callable[[], datetime], dry_run: bool, is_leader: Callable[[], bool]) -> WorkloadWatcher:
    """serve, when workloads.enabled: a WatchCache of the ended pods of each namespace, and the watcher's loop."""
    from functools import partial

    from remediator.clients.watch_cache import WatchCache

    caches = {ns: WatchCache(partial(kube.core.list_namespaced_pod, ns), field_selector=ENDED_SELECTOR,
                             label_selector=policy.workloads.selector, name=f"pods-{ns}",
                             request_timeout=kube.timeout)
              for ns in policy.workloads.namespaces}
    watcher = WorkloadWatcher(kube, policy, metrics, Sources(caches), clock=clock, dry_run=dry_run,
                              is_leader=is_leader)
    for cache in caches.values():
        cache.on_change = watcher.on_change
        cache.start(stop)
    threading.Thread(target=watcher.run_forever, args=(stop, interval), name="workloads", daemon=True).start()
    return watcher


def _selected(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                key, want = term.split(op, 1)
                if (labels.get(key) == want) == (op == "!="):
                    return False
                break
        else:
            if term.startswith("!") == (term.lstrip("!") in labels):
                return False
    return True


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    data: dict[str, Any] = client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return data


@dataclass
class Outcome:
    namespace: str
    pod: str
    phase: str
    verdict: Verdict | None = None
    recorded: bool = False  # False: waiting for the look-ahead, or the write failed (next pass retries)


class WorkloadWatcher:
    def __init__(self, kube: Kube, policy: Policy, metrics: Metrics, pods: PodSource, *,
                 clock: Callable[[], datetime], dry_run: bool = False,
                 is_leader: Callable[[], bool] = lambda: True) -> None:
        self.kube, self.policy, self.metrics, self.pods = kube, policy, metrics, pods
        self.clock, self.dry_run, self.is_leader = clock, dry_run, is_leader
        self.settings = settings_of(policy)
        self.wake = threading.Event()
        self.overlay: dict[str, dict[str, str]] = {}  # pod uid -> annotations written only here (dry run, gone)
        self.gone: dict[str, dict[str, Any]] = {}  # pod uid -> pods deleted before they were counted
        self._lock = threading.Lock()
        self.loops: dict[Workload, LoopState] = {}  # workloads without a Job to keep the count on; dry run
        self._gauges: dict[str, set[tuple[str, str]]] = {}  # the series each gauge holds now
        self._nodes_seen: dict[str, tuple[dict[str, Any] | None, list[Any]]] = {}  # a pass's node reads
        self._dra_seen: tuple[dict[str, NodeDevices], ClaimIndex] | None = None  # a pass's DRA reads
        metrics.init_workloads(policy.workloads.namespaces)

    # --- the watch cache's callback: something changed, look soon -----------------------------
    def on_change(self, event_type: str, obj: Any, old_obj: Any = None) -> None:
        """A pod that ended and is deleted before a pass saw it (evicted pods of a Job stay only until the
        Job controller has counted them) is kept here, as last seen, until it is counted."""
        if event_type == "DELETED":
            pod = _as_dict(obj)
            if self._counts(pod):
                with self._lock:
                    self.gone[_uid(pod)] = pod
        self.wake.set()

    # --- reading -------------------------------------------------------------------------------
    def _annotations(self, pod: dict[str, Any]) -> dict[str, str]:
        meta = pod.get("metadata") or {}
        return {**(meta.get("annotations") or {}), **self.overlay.get(_uid(pod), {})}

    def _in_scope(self, pod: dict[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") not in self.policy.workloads.namespaces:
            return False
        selector = self.policy.workloads.selector
        if selector:
            return _selected(meta.get("labels") or {}, selector)
        return asks_for_gpu(pod)

    def _all(self) -> list[dict[str, Any]]:
        return [p for p in (_as_dict(o) for o in self.pods.items()) if self._in_scope(p)]

    def _counts(self, pod: dict[str, Any]) -> bool:
        """An ended pod of ours, not counted yet. A pod deleted without a DisruptionTarget (its Job or JobSet
        stopping it because another pod failed, a person's kubectl delete) did not end by itself: not counted.
        Nor is one that ended more than HISTORY ago (the pods already there when the watcher is first turned on,
        or a remediator down that long): the evidence about its node is gone."""
        status = pod.get("status") or {}
        if status.get("phase") not in ("Succeeded", "Failed") or not self._in_scope(pod):
            return False
        if ENDED_ANNOTATION in self._annotations(pod):
            return False
        ended = pod_facts(pod).failed_at
        if ended is not None and self.clock() - ended > HISTORY:
            return False
        deleted = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        return not deleted or any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                                  for c in status.get("conditions") or [])

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:  # a deleted pod that ended over HISTORY ago is history: forget it, as a live one
            self.gone = {uid: p for uid, p in self.gone.items() if self._counts(p)}
            gone = list(self.gone.values())
        live = [p for p in self._all() if self._counts(p)]
        seen = {_uid(p) for p in live}
        return live + [p for p in gone if _uid(p) not in seen]

    # --- the pass ------------------------------------------------------------------------------
    def run_once(self) -> list[Outcome]:
        if not self.is_leader():
            self._clear_gauges()  # another replica reports them
            return []
        now = self.clock()
        outcomes = []
        self._nodes_seen = {}  # this pass's node reads
        self._dra_seen = None
        for pod in self.pending():
            if not self.is_leader():  # lost the Lease mid-pass: the next leader carries on
                break
            try:
                outcome = self._handle(pod, now)
                outcomes.append(outcome)
                if outcome.recorded:
                    with self._lock:
                        self.gone.pop(_uid(pod), None)
            except Exception as exc:
                self.metrics.api_errors.labels("workloads").inc()
                log.warning("workload pod %s/%s: %s", pod["metadata"].get("namespace"), pod["metadata"].get("name"),
                            exc)
        self._refresh_gauges(now)
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
    def _handle(self, pod: dict[str, Any], now: datetime) -> Outcome:
        meta = pod["metadata"]
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        phase = str(pod["status"]["phase"])
        if phase == "Succeeded":
            if not self._annotate(pod, {ENDED_ANNOTATION: "Succeeded"}):
                return Outcome(ns, name, phase)
            self.metrics.workload_pods_ended.labels(ns, phase).inc()
            audit("workload_ended", namespace=ns, pod=name, phase=phase, dry_run=self.dry_run)
            return Outcome(ns, name, phase, recorded=True)

        facts = pod_facts(pod)
        if facts.node not in self._nodes_seen:
            found = self._node(facts.node)
            self._nodes_seen[facts.node] = (found, (signals_from_node(found) if found else [])
                                            + self._node_events(facts.node))
        node, signals = self._nodes_seen[facts.node]
        capacity = ((node or {}).get("status") or {}).get("capacity") or {}
        node_gpus = int(capacity["nvidia.com/gpu"]) if str(capacity.get("nvidia.com/gpu", "")).isdigit() else None
        gpus = None if GPUS_ANNOTATION in (meta.get("annotations") or {}) else self._claimed_gpus(pod, facts.node)
        verdict = classify(pod, signals, self.settings, now, pod_gpus(pod, node_gpus) if gpus is None else gpus)
        if not verdict.final:
            return Outcome(ns, name, phase, verdict)
        workload = workload_of(pod)
        suspect = verdict.reason in NODE_SUSPECT_REASONS and bool(facts.node)
        loop = self._count_loop(pod, workload, verdict, now)
        pool = (((node or {}).get("metadata") or {}).get("labels") or {}).get(self.policy.pools.label,
                                                                              self.policy.pools.default)
        record = {**verdict.to_json(), "node": facts.node, "pool": pool,
                  "workload": f"{workload.kind}/{workload.name}",
                  "failed_at": fmt_time(verdict.failed_at) if verdict.failed_at else None,
                  "classified_at": fmt_time(now), "node_suspect": suspect, "loop": loop.count,
                  "cause": verdict.cause}
        if not self._annotate(pod, {ENDED_ANNOTATION: "Failed",
                                    FAILURE_ANNOTATION: json.dumps(record, sort_keys=True)}):
            return Outcome(ns, name, phase, verdict)
        m = self.metrics
        m.workload_failures.labels(verdict.cls, verdict.reason, ns).inc()
        m.workload_pods_ended.labels(ns, phase).inc()
        if verdict.failed_at and facts.started and verdict.failed_at > facts.started:
            m.workload_lost_seconds.labels(verdict.cls, ns).inc((verdict.failed_at - facts.started).total_seconds())
        message = f"{verdict.cls} ({verdict.reason}): " + "; ".join(verdict.evidence)
        audit("workload_failure", namespace=ns, pod=name, node=facts.node, workload=record["workload"],
              **{"class": verdict.cls}, reason=verdict.reason, evidence=list(verdict.evidence),
              node_suspect=suspect, dry_run=self.dry_run)
        self._event(name, ns, "Pod", "v1", EventReason.WORKLOAD_FAILURE_CLASSIFIED, message, now,
                    warning=verdict.cls != APP)
        return Outcome(ns, name, phase, verdict, recorded=True)

    def _claimed_gpus(self, pod: dict[str, Any], node: str) -> frozenset[str] | None:
        """What the pod's ResourceClaims were allocated on its node (DRA, status.reservedFor): each GPU's PCI bus id
        and UUID, and each MIG device's UUID with its GPU's. So an Xid on one MIG instance is the failure of the
        pods on that instance only. None: not known (DRA off, no claim reserved for the pod names a device of the
        node, e.g. the claim controller already released it, or the objects could not be read)."""
        if not self.policy.dra.enabled or not node:
            return None
        if self._dra_seen is None:
            try:
                self._dra_seen = (devices_by_node(self.kube.list_resource_slices(), self.policy.dra.driver),
                                  claim_index(self.kube.list_resource_claims()))
            except Exception as exc:  # the pods' GPU requests still say what they can
                log.warning("listing ResourceSlices and ResourceClaims for the workload watcher: %s", exc)
                self._dra_seen = ({}, ClaimIndex())
        slices, claims = self._dra_seen
        mine = slices.get(node)
        if mine is None:
            return None
        meta = pod.get("metadata") or {}
        holder = f"{meta.get('namespace')}/{meta.get('name')}"
        out: set[str] = set()
        for d in mine.devices:
            if holder not in claims.pods.get((mine.driver, mine.pool, d.name), ()):
                continue
            gpu = d if d.kind == "gpu" else mine.parent(d)
            out |= {d.uuid} | ({gpu.uuid, gpu.pci_bus_id or ""} if gpu is not None else set())
        return frozenset(out - {""}) or None

    def _node(self, name: str) -> dict[str, Any] | None:
        if not name:
            return None
        try:
            return self.kube.get_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _node_events(self, name: str) -> list[Any]:
        if not name:
            return []
        try:
            resp: Any = self.kube.core.list_namespaced_event(
                NODE_EVENTS_NAMESPACE, field_selector=f"involvedObject.kind=Node,involvedObject.name={name}",
                _preload_content=False, _request_timeout=self.kube.timeout)
            return signals_from_events(json.loads(resp.data).get("items") or [])
        except Exception as exc:  # the annotations still carry the alerts
            log.warning("listing gpuhealth Events of node %s: %s", name, exc)
            return []

    def _annotate(self, pod: dict[str, Any], annotations: dict[str, str]) -> bool:
        meta = pod["metadata"]
        if self.dry_run or _uid(pod) in self.gone:  # a deleted pod: counted, nothing left to annotate
            self.overlay.setdefault(_uid(pod), {}).update(annotations)
            return True
        body = {"metadata": {"annotations": annotations, "resourceVersion": meta.get("resourceVersion")}}
        try:
            resp: Any = self.kube.core.patch_namespaced_pod(
                meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH, _preload_content=False,
                _request_timeout=self.kube.timeout)
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or changed since the cache saw it: the next pass looks again
                return False
            raise
        apply = getattr(self.pods, "apply", None)
        if apply is not None:  # read our own write before the watch brings it
            apply(json.loads(resp.data))
        return True

    def _event(self, name: str, namespace: str, kind: str, api_version: str, reason: str, message: str,
               now: datetime, warning: bool) -> None:
        if self.dry_run:
            return
        try:
            self.kube.event(name, reason, message, now, warning=warning, kind=kind, namespace=namespace,
                            api_version=api_version)
        except Exception as exc:
            log.warning("event %s on %s %s/%s: %s", reason, kind, namespace, name, exc)

    # --- the restart-loop guard ----------------------------------------------------------------
    def _count_loop(self, pod: dict[str, Any], workload: Workload, verdict: Verdict, now: datetime) -> LoopState:
        """Count the failure on the owning Job's annotation (in memory for pods without a Job, and in a dry run)."""
        w = self.policy.workloads
        job_name = job_of(pod)
        job = self._job(workload.namespace, job_name) if job_name else None
        meta, spec, status = ((job or {}).get(k) or {} for k in ("metadata", "spec", "status"))
        suspended = bool(spec.get("suspend"))
        stored = LoopState.from_json((meta.get("annotations") or {}).get(LOOP_ANNOTATION))
        in_memory = job is None or self.dry_run
        before = self.loops.get(workload, stored) if in_memory else stored
        after = count_failure(before, str(pod["metadata"]["name"]), verdict.cls, verdict.cause,
                              int(status.get("succeeded") or 0), suspended, started=pod_facts(pod).started,
                              failed_at=verdict.failed_at)
        suspend = job is not None and in_loop(after, w.restart_loop_threshold) and w.restart_loop_suspend \
            and not suspended
        if suspend and not self.dry_run:  # (a dry run suspends nothing, so nothing is resumed either)
            after = replace(after, suspended=True)
        if in_memory:
            self.loops[workload] = after
        elif after != before:
            body: dict[str, Any] = {"metadata": {"annotations": {LOOP_ANNOTATION: after.to_json()},
                                                 "resourceVersion": meta.get("resourceVersion")}}
            if suspend:
                body["spec"] = {"suspend": True}
            # a 409 (the Job changed) raises: the pod is not annotated, and the next pass counts it again
            self.kube.batch.patch_namespaced_job(str(job_name), workload.namespace, body, _content_type=MERGE_PATCH,
                                                 _preload_content=False, _request_timeout=self.kube.timeout)
        self._report_loop(workload, before, after, suspend, job_name if job is not None else None, now)
        return after

    def _job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return read_or_none(self.kube.batch.read_namespaced_job, name, namespace, timeout=self.kube.timeout)

    def _report_loop(self, workload: Workload, before: LoopState, after: LoopState, suspend: bool,
                     job_name: str | None, now: datetime) -> None:
        threshold = self.policy.workloads.restart_loop_threshold
        if not in_loop(after, threshold) or after == before:
            return
        action = ("would suspend" if self.dry_run else "suspend") if suspend else "none"
        audit("restart_loop", namespace=workload.namespace, workload=f"{workload.kind}/{workload.name}",
              cause=after.cause, count=after.count, pods=list(after.pods), action=action, dry_run=self.dry_run)
        if job_name is None:
            return
        message = (f"{after.count} failures in a row with the same application cause ({after.cause}) and no progress "
                   f"(pods {', '.join(after.pods)})")
        self._event(job_name, workload.namespace, "Job", "batch/v1", EventReason.RESTART_LOOP, message, now,
                    warning=True)
        if suspend:
            self._event(job_name, workload.namespace, "Job", "batch/v1", EventReason.RESTART_LOOP_SUSPENDED,
                        f"gpuhealth suspended the Job (spec.suspend: true): {message}. Fix the cause, then resume "
                        "it: kubectl patch job ... -p '{\"spec\":{\"suspend\":false}}'", now, warning=True)

    # --- the gauges, from the pods' annotations (so a restarted remediator reports the same) -------
    def _refresh_gauges(self, now: datetime) -> None:
        newest: dict[Workload, tuple[float, dict[str, Any] | None]] = {}
        suspects: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (node, pool) -> workloads
        window = self.policy.workloads.node_suspect_window
        for pod in self._all():
            annotations = self._annotations(pod)
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
                                                                 self._gauges.get("loops", set())})
        self._set(self.metrics.workload_node_suspect, "suspects", {k: float(len(v)) for k, v in suspects.items()})

    def _set(self, gauge: Any, name: str, values: dict[tuple[str, str], float]) -> None:
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        for gone in self._gauges.get(name, set()) - set(values):
            gauge.remove(*gone)
        self._gauges[name] = set(values)

    def _clear_gauges(self) -> None:
        self._set(self.metrics.workload_restart_loop, "loops", {})
        self._set(self.metrics.workload_node_suspect, "suspects", {})


def _uid(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def _failure(annotations: dict[str, str]) -> dict[str, Any] | None:
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

