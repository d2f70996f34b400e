"""Writes gpuhealth's conditions onto this node's status, with one HTTP call, only when they change.

The node agent needs one verb on one object, so it speaks to the API server directly with the pod's
service-account token instead of loading the kubernetes client (~25 MB RSS and a second of start-up).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from exporter.conditions import Condition

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CONDITION_PREFIX = "Gpuhealth"
RELOAD_SECONDS = 600.0


class KubeError(RuntimeError):
    pass


def in_cluster_api() -> str:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


class NodeConditionWriter:
    def __init__(self, api: str, node: str, sa_dir: str = SA_DIR, timeout: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api.rstrip("/")
        self.clock = clock  # wall-clock seconds, for the conditions' heartbeat and transition times
        self.node = node
        self.sa_dir = sa_dir
        self.timeout = timeout
        self._written: dict[str, dict[str, str]] | None = None  # our conditions as the API has them
        self._loaded_at = 0.0
        self._ssl: ssl.SSLContext | None = None
        if self.api.startswith("https://"):
            ca = os.path.join(sa_dir, "ca.crt")
            self._ssl = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        token_file = os.path.join(self.sa_dir, "token")
        if os.path.exists(token_file):  # re-read: projected tokens rotate
            with open(token_file) as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/strategic-merge-patch+json"
        req = urllib.request.Request(f"{self.api}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                return dict(json.loads(resp.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise KubeError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise KubeError(f"{method} {path}: {exc}") from exc

    def node_labels(self) -> dict[str, str]:
        node = self._request("GET", f"/api/v1/nodes/{self.node}")
        return {str(k): str(v) for k, v in (node.get("metadata", {}).get("labels") or {}).items()}

    def node_annotations(self) -> dict[str, str]:
        """This node's annotations, read often (the GPU reset marker, exporter/gpu_reset.py): resourceVersion=0
        lets the API server answer from its watch cache, as it does the kubelet's reads of its Node."""
        node = self._request("GET", f"/api/v1/nodes/{self.node}?resourceVersion=0")
        metadata = node.get("metadata")
        if not isinstance(metadata, dict) or metadata.get("name") != self.node:
            raise KubeError(f"GET /api/v1/nodes/{self.node}: not this Node")
        annotations = metadata.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise KubeError(f"GET /api/v1/nodes/{self.node}: metadata.annotations is not an object")
        return {str(k): str(v) for k, v in annotations.items()}

    def _load(self) -> dict[str, dict[str, str]]:
        node = self._request("GET", f"/api/v1/nodes/{self.node}")
        conditions = node.get("status", {}).get("conditions") or []
        return {c["type"]: c for c in conditions if str(c.get("type", "")).startswith(CONDITION_PREFIX)}

    def sync(self, conditions: list[Condition]) -> bool:
        """Patch the node if any of our conditions changed; True if a write was made."""
        if self._written is None or time.monotonic() - self._loaded_at > RELOAD_SECONDS:
            self._written = self._load()  # re-read now and then: someone may have changed or recreated the Node
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
            self._request("PATCH", f"/api/v1/nodes/{self.node}/status", {"status": {"conditions": patch}})
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
