"""The node agent's HTTP to the API server: one request at a time, with the pod's service-account token.

The node agent needs a few verbs on one object, so it speaks to the API server directly instead of loading the
kubernetes client (~25 MB RSS and a second of start-up). Both of its users are here: the condition writer
(gpuhealth/exporter/node_status.py) and the watch of its own Node (gpuhealth/exporter/node_watch.py).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from http.client import HTTPResponse
from typing import Any

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubeError(RuntimeError):
    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code  # the HTTP status, when the API server answered with one


def in_cluster_api() -> str:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


class KubeHttp:
    def __init__(self, api: str, sa_dir: str = SA_DIR, timeout: float = 10.0) -> None:
        self.api = api.rstrip("/")
        self.sa_dir = sa_dir
        self.timeout = timeout
        self._ssl: ssl.SSLContext | None = None
        if self.api.startswith("https://"):
            ca = os.path.join(sa_dir, "ca.crt")
            self._ssl = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)

    def open(self, method: str, path: str, body: dict[str, Any] | None = None,
             timeout: float | None = None) -> HTTPResponse:
        """The answer of a request that succeeded, to read (a watch: line by line) and close; KubeError otherwise.
        timeout: seconds any one read may wait (default: this client's)."""
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
            resp: HTTPResponse = urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl)
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise KubeError(f"{method} {path}: HTTP {exc.code}: {detail}", exc.code) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise KubeError(f"{method} {path}: {exc}") from exc
        return resp

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request and its JSON answer."""
        resp = self.open(method, path, body)
        try:
            with resp:
                return dict(json.loads(resp.read() or b"{}"))
        except (OSError, ValueError) as exc:
            raise KubeError(f"{method} {path}: {exc}") from exc
