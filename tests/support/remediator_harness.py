"""Shared set-up for the remediator tests: the official kubernetes client pointed at FakeCluster,
a Remediator with an injected clock and sleep, the Flask test client, and webhook bodies built
from the real Alertmanager 0.25 capture."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client

from gpuhealth.remediator.app import ServeConfig, create_app
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide.decision import Decision, NodePlan, SilenceCheck
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, NodeState
from gpuhealth.remediator.policy import Policy, parse_policy
from gpuhealth.remediator.service import Remediator
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac, paths

FIXTURES = paths.FIXTURES / "alertmanager"
TOKEN = "s3cret-token"


def _start() -> datetime:
    """The tests' start time. `make clock-shift` runs the tests that fix a start time with it a year
    back and a year ahead (GPUHEALTH_TEST_T0): nothing may depend on the wall clock being near it."""
    raw = os.environ.get("GPUHEALTH_TEST_T0")
    if not raw:
        return datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    start = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if start.tzinfo is None:
        raise ValueError(f"GPUHEALTH_TEST_T0={raw!r}: give a UTC offset (e.g. 2025-12-02T10:00:00Z)")
    return start


T0 = _start()


def utc_now_clock() -> datetime:
    return datetime.now(UTC)


def firing_fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "webhook_firing_v4.json").read_text())
    return data


def webhook(node: str, remediation: str = "cordon", status: str = "firing", fingerprint: str | None = None,
            gpu: str | None = "0", starts: datetime = T0, alertname: str = "GPUFault",
            extra_alerts: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An Alertmanager v4 body shaped exactly like the real capture, for one alert (`labels`: more of its labels,
    e.g. an Xid alert's gpu_instance and mig_uuid)."""
    body = firing_fixture()
    alert = copy.deepcopy(body["alerts"][0])
    extra = labels or {}
    labels = {"alertname": alertname, "node": node, "remediation": remediation, "severity": "critical",
              "component": "gpu", "instance": "10.0.0.1:9400", "job": "gpuhealth-exporter", **extra}
    if gpu is not None:
        labels["gpu"] = gpu
    alert.update(status=status, labels=labels, startsAt=starts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                 fingerprint=fingerprint or f"fp-{node}-{alertname}")
    alert["endsAt"] = "0001-01-01T00:00:00Z" if status == "firing" else \
        (starts + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body.update(status=status, alerts=[alert, *(extra_alerts or [])], commonLabels=labels,
                groupLabels={"alertname": alertname, "node": node})
    return body


class Harness:
    def __init__(self, cluster: FakeCluster, policy: Policy | str | None = None, identity: str = "replica-a",
                 dry_run: bool = False, silences: SilenceCheck | None = None, timeout: float = 10.0,
                 start: datetime = T0) -> None:
        if isinstance(policy, str):
            policy = parse_policy(policy)
        policy = policy or Policy()
        if silences is None and policy.alertmanager.url is None:  # tests that do not use silences opt out
            policy = dataclasses.replace(policy, alertmanager=dataclasses.replace(policy.alertmanager, url="none"))
        self.policy = policy
        self.cluster = cluster
        self.now = start
        cluster.backdate_pods((start - timedelta(hours=1)).timestamp())  # the fixture's pods predate the test
        cluster.clock = lambda: self.now.timestamp()  # pods are made and terminate on the test's clock...
        cluster.pod_grace = 30.0  # ...after Kubernetes' default grace period
        self.slept: list[float] = []
        if cluster.rbac is None:  # the chart's RBAC, rendered for this policy: the remediator gets what it grants
            chart_rbac.enforce(cluster, chart_rbac.policy_values(policy))
        self.kube = Kube(client.ApiClient(chart_rbac.configuration(cluster)), request_timeout=timeout)
        self.stop = threading.Event()
        cluster.on_close.append(self.stop.set)  # the watches end with the cluster
        assert self.kube.start_cache(self.stop).wait_synced(10)
        self.rem = Remediator(self.kube, self.policy, identity, dry_run=dry_run, clock=lambda: self.now,
                              sleep=self.sleep, silences=silences)
        self.intake = self.rem.start_intake(retry=(0.01, 0.02), hold_off=0.5)
        cluster.on_close.append(self.intake.stop)
        self.app = create_app(ServeConfig(self.policy, TOKEN), remediator=self.rem, start_loop=False)
        self.http = self.app.test_client()

    def post(self, body: dict[str, Any] | bytes | str, token: str | None = TOKEN) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        response = self.http.post("/alerts", data=data, headers=headers, content_type="application/json")
        assert self.intake.join(), "the intake did not record the post in time"  # answered first, recorded next
        return response

    def fire(self, node: str, remediation: str = "cordon", **kw: Any) -> None:
        response = self.post(webhook(node, remediation, **kw))
        assert response.status_code == 202, response.get_json()

    def resolve(self, node: str, remediation: str = "cordon", **kw: Any) -> None:
        response = self.post(webhook(node, remediation, status="resolved", **kw))
        assert response.status_code == 202, response.get_json()

    def sleep(self, seconds: float) -> None:
        """The remediator's sleep: recorded, and time passes."""
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)

    def sync(self) -> None:
        """Let the watch caches catch up with every change made so far (pods whose grace ended included),
        as they do within milliseconds on their own: passes then decide deterministically. 30 s: on a 2-core CI
        machine running two test workers a cache's thread was once seen to need more than 10."""
        self.cluster.reap()
        assert self.kube.cache is not None and self.kube.cache.wait_for(str(self.cluster.rv), 30), (
            f"the watch caches did not reach resourceVersion {self.cluster.rv} in 30 s")

    def step(self) -> list[NodePlan] | None:
        self.sync()
        return self.rem.run_once()

    def state(self, node: str) -> NodeState:
        return NodeState.from_json(self.cluster.annotations(node).get(STATE_ANNOTATION))

    def decisions(self, plans: list[NodePlan] | None) -> list[tuple[str, str, str]]:
        return [(d.node, d.action, d.decision) for p in plans or [] for d in p.decisions]

    def decided(self, plans: list[NodePlan] | None) -> list[Decision]:
        return [d for p in plans or [] for d in p.decisions]

    def metric(self, name: str, **labels: str) -> float:
        value = self.rem.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


class FakeAlertmanager:
    """GET /api/v2/alerts, answering with whatever alerts the test sets (or an error status)."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.status = 200
        self.queries: list[str] = []
        am = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                am.queries.append(self.path)
                data = json.dumps(am.alerts if am.status == 200 else {"error": "x"}).encode()
                self.send_response(am.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def silence(self, node: str, fingerprint: str, silence_id: str = "a1b2c3") -> None:
        self.alerts.append({"labels": {"node": node}, "fingerprint": fingerprint,
                            "status": {"state": "suppressed", "silencedBy": [silence_id], "inhibitedBy": []}})

    def inhibit(self, node: str, fingerprint: str, by: str = "fp-node-down") -> None:
        self.alerts.append({"labels": {"node": node}, "fingerprint": fingerprint,
                            "status": {"state": "suppressed", "silencedBy": [], "inhibitedBy": [by]}})

    def __enter__(self) -> FakeAlertmanager:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
