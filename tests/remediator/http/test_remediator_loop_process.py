"""`gpuhealth-remediator serve` in two processes (issue 27, item 5: the webhook's p99 while a storm is written): the
receiver serves HTTP and records, the reconcile loop runs in a process of its own
(gpuhealth/remediator/loop_process.py). The real `serve` against the fake API server, and the real loop process: what
crosses between them (a recorded alert wakes the loop, one /metrics page with both processes' counts, the loop's health
in /healthz), and how they end (SIGTERM to the receiver stops both; a loop that dies takes the receiver down, exit 1; a
receiver killed outright leaves no loop running behind it)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.remediator.app import ServeConfig, build_remediator, create_app
from gpuhealth.remediator.decide.nodestate import TAINT_KEY
from gpuhealth.remediator.loop_process import LoopProcess
from gpuhealth.remediator.metrics import Metrics
from gpuhealth.remediator.metrics_merge import merged_exposition
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.remediator.real_remediator import ServeProcess
from tests.support import chart_rbac
from tests.support.headroom import HEADROOM
from tests.support.polling import wait_for
from tests.support.remediator_harness import webhook

TOKEN = "loop-process-token"
POLICY = "alertmanager: {url: none}\n"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for i in range(5):
            c.add_node(f"gpu-{i}")
        yield c


@pytest.fixture
def serve(cluster: FakeCluster, tmp_path: Path) -> Iterator[ServeProcess]:
    """`serve` started and ready; at the end its whole process group is killed, whichever of its processes the test
    left (ServeProcess.kill does nothing once the first has ended)."""
    (tmp_path / "token").write_text(TOKEN)
    process = ServeProcess(cluster, tmp_path, tmp_path / "token", policy=POLICY)
    with _serving(process):
        yield process


@contextlib.contextmanager
def _serving(process: ServeProcess) -> Iterator[None]:
    """`process` started and ready; at the end its whole process group is killed, whichever of its processes the
    test left (ServeProcess.kill does nothing once the first has ended)."""
    proc = process.start(60)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _loop_config(cluster: FakeCluster, tmp_path: Path) -> ServeConfig:
    """serve's configuration for a loop process of the test's own, under the chart's RBAC."""
    policy = parse_policy(POLICY)
    chart_rbac.enforce(cluster, chart_rbac.policy_values(policy))
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(chart_rbac.kubeconfig(cluster)))
    return ServeConfig(policy, TOKEN, interval=1, kubeconfig=str(tmp_path / "kubeconfig"), identity="test-pod")


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _loop_pid(serve: ServeProcess) -> int:
    """The loop's process: the receiver's one child that runs gpuhealth (multiprocessing's resource tracker, its
    other child, runs none)."""
    assert serve.proc is not None
    (child,) = [c for c in _children(serve.proc.pid) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
    return child


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended too
    except FileNotFoundError:
        return True


def _request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"} if body else {}
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _samples(text: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
    return out


def test_an_alert_posted_to_the_receiver_is_acted_on_by_the_loop_in_its_own_process(
        cluster: FakeCluster, serve: ServeProcess) -> None:
    assert serve.proc is not None
    loop = _loop_pid(serve)
    status, _ = _request(serve.port, "POST", "/alerts", json.dumps(webhook("gpu-1", "cordon")).encode())
    assert status == 202
    assert wait_for(lambda: any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1")), 20)
    status, text = _request(serve.port, "GET", "/metrics")
    assert status == 200
    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))  # every family once, though both processes have each
    samples = _samples(text)
    assert samples['gpuhealth_remediator_webhook_requests_total{"result": "202"}'] == 1  # the receiver's count
    assert samples["gpuhealth_remediator_reconcile_passes_total{}"] >= 1  # the loop's
    assert samples["gpuhealth_remediator_leader{}"] == 1  # the loop holds the Lease, not the receiver
    assert samples['gpuhealth_remediator_actions_total{"action": "cordon", "result": "executed"}'] == 1
    assert _request(serve.port, "GET", "/healthz") == (200, '{"loop":"running","ok":true}\n')
    assert f"the reconcile loop runs in process {loop}" in serve.log.read_text()


def test_sigterm_to_the_receiver_alone_stops_both_processes_and_exits_0(serve: ServeProcess) -> None:
    assert serve.proc is not None
    loop = _loop_pid(serve)
    os.kill(serve.proc.pid, signal.SIGTERM)  # as the kubelet does: PID 1 of the container only
    assert serve.proc.wait(20) == 0
    assert wait_for(lambda: _gone(loop), 5)
    assert "the reconcile loop's process ended (exit code 0)" in serve.log.read_text()


def test_a_loop_process_that_dies_stops_the_receiver_with_exit_code_1(serve: ServeProcess) -> None:
    assert serve.proc is not None
    os.kill(_loop_pid(serve), signal.SIGKILL)  # the OOM killer, a crash
    assert serve.proc.wait(20) == 1  # fail closed: the pod restarts, no webhook taken with no loop to act
    assert "the reconcile loop's process ended (exit code -9): stopping the receiver" in serve.log.read_text()


def test_a_receiver_killed_outright_leaves_no_loop_running_behind_it(serve: ServeProcess) -> None:
    assert serve.proc is not None
    loop = _loop_pid(serve)
    os.kill(serve.proc.pid, signal.SIGKILL)  # the receiver alone: its pipe closes, the loop sees it
    serve.proc.wait(5)
    assert wait_for(lambda: _gone(loop), 15)  # a loop left running would hold the Lease and act unseen


def test_healthz_fails_once_the_loop_process_has_ended(cluster: FakeCluster, tmp_path: Path) -> None:
    """The probe itself (serve also stops on the loop's end; here the receiver is the test's, and stays)."""
    config = _loop_config(cluster, tmp_path)
    app = create_app(config, remediator=build_remediator(config), start_loop=False)
    ended: list[int] = []
    process = LoopProcess(config, on_end=ended.append)
    app.extensions["remediator_process"] = process
    stop = threading.Event()
    process.start(stop)
    web = app.test_client()
    try:
        assert wait_for(process.ready, 30)
        assert web.get("/healthz").status_code == 200
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        assert wait_for(lambda: ended == [-9], 10)
        answer = web.get("/healthz")
        assert answer.status_code == 503
        assert answer.get_json() == {"ok": False, "loop": "the reconcile loop's process ended (exit code -9)"}
        assert web.get("/readyz").status_code == 503
        assert web.get("/metrics").status_code == 503  # never the receiver's half alone (the loop's as zeros)
        assert process.died == -9
    finally:
        stop.set()
        process.join(5)


def test_one_metrics_page_adds_the_two_processes_counts_and_keeps_each_gauge_where_it_is_set() -> None:
    receiver, loop = Metrics(), Metrics()
    receiver.webhooks.labels("202").inc(3)
    receiver.api_throttled.inc(0.5)
    loop.api_throttled.inc(1.25)
    loop.passes.inc(7)
    loop.leader.set(1)
    loop.budget_in_use.labels("pool-a", "cordoned").set(4)
    text = merged_exposition(receiver.registry, generate_latest(loop.registry).decode()).decode()
    families = [f.name for f in text_string_to_metric_families(text)]
    alone = [f.name for f in text_string_to_metric_families(generate_latest(receiver.registry).decode())]
    assert sorted(families) == sorted(alone)  # the same families as one process had, each once
    samples = _samples(text)
    assert samples['gpuhealth_remediator_webhook_requests_total{"result": "202"}'] == 3
    assert samples["gpuhealth_remediator_api_throttled_seconds_total{}"] == 1.75  # both processes' clients
    assert samples["gpuhealth_remediator_reconcile_passes_total{}"] == 7
    assert samples["gpuhealth_remediator_leader{}"] == 1
    assert samples['gpuhealth_remediator_budget_in_use{"budget": "cordoned", "pool": "pool-a"}'] == 4
    created = samples["gpuhealth_remediator_reconcile_passes_created{}"]
    assert created == min(receiver.passes._created, loop.passes._created)  # the earlier start, not a sum


def test_the_receivers_watch_keeps_each_nodes_metadata_only(cluster: FakeCluster) -> None:
    """The receiver checks a post's nodes and records on their state annotation: a real Node's status (its images)
    would be most of what the second process's memory holds twice, and others' annotations are no use to it."""
    from kubernetes import client

    from gpuhealth.remediator.clients.fleet_cache import NodeCache

    cluster.add_node("gpu-9", annotations={"example.com/not-ours": "yes", "gpuhealth.io/hold": '{"by": "ops"}'})
    cache = NodeCache(client.CoreV1Api(client.ApiClient(chart_rbac.configuration(cluster))))
    stop = threading.Event()
    cache.start(stop)
    try:
        assert cache.wait_synced(10) and cache.synced and cache.healthy
        node = cache.nodes.get("gpu-9")
        assert node is not None and set(node) == {"metadata"}
        assert node["metadata"]["annotations"] == {"gpuhealth.io/hold": '{"by": "ops"}'}  # gpuhealth's only
        assert node["metadata"]["resourceVersion"] == cluster.node("gpu-9")["metadata"]["resourceVersion"]
    finally:
        stop.set()


def test_while_cleanup_holds_the_lease_the_receiver_records_nothing(cluster: FakeCluster, tmp_path: Path) -> None:
    """Only the loop's process reads the Lease; the receiver learns of the cleanup's mark from its status."""
    import time
    from datetime import UTC, datetime

    from kubernetes import client

    from gpuhealth.remediator.clients.leader import CLEANUP_ANNOTATION
    from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION

    (tmp_path / "token").write_text(TOKEN)
    serve = ServeProcess(cluster, tmp_path, tmp_path / "token", policy=POLICY)  # the chart's RBAC, an admin
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(chart_rbac.admin(cluster)).create_namespaced_lease("gpuhealth", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gpuhealth-remediator", "namespace": "gpuhealth",
                     "annotations": {CLEANUP_ANNOTATION: json.dumps({"by": "helm uninstall gpuhealth", "at": now})}},
        "spec": {"holderIdentity": "gpuhealth-cleanup-x7k2p", "leaseDurationSeconds": 300, "renewTime": now}})
    with _serving(serve):
        assert wait_for(lambda: "acting and recording alerts stop" in serve.log.read_text(), 10)
        time.sleep(0.2)  # the loop logs the mark, then notes it; its status reaches the receiver within STATUS_POLL_S
        status, _ = _request(serve.port, "POST", "/alerts", json.dumps(webhook("gpu-2", "cordon")).encode())
        assert status == 202  # answered (queued), then not recorded
        ignored = 'gpuhealth_remediator_alerts_ignored_total{"reason": "cleanup"}'
        assert wait_for(lambda: _samples(_request(serve.port, "GET", "/metrics")[1]).get(ignored) == 1, 10)
        assert STATE_ANNOTATION not in cluster.annotations("gpu-2")
        assert not any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-2"))


