"""The Flask receiver: POST /alerts (Alertmanager v4 webhook), /healthz, /readyz, /metrics.

A request is authenticated, size-limited and validated, its nodes checked against the watch cache,
then queued and answered 202; the intake's workers record it on the Nodes (one PATCH per node) right
after (intake.py says what that trades), and while recording fails new posts get 503 (Alertmanager
retries 5xx). The loop acts on it asynchronously. Anything wrong with a request is a 4xx with a reason
and changes nothing. In production: `gpuhealth-remediator serve` runs it under waitress (http_server.py: slow
clients never hold its threads); create_app() with no arguments is configured from the
environment for another WSGI server (docs/remediation.md); tests build the app around their own Remediator.
"""

from __future__ import annotations

import hmac
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.intake.webhook import WebhookError, parse_webhook
from gpuhealth.remediator.loop_process import LoopProcess
from gpuhealth.remediator.metrics import AlertIgnoredReason, WebhookErrorReason
from gpuhealth.remediator.metrics_merge import merged_exposition
from gpuhealth.remediator.serve_config import (
    DEFAULT_MAX_BODY,
    ServeConfig,
    TokenFile,
    build_remediator,
    config_from_env,
    read_token,
)
from gpuhealth.remediator.service import Remediator

__all__ = ["DEFAULT_MAX_BODY", "ServeConfig", "TokenFile", "build_remediator", "config_from_env", "create_app",
           "read_token"]

log = logging.getLogger("gpuhealth.remediator")

def create_app(config: ServeConfig | None = None, remediator: Remediator | None = None,
               start_loop: bool | None = None) -> Flask:
    """The WSGI app. With no arguments (a WSGI server's factory), configuration comes from the environment and the
    reconcile loop starts in a background thread."""
    if config is None:
        config = config_from_env()
    if config.token is None and not config.allow_no_auth:
        raise SystemExit("no webhook token: set GPUHEALTH_TOKEN_FILE or GPUHEALTH_TOKEN "
                         "(or GPUHEALTH_ALLOW_NO_AUTH=1 for local experiments)")
    if remediator is None:
        remediator = build_remediator(config)
        start_loop = True if start_loop is None else start_loop
    rem = remediator
    app = Flask(__name__)
    # One byte over the limit: for a chunked body (no Content-Length) werkzeug reads at most MAX_CONTENT_LENGTH
    # bytes and stops there without a word, so a body of exactly limit + 1 bytes read means "larger" (413),
    # not a cut-off body that fails to parse (400).
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes + 1
    app.extensions["remediator"] = rem
    reject = _rejecter(rem)
    _json_errors(app, config, reject)
    _webhook_route(app, config, rem, reject)
    _probe_routes(app, rem)
    if start_loop:
        _start_loop(app, config, rem)
    return app


Reject = Callable[[int, str, WebhookErrorReason], tuple[Response, int]]


def _rejecter(rem: Remediator) -> Reject:
    """A refused webhook: a JSON error, counted, and an audit line."""

    def reject(code: int, reason: str, label: WebhookErrorReason) -> tuple[Response, int]:
        rem.metrics.webhook_error(label)
        rem.metrics.webhooks.labels(str(code)).inc()
        audit(AuditKind.WEBHOOK_REJECTED, status=code, reason=reason, remote=request.remote_addr)
        return jsonify({"error": reason}), code

    return reject


def _json_errors(app: Flask, config: ServeConfig, reject: Reject) -> None:
    """Every error answer is JSON, never Flask's HTML page."""

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_: Any) -> tuple[Response, int]:
        return reject(413, f"body larger than {config.max_body_bytes} bytes", WebhookErrorReason.TOO_LARGE)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:  # 404, 405...
        code = exc.code or 500
        return jsonify({"error": f"{code} {exc.name}: {exc.description}"}), code

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> tuple[Response, int]:  # a bug: logged with its traceback once
        log.error("unhandled error serving %s %s", request.method, request.path, exc_info=exc)
        return jsonify({"error": f"internal error ({type(exc).__name__}); see the remediator's log"}), 500


