"""The remediator's view of the fleet: a watch cache of every Node, and of every Pod by node.

A pass reads Nodes and their pods from here instead of listing the fleet; the API is still read fresh
before each disruptive step (reconciler.py). Pods are kept slim (what a drain needs: owner kinds, the
mirror and karpenter.sh/do-not-disrupt annotations, phase, terminating, created, started, GPU requests; and for
gpuhealth's own reset, reboot and diagnostic pods, what tells whether they started, and the diagnostic's
verdict), so 100,000 pods cost megabytes, not gigabytes. Nodes too (`slim_node`): a real Node is 10-30 KiB of JSON,
most of it the images its kubelet reports, managedFields and others' annotations, none of which a decision reads.
Both are slimmed page by page as a list arrives and event by event (clients/watch_cache.py, clients/pager.py).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from kubernetes import client

from gpuhealth.remediator.clients.watch_cache import WatchCache
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import (
    RawContainer,
    RawMeta,
    RawNode,
    RawNodeSpec,
    RawNodeStatus,
    RawPod,
    RawPodSpec,
    RawPodStatus,
    RawResources,
)
from gpuhealth.remediator.decide.diagnosis import COMPONENT as DIAGNOSE_COMPONENT
from gpuhealth.remediator.decide.diagnosis import verdict_fields
from gpuhealth.remediator.decide.do_not_disrupt import POD_ANNOTATION
from gpuhealth.remediator.decide.job_start import is_node_action_pod, start_fields
from gpuhealth.remediator.decide.nodestate import DO_NOT_DISRUPT_ANNOTATION, PREFIX
from gpuhealth.remediator.decide.views import GPU_RESOURCES

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
KEPT_ANNOTATIONS = (MIRROR_ANNOTATION, POD_ANNOTATION)  # a mirror pod is not drained; a do-not-disrupt one waits


def slim_pod(pod: RawPod) -> RawPod:
    meta, status, owners = api_objects.meta(pod), api_objects.pod_status(pod), api_objects.owners(pod)
    annotations = api_objects.annotations(pod)
    slim_meta: RawMeta = {"name": api_objects.name(pod), "namespace": api_objects.namespace(pod),
                          "resourceVersion": api_objects.resource_version(pod) or "",
                          "creationTimestamp": meta.get("creationTimestamp") or "",
                          "ownerReferences": [{"kind": o.get("kind") or ""} for o in owners]}
    if any(o.get("kind") == "DaemonSet" for o in owners):
        slim_meta["labels"] = dict(api_objects.labels(pod))  # the GPU Operator's operands: a reset waits for them
    kept_annotations = {k: annotations[k] for k in KEPT_ANNOTATIONS if k in annotations}
    if kept_annotations:
        slim_meta["annotations"] = kept_annotations
    if meta.get("deletionTimestamp"):
        slim_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    slim_status: RawPodStatus = {"phase": status.get("phase") or ""}
    if status.get("startTime"):
        slim_status["startTime"] = status["startTime"]
    if is_node_action_pod(pod):  # gpuhealth's own reset and reboot pods: whether they started (decide/job_start.py)
        slim_meta["labels"] = dict(api_objects.labels(pod))
        slim_meta["ownerReferences"], started = start_fields(pod)
        slim_status.update(started)
        if api_objects.labels(pod).get("app.kubernetes.io/component") == DIAGNOSE_COMPONENT:
            slim_status.update(verdict_fields(pod))  # and the diagnostic's verdict (decide/diagnosis.py)
    spec: RawPodSpec = {"containers": [_gpu_requests(c) for c in api_objects.containers(pod)]}
    if api_objects.node_name(pod):
        spec["nodeName"] = api_objects.node_name(pod)
    slim: RawPod = shared({"metadata": slim_meta, "spec": spec, "status": slim_status})
    return slim


def shared(value: Any) -> Any:
    """`value` (a slimmed object) rebuilt with every string interned (sys.intern): the labels, condition texts, owner
    kinds, namespaces and node names that thousands of Nodes and Pods repeat are then held once, not once per object
    (the JSON decoder shares keys only within one page). A slim Node of a real cluster shrinks by about half."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k): shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shared(v) for v in value]
    return value


def _gpu_requests(container: RawContainer) -> RawContainer:
    """The container's limits and requests of GPU resources only (a section with none is left out)."""
    res = container.get("resources") or {}
    kept: RawResources = {}
    limits = {k: v for k, v in (res.get("limits") or {}).items() if GPU_RESOURCES.match(k)}
    requests = {k: v for k, v in (res.get("requests") or {}).items() if GPU_RESOURCES.match(k)}
    if limits:
        kept["limits"] = limits
    if requests:
        kept["requests"] = requests
    return {"resources": kept}


