"""What the sync reads from Alertmanager is bounded: Alertmanager itself leaves out the alerts not meant for gpuhealth
(the label matchers, checked against Debian's real Alertmanager), so memory stays flat in their number; and an
answer over alertmanager.max_answer_bytes is refused once that much is read, failing that sync only (a metric, a log
line), never the process."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from gpuhealth.remediator.clients.alertmanager import AlertmanagerUnavailable, client_from
from gpuhealth.remediator.intake.alert_sync import Reading, read_alertmanager
from gpuhealth.remediator.policy import Policy, parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support.real_alertmanager import RealAlertmanager, stamp
from tests.support.remediator_harness import Harness


def not_for_gpuhealth(count: int, start: int = 0) -> list[dict[str, object]]:
    """kube-prometheus-stack's KubeNodeNotReady: it names a node, asks for no remediation, is routed elsewhere."""
    now = datetime.now(UTC)
    return [{"labels": {"alertname": "KubeNodeNotReady", "node": f"node-{i}", "severity": "warning",
                        "namespace": "monitoring", "job": "kube-state-metrics", "condition": "Ready"},
             "annotations": {"description": f"node-{i} has been unready for more than 15 minutes."},
             "startsAt": stamp(now - timedelta(minutes=1)), "endsAt": stamp(now + timedelta(hours=1))}
            for i in range(start, start + count)]


PEAK = [0]  # the last peak_read's peak, also when it raised


