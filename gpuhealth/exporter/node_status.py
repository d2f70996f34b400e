"""Writes gpuhealth's conditions onto this node's status, with one HTTP call, only when they change.

Plain HTTP with the pod's service-account token (gpuhealth/exporter/kube_http.py), not the kubernetes client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from gpuhealth.exporter.conditions import Condition
from gpuhealth.exporter.kube_http import SA_DIR as SA_DIR
from gpuhealth.exporter.kube_http import KubeError as KubeError
from gpuhealth.exporter.kube_http import KubeHttp
from gpuhealth.exporter.kube_http import in_cluster_api as in_cluster_api

log = logging.getLogger(__name__)

CONDITION_PREFIX = "Gpuhealth"
RELOAD_SECONDS = 600.0


class NodeConditionWriter:
    def __init__(self, api: str, node: str, sa_dir: str = SA_DIR, timeout: float = 10.0,
                 clock: Callable[[], float] = time.time,
                 read_node: Callable[[], Mapping[str, Any] | None] | None = None) -> None:
        """read_node: this Node as a watch keeps it (gpuhealth/exporter/node_watch.py), read instead of a GET; None
        while it knows none."""
        self.http = KubeHttp(api, sa_dir, timeout)
        self.clock = clock  # wall-clock seconds, for the conditions' heartbeat and transition times
        self.node = node
        self._read_node = read_node
        self._written: dict[str, dict[str, str]] | None = None  # our conditions as the API has them
        self._loaded_at = 0.0

    def _load(self) -> dict[str, dict[str, str]]:
        node = self._read_node() if self._read_node is not None else None
        if node is None:
            node = self.http.request("GET", f"/api/v1/nodes/{self.node}")
        conditions = node.get("status", {}).get("conditions") or []
        return {c["type"]: c for c in conditions if str(c.get("type", "")).startswith(CONDITION_PREFIX)}

    def sync(self, conditions: list[Condition]) -> bool:
        """Patch the node if any of our conditions changed; True if a write was made."""
        if self._written is None or time.monotonic() - self._loaded_at > RELOAD_SECONDS:
            self._written = self._load()  # read again now and then: someone may have changed or recreated the Node
            self._loaded_at = time.monotonic()
        now = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        changed = False
        patch: list[dict[str, str]] = []
        for c in conditions:
            old = self._written.get(c.type)
            same_status = old is not None and old.get("status") == c.status
            if not (same_status and old and old.get("reason") == c.reason and old.get("message") == c.message):
                changed = True
            patch.append({
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": old.get("lastTransitionTime", now) if same_status and old else now,
            })
        if not changed:
            return False
        try:
            self.http.request("PATCH", f"/api/v1/nodes/{self.node}/status", {"status": {"conditions": patch}})
        except KubeError:
            self._written = None  # unsure what the API server holds now: read it again next time
            raise
        before, self._written = self._written, {p["type"]: p for p in patch}
        for c in conditions:
            old = before.get(c.type)
            if old is None or (old.get("status"), old.get("reason"), old.get("message")) != (c.status, c.reason,
                                                                                           c.message):
                log.info("node %s condition %s=%s (%s): %s", self.node, c.type, c.status, c.reason, c.message)
        return True
