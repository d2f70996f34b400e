"""The remediator's one Kubernetes client: Nodes (state, holds, conditions), pods (evictions), Jobs, Events.

Failures come out typed (clients/errors.py: Conflict, NotFound, Forbidden, Rejected, ServerError, NoAnswer).
The patch bodies a decision writes are in decide/node_patches.py; nothing else writes Nodes.

Every write to a Node carries the resourceVersion it was computed from, so a concurrent change (a
person, another replica) makes it fail with 409 instead of silently overwriting; the next pass
re-reads and decides again. Events go to the involved object's namespace ("default" for Nodes, which
are cluster-scoped), as the API server requires.

Events are the audit trail: one the API does not take is kept and sent later (clients/event_outbox.py).
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

from gpuhealth.remediator.clients.dra_api import DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_SLICES, DraApi
from gpuhealth.remediator.clients.dra_api import GROUP as DRA_GROUP
from gpuhealth.remediator.clients.errors import Conflict, NotFound, api_call
from gpuhealth.remediator.clients.event_outbox import EventOutbox
from gpuhealth.remediator.clients.fleet_cache import FleetCache, NodeCache, slim_node
from gpuhealth.remediator.clients.pager import PAGE_SIZE, list_pages
from gpuhealth.remediator.clients.watch_cache import newer_rv
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import NodePatch, NodeStatusPatch, RawJob, RawNode, RawObject, RawPod
from gpuhealth.remediator.decide.dra_objects import RawDeviceTaintRule, RawResourceClaim, RawResourceSlice
from gpuhealth.remediator.decide.node_patches import state_body
from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION, STATE_ANNOTATION, NodeState, fmt_time

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


def read_or_none(read: Callable[..., Any], *args: Any, timeout: float) -> Any:
    """`read` (a client's read_namespaced_*) as plain JSON (its caller types it); None when the object does not
    exist."""
    try:
        response: Any = read(*args, _preload_content=False, _request_timeout=timeout)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return json.loads(response.data)


class ApiHealth:
    """Whether the last of the remediator's calls reached the API (the recorder's and the loop's): /readyz."""

    def __init__(self) -> None:
        self.ok = True


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
        self.events = EventOutbox(self._create_event)  # Events the API could not take yet
        self.health = ApiHealth()
        self.dra_api = DraApi(api_client, request_timeout)  # which resource.k8s.io version serves what
        self.page_size = PAGE_SIZE  # objects a page of the fleet-wide lists (Nodes, DRA's objects)
        self.written_rv = ""  # the newest resourceVersion of a Node this client wrote (loop_process.py's wake)

    def start_cache(self, stop: threading.Event, pods: bool = True) -> FleetCache:
        """pods=False: the Nodes alone (the receiver's process, loop_process.py; the loop's process watches both)."""
        self.cache = FleetCache(self.core, self.timeout) if pods else NodeCache(self.core, self.timeout)
        self.cache.start(stop)
        return self.cache

    # --- reads, as plain JSON (the same shape `kubectl get -o json` gives the plan command) ----
    @staticmethod
    def _json(response: Any) -> Any:
        return json.loads(response.data)

    def list_nodes(self) -> list[RawNode]:
        """Every Node, in pages, each slimmed as its page arrives to what decisions and cleanup read (slim_node)."""
        with api_call():
            items, _ = list_pages(self.core.list_node, self.page_size, slim_node, _request_timeout=self.timeout)
        return items

    def get_node(self, name: str) -> RawNode:
        with api_call():
            node: RawNode = self._json(self.core.read_node(name, _preload_content=False,
                                                                  _request_timeout=self.timeout))
        return node

    def pods_on(self, node: str) -> list[RawPod]:
        with api_call():
            items, _ = list_pages(self.core.list_pod_for_all_namespaces, self.page_size,
                                  field_selector=f"spec.nodeName={node}", _request_timeout=self.timeout)
        return items

    # --- DRA: the GPUs drivers publish and the claims on them (GPU scope) ---------------------
    def list_resource_slices(self) -> list[RawResourceSlice]:
        return self._resource_items(RESOURCE_SLICES)

    def list_resource_claims(self) -> list[RawResourceClaim]:
        return self._resource_items(RESOURCE_CLAIMS)

    def _resource_items(self, resource: str) -> list[Any]:
        """Every object of a resource.k8s.io resource, cluster-wide, as plain JSON: in the version the cluster serves
        it in (clients/dra_api.py; NotFound when none does), in pages of `page_size` (clients/pager.py)."""
        version = self.dra_api.version(resource)
        if version is None:
            raise NotFound(404, f"no {DRA_GROUP} version is served with {resource}")
        with api_call():
            items, _ = list_pages(self.custom.list_cluster_custom_object, self.page_size, group=DRA_GROUP,
                                  version=version, plural=resource, _request_timeout=self.timeout)
        return items

    # --- DRA device taints (clients/device_taints.py chooses the version and the rules) --------
    def create_device_taint_rule(self, version: str, body: RawDeviceTaintRule) -> bool:
        """True if created, False if one of that name exists (rule names are deterministic: idempotent)."""
        try:
            with api_call():
                self.custom.create_cluster_custom_object(DRA_GROUP, version, DEVICE_TAINT_RULES, {**body},
                                                         _request_timeout=self.timeout)
        except Conflict:
            return False
        return True

    def list_device_taint_rules(self, version: str, labels: dict[str, str]) -> list[RawDeviceTaintRule]:
        with api_call():
            items, _ = list_pages(self.custom.list_cluster_custom_object, self.page_size, group=DRA_GROUP,
                                  version=version, plural=DEVICE_TAINT_RULES,
                                  label_selector=",".join(f"{k}={v}" for k, v in labels.items()),
                                  _request_timeout=self.timeout)
        return items

    def delete_device_taint_rule(self, version: str, name: str) -> None:
        """Gone already is what was wanted."""
        try:
            with api_call():
                self.custom.delete_cluster_custom_object(DRA_GROUP, version, DEVICE_TAINT_RULES, name,
                                                         _request_timeout=self.timeout)
        except NotFound:
            pass

    def cached_node(self, name: str) -> RawNode | None:
        """The watch cache's copy of the Node (None: no cache, or not in it): cheap, maybe stale (a write with
        its resourceVersion then conflicts, and the writer reads it again)."""
        return self.cache.nodes.get(name) if self.cache is not None else None

    def recorded_overlay(self) -> dict[str, NodeState] | None:
        """States written that the cluster does not show (a dry run's); None: the cluster is the record."""
        return None

    @property
    def dry_run(self) -> bool:
        return False

    # --- pods and Jobs (the drain and the node-action Jobs) ---------------------------------
    def evict(self, namespace: str, name: str, force: bool = False) -> None:
        """Through the Eviction API, so PodDisruptionBudgets are respected (429 while one allows no disruption);
        forced (policy drain.on_timeout: force), a plain delete."""
        with api_call():
            if force:
                self.core.delete_namespaced_pod(name, namespace, _request_timeout=self.timeout)
                return
            body = client.V1Eviction.from_dict({"apiVersion": "policy/v1", "kind": "Eviction",
                                                "metadata": {"name": name, "namespace": namespace}})
            assert body is not None
            self.core.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=self.timeout)

    def create_job(self, manifest: dict[str, Any]) -> bool:
        """True if created, False if it already existed (Job names are deterministic: idempotent)."""
        job = client.V1Job.from_dict(manifest)
        assert job is not None
        try:
            with api_call():
                self.batch.create_namespaced_job(manifest["metadata"]["namespace"], job,
                                                 _request_timeout=self.timeout)
        except Conflict:
            return False
        return True

    def get_job(self, namespace: str, name: str) -> RawJob | None:
        """None when there is no such Job."""
        try:
            job: RawJob = self._json(self.batch.read_namespaced_job(name, namespace, _preload_content=False,
                                                                    _request_timeout=self.timeout))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return job

    def list_jobs(self, namespace: str, label_selector: str) -> list[RawJob]:
        with api_call():
            items, _ = list_pages(self.batch.list_namespaced_job, self.page_size, namespace=namespace,
                                  label_selector=label_selector, _request_timeout=self.timeout)
        return items

    # --- the evidence's ConfigMaps and its pod's log (gpuhealth/remediator/act/evidence_job.py) -------------------
    def pod_log(self, namespace: str, name: str, limit_bytes: int) -> str:
        """The pod's log, at most `limit_bytes` of it (the kubelet cuts it), as text."""
        with api_call():
            response: Any = self.core.read_namespaced_pod_log(name, namespace, limit_bytes=limit_bytes,
                                                               _preload_content=False, _request_timeout=self.timeout)
        return bytes(response.data[:limit_bytes]).decode("utf-8", "replace")

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> bool:
        """True if created, False if it already existed (its name is deterministic: idempotent)."""
        try:
            with api_call():
                self.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
                    api_version="v1", kind="ConfigMap", metadata=body["metadata"], data=body["data"]),
                                                       _request_timeout=self.timeout)
        except Conflict:
            return False
        return True

    def list_configmaps(self, namespace: str, label_selector: str) -> list[RawObject]:
        with api_call():
            items, _ = list_pages(self.core.list_namespaced_config_map, self.page_size, namespace=namespace,
                                  label_selector=label_selector, _request_timeout=self.timeout)
        return items

    def delete_configmap(self, namespace: str, name: str) -> None:
        """Deleted, or already gone."""
        try:
            with api_call():
                self.core.delete_namespaced_config_map(name, namespace, _request_timeout=self.timeout)
        except NotFound:
            return

    # --- node writes -----------------------------------------------------------------------
    def patch_node(self, name: str, body: NodePatch, resource_version: str | None) -> RawNode:
        if resource_version is not None:
            body = {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": resource_version}}
        with api_call():
            node: RawNode = self._json(self.core.patch_node(
                name, {**body}, _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=self.timeout))
        if self.cache is not None:  # read our own writes before the watch brings them
            self.cache.nodes.apply(node)
        self.written_rv = newer_rv(self.written_rv, api_objects.resource_version(node) or "")
        return node

    def patch_node_status(self, name: str, body: NodeStatusPatch, resource_version: str) -> RawNode:
        """A merge patch of the Node's status subresource (a list in it, such as the conditions, is replaced whole),
        guarded by the resourceVersion it was computed from."""
        body = {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": resource_version}}
        with api_call():
            node: RawNode = self._json(self.core.patch_node_status(
                name, {**body}, _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=self.timeout))
        if self.cache is not None:
            self.cache.nodes.apply(node)
        return node

    def write_state(self, name: str, state: NodeState, resource_version: str | None) -> RawNode:
        """The state annotation alone, guarded by the resourceVersion it was computed from (Conflict if the
        Node changed since)."""
        return self.patch_node(name, state_body(state), resource_version)

    def set_hold(self, name: str, reason: str, by: str, now: datetime) -> RawNode:
        """Unconditional (no resourceVersion): a person's word wins over whatever a pass is doing."""
        value = json.dumps({"reason": reason, "by": by, "at": fmt_time(now)}, sort_keys=True)
        return self.patch_node(name, {"metadata": {"annotations": {HOLD_ANNOTATION: value}}}, None)

    def clear_hold(self, name: str, state: NodeState | None, resource_version: str | None) -> RawNode:
        annotations: dict[str, str | None] = {HOLD_ANNOTATION: None}
        if state is not None:
            annotations[STATE_ANNOTATION] = state.to_json()
        return self.patch_node(name, {"metadata": {"annotations": annotations}}, resource_version)

    def set_condition(self, name: str, ctype: str, status: str, reason: str, message: str, now: datetime) -> None:
        cond = {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": fmt_time(now).split(".")[0] + "Z",
                "lastHeartbeatTime": fmt_time(now).split(".")[0] + "Z"}
        with api_call():
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
        self.events.send(event_namespace, body, f"{reason} on {kind} {node}")

    def _create_event(self, namespace: str, body: client.CoreV1Event) -> None:
        self.core.create_namespaced_event(namespace, body, _request_timeout=self.timeout)
