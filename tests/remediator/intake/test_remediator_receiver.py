"""The webhook receiver: real Alertmanager 0.25 bodies in, 4xx with a reason (and no change) for bad ones."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpuhealth.remediator.intake.queue import Intake, RecordSummary
from gpuhealth.remediator.intake.webhook import Batch, parse_webhook
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support.headroom import HEADROOM
from tests.support.remediator_harness import FIXTURES, TOKEN, Harness, firing_fixture, webhook


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node("gpu-node-1")
        c.add_node("gpu-1")
        yield c


def test_real_capture_is_parsed_with_its_labels() -> None:
    policy = parse_policy("alert_labels: {remediation: action}")
    batch = parse_webhook((FIXTURES / "webhook_firing_v4.json").read_bytes(), policy)
    [alert] = batch.alerts
    assert (alert.node, alert.fingerprint, alert.record.remediation, alert.record.gpu) == (
        "gpu-node-1", "63def2fa76d97716", "cordon", "0")
    resolved = parse_webhook((FIXTURES / "webhook_resolved_v4.json").read_bytes(), policy)
    assert resolved.alerts[0].record.status == "resolved"
    assert resolved.alerts[0].record.ends_at == datetime(2026, 12, 2, 9, 37, 37, 851000, tzinfo=UTC)


def test_real_capture_without_a_remediation_label_is_ignored_with_a_reason() -> None:
    batch = parse_webhook((FIXTURES / "webhook_firing_v4.json").read_bytes(), parse_policy(""))
    assert batch.alerts == [] and batch.ignored == [("63def2fa76d97716", "no 'remediation' label")]


def test_ignored_alerts_are_counted_by_what_is_wrong_with_them_not_by_their_messages_words(
        cluster: FakeCluster) -> None:
    cluster.add_node("gpu-1")
    h = Harness(cluster)
    base = webhook("gpu-1")
    no_node, bad_node, no_rung, odd_rung = (json.loads(json.dumps(base["alerts"][0])) for _ in range(4))
    del no_node["labels"]["node"]
    bad_node["labels"]["node"] = "not a node name"
    del no_rung["labels"]["remediation"]
    odd_rung["labels"]["remediation"] = "nothing-known"
    for i, alert in enumerate((no_node, bad_node, no_rung, odd_rung)):
        alert["fingerprint"] = f"fp-{i}"
    assert h.post({**base, "alerts": [no_node, bad_node, no_rung, odd_rung]}).status_code == 202
    assert h.metric("gpuhealth_remediator_alerts_ignored_total", reason="no") == 2
    assert h.metric("gpuhealth_remediator_alerts_ignored_total", reason="unusable") == 2


def test_real_capture_cordons_then_resolves_through_the_app(cluster: FakeCluster) -> None:
    h = Harness(cluster, "alert_labels: {remediation: action}\nreturn_to_service: {healthy_delay: 0s}")
    response = h.post((FIXTURES / "webhook_firing_v4.json").read_bytes())
    assert response.status_code == 202 and response.get_json()["accepted"] == 1
    assert h.decisions(h.step()) == [("gpu-node-1", "cordon", "execute")]
    assert h.post((FIXTURES / "webhook_resolved_v4.json").read_bytes()).status_code == 202
    assert h.decisions(h.step()) == [("gpu-node-1", "uncordon", "execute")]


@pytest.mark.parametrize("token", [None, "wrong", "", TOKEN + "x"])
def test_bad_or_missing_token_is_401_and_changes_nothing(cluster: FakeCluster, token: str | None) -> None:
    h = Harness(cluster)
    response = h.post(webhook("gpu-1", "reboot"), token=token)
    assert response.status_code == 401 and "token" in response.get_json()["error"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    h.step()
    assert not cluster.taints("gpu-1") and [w for w in cluster.writes() if "/nodes" in w[1]] == []
    assert h.metric("gpuhealth_remediator_webhook_errors_total", reason="unauthorized") == 1


def _mutate(path: str, value: object) -> dict[str, object]:
    body = firing_fixture()
    target: dict[str, object] = body
    *parents, last = path.split(".")
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]  # type: ignore[index,assignment]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return body


@pytest.mark.parametrize(("body", "code", "reason"), [
    (b"{not json", 400, "not JSON"),
    (b"[]", 422, "expected a JSON object"),
    (_mutate("version", "3"), 422, "version"),
    (_mutate("alerts", {"a": 1}), 422, "alerts"),
    (_mutate("alerts.0.status", "pending"), 422, "status"),
    (_mutate("alerts.0.labels", {"node": 7}), 422, "labels"),
    (_mutate("alerts.0.fingerprint", KeyError), 422, "fingerprint"),
    (_mutate("alerts.0.startsAt", "yesterday"), 422, "timestamp"),
    (_mutate("alerts.0.startsAt", "0001-01-01T00:00:00Z"), 422, "no time an alert started"),
])
def test_malformed_bodies_get_4xx_with_a_reason_and_change_nothing(cluster: FakeCluster, body: object, code: int,
                                                                   reason: str) -> None:
    h = Harness(cluster)
    response = h.post(body if isinstance(body, bytes) else json.dumps(body))
    assert response.status_code == code
    assert reason in response.get_json()["error"]
    h.step()
    assert [w for w in cluster.writes() if "leases" not in w[1]] == []


def test_body_over_the_size_limit_is_413(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    response = h.post(b'{"pad": "' + b"x" * (2 << 20) + b'"}')
    assert response.status_code == 413 and cluster.writes() == []


def test_a_chunked_body_over_the_size_limit_is_413_not_a_cut_off_body(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    body = json.dumps(webhook("gpu-1", "reboot")).encode()
    pad = b" " * ((1 << 20) - len(body) + 1)  # JSON with trailing spaces: one byte over the limit
    for data, code in ((body + pad, 413), (body + pad[:-1], 202)):
        response = h.http.post("/alerts", headers={"Authorization": f"Bearer {TOKEN}", "Transfer-Encoding": "chunked",
                                                   "Content-Type": "application/json"},
                               environ_overrides={"wsgi.input": io.BytesIO(data), "wsgi.input_terminated": True})
        assert response.status_code == code, response.get_json()
        if code == 413:
            assert "larger than 1048576 bytes" in response.get_json()["error"]
    assert h.intake.join() and h.state("gpu-1").active  # only the post within the limit was recorded


def test_deeply_nested_json_is_400_with_a_reason_and_one_log_line(cluster: FakeCluster,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(cluster)
    with caplog.at_level("INFO"):
        response = h.post("[" * 100_000 + "]" * 100_000)
    assert response.status_code == 400 and response.is_json
    assert "nested too deeply" in response.get_json()["error"]
    rejected = [r for r in caplog.records if "webhook_rejected" in r.getMessage()]
    assert len(rejected) == 1 and not any(r.exc_info for r in caplog.records)
    assert "RecursionError" not in caplog.text
    assert h.metric("gpuhealth_remediator_webhook_errors_total", reason="invalid") == 1


def test_unknown_paths_and_methods_are_answered_in_json(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    for response, code in ((h.http.get("/nope"), 404), (h.http.get("/alerts"), 405)):
        assert response.status_code == code and response.is_json and str(code) in response.get_json()["error"]


def test_unusable_alerts_are_ignored_without_blocking_the_rest(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    body = webhook("gpu-1", "cordon")
    odd = dict(body["alerts"][0], fingerprint="odd", labels={**body["alerts"][0]["labels"], "remediation": "nuke"})
    body["alerts"].append(odd)
    response = h.post(body)
    assert response.status_code == 202
    assert response.get_json() == {"accepted": 1, "queued": ["gpu-1"],
                                   "ignored": [{"fingerprint": "odd", "reason": "unknown remediation 'nuke'"}]}


def test_gpu_label_that_is_neither_an_index_nor_a_pci_bus_id_is_dropped() -> None:
    body = webhook("gpu-1", "reset_gpu", gpu="0; reboot")
    assert parse_webhook(json.dumps(body), parse_policy("")).alerts[0].record.gpu is None


def test_gpu_label_of_non_ascii_digits_is_dropped_and_never_reaches_the_reset_job(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    h.fire("gpu-1", "reset_gpu", gpu="\u0663")  # ARABIC-INDIC DIGIT THREE: str.isdigit() and \\d take it
    assert h.state("gpu-1").alerts["fp-gpu-1-GPUFault"].gpu is None
    h.step()
    assert cluster.jobs and not any("\u0663" in json.dumps(job, ensure_ascii=False) for job in cluster.jobs.values())


def test_health_ready_and_metrics_endpoints(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    assert h.http.get("/healthz").status_code == 200
    assert h.http.get("/readyz").status_code == 200
    h.fire("gpu-1", "cordon")
    h.step()
    text = h.http.get("/metrics").get_data(as_text=True)
    for name in ("gpuhealth_remediator_actions_total", "gpuhealth_remediator_budget_in_use",
                 "gpuhealth_remediator_breaker_open", "gpuhealth_remediator_webhook_requests_total",
                 "gpuhealth_remediator_leader"):
        assert name in text


def test_readyz_fails_while_the_kubernetes_api_is_unreachable(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    cluster.fail("GET", "/api/v1/nodes$", 500, times=5)
    h.step()
    assert h.http.get("/readyz").status_code == 503


def test_app_refuses_to_start_without_a_token() -> None:
    from gpuhealth.remediator.app import ServeConfig, create_app
    from gpuhealth.remediator.policy import Policy

    with pytest.raises(SystemExit, match="token"):
        create_app(ServeConfig(Policy(), None), remediator=object())  # type: ignore[arg-type]


def test_the_webhook_is_answered_before_recording_and_recorded_without_a_pass(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    cluster.delay("PATCH", "/api/v1/nodes/gpu-1$", 3.0)  # a slow API server
    started = time.monotonic()
    response = h.http.post("/alerts", data=json.dumps(webhook("gpu-1", "reboot")),
                           headers={"Authorization": f"Bearer {TOKEN}"}, content_type="application/json")
    assert response.status_code == 202 and response.get_json()["queued"] == ["gpu-1"]
    assert time.monotonic() - started < 3.0 / HEADROOM and not h.state("gpu-1").alerts  # answered first
    assert h.intake.join()
    assert h.state("gpu-1").alerts["fp-gpu-1-GPUFault"].status == "firing"  # recorded; no pass has run


def test_an_accepted_resolve_survives_a_restart(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-2")
    cluster.nodeclaims["nc"] = {"metadata": {"name": "nc"}, "status": {"nodeName": "gpu-2"}}
    h = Harness(cluster)
    h.fire("gpu-2", "reset_gpu", gpu="1")
    h.step()
    next(iter(cluster.jobs.values()))["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    h.resolve("gpu-2", "reset_gpu", gpu="1")  # answered 2xx: Alertmanager never sends it again
    h2 = Harness(cluster)  # the process restarts before its next pass
    h2.now = h.now
    executed = []
    for _ in range(6):
        h2.advance(minutes=10)
        executed += [d for d in h2.decisions(h2.step()) if d[2] == "execute"]
    assert executed == [("gpu-2", "uncordon", "execute")] and cluster.nodeclaims


@pytest.mark.parametrize("status", [500, 409])
def test_a_failed_recording_is_retried_by_the_receiver(cluster: FakeCluster, status: int) -> None:
    h = Harness(cluster)
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", status, times=3 if status == 409 else 1)  # 409: 3 tries
    h.fire("gpu-1", "reboot")
    assert h.state("gpu-1").active


def test_while_recording_fails_webhooks_are_answered_5xx_for_alertmanager_to_retry(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", 500, times=3)  # the first try and both retries
    assert h.post(webhook("gpu-1", "reboot")).status_code == 202  # queued; then given up on
    assert h.metric("gpuhealth_remediator_webhook_errors_total", reason="record_failed") == 1  # dropped, counted
    assert not h.state("gpu-1").alerts
    response = h.post(webhook("gpu-1", "reboot"))  # the API is failing: Alertmanager must retry
    assert response.status_code == 503 and "gpu-1" in response.get_json()["error"]
    time.sleep(0.5)  # the harness's hold-off: the receiver tries the API again
    h.fire("gpu-1", "reboot")  # Alertmanager's retry
    assert h.state("gpu-1").active


def test_alerts_for_unknown_nodes_or_unreadable_state_are_reported_not_dropped(cluster: FakeCluster) -> None:
    cluster.nodes["gpu-1"]["metadata"]["annotations"]["gpuhealth.io/state"] = "{broken"
    h = Harness(cluster)
    body = webhook("gpu-1", "reboot")
    body["alerts"].append(dict(body["alerts"][0], fingerprint="x", labels={**body["alerts"][0]["labels"],
                                                                           "node": "gpu-404"}))
    response = h.post(body)
    assert response.status_code == 202
    reasons = {i["node"]: i["reason"] for i in response.get_json()["ignored"]}
    assert reasons["gpu-404"] == "node not found" and "unreadable" in reasons["gpu-1"]
    assert cluster.annotations("gpu-1")["gpuhealth.io/state"] == "{broken"  # never overwritten


def test_gpu_label_all_or_unknown_means_every_gpu() -> None:
    for label in ("all", "unknown", "ALL"):
        body = webhook("gpu-1", "reset_gpu", gpu=label)
        assert parse_webhook(json.dumps(body), parse_policy("")).alerts[0].record.gpu == "all"


def test_without_an_intake_alerts_are_recorded_before_the_answer_or_5xx(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    h.rem.receiver.intake = None  # a Remediator used as a library, without serve's intake
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", 500)
    response = h.post(webhook("gpu-1", "reboot"))
    assert response.status_code == 503 and "gpu-1" in response.get_json()["error"]
    assert not h.state("gpu-1").alerts
    response = h.post(webhook("gpu-1", "reboot"))
    assert response.status_code == 202 and response.get_json()["recorded"] == ["gpu-1"]
    assert h.state("gpu-1").active


def test_a_clean_shutdown_records_what_was_answered_first(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    recorded: list[str] = []

    def record(batch: Batch, received: datetime) -> RecordSummary:
        release.wait(5)  # the API is slow: the answer went out long before the write
        recorded.extend(a.node for a in batch.alerts)
        return RecordSummary(recorded=[a.node for a in batch.alerts], failed=[])

    intake = Intake(record, lambda: datetime.now(UTC))
    assert intake.submit(parse_webhook(json.dumps(webhook("gpu-1", "none", status="resolved")), parse_policy("")))
    with caplog.at_level("WARNING", logger="gpuhealth.remediator"):
        assert not intake.flush_at_exit(timeout=0.1)  # still stuck: said so, not silently dropped
    assert "not recorded" in caplog.text and recorded == []
    release.set()
    assert intake.flush_at_exit(timeout=5) and recorded == ["gpu-1"]


@pytest.mark.parametrize(("status", "refuses"), [(500, True), (503, True), (403, False), (422, False)])
def test_only_a_failing_api_refuses_every_webhook_not_one_nodes_rejection(cluster: FakeCluster, status: int,
                                                                          refuses: bool) -> None:
    h = Harness(cluster)
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", status, times=10)  # the first try and every retry
    assert h.post(webhook("gpu-1", "reboot")).status_code == 202
    assert h.intake.join(15)
    assert not h.state("gpu-1").alerts
    assert (h.post(webhook("gpu-2", "reboot")).status_code == 503) == refuses  # another node's webhook