def _webhook_route(app: Flask, config: ServeConfig, rem: Remediator, reject: Reject) -> None:
    """POST /alerts: authenticated, size-limited, validated, then handed to the intake and answered 202."""
    token = config.token
    fixed = f"Bearer {token}".encode() if isinstance(token, str) and token else None

    @app.post("/alerts")
    def alerts() -> tuple[Response, int]:
        expected = token.expected() if isinstance(token, TokenFile) else fixed
        if expected is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                resp, code = reject(401, "missing or wrong bearer token", WebhookErrorReason.UNAUTHORIZED)
                resp.headers["WWW-Authenticate"] = 'Bearer realm="gpuhealth-remediator"'
                return resp, code
        length = request.content_length
        if length is not None and length > config.max_body_bytes:
            return reject(413, f"body larger than {config.max_body_bytes} bytes", WebhookErrorReason.TOO_LARGE)
        raw = request.get_data(cache=False)
        if len(raw) > config.max_body_bytes:
            return reject(413, f"body larger than {config.max_body_bytes} bytes", WebhookErrorReason.TOO_LARGE)
        try:
            batch = parse_webhook(raw, rem.policy)
        except WebhookError as exc:
            return reject(exc.status, str(exc), WebhookErrorReason.INVALID)
        for fp, why in batch.ignored:
            rem.metrics.alert_ignored(AlertIgnoredReason.NO_LABEL if fp in batch.missing_label
                                      else AlertIgnoredReason.UNUSABLE)
            audit(AuditKind.ALERT_IGNORED, fingerprint=fp, reason=why)
        result = rem.accept(batch)  # queued for recording (the intake), or recorded now when there is no intake
        ignored = [{"fingerprint": f, "reason": r} for f, r in batch.ignored]
        ignored += [{"node": n, "reason": r} for n, r in result.ignored]
        if result.refused:
            return reject(503, f"could not record alerts on node(s) ({result.refused}): retry",
                          WebhookErrorReason.RECORD_FAILED)
        rem.metrics.webhooks.labels("202").inc()
        nodes = "queued" if rem.queues_webhooks else "recorded"
        return jsonify({"accepted": len(batch.alerts), nodes: result.queued, "ignored": ignored}), 202


def _probe_routes(app: Flask, rem: Remediator) -> None:
    def loop() -> LoopProcess | None:
        return app.extensions.get("remediator_process")

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        process = loop()
        if process is None:  # the loop in a thread of this process (a dry run): hung when its pass overran
            stuck = rem.loop.stuck()
            return (jsonify({"ok": False, "loop": stuck}), 503) if stuck else (jsonify({"ok": True}), 200)
        ok, why = process.health()  # the loop's process runs, speaks and its pass is not hung (else: restarted)
        return jsonify({"ok": ok, "loop": why}), 200 if ok else 503

    @app.get("/readyz")
    def readyz() -> tuple[Response, int]:
        process = loop()
        ok = rem.ready() and (process is None or process.ready())
        return jsonify({"ready": ok, "kubernetes_api": "ok" if ok else "failing"}), 200 if ok else 503

    @app.get("/metrics")
    def metrics() -> Response:
        process = loop()
        if process is None:
            return Response(generate_latest(rem.metrics.registry), mimetype=CONTENT_TYPE_LATEST)
        theirs = process.metrics_text()
        if theirs is None:  # never half the metrics: the loop's would read as zeros
            return Response("the reconcile loop's process did not answer: no metrics\n", 503, mimetype="text/plain")
        return Response(merged_exposition(rem.metrics.registry, theirs), mimetype=CONTENT_TYPE_LATEST)


def _start_loop(app: Flask, config: ServeConfig, rem: Remediator) -> None:
    """The reconcile loop (and the workload watcher, when on) in background threads; serve stops them."""
    stop = threading.Event()
    app.extensions["remediator_stop"] = stop
    # A pass over 10,000 nodes holds the GIL for ~0.4 s; at the default 5 ms switch interval a webhook
    # thread waits up to 5 ms each time it wants it back. 1 ms keeps the answer fast (bench/remediator_storm.py).
    sys.setswitchinterval(0.001)
    if config.loop_process and not rem.kube.dry_run:  # a dry run's writes live in this process: the loop too
        _start_loop_process(app, config, rem, stop)
        return
    rem.start(stop)  # the watches of Nodes and Pods, the intake's workers: answered first, then recorded
    thread = threading.Thread(target=rem.run_forever, args=(stop, config.interval), name="remediator",
                              daemon=True)
    thread.start()
    app.extensions["remediator_loop"] = thread
    if rem.policy.workloads.enabled:  # classify failed workload pods (docs/jobs.md)
        app.extensions["workload_watcher"] = rem.start_workload_watcher(stop, config.interval)


def _start_loop_process(app: Flask, config: ServeConfig, rem: Remediator, stop: threading.Event) -> None:
    """This process: the watch of the Nodes (a post's nodes checked, the recording's reads) and the intake's workers;
    the loop (its watches, passes, writes, the workload watcher) in a process of its own (loop_process.py). When that
    process ends unasked, this one stops too (SIGTERM to itself: serve's graceful stop); serve exits 1 if it died."""
    process = LoopProcess(config, on_end=lambda code: os.kill(os.getpid(), signal.SIGTERM))
    process.start(stop)
    rem.start_receiver(stop, process.wake, lambda: process.stopped_by)
    app.extensions["remediator_process"] = process
    app.extensions["remediator_loop"] = process  # what serve joins on the way out
