"""Level-triggered: the leader makes the Nodes' records agree with the alerts Debian's real Alertmanager lists
as active, so a webhook lost after its 202, or a resolution answered while the API was down, is recovered
within one sync interval; and an Alertmanager that cannot be read (or has just started) resolves nothing."""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhealth.remediator.cli import main
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.support.real_alertmanager import RealAlertmanager, free_port, webhook_of
from tests.support.remediator_harness import FakeAlertmanager, Harness


def policy(url: str | list[str], **alertmanager: Any) -> str:
    settings = {"url": url, "sync_interval": "30s", "min_uptime": "0s", **alertmanager}
    return yaml.safe_dump({"alertmanager": settings, "return_to_service": {"healthy_delay": "0s"}})


@pytest.fixture(scope="module")
def am() -> Iterator[RealAlertmanager]:
    with RealAlertmanager() as alertmanager:  # no webhook: the tests post what Alertmanager would have posted
        yield alertmanager


@pytest.fixture
def fresh_am() -> Iterator[RealAlertmanager]:
    with RealAlertmanager() as alertmanager:
        yield alertmanager


def now() -> datetime:
    """These tests share Alertmanager's clock (it decides what is active by the wall clock), so the harness
    starts from it; nothing here depends on the date."""
    return datetime.now(UTC)


def firing(h: Harness, node: str) -> dict[str, str]:
    return {a.name: a.status for a in h.state(node).alerts.values()}


def test_a_resolution_lost_while_the_api_was_down_is_recovered_by_the_next_sync(cluster: FakeCluster,
                                                                                  am: RealAlertmanager) -> None:
    h = Harness(cluster, policy(am.url), start=now())
    am.push("gpu-5", "GPULostResolution")
    listed = [a for a in am.alerts("gpu-5") if a["labels"]["alertname"] == "GPULostResolution"]
    h.post(webhook_of(listed))
    assert ("gpu-5", "cordon", "execute") in h.decisions(h.step())

    cluster.fail("PATCH", "/api/v1/nodes/gpu-5$", 503, times=1000)  # the API server is down for this node
    am.push("gpu-5", "GPULostResolution", starts=datetime.fromisoformat(listed[0]["startsAt"].replace("Z", "+00:00")),
            resolved=True)
    assert h.post(webhook_of(listed, "resolved")).status_code == 202  # answered, then lost: Alertmanager won't resend
    assert firing(h, "gpu-5") == {"GPULostResolution": "firing"}
    cluster.heal()

    h.advance(seconds=10)  # within the interval: only webhooks count, and none is coming
    h.step()
    assert firing(h, "gpu-5") == {"GPULostResolution": "firing"} and cluster.taints("gpu-5")

    h.advance(seconds=20)  # one sync interval after the first pass
    plans = h.step()
    assert ("gpu-5", "uncordon", "execute") in h.decisions(plans)  # resolved, healthy, returned (the episode ends)
    assert not cluster.taints("gpu-5")
    assert h.metric("gpuhealth_remediator_alertmanager_sync_changes_total", change="resolved") == 1


def test_a_new_leader_records_a_lost_webhook_and_resolves_a_lost_resolution_before_acting(
        cluster: FakeCluster, am: RealAlertmanager) -> None:
    first = Harness(cluster, policy(am.url, sync_interval="off"), identity="replica-a", start=now())
    am.push("gpu-4", "GPUResolvedWhileDown")
    listed = [a for a in am.alerts("gpu-4") if a["labels"]["alertname"] == "GPUResolvedWhileDown"]
    first.post(webhook_of(listed))
    first.step()
    assert cluster.taints("gpu-4")
    # replica-a stops; meanwhile gpu-4's alert resolves and gpu-3's fires, and neither webhook is recorded
    am.push("gpu-4", "GPUResolvedWhileDown",
            starts=datetime.fromisoformat(listed[0]["startsAt"].replace("Z", "+00:00")), resolved=True)
    am.push("gpu-3", "GPUWebhookLost")

    second = Harness(cluster, policy(am.url), identity="replica-b", start=first.now)
    assert second.step() is None  # it sees replica-a's Lease, and waits it out on its own clock
    second.advance(seconds=16)
    plans = second.step()
    assert ("gpu-3", "cordon", "execute") in second.decisions(plans)
    assert ("gpu-4", "uncordon", "execute") in second.decisions(plans)
    assert firing(second, "gpu-3") == {"GPUWebhookLost": "firing"}
    assert "firing" not in firing(second, "gpu-4").values()


