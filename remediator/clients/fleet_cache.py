"""The remediator's view of the fleet: a watch cache of every Node, and of every Pod by node.

A pass reads Nodes and their pods from here instead of listing the fleet; the API is still read fresh
before each disruptive step (reconciler.py). Pods are kept slim (what a drain needs: owner kinds, the
mirror and karpenter.sh/do-not-disrupt annotations, phase, terminating, created, started, GPU requests; and for
gpuhealth's own reset and reboot pods, what tells whether they started), so 100,000 pods cost megabytes, not
gigabytes.
"""

from __future__ import annotations

import threading

from kubernetes import client

from remediator.clients.watch_cache import Obj, WatchCache
from remediator.decide.do_not_disrupt import POD_ANNOTATION
from remediator.decide.job_start import is_node_action_pod, start_fields
from remediator.decide.views import GPU_RESOURCES

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
KEPT_ANNOTATIONS = (MIRROR_ANNOTATION, POD_ANNOTATION)  # a mirror pod is not drained; a do-not-disrupt one waits


def slim_pod(pod: Obj) -> Obj:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    slim_meta: Obj = {"name": meta.get("name"), "namespace": meta.get("namespace"),
                      "resourceVersion": meta.get("resourceVersion"),
                      "creationTimestamp": meta.get("creationTimestamp"),
                      "ownerReferences": [{"kind": o.get("kind")} for o in meta.get("ownerReferences") or []]}
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        slim_meta["labels"] = dict(meta.get("labels") or {})  # the GPU Operator's operands: a reset waits for them
    kept_annotations = {k: annotations[k] for k in KEPT_ANNOTATIONS if k in annotations}
    if kept_annotations:
        slim_meta["annotations"] = kept_annotations
    if meta.get("deletionTimestamp"):
        slim_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    containers = []
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        kept = {s: {k: v for k, v in (res.get(s) or {}).items() if GPU_RESOURCES.match(k)}
                for s in ("limits", "requests") if any(GPU_RESOURCES.match(k) for k in res.get(s) or {})}
        containers.append({"resources": kept})
    status = {"phase": (pod.get("status") or {}).get("phase"), "startTime": (pod.get("status") or {}).get("startTime")}
    if is_node_action_pod(pod):  # gpuhealth's own reset and reboot pods: whether they started (decide/job_start.py)
        slim_meta["labels"] = dict(meta.get("labels") or {})
        slim_meta["ownerReferences"], started = start_fields(pod)
        status.update(started)
    return {"metadata": slim_meta, "spec": {"nodeName": spec.get("nodeName"), "containers": containers},
            "status": status}


def _node_of(pod: Obj) -> str | None:
    node: str | None = (pod.get("spec") or {}).get("nodeName")
    return node


class FleetCache:
    def __init__(self, core: client.CoreV1Api, request_timeout: float = 10.0, watch_timeout: int = 300) -> None:
        self.nodes = WatchCache(core.list_node, name="nodes", request_timeout=request_timeout,
                                timeout_seconds=watch_timeout)
        self.pods = WatchCache(core.list_pod_for_all_namespaces, name="pods", index=_node_of, transform=slim_pod,
                               request_timeout=request_timeout, timeout_seconds=watch_timeout)

    def start(self, stop: threading.Event) -> None:
        self.nodes.start(stop)
        self.pods.start(stop)

    def wait_synced(self, timeout: float) -> bool:
        return self.nodes.wait_synced(timeout) and self.pods.wait_synced(timeout)

    @property
    def synced(self) -> bool:
        return self.nodes.synced and self.pods.synced

    @property
    def healthy(self) -> bool:
        return self.nodes.healthy and self.pods.healthy

    def wait_for(self, resource_version: str, timeout: float) -> bool:
        """Both caches have seen `resource_version` (tests: after changing the cluster, before a pass)."""
        return self.nodes.wait_for(resource_version, timeout) and self.pods.wait_for(resource_version, timeout)

    def pods_on(self, node: str) -> list[Obj]:
        return self.pods.indexed(node)
