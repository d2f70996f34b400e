"""What a failed pod's node says, for the classifier: the Node (its gpuhealth state and last-episode annotations, its
GPU count and pool), gpuhealth's Events on it, and which of its GPUs the pod's ResourceClaims held (DRA). Read once
per pass (a new NodeEvidence each pass): the pods of one node share the reads.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.pager import list_pages
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode, RawPod
from gpuhealth.remediator.decide.devices import ClaimIndex, NodeDevices, claim_index, devices_by_node
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import GPUS_ANNOTATION, NodeSignal, pod_gpus
from gpuhealth.remediator.workloads.evidence import signals_from_events, signals_from_node

log = logging.getLogger("gpuhealth.remediator")

NODE_EVENTS_NAMESPACE = "default"  # where Kube.event puts Events about Nodes


class NodeEvidence:
    def __init__(self, kube: Kube, policy: Policy) -> None:
        self.kube, self.policy = kube, policy
        self._nodes: dict[str, tuple[RawNode | None, list[NodeSignal]]] = {}  # this pass's node reads
        self._dra: tuple[dict[str, NodeDevices], ClaimIndex] | None = None  # this pass's DRA reads

    def of(self, name: str) -> tuple[RawNode | None, list[NodeSignal]]:
        """The Node (None: none of that name, or no node) and the gpuhealth signals on it."""
        if name not in self._nodes:
            found = self._node(name)
            self._nodes[name] = (found, (signals_from_node(found) if found else []) + self._node_events(name))
        return self._nodes[name]

    def pod_gpus(self, pod: RawPod, name: str, node: RawNode | None) -> frozenset[str] | None:
        """The GPUs the pod had (classify.pod_gpus; None: all of its node's): its gpuhealth.io/gpus annotation,
        else what its ResourceClaims were allocated, else its GPU request against the node's capacity."""
        capacity = ((node or {}).get("status") or {}).get("capacity") or {}
        node_gpus = int(capacity["nvidia.com/gpu"]) if str(capacity.get("nvidia.com/gpu", "")).isdigit() else None
        gpus = None if GPUS_ANNOTATION in api_objects.annotations(pod) else self._claimed_gpus(pod, name)
        return pod_gpus(pod, node_gpus) if gpus is None else gpus

    def pool(self, node: RawNode | None) -> str:
        default = self.policy.pools.default
        return api_objects.labels(node).get(self.policy.pools.label, default) if node is not None else default

    def _claimed_gpus(self, pod: RawPod, node: str) -> frozenset[str] | None:
        """What the pod's ResourceClaims were allocated on its node (DRA, status.reservedFor): each GPU's PCI bus id
        and UUID, and each MIG device's UUID with its GPU's. So an Xid on one MIG instance is the failure of the
        pods on that instance only. None: not known (DRA off, no claim reserved for the pod names a device of the
        node, e.g. the claim controller already released it, or the objects could not be read)."""
        if not self.policy.dra.enabled or not node:
            return None
        if self._dra is None:
            try:
                self._dra = (devices_by_node(self.kube.list_resource_slices(), self.policy.dra.driver),
                             claim_index(self.kube.list_resource_claims()))
            except Exception as exc:  # the pods' GPU requests still say what they can
                log.warning("listing ResourceSlices and ResourceClaims for the workload watcher: %s", exc)
                self._dra = ({}, ClaimIndex())
        slices, claims = self._dra
        mine = slices.get(node)
        if mine is None:
            return None
        meta = api_objects.meta(pod)
        holder = f"{meta.get('namespace')}/{meta.get('name')}"
        out: set[str] = set()
        for d in mine.devices:
            if holder not in claims.pods.get((mine.driver, mine.pool, d.name), ()):
                continue
            gpu = d if d.kind == "gpu" else mine.parent(d)
            out |= {d.uuid} | ({gpu.uuid, gpu.pci_bus_id or ""} if gpu is not None else set())
        return frozenset(out - {""}) or None

    def _node(self, name: str) -> RawNode | None:
        if not name:
            return None
        try:
            return self.kube.get_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _node_events(self, name: str) -> list[NodeSignal]:
        if not name:
            return []
        try:
            events, _ = list_pages(self.kube.core.list_namespaced_event, self.kube.page_size,
                                   namespace=NODE_EVENTS_NAMESPACE,
                                   field_selector=f"involvedObject.kind=Node,involvedObject.name={name}",
                                   _request_timeout=self.kube.timeout)
            return signals_from_events(events)
        except Exception as exc:  # the annotations still carry the alerts
            log.warning("listing gpuhealth Events of node %s: %s", name, exc)
            return []