def test_an_unreachable_alertmanager_resolves_nothing_and_says_so(cluster: FakeCluster,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(cluster, policy(f"http://127.0.0.1:{free_port()}"), start=now())
    h.fire("gpu-2", "cordon")
    h.step()
    with caplog.at_level(logging.WARNING, "gpuhealth.remediator"):
        h.advance(minutes=5)
        h.step()
    assert firing(h, "gpu-2") == {"GPUFault": "firing"} and cluster.taints("gpu-2")
    assert h.metric("gpuhealth_remediator_alertmanager_up") == 0
    assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="error") == 2
    assert any("nothing is resolved until it answers" in r.getMessage() for r in caplog.records)


def test_an_alertmanager_that_just_started_records_but_never_resolves(cluster: FakeCluster,
                                                                      fresh_am: RealAlertmanager) -> None:
    h = Harness(cluster, policy(fresh_am.url, min_uptime="5m"), start=now())
    h.fire("gpu-1", "cordon", alertname="GPUBeforeRestart")  # fired before Alertmanager restarted, not re-sent yet
    fresh_am.push("gpu-8", "GPUAfterRestart")
    fresh_am.wait_listed(1)
    h.step()
    assert firing(h, "gpu-1") == {"GPUBeforeRestart": "firing"}  # absent from a young Alertmanager: kept
    assert firing(h, "gpu-8") == {"GPUAfterRestart": "firing"}


def test_a_silenced_alert_is_kept_but_never_recorded_from_the_list(cluster: FakeCluster,
                                                                   am: RealAlertmanager) -> None:
    h = Harness(cluster, policy(am.url), start=now())
    am.push("gpu-7", "GPUSilencedLater")
    h.post(webhook_of([a for a in am.alerts("gpu-7") if a["labels"]["alertname"] == "GPUSilencedLater"]))
    am.push("gpu-6", "GPUSilencedFirst")
    am.silence("gpu-6")
    am.silence("gpu-7")
    h.step()
    assert firing(h, "gpu-7") == {"GPUSilencedLater": "firing"}  # still active in Alertmanager: not resolved
    assert firing(h, "gpu-6") == {}  # Alertmanager would never have sent it
    assert not cluster.taints("gpu-6")


def _nodes_file(cluster: FakeCluster, tmp_path: Path) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": [cluster.node(f"gpu-{i}") for i in range(10)]}))
    return str(path)