def test_a_recorded_alert_wakes_the_loop_in_the_other_process_before_its_interval(
        cluster: FakeCluster, tmp_path: Path) -> None:
    """The pass after a recording starts on the receiver's word (and once the loop's own watch shows the write), not
    an --interval later."""
    import time

    (tmp_path / "token").write_text(TOKEN)
    interval = 60  # an answer within a third of it was woken, not the next interval's pass
    policy = POLICY + "leader: {lease_duration: 120s}\n"  # the interval must be shorter than the Lease
    serve = ServeProcess(cluster, tmp_path, tmp_path / "token", policy=policy, args=("--interval", str(interval)))
    with _serving(serve):
        passes = "gpuhealth_remediator_reconcile_passes_total{}"
        assert wait_for(lambda: _samples(_request(serve.port, "GET", "/metrics")[1]).get(passes, 0) >= 1, 20)
        time.sleep(1)  # the first pass over: the next is an interval away unless woken
        posted = time.monotonic()
        status, _ = _request(serve.port, "POST", "/alerts", json.dumps(webhook("gpu-3", "cordon")).encode())
        assert status == 202
        assert wait_for(lambda: any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-3")), interval / HEADROOM)
        assert time.monotonic() - posted < interval / HEADROOM


def test_a_frozen_loop_process_blocks_neither_the_recordings_wakes_nor_a_scrape(
        cluster: FakeCluster, tmp_path: Path) -> None:
    """The loop's process alive but not reading its pipe (SIGSTOP here: a frozen process): the intake's wakes, more
    than the pipe's buffer holds, return at once, a scrape's ask for the loop's metrics ends within its timeout
    (503, never a hung request thread), and stopping it still escalates to SIGKILL."""
    import time

    config = _loop_config(cluster, tmp_path)
    process = LoopProcess(config)
    stop = threading.Event()
    process.start(stop)
    try:
        assert wait_for(process.ready, 30)
        assert process.pid is not None
        os.kill(process.pid, signal.SIGSTOP)
        woken = threading.Thread(target=lambda: [process.wake(str(10**9 + i)) for i in range(5000)], daemon=True)
        woken.start()
        woken.join(5)
        assert not woken.is_alive()  # ~1,700 wakes fill a 64 KiB pipe: an intake worker must not wait on it
        asked = time.monotonic()
        answers: list[str | None] = []
        scrape = threading.Thread(target=lambda: answers.append(process.metrics_text(1.0)), daemon=True)
        scrape.start()
        scrape.join(5)
        assert answers == [None] and time.monotonic() - asked < 3
        ended = time.monotonic()
        process.join(1.0)  # stop, then SIGTERM (held: the process is stopped), then SIGKILL
        assert wait_for(lambda: process.health()[0] is False, 5) and time.monotonic() - ended < 10
        assert process.health() == (False, "the reconcile loop's process ended (exit code -9)")
    finally:
        stop.set()
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(process.pid, signal.SIGKILL)  # type: ignore[arg-type]
