"""The fake API server's HTTP side: one request through authentication, RBAC and injected faults to the cluster's
routes, or a watch streamed as chunked newline-delimited JSON."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.apiserver.objects import TEXT_BODY, Obj, api_status
from tests.fakes.apiserver.rbac import request as rbac_request
from tests.fakes.apiserver.rbac import watching

if TYPE_CHECKING:
    from tests.fakes.apiserver.admission import Identity
    from tests.fakes.apiserver.cluster import FakeCluster


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a watch the test stopped) is normal here, not an error to print."""

    daemon_threads = True
    cluster: FakeCluster  # what its handlers serve
    # Niceness of each request's thread (Linux: a thread's own). A benchmark raises it to stand for an API server on
    # other machines than the client it measures, which this one shares the cores with.
    thread_niceness = 0

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        if self.thread_niceness:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.thread_niceness)
        super().process_request_thread(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _verb(method: str, path: str, query: dict[str, str]) -> tuple[str, str]:
    """(verb, resource) as the API server's request metrics name them: RBAC's attributes of the request."""
    r = rbac_request(method, path, query)
    if r is None:
        return method.lower(), path  # a non-resource path (discovery)
    return r.verb, f"{r.resource}/{r.subresource}" if r.subresource else r.resource


@contextmanager
def _in_flight(cluster: FakeCluster) -> Iterator[None]:
    """Counts the requests served at once (cluster.in_flight, and its peak)."""
    with cluster.lock:
        cluster.in_flight += 1
        cluster.peak_in_flight = max(cluster.peak_in_flight, cluster.in_flight)
    try:
        yield
    finally:
        with cluster.lock:
            cluster.in_flight -= 1


class ApiHandler(BaseHTTPRequestHandler):
    """One HTTP request to the fake API server: authentication, RBAC, injected faults, then the cluster's route or
    a watch stream. The cluster it serves is its server's (`QuietServer.cluster`)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: Obj, data: bytes | None = None) -> None:
        """`body` as JSON (or its text), unless `data` already is it."""
        text = body.get(TEXT_BODY) if isinstance(body, dict) else None
        if data is None:
            data = text.encode() if isinstance(text, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(text, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        cluster: FakeCluster = self.server.cluster  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with cluster.lock:
            cluster.requests.append((method, url.path))
            cluster.queries.append((method, url.path, query))
            cluster.calls[_verb(method, url.path, query)] += 1
            fault = cluster._take_fault(method, url.path)
        identity = cluster.authenticate(self.headers.get("Authorization"))
        if identity is None:
            return self._send(401, api_status(401, "Unauthorized"))
        if cluster.rbac is not None:
            attrs = rbac_request(method, url.path, query)
            if not cluster.rbac.allowed(identity, url.path, attrs):
                with cluster.lock:
                    cluster.forbidden.append((identity.username, method, url.path))
                return self._send(403, cluster.rbac.forbidden(identity, url.path, attrs))
        if fault and fault.get("delay"):
            time.sleep(fault["delay"])
        if method == "GET" and watching(query):  # a watch: the latency once, at its start
            if cluster.latency:
                time.sleep(cluster.latency)
            if not self._fault(fault):
                self._watch(url.path, query)
            return None
        with _in_flight(cluster):
            if cluster.latency:
                time.sleep(cluster.latency)
            if not self._fault(fault):
                self._answer(cluster, method, url.path, query, raw, identity)
        return None

    def _fault(self, fault: dict[str, Any] | None) -> bool:
        """An injected error status, or the client killed as it sends: done (True), or nothing injected (False)."""
        if fault and fault.get("status"):
            self._send(fault["status"], api_status(fault["status"], fault.get("reason", "Injected")))
            return True
        if fault and fault.get("crash"):  # crash_on: the client dies as it sends; nothing done, no answer
            fault["crash"]()
            self.close_connection = True
            return True
        return False

    def _answer(self, cluster: FakeCluster, method: str, path: str, query: dict[str, str], raw: bytes,
                identity: Identity) -> None:
        """A request that is not a watch: the route's answer."""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return self._send(400, api_status(400, "BadRequest", "body is not JSON"))
        with cluster.lock:
            try:
                if method == "GET" and "continue" in query:  # a later page of a paged list: its snapshot
                    code, out = cluster._next_page(query)
                else:
                    code, out = cluster._route(method, path, query, body,
                                               self.headers.get("Content-Type") or "", identity)
                    if method == "GET" and code == 200 and query.get("limit"):
                        out = cluster._first_page(out, query)
                if method == "GET" and code == 200 and isinstance(out.get("items"), list):
                    cluster.listed[_verb(method, path, query)] += len(out["items"])
                # A list holds the stored objects themselves (routes.py _list): written out while they are as listed
                data = None if TEXT_BODY in out else json.dumps(out).encode()
            except ValueError as exc:
                code, out, data = 400, api_status(400, "BadRequest", str(exc)), None
        self._send(code, out, data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, path: str, query: dict[str, str]) -> None:
        cluster: FakeCluster = self.server.cluster  # type: ignore[attr-defined]
        try:
            kind, namespace, initial, pos = cluster._watch_start(path, query)
        except LookupError as exc:
            return self._send(404, api_status(404, "NotFound", str(exc)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        fs, ls = query.get("fieldSelector"), query.get("labelSelector")
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        for obj in initial:
            self._chunk(b'{"type":"ADDED","object":' + obj.encode() + b"}\n")
        marked = pos or 0
        generation, silenced = cluster._dropped, cluster._silenced
        bookmarked = time.monotonic()
        while time.monotonic() < deadline and not cluster._closed:
            if cluster._dropped != generation:  # the connection dies mid-stream: no last chunk
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if cluster._silenced != silenced:  # a connection dead on the way (no FIN, no RST): nothing more
                while not cluster._closed and cluster._dropped == generation:
                    time.sleep(cluster.watch_tick)
                self.close_connection = True
                return
            if pos is None:  # too old: as the API server does, a 200 carrying an ERROR event
                expired = api_status(410, "Expired", "too old resource version")
                self._chunk(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                break
            events, pos = cluster._watch_next(kind, pos, namespace, fs, ls,
                                              min(cluster.watch_tick, deadline - time.monotonic()))
            if pos is None:
                continue
            for rv, etype, obj in events:
                self._chunk(b'{"type":"' + etype.encode() + b'","object":' + obj.encode() + b"}\n")
                marked = rv
            due = time.monotonic() - bookmarked >= cluster.bookmark_interval
            if bookmarks and (pos > marked or due):  # as the cacher: when it moves, and about every minute
                self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                    "kind": "Node" if kind == "nodes" else "Pod", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(pos)}}}).encode() + b"\n")
                marked, bookmarked = pos, time.monotonic()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")
