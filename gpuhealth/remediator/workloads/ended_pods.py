"""The ended pods the workload watcher looks at, from its watch caches: which are its own (the policy's namespaces;
GPU pods, or those its selector picks), which still wait to be counted, whose workload each is, and their
annotations as written (or as a dry run would have written them).

A pod that ended and is deleted before a pass saw it (evicted pods of a Job stay only until the Job controller has
counted them) is kept here, as last seen, until it is counted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.clients.kube import MERGE_PATCH, Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawPod
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import asks_for_gpu, pod_facts

ENDED_ANNOTATION = "gpuhealth.io/ended"
FAILURE_ANNOTATION = "gpuhealth.io/failure"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
HISTORY = timedelta(hours=1)  # older endings are not classified: Events (1 h TTL) and node state have moved on
# Only pods that ended are kept in the cache: a field selector the API server applies.
ENDED_SELECTOR = "status.phase!=Running,status.phase!=Pending"


@dataclass(frozen=True)
class Workload:
    namespace: str
    kind: str  # JobSet | Job | <controller kind> | Pod
    name: str


def workload_of(pod: RawPod) -> Workload:
    ns = api_objects.namespace(pod) or "default"
    jobset = api_objects.labels(pod).get(JOBSET_LABEL)
    if jobset:
        return Workload(ns, "JobSet", str(jobset))
    refs = api_objects.owners(pod)
    owner = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if owner:
        return Workload(ns, str(owner.get("kind")), str(owner.get("name")))
    return Workload(ns, "Pod", api_objects.name(pod))


class PodSource(Protocol):
    def items(self) -> Any: ...


class Sources:
    """Several pod caches (one per namespace) read as one; `apply` puts our own write in the right one."""

    def __init__(self, caches: dict[str, Any]) -> None:
        self.caches = caches

    def items(self) -> list[Any]:
        return [o for c in self.caches.values() for o in c.items()]

    def apply(self, obj: RawPod) -> None:
        cache = self.caches.get(api_objects.namespace(obj))
        if cache is not None and hasattr(cache, "apply"):
            cache.apply(obj)


def _selected(labels: dict[str, str], selector: str) -> bool:
    """Whether labels match a label selector as a string (k=v, k==v, k!=v, k, !k; comma-separated)."""
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


def _as_pod(obj: Any) -> RawPod:
    """A pod as the API's JSON, from a cache that holds JSON or the client's models."""
    if not isinstance(obj, dict):
        obj = client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    pod: RawPod = obj
    return pod


def _uid(pod: RawPod) -> str:
    return api_objects.uid(pod) or f"{api_objects.namespace(pod)}/{api_objects.name(pod)}"


class EndedPods:
    """The watcher's ended pods: read from `source`, written back (the ended and failure annotations)."""

    def __init__(self, kube: Kube, policy: Policy, source: PodSource, *, clock: Callable[[], datetime],
                 dry_run: bool) -> None:
        self.kube, self.policy, self.source, self.clock, self.dry_run = kube, policy, source, clock, dry_run
        self.overlay: dict[str, dict[str, str]] = {}  # pod uid -> annotations written only here (dry run, gone)
        self.gone: dict[str, RawPod] = {}  # pod uid -> pods deleted before they were counted
        self._lock = threading.Lock()

    def deleted(self, obj: Any) -> None:
        """The watch cache saw the pod deleted: kept, as last seen, if it is still to be counted."""
        pod = _as_pod(obj)
        if self._counts(pod):
            with self._lock:
                self.gone[_uid(pod)] = pod

    def annotations(self, pod: RawPod) -> dict[str, str]:
        return {**api_objects.annotations(pod), **self.overlay.get(_uid(pod), {})}

    def in_scope(self, pod: RawPod) -> bool:
        if api_objects.namespace(pod) not in self.policy.workloads.namespaces:
            return False
        selector = self.policy.workloads.selector
        if selector:
            return _selected(api_objects.labels(pod), selector)
        return asks_for_gpu(pod)

    def all(self) -> list[RawPod]:
        return [p for p in (_as_pod(o) for o in self.source.items()) if self.in_scope(p)]

    def _counts(self, pod: RawPod) -> bool:
        """An ended pod of ours, not counted yet. A pod deleted without a DisruptionTarget (its Job or JobSet
        stopping it because another pod failed, a person's kubectl delete) did not end by itself: not counted.
        Nor is one that ended more than HISTORY ago (the pods already there when the watcher is first turned on,
        or a remediator down that long): the evidence about its node is gone."""
        status = api_objects.pod_status(pod)
        if status.get("phase") not in ("Succeeded", "Failed") or not self.in_scope(pod):
            return False
        if ENDED_ANNOTATION in self.annotations(pod):
            return False
        ended = pod_facts(pod).failed_at
        if ended is not None and self.clock() - ended > HISTORY:
            return False
        return not api_objects.terminating(pod) or any(
            c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or [])

    def pending(self) -> list[RawPod]:
        with self._lock:  # a deleted pod that ended over HISTORY ago is history: forget it, as a live one
            self.gone = {key: p for key, p in self.gone.items() if self._counts(p)}
            gone = list(self.gone.values())
        live = [p for p in self.all() if self._counts(p)]
        seen = {_uid(p) for p in live}
        return live + [p for p in gone if _uid(p) not in seen]

    def counted(self, pod: RawPod) -> None:
        with self._lock:
            self.gone.pop(_uid(pod), None)

    def annotate(self, pod: RawPod, annotations: dict[str, str]) -> bool:
        """Write the annotations on the pod, with the resourceVersion it was read at; False when it is gone or
        changed since (the next pass looks again)."""
        if self.dry_run or _uid(pod) in self.gone:  # a deleted pod: counted, nothing left to annotate
            self.overlay.setdefault(_uid(pod), {}).update(annotations)
            return True
        body = {"metadata": {"annotations": annotations, "resourceVersion": api_objects.resource_version(pod)}}
        try:
            resp: Any = self.kube.core.patch_namespaced_pod(
                api_objects.name(pod), api_objects.namespace(pod), body, _content_type=MERGE_PATCH,
                _preload_content=False, _request_timeout=self.kube.timeout)
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or changed since the cache saw it: the next pass looks again
                return False
            raise
        apply = getattr(self.source, "apply", None)
        if apply is not None:  # read our own write before the watch brings it
            apply(json.loads(resp.data))
        return True