def test_plan_from_alertmanager_decides_as_the_same_alerts_posted_would(
        cluster: FakeCluster, fresh_am: RealAlertmanager, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fresh_am.push("gpu-9", "GPUFallenOffBus", remediation="reboot")
    fresh_am.push("gpu-8", "GPUTemperatureHigh", remediation="none")
    listed = fresh_am.wait_listed(2)
    (tmp_path / "policy.yaml").write_text(policy("none", min_uptime="0s"))
    (tmp_path / "webhook.json").write_text(json.dumps(webhook_of(listed)))
    common = ["plan", "--policy", str(tmp_path / "policy.yaml"), "--nodes", _nodes_file(cluster, tmp_path)]
    assert main([*common, "--alerts", str(tmp_path / "webhook.json")]) == 0
    from_webhook = capsys.readouterr().out
    assert main([*common, "--from-alertmanager", fresh_am.url]) == 0
    from_alertmanager = capsys.readouterr().out
    lines = [json.loads(line) for line in from_alertmanager.splitlines()]
    assert {(d["node"], d["action"], d["decision"]) for d in lines} >= {("gpu-9", "cordon", "execute")}
    assert from_alertmanager == from_webhook


def test_plan_from_alertmanager_resolves_what_alertmanager_no_longer_lists(
        cluster: FakeCluster, fresh_am: RealAlertmanager, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = Harness(cluster, policy(fresh_am.url, sync_interval="off"), start=now())
    h.fire("gpu-2", "cordon", alertname="GPUGone")
    h.step()
    assert cluster.taints("gpu-2")
    (tmp_path / "policy.yaml").write_text(policy("none", min_uptime="0s"))
    later = (h.now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert main(["plan", "--policy", str(tmp_path / "policy.yaml"), "--nodes", _nodes_file(cluster, tmp_path),
                 "--from-alertmanager", fresh_am.url, "--now", later]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert ("gpu-2", "uncordon", "execute") in {(d["node"], d["action"], d["decision"]) for d in lines}
    assert json.loads(cluster.annotations("gpu-2")[STATE_ANNOTATION])["alerts"]  # plan changed nothing


def test_plan_from_an_unreachable_alertmanager_fails_in_one_line(cluster: FakeCluster, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--nodes", _nodes_file(cluster, tmp_path), "--from-alertmanager",
                 f"http://127.0.0.1:{free_port()}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Alertmanager: http://127.0.0.1:") and err.count("\n") == 1


def test_an_ha_pair_resolves_only_what_no_member_lists_and_only_while_both_answer(cluster: FakeCluster) -> None:
    with RealAlertmanager() as am0, RealAlertmanager() as am1:
        am1.push("gpu-3", "GPUOnlyOnOne")  # Prometheus could not reach am0: it never heard of these
        am1.push("gpu-4", "GPUOnlyOnOneLost")
        h = Harness(cluster, policy([am0.url, am1.url]), start=now())
        h.post(webhook_of(am1.alerts("gpu-3")))
        h.step()
        assert firing(h, "gpu-3") == {"GPUOnlyOnOne": "firing"}  # am0 lists nothing: not a resolution
        assert firing(h, "gpu-4") == {"GPUOnlyOnOneLost": "firing"}  # recorded from am1's list
        am1.__exit__()
        h.advance(seconds=30)
        h.fire("gpu-5", "cordon", alertname="GPUAbsentFromBoth")
        h.advance(seconds=30)
        h.step()  # am0 answers, am1 does not: its list might have held them, so nothing is resolved
        assert firing(h, "gpu-3") == {"GPUOnlyOnOne": "firing"}
        assert firing(h, "gpu-5") == {"GPUAbsentFromBoth": "firing"}
        assert h.metric("gpuhealth_remediator_alertmanager_up") == 1


def test_a_resolution_the_sync_inferred_reopens_when_alertmanager_lists_the_alert_again(
        cluster: FakeCluster, am: RealAlertmanager) -> None:
    h = Harness(cluster, policy(am.url).replace("healthy_delay: 0s", "healthy_delay: 1h"), start=now())
    am.push("gpu-9", "GPUListedAgain")
    listed = am.alerts("gpu-9")
    started = datetime.fromisoformat(listed[0]["startsAt"].replace("Z", "+00:00"))
    h.post(webhook_of(listed))
    h.step()
    am.push("gpu-9", "GPUListedAgain", starts=started, resolved=True)  # gone from Alertmanager, webhook lost
    h.advance(seconds=30)
    h.step()
    assert firing(h, "gpu-9") == {"GPUListedAgain": "resolved"}  # inferred: the node waits out its healthy delay
    assert h.state("gpu-9").alerts[listed[0]["fingerprint"]].resolved_by == "sync"
    am.push("gpu-9", "GPUListedAgain", starts=started)  # listed again, same start (a Prometheus that was late)
    h.advance(seconds=30)
    h.step()
    assert firing(h, "gpu-9") == {"GPUListedAgain": "firing"}  # reopened: the alert is active after all
    assert cluster.taints("gpu-9")


def test_the_sync_lists_alerts_by_the_policys_node_label(cluster: FakeCluster, am: RealAlertmanager) -> None:
    # (the shipped route matches node=~".+"; a fleet that names nodes by `hostname` routes on that label)
    text = policy(am.url, receiver=None) + "alert_labels: {node: hostname}\n"
    am.push("gpu-1", "GPUByHostname", node_label="hostname")
    h = Harness(cluster, text, start=now())
    h.step()
    assert firing(h, "gpu-1") == {"GPUByHostname": "firing"}


def test_a_receiver_regex_that_names_no_receiver_resolves_nothing(cluster: FakeCluster, am: RealAlertmanager,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(cluster, policy(am.url, receiver="someone-else"), start=now())
    h.fire("gpu-2", "cordon", alertname="GPUOtherRoute")
    with caplog.at_level(logging.WARNING, "gpuhealth.remediator"):
        h.step()
    assert firing(h, "gpu-2") == {"GPUOtherRoute": "firing"}  # an empty list for a wrong receiver is not news
    assert h.metric("gpuhealth_remediator_alertmanager_up") == 0
    assert any("matches none of its receivers" in r.getMessage() for r in caplog.records)


class _Garbage:
    """Something on Alertmanager's port that answers HTTP with garbage (a proxy mid-restart, another service)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"garbage that is not HTTP\r\n\r\n")


def test_a_garbled_answer_is_an_unavailable_alertmanager_not_a_failed_pass(cluster: FakeCluster) -> None:
    garbage = _Garbage()
    try:
        h = Harness(cluster, policy(garbage.url), start=now())
        h.fire("gpu-6", "reboot")
        plans = h.step()
        assert ("gpu-6", "cordon", "execute") in h.decisions(plans)  # the pass went on
        assert h.metric("gpuhealth_remediator_alertmanager_up") == 0
        drain = [d for d in h.decided(plans) if d.action == "drain"]
        assert drain and drain[0].decision == "deferred"  # the silence check could not ask: on_error defer
    finally:
        garbage.sock.close()


class _TokenProxy:
    """A reverse proxy in front of Alertmanager that wants a bearer token (as kube-rbac-proxy or an ingress would)."""

    def __init__(self, upstream: str) -> None:
        self.token = "first-token"
        self.seen: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                given = self.headers.get("Authorization", "")
                proxy.seen.append(given)
                if given != f"Bearer {proxy.token}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with urllib.request.urlopen(upstream + self.path, timeout=5) as r:
                    body, date = r.read(), r.headers.get("Date", "")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Date", date)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()


def test_the_sync_and_the_silence_checks_send_the_bearer_token_and_pick_up_a_rotated_one(
        cluster: FakeCluster, am: RealAlertmanager, tmp_path: Path) -> None:
    proxy = _TokenProxy(am.url)
    token = tmp_path / "token"
    token.write_text("first-token\n")
    try:
        h = Harness(cluster, policy(proxy.url, bearer_token_file=str(token)), start=now())
        am.push("gpu-0", "GPUBehindAProxy", remediation="reboot")  # (gpu-6 and gpu-7 are silenced in `am`)
        plans = h.step()
        assert firing(h, "gpu-0") == {"GPUBehindAProxy": "firing"}
        assert ("gpu-0", "drain", "execute") in h.decisions(plans)  # the silence check got in too
        proxy.token = "second-token"
        token.write_text("second-token\n")  # the Secret was rotated: the kubelet rewrites the file
        h.advance(seconds=30)
        h.step()
        assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="error") == 0
        assert set(proxy.seen) == {"Bearer first-token", "Bearer second-token"}
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()


def test_an_https_alertmanager_is_trusted_through_the_configured_ca_only(cluster: FakeCluster) -> None:
    with RealAlertmanager(tls=True) as am:
        am.push("gpu-8", "GPUOverTLS")
        assert am.ca_file is not None
        trusted = Harness(cluster, policy(am.url, ca_file=am.ca_file), start=now())
        trusted.step()
        assert firing(trusted, "gpu-8") == {"GPUOverTLS": "firing"}
    with FakeCluster() as other, RealAlertmanager(tls=True) as am2:
        other.add_node("gpu-8")
        am2.push("gpu-8", "GPUOverTLS")
        untrusted = Harness(other, policy(am2.url), start=now())  # the system CAs do not know the test CA
        untrusted.step()
        assert untrusted.metric("gpuhealth_remediator_alertmanager_up") == 0
        assert firing(untrusted, "gpu-8") == {}


def test_an_alert_that_started_before_1970_is_skipped_and_counted_and_the_others_are_still_recorded(
        cluster: FakeCluster, fresh_am: RealAlertmanager, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(cluster, policy(fresh_am.url), start=now())
    fresh_am.push("gpu-2", "GPUBeforeEpoch", starts=datetime(1969, 12, 31, tzinfo=UTC))  # Alertmanager accepts it
    fresh_am.push("gpu-3", "GPUWebhookLost")
    bad = next(a for a in fresh_am.wait_listed(2) if a["labels"]["alertname"] == "GPUBeforeEpoch")
    with caplog.at_level(logging.WARNING, "gpuhealth.remediator"):
        h.step()
    assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="ok") == 1
    assert firing(h, "gpu-3") == {"GPUWebhookLost": "firing"}
    assert firing(h, "gpu-2") == {} and not cluster.taints("gpu-2")
    assert h.metric("gpuhealth_remediator_alerts_ignored_total", reason="unusable") == 1
    assert any(bad["fingerprint"] in r.getMessage() and "startsAt" in r.getMessage() for r in caplog.records)


def _listed(node: str, fingerprint: str, status: object) -> dict[str, Any]:
    """An alert as /api/v2/alerts lists it, with whatever `status` the test gives."""
    return {"labels": {"alertname": "GPUFault", "node": node, "remediation": "cordon", "severity": "critical",
                       "component": "gpu", "gpu": "0"}, "annotations": {}, "fingerprint": fingerprint,
            "startsAt": now().strftime("%Y-%m-%dT%H:%M:%SZ"), "status": status}


def test_an_alert_whose_status_is_a_string_is_refused_alone_and_the_pass_goes_on(cluster: FakeCluster) -> None:
    """Alertmanager lists status as an object; a listed alert whose status is a string made every sync raise, skip
    its pass and turn /readyz 503."""
    with FakeAlertmanager() as am:
        am.alerts = [_listed("gpu-2", "fp-odd", "active"),
                     _listed("gpu-3", "fp-good", {"state": "active", "silencedBy": [], "inhibitedBy": []})]
        h = Harness(cluster, policy(am.url, receiver=None), start=now())  # the stand-in has no receivers to list
        plans = h.step()
        assert ("gpu-3", "cordon", "execute") in h.decisions(plans)
        assert firing(h, "gpu-2") == {} and not cluster.taints("gpu-2")
        assert h.metric("gpuhealth_remediator_alerts_ignored_total", reason="unusable") == 1
        assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="ok") == 1
        assert h.http.get("/readyz").status_code == 200