def _kept_node_annotations(node: RawNode) -> dict[str, str]:
    """The Node's annotations a decision reads: gpuhealth's own (gpuhealth.io/: state, hold, history, last episode and
    sweep, the GPU reset request) and karpenter.sh/do-not-disrupt (a drain claims it only where nobody else set it)."""
    return {k: v for k, v in api_objects.annotations(node).items()
            if k.startswith(f"{PREFIX}/") or k == DO_NOT_DISRUPT_ANNOTATION}


def slim_node(node: RawNode) -> RawNode:
    """What the decisions read of a Node (decide/views.py node_view, decide/node_patches.py, decide/undo.py,
    decide/diagnosis.py provisioned): name, uid, resourceVersion, creation and deletion times, every label (pools,
    exclusions, GFD's GPU count, the GPU Operator's deploy labels), the annotations above, the taints and
    unschedulable (written back whole), every condition (a status patch replaces the list whole), the bootID and the
    capacity (GPUs and EFA advertised). Left out: images, managedFields, addresses, allocatable, others' annotations."""
    meta, spec, status = api_objects.meta(node), node.get("spec") or {}, node.get("status") or {}
    slim_meta: RawMeta = {"name": api_objects.name(node), "uid": api_objects.uid(node),
                          "resourceVersion": api_objects.resource_version(node) or "",
                          "labels": dict(api_objects.labels(node)), "annotations": _kept_node_annotations(node)}
    for stamp in ("creationTimestamp", "deletionTimestamp"):
        if meta.get(stamp):
            slim_meta[stamp] = meta[stamp]
    slim_spec: RawNodeSpec = {}
    if "taints" in spec:
        slim_spec["taints"] = api_objects.taints(node)
    if "unschedulable" in spec:
        slim_spec["unschedulable"] = api_objects.unschedulable(node)
    slim_status: RawNodeStatus = {"conditions": api_objects.node_conditions(node)}
    if "bootID" in (status.get("nodeInfo") or {}):
        slim_status["nodeInfo"] = {"bootID": status["nodeInfo"]["bootID"]}
    if "capacity" in status:
        slim_status["capacity"] = status["capacity"]
    slim: RawNode = shared({"metadata": slim_meta, "spec": slim_spec, "status": slim_status})
    return slim


def _node_of(pod: RawPod) -> str | None:
    return api_objects.node_name(pod) or None


class FleetCache:
    def __init__(self, core: client.CoreV1Api, request_timeout: float = 10.0, watch_timeout: int = 300) -> None:
        self.nodes: WatchCache[RawNode] = WatchCache(core.list_node, name="nodes", transform=slim_node,
                                                     request_timeout=request_timeout, timeout_seconds=watch_timeout)
        self.pods: WatchCache[RawPod] = WatchCache(core.list_pod_for_all_namespaces, name="pods", index=_node_of,
                                                   transform=slim_pod, request_timeout=request_timeout,
                                                   timeout_seconds=watch_timeout)

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

    def pods_on(self, node: str) -> list[RawPod]:
        return self.pods.indexed(node)


def node_metadata(node: RawNode) -> RawNode:
    """What the receiver reads of a Node: its name, resourceVersion and gpuhealth's annotations (the state it records
    on, the hold)."""
    kept: RawMeta = {"name": api_objects.name(node), "resourceVersion": api_objects.resource_version(node) or ""}
    annotations = _kept_node_annotations(node)
    if annotations:
        kept["annotations"] = annotations
    slim: RawNode = shared({"metadata": kept})
    return slim


class NodeCache(FleetCache):
    """The Nodes alone, their metadata only: the webhook receiver's process (gpuhealth/remediator/loop_process.py)
    checks a post's nodes and records on them, and reads neither pods nor a Node's spec and status (a real Node's
    status, with its images, is most of its size); the loop's process keeps the whole FleetCache."""

    def __init__(self, core: client.CoreV1Api, request_timeout: float = 10.0, watch_timeout: int = 300) -> None:
        super().__init__(core, request_timeout, watch_timeout)
        self.nodes = WatchCache(core.list_node, name="nodes", transform=node_metadata, request_timeout=request_timeout,
                                timeout_seconds=watch_timeout)

    def start(self, stop: threading.Event) -> None:
        self.nodes.start(stop)

    def wait_synced(self, timeout: float) -> bool:
        return self.nodes.wait_synced(timeout)

    @property
    def synced(self) -> bool:
        return self.nodes.synced

    @property
    def healthy(self) -> bool:
        return self.nodes.healthy

    def wait_for(self, resource_version: str, timeout: float) -> bool:
        return self.nodes.wait_for(resource_version, timeout)
