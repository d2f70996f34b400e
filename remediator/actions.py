"""Kubernetes side effects on Nodes: state, cordon, uncordon, holds, Events. Nothing else writes Nodes.

Every write to a Node carries the resourceVersion it was computed from, so a concurrent change (a
person, another replica) makes it fail with 409 instead of silently overwriting; the next pass
re-reads and decides again. Events go to the involved object's namespace ("default" for Nodes, which
are cluster-scoped), as the API server requires.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediator.fleet_cache import FleetCache
from remediator.nodestate import (
    HOLD_ANNOTATION,
    LAST_EPISODE_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_EFFECT,
    TAINT_KEY,
    NodeState,
    fmt_time,
)

log = logging.getLogger("gpuhealth.remediator")

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "gpuhealth-remediator"


def api_client_from(kubeconfig: str | None) -> client.ApiClient:
    """In a pod: the service account; else the given kubeconfig, or the default one."""
    from kubernetes import config

    if kubeconfig:
        api: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return api
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def read_or_none(read: Callable[..., Any], *args: Any, timeout: float) -> dict[str, Any] | None:
    """`read` (a client's read_namespaced_*) as plain JSON; None when the object does not exist."""
    try:
        response: Any = read(*args, _preload_content=False, _request_timeout=timeout)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    obj: dict[str, Any] = json.loads(response.data)
    return obj


class Kube:
    """The handful of API calls the remediator makes, through the official client."""

    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.timeout = request_timeout
        self.cache: FleetCache | None = None  # the watch cache of Nodes and Pods, once started

    def start_cache(self, stop: threading.Event) -> FleetCache:
        self.cache = FleetCache(self.core, self.timeout)
        self.cache.start(stop)
        return self.cache

    # --- reads, as plain JSON (the same shape `kubectl get -o json` gives the plan command) ----
    @staticmethod
    def _json(response: Any) -> Any:
        return json.loads(response.data)

    def list_nodes(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._json(
            self.core.list_node(_preload_content=False, _request_timeout=self.timeout))["items"]
        return items

    def get_node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self._json(self.core.read_node(name, _preload_content=False,
                                                              _request_timeout=self.timeout))
        return node

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._json(self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False, _request_timeout=self.timeout))["items"]
        return items

    # --- node writes -----------------------------------------------------------------------
    def patch_node(self, name: str, body: dict[str, Any], resource_version: str | None) -> dict[str, Any]:
        if resource_version is not None:
            body = {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": resource_version}}
        node: dict[str, Any] = self._json(self.core.patch_node(
            name, body, _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=self.timeout))
        if self.cache is not None:  # read our own writes before the watch brings them
            self.cache.nodes.apply(node)
        return node

    def write_state(self, name: str, state: NodeState, resource_version: str | None) -> dict[str, Any]:
        return self.patch_node(name, state_body(state), resource_version)

    def set_hold(self, name: str, reason: str, by: str, now: datetime) -> dict[str, Any]:
        """Unconditional (no resourceVersion): a person's word wins over whatever a pass is doing."""
        value = json.dumps({"reason": reason, "by": by, "at": fmt_time(now)}, sort_keys=True)
        return self.patch_node(name, {"metadata": {"annotations": {HOLD_ANNOTATION: value}}}, None)

    def clear_hold(self, name: str, state: NodeState | None, resource_version: str | None) -> dict[str, Any]:
        annotations: dict[str, Any] = {HOLD_ANNOTATION: None}
        if state is not None:
            annotations[STATE_ANNOTATION] = state.to_json()
        return self.patch_node(name, {"metadata": {"annotations": annotations}}, resource_version)

    def set_condition(self, name: str, ctype: str, status: str, reason: str, message: str, now: datetime) -> None:
        cond = {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": fmt_time(now).split(".")[0] + "Z",
                "lastHeartbeatTime": fmt_time(now).split(".")[0] + "Z"}
        self.core.patch_node_status(name, {"status": {"conditions": [cond]}},
                                    _content_type="application/strategic-merge-patch+json",
                                    _preload_content=False, _request_timeout=self.timeout)

    # --- events ----------------------------------------------------------------------------
    def event(self, node: str, reason: str, message: str, now: datetime, warning: bool = False,
              kind: str = "Node", namespace: str = "", api_version: str = "v1") -> None:
        stamp = fmt_time(now).split(".")[0] + "Z"
        event_namespace = namespace or "default"  # cluster-scoped objects' Events live in "default"
        body = client.CoreV1Event.from_dict({
            "metadata": {"name": f"{node}.{secrets.token_hex(8)}", "namespace": event_namespace},
            "involvedObject": {"kind": kind, "name": node, "apiVersion": api_version,
                               **({"namespace": namespace} if namespace else {}),
                               **({"uid": f"{node}"} if kind == "Node" else {})},
            "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT})
        assert body is not None
        self.core.create_namespaced_event(event_namespace, body, _request_timeout=self.timeout)


def state_body(state: NodeState) -> dict[str, Any]:
    return {"metadata": {"annotations": {STATE_ANNOTATION: state.to_json()}}}


def cordon_body(node: dict[str, Any], state: NodeState) -> dict[str, Any]:
    """Our NoSchedule taint, unschedulable (when the state says we set it), and the state, in one patch."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    taints.append({"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT})
    body: dict[str, Any] = {**state_body(state), "spec": {"taints": taints}}
    if state.cordoned:
        body["spec"]["unschedulable"] = True
    return body


def uncordon_body(node: dict[str, Any], before: NodeState, after: NodeState, now: datetime) -> dict[str, Any]:
    """Undo only what we did: our taint, and unschedulable only if we set it; keep a summary."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    summary = {"episode": before.episode, "ended": fmt_time(now), "rung": before.rung,
               "rung_status": before.rung_status,
               "alerts": sorted({a.name for a in before.alerts.values() if a.name})}
    body: dict[str, Any] = {
        "metadata": {"annotations": {STATE_ANNOTATION: after.to_json(),
                                     LAST_EPISODE_ANNOTATION: json.dumps(summary, sort_keys=True)}},
        "spec": {"taints": taints or None}}
    if before.cordoned:
        body["spec"]["unschedulable"] = None
    return body
