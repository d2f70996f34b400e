"""The HTTP server `gpuhealth-remediator serve` runs the app under (waitress), with the limits that keep slow or
hostile clients from holding it: deadlines on a request's headers and body, connection caps (in all and per
source address), and, with --metrics-listen, a listener of its own for the probes and /metrics.
docs/remediation.md, "Serving: slow clients", has the figures."""

from __future__ import annotations

import json
import logging
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from flask import Flask
from waitress.adjustments import Adjustments  # type: ignore[import-untyped]
from waitress.channel import HTTPChannel  # type: ignore[import-untyped]
from waitress.server import TcpWSGIServer  # type: ignore[import-untyped]
from waitress.task import ErrorTask, ThreadedTaskDispatcher  # type: ignore[import-untyped]

from gpuhealth.remediator.service import Remediator

log = logging.getLogger("gpuhealth.remediator")

STOP_SECONDS = 10.0  # on SIGTERM, for the pass under way to end (the chart's grace period is 30 s)

# --- the HTTP server -------------------------------------------------------------------------------
# waitress: an asynchronous loop reads every request whole (headers and body) before a thread runs the app,
# so a slow or stalled client holds a connection slot, never one of the threads that answer webhooks and
# probes. gunicorn's gthread worker hands a connection to a thread once its first bytes arrive: four clients
# dripping headers took all four threads. What waitress lacks, a time limit on a request's headers and on
# its body (it only closes connections idle for channel_timeout, and a client sending a byte a second is
# never idle), _Channel and _Server add, and a cap on the connections of one source address.
# With --metrics-listen, /healthz, /readyz and /metrics get a listener of their own (a loop, threads and
# connection slots apart, probe_limits): clients holding every slot of the webhook's listener cannot fail the
# kubelet's probes and restart the pod.


@dataclass(frozen=True)
class ServerLimits:
    threads: int = 4  # run the app (webhooks, probes, metrics): each request is already read whole
    max_connections: int = 256  # beyond, new connections wait in the listen backlog until slots free up
    header_timeout: float = 10.0  # seconds from a request's first byte to the end of its headers
    body_timeout: float = 30.0  # seconds from the end of the headers to the end of the body
    idle_timeout: int = 10  # seconds a connection may sit silent (before a request, kept alive, or not reading)
    max_header_bytes: int = 16384
    # one source address's open connections at most; beyond, a new one is closed unanswered. Half the slots: one
    # client cannot take them all, and an Alertmanager sending a notification per group at once still has room.
    max_connections_per_source: int = 128
    # with every slot taken, a new connection closes the oldest one that holds no complete request (a slow or stalled
    # client) instead of waiting in the backlog: the probes' listener, whose clients send a request at once
    shed_when_full: bool = False


def probe_limits(limits: ServerLimits) -> ServerLimits:
    """The probes' and Prometheus's listener: a probe is a small GET (the kubelet opens a connection for each,
    two per period), Prometheus keeps one per replica: a few slots and two threads, the same deadlines. Full, it
    sheds its oldest slow client: 4 addresses dripping into 8 connections each held all 32, and the kubelet's
    connections waited in the backlog past their 1 s (issue 35, item 7)."""
    return replace(limits, threads=2, max_connections=32, max_connections_per_source=8, shed_when_full=True)


PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
WEBHOOK_PATHS = frozenset({"/alerts"})


def _json_error(code: int, reason: str, detail: str) -> bytes:
    return json.dumps({"error": f"{code} {reason}: {detail}"}).encode()


class _JSONErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's own rejections (413 body too large, 431 headers too large, 400 bad framing) answered in
    JSON like the app's, and counted."""

    def execute(self) -> None:
        error = self.request.error
        body = _json_error(error.code, error.reason, str(error.body).strip())
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)
        self.channel.server.count(_REJECT_REASONS.get(error.code, "bad_request"))


_REJECT_REASONS = {413: "too_large", 431: "headers_too_large"}


