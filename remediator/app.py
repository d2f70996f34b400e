"""The Flask receiver: POST /alerts (Alertmanager v4 webhook), /healthz, /readyz, /metrics.

A request is authenticated, size-limited and validated, its nodes checked against the watch cache,
then queued and answered 202; the intake's workers record it on the Nodes (one PATCH per node) right
after (intake.py says what that trades), and while recording fails new posts get 503 (Alertmanager
retries 5xx). The loop acts on it asynchronously. Anything wrong with a request is a 4xx with a reason
and changes nothing. In production: gunicorn
'remediator.app:create_app()' (configured from the environment, see docs/remediation.md); tests build
the app around their own Remediator.
"""

from __future__ import annotations

import hmac
import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from remediator.leader import leader_identity
from remediator.policy import Policy, load_policy
from remediator.reconciler import Remediator, audit
from remediator.webhook import WebhookError, parse_webhook

log = logging.getLogger("gpuhealth.remediator")

DEFAULT_MAX_BODY = 1 << 20


@dataclass
class ServeConfig:
    policy: Policy
    token: str | None  # None: no authentication (only with allow_no_auth)
    max_body_bytes: int = DEFAULT_MAX_BODY
    dry_run: bool = False
    interval: float = 10.0
    kubeconfig: str | None = None
    identity: str = ""
    allow_no_auth: bool = False


def read_token(token_file: str | None, env: dict[str, str]) -> str | None:
    if token_file:
        with open(token_file) as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token file {token_file} is empty")
        return token
    return env.get("GPUHEALTH_TOKEN") or None


def config_from_env(env: dict[str, str] | None = None) -> ServeConfig:
    """For gunicorn: GPUHEALTH_POLICY, GPUHEALTH_TOKEN_FILE or GPUHEALTH_TOKEN, GPUHEALTH_DRY_RUN,
    GPUHEALTH_INTERVAL, GPUHEALTH_MAX_BODY_BYTES, GPUHEALTH_KUBECONFIG, GPUHEALTH_ALLOW_NO_AUTH."""
    env = dict(os.environ if env is None else env)
    truthy = ("1", "true", "yes")
    return ServeConfig(
        policy=load_policy(env.get("GPUHEALTH_POLICY") or None),
        token=read_token(env.get("GPUHEALTH_TOKEN_FILE"), env),
        max_body_bytes=int(env.get("GPUHEALTH_MAX_BODY_BYTES", DEFAULT_MAX_BODY)),
        dry_run=env.get("GPUHEALTH_DRY_RUN", "").lower() in truthy,
        interval=float(env.get("GPUHEALTH_INTERVAL", "10")),
        kubeconfig=env.get("GPUHEALTH_KUBECONFIG") or None,
        identity=leader_identity(env),
        allow_no_auth=env.get("GPUHEALTH_ALLOW_NO_AUTH", "").lower() in truthy)


def build_remediator(config: ServeConfig) -> Remediator:
    from remediator.actions import Kube, api_client_from

    config.policy.check_serve(config.interval)
    api_client = api_client_from(config.kubeconfig)
    kube = Kube(api_client)
    return Remediator(kube, config.policy, config.identity or leader_identity(), dry_run=config.dry_run)


def create_app(config: ServeConfig | None = None, remediator: Remediator | None = None,
               start_loop: bool | None = None) -> Flask:
    """The WSGI app. With no arguments (gunicorn), configuration comes from the environment and the
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
    rem.metrics.watch_events(rem.kube.events)  # Events kept while the API fails: pending, sent late, dropped
    expected = f"Bearer {config.token}".encode() if config.token else None

    def reject(code: int, reason: str, label: str) -> tuple[Response, int]:
        rem.metrics.webhook_errors.labels(label).inc()
        rem.metrics.webhooks.labels(str(code)).inc()
        audit("webhook_rejected", status=code, reason=reason, remote=request.remote_addr)
        return jsonify({"error": reason}), code

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_: Any) -> tuple[Response, int]:
        return reject(413, f"body larger than {config.max_body_bytes} bytes", "too_large")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:  # 404, 405...: JSON too, not Flask's HTML page
        code = exc.code or 500
        return jsonify({"error": f"{code} {exc.name}: {exc.description}"}), code

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> tuple[Response, int]:  # a bug: logged with its traceback once
        log.error("unhandled error serving %s %s", request.method, request.path, exc_info=exc)
        return jsonify({"error": f"internal error ({type(exc).__name__}); see the remediator's log"}), 500

    @app.post("/alerts")
    def alerts() -> tuple[Response, int]:
        if expected is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                resp, code = reject(401, "missing or wrong bearer token", "unauthorized")
                resp.headers["WWW-Authenticate"] = 'Bearer realm="gpuhealth-remediator"'
                return resp, code
        length = request.content_length
        if length is not None and length > config.max_body_bytes:
            return reject(413, f"body larger than {config.max_body_bytes} bytes", "too_large")
        raw = request.get_data(cache=False)
        if len(raw) > config.max_body_bytes:
            return reject(413, f"body larger than {config.max_body_bytes} bytes", "too_large")
        try:
            batch = parse_webhook(raw, rem.policy)
        except WebhookError as exc:
            return reject(exc.status, str(exc), "invalid")
        for fp, why in batch.ignored:
            rem.metrics.alerts_ignored.labels(why.split(" ")[0] if why.startswith("no ") else "unusable").inc()
            audit("alert_ignored", fingerprint=fp, reason=why)
        result = rem.accept(batch)  # queued for recording (rem.intake), or recorded now when there is no intake
        ignored = [{"fingerprint": f, "reason": r} for f, r in batch.ignored]
        ignored += [{"node": n, "reason": r} for n, r in result.ignored]
        if result.refused:
            return reject(503, f"could not record alerts on node(s) ({result.refused}): retry", "record_failed")
        rem.metrics.webhooks.labels("202").inc()
        nodes = "queued" if rem.intake is not None else "recorded"
        return jsonify({"accepted": len(batch.alerts), nodes: result.queued, "ignored": ignored}), 202

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        return jsonify({"ok": True}), 200

    @app.get("/readyz")
    def readyz() -> tuple[Response, int]:
        cache = rem.kube.cache
        ok = rem.api_ok and (cache is None or cache.healthy)
        return jsonify({"ready": ok, "kubernetes_api": "ok" if ok else "failing"}), 200 if ok else 503

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(rem.metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    if start_loop:
        stop = threading.Event()
        app.extensions["remediator_stop"] = stop
        # A pass over 10,000 nodes holds the GIL for ~0.4 s; at the default 5 ms switch interval a webhook
        # thread waits up to 5 ms each time it wants it back. 1 ms keeps the answer fast (bench/remediator_storm.py).
        sys.setswitchinterval(0.001)
        if rem.kube.cache is None:
            rem.kube.start_cache(stop)  # watches of Nodes and Pods: the loop and the receiver read from them
        if rem.intake is None:
            rem.start_intake(stop)  # webhooks are answered first, then recorded
        thread = threading.Thread(target=rem.run_forever, args=(stop, config.interval), name="remediator",
                                  daemon=True)
        thread.start()
        if rem.policy.workloads.enabled:  # classify failed workload pods (docs/jobs.md)
            from remediator.workloads import start_watcher

            app.extensions["workload_watcher"] = start_watcher(
                rem.kube, rem.policy, rem.metrics, stop, config.interval, clock=rem.clock, dry_run=rem.dry_run,
                is_leader=lambda: rem.dry_run or rem.elector.is_leader())
    return app