def peak_read(policy: Policy) -> tuple[Reading, int]:
    client = client_from(policy)
    assert client is not None
    tracemalloc.start()
    try:
        reading = read_alertmanager(client, policy)
        return reading, tracemalloc.get_traced_memory()[1]
    finally:
        PEAK[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


@pytest.mark.parametrize("receiver", [None, "(.+/)?gpuhealth-remediator"], ids=["any-receiver", "the-route"])
def test_the_sync_receives_only_the_alerts_meant_for_gpuhealth_and_its_memory_stays_flat_in_the_others(
        receiver: str | None) -> None:
    with RealAlertmanager() as am:
        for i in range(3):
            am.push(f"gpu-{i}", "GPUXidFatal", "reset_gpu")
        am.push("gpu-3", "GPUContainedMemoryError", "none")  # informational: recorded too
        policy = parse_policy(yaml.safe_dump({"alertmanager": {"url": am.url, "receiver": receiver,
                                                               "min_uptime": "0s"}}))
        am.wait_listed(4)
        alone, peak_alone = peak_read(policy)
        am.post_alerts(not_for_gpuhealth(3000))
        am.wait_listed(3004)
        among_others, peak_among_others = peak_read(policy)
    for reading in (alone, among_others):
        assert sorted(a.node for a in reading.active) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
        assert reading.ignored == [] and reading.untrusted is None  # the others never came
    assert peak_among_others < peak_alone * 1.5 + (64 << 10), (peak_alone, peak_among_others)


class BigAnswer:
    """An Alertmanager (or what answers in its place) whose alert list is `size` bytes of well-formed alerts."""

    def __init__(self, size: int, one: str | None = None) -> None:
        """`size` bytes of `one` alert repeated (by default a well-formed one)."""
        alert = {"labels": {"alertname": "GPUXidFatal", "node": "gpu-0", "remediation": "cordon"},
                 "annotations": {"summary": "x" * 400}, "fingerprint": "f", "startsAt": "2026-01-01T00:00:00Z",
                 "endsAt": "2026-01-01T00:10:00Z", "status": {"state": "active", "silencedBy": [], "inhibitedBy": []}}
        one = one if one is not None else json.dumps(alert)
        body = ("[" + ",".join([one] * (size // (len(one) + 1))) + "]").encode()
        self.asked = 0
        big = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                big.asked += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client stopped reading at its cap
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def big_answer() -> Iterator[BigAnswer]:
    server = BigAnswer(4 << 20)
    yield server
    server.close()


def test_an_answer_over_the_byte_cap_fails_that_sync_only_with_a_metric_and_a_log_line(
        cluster: FakeCluster, big_answer: BigAnswer, caplog: pytest.LogCaptureFixture) -> None:
    text = yaml.safe_dump({"alertmanager": {"url": big_answer.url, "max_answer_bytes": 1 << 20, "min_uptime": "0s"}})
    h = Harness(cluster, text)
    h.fire("gpu-1", "cordon")
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, "gpuhealth.remediator"):
            plans = h.step()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ("gpu-1", "cordon", "execute") in h.decisions(plans)  # the pass went on
    assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="error") == 1
    assert h.metric("gpuhealth_remediator_alertmanager_calls_cut_total", reason="too_large") == 1
    assert h.metric("gpuhealth_remediator_alertmanager_up") == 0
    assert any("larger than 1048576 bytes" in r.getMessage() and "max_answer_bytes" in r.getMessage()
               for r in caplog.records)
    assert peak < 8 << 20, f"{peak} bytes at peak for a 4 MiB answer refused at 1 MiB"
    h.advance(seconds=30)
    h.step()  # the next sync tries again, and fails the same way: the process is not at stake
    assert h.metric("gpuhealth_remediator_alertmanager_calls_cut_total", reason="too_large") == 2


def test_the_default_byte_cap_refuses_an_answer_past_8_mib(cluster: FakeCluster) -> None:
    server = BigAnswer(9 << 20)
    try:
        h = Harness(cluster, yaml.safe_dump({"alertmanager": {"url": server.url, "min_uptime": "0s"}}))
        h.step()
        assert h.metric("gpuhealth_remediator_alertmanager_calls_cut_total", reason="too_large") == 1
        assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="error") == 1
    finally:
        server.close()


def test_members_answering_empty_objects_under_the_byte_cap_are_refused_unparsed_in_bounded_memory() -> None:
    # 3 members, each 1 MiB of `{},` (under a 1 MiB + 1 KiB cap): ~350,000 empty dicts each, ~75 MiB parsed together;
    # the attack of issue 35 (item 12) at an eighth of its size (8 MiB each reached 814 MiB)
    servers = [BigAnswer(1 << 20, "{}") for _ in range(3)]
    try:
        policy = parse_policy(yaml.safe_dump({"alertmanager": {"url": [s.url for s in servers], "min_uptime": "0s",
                                                               "max_answer_bytes": (1 << 20) + 1024,
                                                               "receiver": None}}))
        with pytest.raises(AlertmanagerUnavailable) as refused:
            peak_read(policy)
        peak = PEAK[0]
    finally:
        for server in servers:
            server.close()
    assert str(refused.value).count("JSON values, more than 87466 (one per 12 bytes of "
                                    "alertmanager.max_answer_bytes): not parsed") == 3
    assert peak < 16 << 20, f"{peak} bytes at peak for three answers of 1 MiB"


def test_commas_and_brackets_inside_strings_are_not_counted_as_values() -> None:
    alert = {"labels": {"alertname": "GPUXidFatal", "node": "gpu-0", "remediation": "cordon"},
             "annotations": {"summary": ",[{" * 300}, "fingerprint": "f", "startsAt": "2026-01-01T00:00:00Z",
             "endsAt": "2026-01-01T00:10:00Z", "status": {"state": "active", "silencedBy": [], "inhibitedBy": []}}
    server = BigAnswer(1 << 20, json.dumps(alert))  # ~900 of them, each 900 characters that read as 900 values
    try:
        policy = parse_policy(yaml.safe_dump({"alertmanager": {"url": server.url, "min_uptime": "0s",
                                                               "max_answer_bytes": (1 << 20) + 1024,
                                                               "receiver": None}}))
        reading, _ = peak_read(policy)
    finally:
        server.close()
    assert [a.node for a in reading.active] == ["gpu-0"] and reading.untrusted is None


def test_an_alert_list_nested_too_deep_is_refused_not_raised() -> None:
    deep = "[" * 100_000 + "]" * 100_000  # 200 KB: json.loads raises RecursionError, no ValueError
    server = BigAnswer(len(deep) + 1, deep)
    try:
        policy = parse_policy(yaml.safe_dump({"alertmanager": {"url": server.url, "min_uptime": "0s",
                                                               "receiver": None}}))
        with pytest.raises(AlertmanagerUnavailable, match="JSON nested too deep to read"):
            peak_read(policy)
    finally:
        server.close()


def test_the_policy_refuses_a_byte_cap_below_1_kib() -> None:
    from gpuhealth.remediator.policy import PolicyError

    with pytest.raises(PolicyError, match=r"max_answer_bytes.*expected an integer >= 1024"):
        parse_policy("alertmanager: {url: http://am:9093, max_answer_bytes: 100}")
