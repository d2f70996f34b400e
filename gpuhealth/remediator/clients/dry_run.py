"""A Kubernetes client that reads the cluster and writes nothing: the dry run's.

Every write is kept as a `WouldDo` (the newest `keep` of them, and a log line), so a dry run shows what a live
replica would have done. The states the recorder writes are kept as an overlay and read back, as the cluster
would show them, by the same code that reads a live replica's writes: each overlaid Node carries a
resourceVersion of its own, so two recorders writing one Node at once conflict as they would on the API server.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client

from gpuhealth.remediator.clients.errors import Conflict
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import NodePatch, NodeStatusPatch, RawNode
from gpuhealth.remediator.decide.dra_objects import RawDeviceTaintRule
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, NodeState, time_text

log = logging.getLogger("gpuhealth.remediator")


@dataclass(frozen=True)
class WouldDo:
    """A write a dry run did not make: what (patch_node, patch_node_status, write_state, event, evict, create_job,
    set_condition, ...), on which object, and its body or fields."""

    what: str
    target: str
    detail: dict[str, Any] = field(default_factory=dict)


class DryRunKube(Kube):
    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0, keep: int = 1000) -> None:
        super().__init__(api_client, request_timeout)
        self.would: deque[WouldDo] = deque(maxlen=keep)
        self._overlay: dict[str, tuple[NodeState, int]] = {}  # node -> (state, our resourceVersion)
        self._lock = threading.Lock()

    @property
    def dry_run(self) -> bool:
        return True

    def recorded_overlay(self) -> dict[str, NodeState]:
        with self._lock:
            return {name: state for name, (state, _) in self._overlay.items()}

    def _record(self, what: str, target: str, **detail: Any) -> None:
        self.would.append(WouldDo(what, target, detail))
        log.debug("dry run: would %s %s", what, target)

    def _overlaid(self, node: RawNode | None) -> RawNode | None:
        name = api_objects.name(node) if node is not None else None
        with self._lock:
            kept = self._overlay.get(name) if name else None
        if node is None or kept is None:
            return node
        node = copy.deepcopy(node)
        meta = node.setdefault("metadata", {})
        meta.setdefault("annotations", {})[STATE_ANNOTATION] = kept[0].to_json()
        meta["resourceVersion"] = f"dry-run-{kept[1]}"
        return node

    # --- reads: the cluster, with the states a dry run recorded -------------------------------
    def get_node(self, name: str) -> RawNode:
        node = self._overlaid(super().get_node(name))
        assert node is not None
        return node

    def cached_node(self, name: str) -> RawNode | None:
        return self._overlaid(super().cached_node(name))

    # --- writes: kept, not made -------------------------------------------------------------
    def write_state(self, name: str, state: NodeState, resource_version: str | None) -> RawNode:
        with self._lock:
            kept = self._overlay.get(name)
            if kept is not None and resource_version is not None and resource_version != f"dry-run-{kept[1]}":
                raise Conflict(409, f"dry run: node {name} was written since resourceVersion {resource_version}")
            version = (kept[1] if kept else 0) + 1
            self._overlay[name] = (state, version)
        self._record("write_state", name, episode=time_text(state.episode), rung=state.rung)
        return {"metadata": {"name": name, "resourceVersion": f"dry-run-{version}",
                             "annotations": {STATE_ANNOTATION: state.to_json()}}}

    def patch_node(self, name: str, body: NodePatch, resource_version: str | None) -> RawNode:
        self._record("patch_node", name, body=body, resource_version=resource_version)
        node = self.cached_node(name) or {"metadata": {"name": name}}
        return node

    def patch_node_status(self, name: str, body: NodeStatusPatch, resource_version: str) -> RawNode:
        self._record("patch_node_status", name, body=body, resource_version=resource_version)
        return self.cached_node(name) or {"metadata": {"name": name}}

    def set_condition(self, name: str, ctype: str, status: str, reason: str, message: str, now: datetime) -> None:
        self._record("set_condition", name, type=ctype, status=status, reason=reason, message=message)

    def event(self, node: str, reason: str, message: str, now: datetime, warning: bool = False,
              kind: str = "Node", namespace: str = "", api_version: str = "v1") -> None:
        self._record("event", f"{kind} {namespace + '/' if namespace else ''}{node}", reason=reason,
                     message=message, warning=warning)

    def evict(self, namespace: str, name: str, force: bool = False) -> None:
        self._record("delete_pod" if force else "evict", f"{namespace}/{name}")

    def create_device_taint_rule(self, version: str, body: RawDeviceTaintRule) -> bool:
        self._record("create_device_taint_rule", api_objects.name(body), spec=body.get("spec"))
        return True

    def delete_device_taint_rule(self, version: str, name: str) -> None:
        self._record("delete_device_taint_rule", name)

    def create_job(self, manifest: dict[str, Any]) -> bool:
        meta = manifest.get("metadata") or {}
        self._record("create_job", f"{meta.get('namespace')}/{meta.get('name')}")
        return True

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> bool:
        self._record("create_configmap", f"{namespace}/{(body.get('metadata') or {}).get('name')}")
        return True

    def delete_configmap(self, namespace: str, name: str) -> None:
        self._record("delete_configmap", f"{namespace}/{name}")