class _Channel(HTTPChannel):  # type: ignore[misc]
    """A connection that also notes when the request being read began, and when its headers ended."""

    error_task_class = _JSONErrorTask
    _reading: Any = None  # the request being read (waitress's parser), as last seen
    _began = 0.0  # monotonic: its first byte
    _headers_done: float | None = None  # monotonic: the end of its headers
    _last_byte = 0.0  # monotonic: the last bytes received

    def received(self, data: bytes) -> bool:
        taken: bool = super().received(data)
        request = self.request  # None: no request under way (every one read so far is complete)
        now = time.monotonic()
        self._last_byte = now
        if request is not None:
            if request is not self._reading:
                self._reading, self._began, self._headers_done = request, now, None
            if request.headers_finished and self._headers_done is None:
                self._headers_done = now
        return taken

    def overdue(self, now: float, limits: ServerLimits) -> tuple[str, str] | None:
        """(reason, why) when the request being read is late: its headers or body past their deadline, or
        nothing of it received for idle_timeout (waitress would close that connection without a word)."""
        request = self.request
        if request is None or request is not self._reading or self.will_close or self.close_when_flushed:
            return None
        reason, what = ("header_timeout", "headers") if self._headers_done is None else ("body_timeout", "body")
        if self._headers_done is None and now - self._began > limits.header_timeout:
            return reason, f"request headers not received within {limits.header_timeout:g} s"
        if self._headers_done is not None and now - self._headers_done > limits.body_timeout:
            return reason, f"request body not received within {limits.body_timeout:g} s"
        # not while a complete request is being answered: its connection is not read meanwhile
        if not self.requests and now - self._last_byte > limits.idle_timeout:
            return reason, f"request {what} not received: nothing sent for {limits.idle_timeout:g} s"
        return None

    def time_out(self, why: str) -> None:
        """408 in JSON, then close: the request was not sent in time. (The loop's thread; no task runs for a
        request still being read.)"""
        body = _json_error(408, "Request Timeout", why)
        data = (f"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode() + body
        with self.requests_lock:
            self.request = None
            with self.outbuf_lock:
                self.outbufs[-1].append(data)
                self.current_outbuf_count += len(data)
                self.total_outbufs_len += len(data)
            self.close_when_flushed = True


class _Server(TcpWSGIServer):  # type: ignore[misc]
    channel_class = _Channel
    limits = ServerLimits()
    metrics: Any = None  # the remediator's Metrics

    def maintenance(self, now: float) -> None:
        """Every second (cleanup_interval): answer 408 to the requests whose headers or body are overdue or
        silent; then waitress closes the connections idle with no request under way."""
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            late = channel.overdue(mono, self.limits) if isinstance(channel, _Channel) else None
            if late is not None:
                reason, why = late
                channel.time_out(why)
                self.count(reason)
        super().maintenance(now)

    def readable(self) -> bool:
        """waitress's (maintenance, then: accepting?), but a listener that sheds keeps accepting when full."""
        accepting: bool = super().readable()
        return accepting or (self.limits.shed_when_full and self.accepting)

    def _shed_one(self) -> bool:
        """With every slot taken, close the oldest connection holding no complete request (one that is slow or
        stalled sending it, or idle between requests); False when every one is being answered."""
        idle = [c for c in list(self.active_channels.values()) if not c.requests and not c.will_close]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.creation_time)
        oldest.handle_close()
        self.count("shed_slow_client")
        return True

    def handle_accept(self) -> None:
        """waitress's, but a source address already holding max_connections_per_source is closed at once; and a
        listener that sheds (shed_when_full) makes room for a new connection by closing its oldest slow client."""
        try:
            accepted = self.accept()
            if accepted is None:
                return
            conn, addr = accepted
            self.set_socket_options(conn)
        except OSError:  # the client went away before the accept (waitress logs and goes on as well)
            return
        source = addr[0]
        held = sum(1 for c in list(self.active_channels.values()) if c.addr and c.addr[0] == source)
        if held >= self.limits.max_connections_per_source:
            conn.close()
            self.count("per_source_limit")
            return
        if self.limits.shed_when_full and len(self.active_channels) >= self.limits.max_connections \
                and not self._shed_one():
            conn.close()  # every slot is answering a request: this one would wait behind them anyway
            self.count("over_capacity")
            return
        self.channel_class(self, conn, addr, self.adj, map=self._map)

    def count(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.http_rejected.labels(reason).inc()


def only_paths(app: Any, paths: frozenset[str], elsewhere: str) -> Any:
    """The WSGI app, answering only `paths`; any other is a JSON 404 that says where it is served."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO") or "/"
        if path in paths:
            return app(environ, start_response)
        body = _json_error(404, "Not Found", f"{path} is not served on this port ({elsewhere})")
        start_response("404 Not Found", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return wsgi


def make_server(app: Any, listen: str, max_body_bytes: int, limits: ServerLimits = ServerLimits(),
                rem: Remediator | None = None) -> Any:
    """One listener: `limits.threads` threads for the app, one loop reading requests (its own socket map, so
    another listener's connections never count against its slots)."""
    adj = Adjustments(
        listen=listen, threads=limits.threads, connection_limit=limits.max_connections,
        channel_timeout=limits.idle_timeout, cleanup_interval=1, max_request_header_size=limits.max_header_bytes,
        max_request_body_size=max_body_bytes, inbuf_overflow=max_body_bytes + 1,  # bodies in memory, not /tmp
        asyncore_use_poll=True,  # poll(): select() stops at 1,024 descriptors
        backlog=1024, ident="gpuhealth-remediator", expose_tracebacks=False)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(limits.threads)
    server = _Server(app, map={}, dispatcher=dispatcher, adj=adj, sockinfo=adj.listen[0])
    server.limits = limits
    server.metrics = rem.metrics if rem is not None else None
    return server


def _raise_open_files(wanted: int) -> None:
    """Room for max_connections sockets beside the API clients' and the watches'."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def serve(app: Flask, listen: str, max_body_bytes: int, limits: ServerLimits = ServerLimits(),
          metrics_listen: str | None = None) -> None:
    """Serve until SIGTERM or SIGINT; then stop taking connections, let the requests under way finish (5 s),
    record the webhooks already answered (intake.flush_at_exit) and stop the loop. With `metrics_listen`, the
    probes and /metrics are served there (probe_limits, a thread of its own running its loop) and `listen`
    serves only the webhook."""
    rem = app.extensions.get("remediator")
    probes = None
    webhook_app: Any = app
    if metrics_listen:
        probes = make_server(only_paths(app, PROBE_PATHS, f"POST /alerts is on {listen}"), metrics_listen,
                             64 << 10, probe_limits(limits), rem)
        webhook_app = only_paths(app, WEBHOOK_PATHS, f"/healthz, /readyz and /metrics are on {metrics_listen}")
    server = make_server(webhook_app, listen, max_body_bytes, limits, rem)
    _raise_open_files(limits.max_connections + (probes.limits.max_connections if probes else 0) + 256)

    def stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        raise SystemExit(0)  # out of waitress's loop, in the main thread

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("listening on http://%s:%s (%d threads, at most %d connections, %d from one address; headers within "
             "%g s, body within %g s, idle %d s)", server.effective_host, server.effective_port, limits.threads,
             limits.max_connections, limits.max_connections_per_source, limits.header_timeout, limits.body_timeout,
             limits.idle_timeout)
    if probes is not None:
        log.info("probes and metrics on http://%s:%s (%d threads, at most %d connections, %d from one address)",
                 probes.effective_host, probes.effective_port, probes.limits.threads, probes.limits.max_connections,
                 probes.limits.max_connections_per_source)
        # a daemon: it answers the probes until the process exits, through the shutdown below
        threading.Thread(target=probes.run, name="probe-listener", daemon=True).start()
    try:
        server.run()  # returns after SystemExit, once the threads finished (waitress waits up to 5 s)
    finally:
        server.close()
        if rem is not None:
            rem.flush_intake()  # answered webhooks recorded if the API lets us
        loop_stop = app.extensions.get("remediator_stop")
        if loop_stop is not None:
            loop_stop.set()
        loop = app.extensions.get("remediator_loop")
        if loop is not None:  # a pass under way ends before the interpreter does (killed mid-call, it aborts)
            loop.join(STOP_SECONDS)
        if rem is not None:
            rem.flush_events()  # Events kept while the API failed: one last try
