"""The Kubernetes objects the remediator reads (Nodes, Pods, Jobs, Events) and the Node patches it writes, in
the shape of the API's JSON: the fields gpuhealth uses, as TypedDicts (kopf's structs/bodies.py is the model).

They are for the type checker only: nothing is checked at run time, so whatever a real API server sends (or
`kubectl get -o json` wrote) goes through as it always did. Every field is optional (total=False): the API
omits empty ones. The accessors below are the one place that walks an object's metadata; a missing or null
field reads as empty.

This module lives in decide/ because decide reads these objects (views.py, node_patches.py) and imports no
client; the clients (clients/kube.py, the watch caches) import it from here.
"""

# No `from __future__ import annotations` here: `annotations` is one of the accessors below.
from typing import TypedDict

# --- metadata, common to every object -------------------------------------------------------------------


class RawOwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class RawMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[RawOwnerReference]


class RawObject(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: RawMeta


class RawCondition(TypedDict, total=False):
    """A condition of a Node, a Pod or a Job."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    lastTransitionTime: str
    lastHeartbeatTime: str


# --- Node -----------------------------------------------------------------------------------------------


class RawTaint(TypedDict, total=False):
    key: str
    value: str
    effect: str


class RawNodeSpec(TypedDict, total=False):
    taints: list[RawTaint]
    unschedulable: bool


class RawNodeInfo(TypedDict, total=False):
    bootID: str


class RawNodeStatus(TypedDict, total=False):
    conditions: list[RawCondition]
    nodeInfo: RawNodeInfo
    capacity: dict[str, str]  # quantities, e.g. {"nvidia.com/gpu": "8"}


class RawNode(RawObject, total=False):
    spec: RawNodeSpec
    status: RawNodeStatus


# --- Pod ------------------------------------------------------------------------------------------------


class RawResources(TypedDict, total=False):
    limits: dict[str, str]
    requests: dict[str, str]


class RawContainer(TypedDict, total=False):
    name: str
    resources: RawResources


class RawPodSpec(TypedDict, total=False):
    nodeName: str
    containers: list[RawContainer]


class RawWaiting(TypedDict, total=False):
    reason: str
    message: str


class RawTerminated(TypedDict, total=False):
    exitCode: int
    reason: str
    message: str
    startedAt: str
    finishedAt: str


class RawContainerState(TypedDict, total=False):
    """One of its keys, the state the container is in (running carries only when it started)."""

    waiting: RawWaiting
    running: dict[str, str]
    terminated: RawTerminated


class RawContainerStatus(TypedDict, total=False):
    name: str
    state: RawContainerState
    lastState: RawContainerState


class RawPodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    startTime: str
    conditions: list[RawCondition]
    containerStatuses: list[RawContainerStatus]
    initContainerStatuses: list[RawContainerStatus]


class RawPod(RawObject, total=False):
    spec: RawPodSpec
    status: RawPodStatus


# --- Job ------------------------------------------------------------------------------------------------


class RawJobSpec(TypedDict, total=False):
    suspend: bool


class RawJobStatus(TypedDict, total=False):
    active: int
    ready: int
    succeeded: int
    failed: int
    terminating: int
    conditions: list[RawCondition]


class RawJob(RawObject, total=False):
    spec: RawJobSpec
    status: RawJobStatus


# --- Event ----------------------------------------------------------------------------------------------


class RawObjectReference(TypedDict, total=False):
    kind: str
    name: str
    namespace: str
    apiVersion: str


class RawEventSource(TypedDict, total=False):
    component: str


class RawEvent(RawObject, total=False):
    involvedObject: RawObjectReference
    source: RawEventSource
    reportingComponent: str
    reason: str
    message: str
    firstTimestamp: str
    lastTimestamp: str
    eventTime: str


# --- Lease (coordination.k8s.io/v1: leadership, and the breaker state on it; clients/leader.py) -------------


class RawLeaseSpec(TypedDict, total=False):
    holderIdentity: str  # "": released
    leaseDurationSeconds: int
    acquireTime: str  # MicroTime
    renewTime: str
    leaseTransitions: int


class RawLease(RawObject, total=False):
    spec: RawLeaseSpec


# --- the patches gpuhealth writes to a Node (JSON merge patches: None removes a key) ------------------


class PatchMeta(TypedDict, total=False):
    annotations: dict[str, str | None]
    labels: dict[str, str | None]
    resourceVersion: str  # the precondition: 409 Conflict when the Node changed since


class NodeSpecPatch(TypedDict, total=False):
    taints: list[RawTaint] | None  # the list is replaced whole
    unschedulable: bool | None


class NodePatch(TypedDict, total=False):
    """A merge patch of a Node's metadata and spec ({}: nothing to write)."""

    metadata: PatchMeta
    spec: NodeSpecPatch


class NodeStatusPatch(TypedDict, total=False):
    """A merge patch of a Node's status subresource (a list in it, such as the conditions, is replaced whole)."""

    metadata: PatchMeta
    status: RawNodeStatus


# --- accessors: the one place that walks an object's metadata ------------------------------------------


def meta(obj: RawObject) -> RawMeta:
    return obj.get("metadata") or {}


def name(obj: RawObject) -> str:
    return meta(obj).get("name") or ""


def namespace(obj: RawObject) -> str:
    """"" for cluster-scoped objects (Nodes)."""
    return meta(obj).get("namespace") or ""


def uid(obj: RawObject) -> str:
    return meta(obj).get("uid") or ""


def resource_version(obj: RawObject) -> str | None:
    return meta(obj).get("resourceVersion")


def labels(obj: RawObject) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: RawObject) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def owners(obj: RawObject) -> list[RawOwnerReference]:
    return meta(obj).get("ownerReferences") or []


def terminating(obj: RawObject) -> bool:
    """Deletion requested: the object is still there until its finalizers (a pod: its containers) are done."""
    return bool(meta(obj).get("deletionTimestamp"))


def taints(node: RawNode) -> list[RawTaint]:
    return (node.get("spec") or {}).get("taints") or []


def unschedulable(node: RawNode) -> bool:
    """Cordoned."""
    return bool((node.get("spec") or {}).get("unschedulable"))


def node_conditions(node: RawNode) -> list[RawCondition]:
    return (node.get("status") or {}).get("conditions") or []


def pod_status(pod: RawPod) -> RawPodStatus:
    return pod.get("status") or {}


def phase(pod: RawPod) -> str | None:
    return pod_status(pod).get("phase")


def containers(pod: RawPod) -> list[RawContainer]:
    return (pod.get("spec") or {}).get("containers") or []


def node_name(pod: RawPod) -> str:
    """The node the pod is bound to ("" before it is scheduled)."""
    return (pod.get("spec") or {}).get("nodeName") or ""
