"""A tiny Kubernetes API server over real HTTP: nodes, GET and strategic-merge PATCH of status.

Enough for the node agent's one call; it merges status.conditions by `type` as the real API server
does for a strategic merge patch, and records every request for the tests to inspect.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeKubeAPI:
    def __init__(self, token: str = "") -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = []
        self.token = token
        self.fail_next = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                api.requests.append((method, self.path, body, dict(self.headers)))
                if api.token and self.headers.get("Authorization") != f"Bearer {api.token}":
                    return self._send(401, {"kind": "Status", "reason": "Unauthorized"})
                if api.fail_next:
                    api.fail_next -= 1
                    return self._send(500, {"kind": "Status", "reason": "InternalError"})
                parts = self.path.strip("/").split("/")
                if parts[:3] != ["api", "v1", "nodes"] or len(parts) < 4 or parts[3] not in api.nodes:
                    return self._send(404, {"kind": "Status", "reason": "NotFound"})
                node = api.nodes[parts[3]]
                if method == "GET" and len(parts) == 4:
                    return self._send(200, node)
                if method == "PATCH" and parts[4:] == ["status"]:
                    if self.headers.get("Content-Type") != "application/strategic-merge-patch+json":
                        return self._send(415, {"kind": "Status", "reason": "UnsupportedMediaType"})
                    conditions = node.setdefault("status", {}).setdefault("conditions", [])
                    by_type = {c["type"]: c for c in conditions}
                    for c in (body or {}).get("status", {}).get("conditions", []):
                        by_type[c["type"]] = {**by_type.get(c["type"], {}), **c}
                    node["status"]["conditions"] = list(by_type.values())
                    return self._send(200, node)
                return self._send(405, {"kind": "Status", "reason": "MethodNotAllowed"})

            def do_GET(self) -> None:
                self._route("GET")

            def do_PATCH(self) -> None:
                self._route("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_node(self, name: str, conditions: list[dict[str, str]] | None = None) -> None:
        self.nodes[name] = {"kind": "Node", "metadata": {"name": name},
                            "status": {"conditions": list(conditions or [])}}

    def conditions(self, name: str) -> dict[str, dict[str, str]]:
        return {c["type"]: c for c in self.nodes[name]["status"]["conditions"]}

    def patches(self) -> list[dict[str, Any] | None]:
        return [body for method, _, body, _ in self.requests if method == "PATCH"]

    def __enter__(self) -> FakeKubeAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
