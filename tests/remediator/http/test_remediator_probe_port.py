"""Clients without the token cannot starve the remediator's health checks (issue 23, item 7), nor hold a request
half-sent without an answer (item 14). The real `gpuhealth-remediator serve`, a process of its own against the
fake API server, run with the chart's flags: its container args (the addresses moved to 127.0.0.1), its ports,
its probes' paths and their timeout (the kubelet's default, 1 s). Clients come from several loopback addresses
(127.0.0.0/8 is all loopback on Linux), as pods from several IPs would.

- 300 connections dripping headers into the webhook's port held its 256 slots, and 26 of 45 /healthz probes
  (1 s) failed, so the kubelet restarted the pod: the probes now have a port of their own (--metrics-listen).
- One address holds at most --max-connections-per-source (128) of the webhook's port, and 8 of the probes'.
- 4 addresses with 8 dripping connections each held all 32 of the probes' port, and 35 of 45 liveness probes failed
  (issue 35, item 7): a full probe port now closes its oldest slow client to take a new connection.
- A request that goes silent part-way (a body shorter than its Content-Length) is answered 408 once it has sent
  nothing for --idle-timeout, as one too slow is, where it was closed without a word.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.apiserver import FakeCluster
from tests.remediator.http.socket_reads import until_closed
from tests.remediator.real_remediator import ServeProcess
from tests.support.chart_render import render
from tests.support.headroom import HEADROOM
from tests.support.polling import wait_for
from tests.support.real_alertmanager import free_port
from tests.support.remediator_harness import webhook

TOKEN = "probe-port-token"
SET_BY_THE_TEST = ("--policy", "--token-file", "--listen")  # ServeProcess's own: a temp file, a free port


def _container() -> dict[str, Any]:
    (deployment,) = [d for d in render() if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "gpuhealth-remediator"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@dataclass
class Remediator:
    serve: ServeProcess
    local: dict[str, int]  # the chart's container port name -> the port it listens on here
    container: dict[str, Any]

    def probe_url(self, probe: str) -> tuple[int, str, float]:
        """(port, path, timeout) of the chart's livenessProbe or readinessProbe."""
        spec = self.container[probe]
        return self.local[spec["httpGet"]["port"]], spec["httpGet"]["path"], float(spec.get("timeoutSeconds", 1))

    def sockets(self) -> int:
        assert self.serve.proc is not None
        count = 0
        for fd in Path(f"/proc/{self.serve.proc.pid}/fd").iterdir():
            with contextlib.suppress(FileNotFoundError):
                count += os.readlink(fd).startswith("socket:")
        return count

    def metric(self, line: str) -> float | None:
        port, _, _ = self.probe_url("readinessProbe")
        status, body = get(port, "/metrics", 5)
        found = [float(x.rsplit(" ", 1)[1]) for x in body.decode().splitlines() if x.startswith(line + " ")]
        return found[0] if status == 200 and found else None


@pytest.fixture(scope="module")
def chart_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remediator]:
    """The chart's remediator, started and ready (its readinessProbe answers 200), stopped after."""
    tmp_path = tmp_path_factory.mktemp("probe-port")
    container = _container()
    ports = {p["name"]: int(p["containerPort"]) for p in container["ports"]}
    local_of = {number: free_port() for number in ports.values()}
    args = []
    for arg in container["args"][1:]:
        flag, _, value = arg.partition("=")
        if flag in SET_BY_THE_TEST:
            continue
        host, _, port = value.rpartition(":")
        if host == "0.0.0.0" and port.isdigit():
            value = f"127.0.0.1:{local_of[int(port)]}"
        args.append(f"{flag}={value}" if value else flag)
    with FakeCluster() as cluster:
        for i in range(2):
            cluster.add_node(f"gpu-{i}")
        (tmp_path / "token").write_text(TOKEN)
        serve = ServeProcess(cluster, tmp_path, tmp_path / "token", args=args)
        listen = container["args"][[a.partition("=")[0] for a in container["args"]].index("--listen")]
        local_of[int(listen.rpartition(":")[2])] = serve.port
        remediator = Remediator(serve, {name: local_of[n] for name, n in ports.items()}, container)
        port, path, _ = remediator.probe_url("readinessProbe")
        try:
            _start_and_wait(serve, port, path)
            yield remediator
        finally:
            serve.stop()


def _start_and_wait(serve: ServeProcess, port: int, path: str) -> None:
    """ServeProcess.start waits on its --listen port; the chart's readiness probe may be on another."""
    serve.port, webhook_port = port, serve.port
    try:
        serve.ready = path
        serve.start(30)
    finally:
        serve.port = webhook_port


def get(port: int, path: str, timeout: float, source: str = "127.0.0.1") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post_webhook(port: int, timeout: float) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/alerts", json.dumps(webhook("gpu-1", "cordon")).encode(),
                     {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


class Drippers:
    """`per_source` connections from each address of `sources`, no token, each sending a header line a byte
    every `every` seconds (never idle, never done until the header deadline)."""

    def __init__(self, port: int, sources: list[str], per_source: int, every: float = 0.5) -> None:
        self.socks = []
        for source in sources:
            for _ in range(per_source):
                s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
                with contextlib.suppress(OSError):  # closed at once by the server: over the cap for its address
                    s.sendall(b"POST /alerts HTTP/1.1\r\nHost: remediator\r\nX-Drip: ")
                self.socks.append(s)
        self.every, self.stop = every, threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self) -> None:
        while not self.stop.wait(self.every):
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.send(b"x")

    def __enter__(self) -> Drippers:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def _probe_for(remediator: Remediator, seconds: float, source: str = "127.0.0.1") -> tuple[int, list[str]]:
    """Both probes, as the kubelet sends them (its timeout), every 100 ms for `seconds`: how many, the failures."""
    failed, tries = [], 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for probe in ("livenessProbe", "readinessProbe"):
            port, path, timeout = remediator.probe_url(probe)
            tries += 1
            try:
                status, body = get(port, path, timeout, source)
                if status != 200:
                    failed.append(f"{path}: {status} {body[:100]!r}")
            except OSError as exc:
                failed.append(f"{path}: {exc!r}")
        time.sleep(0.1)
    return tries, failed


def test_clients_dripping_headers_into_every_webhook_connection_do_not_fail_the_probes(
        chart_serve: Remediator) -> None:
    before = chart_serve.sockets()
    # 3 addresses x 100: each under the cap per address, together more than the 256 connections
    with Drippers(chart_serve.serve.port, ["127.0.0.2", "127.0.0.3", "127.0.0.4"], 100):
        # (nearly) every slot taken: waitress counts its own listening socket and wake-up pipe among the 256
        assert wait_for(lambda: chart_serve.sockets() - before >= 250, 10), chart_serve.sockets() - before
        with pytest.raises(OSError):  # the webhook's port is full: what NetworkPolicy keeps other pods from
            post_webhook(chart_serve.serve.port, 1)
        tries, failed = _probe_for(chart_serve, 3)
    assert failed == [] and tries >= 20


def test_one_address_cannot_take_every_webhook_connection(chart_serve: Remediator) -> None:
    closed = 'gpuhealth_remediator_http_rejected_total{reason="per_source_limit"}'
    start_count = chart_serve.metric(closed) or 0.0
    with Drippers(chart_serve.serve.port, ["127.0.0.5"], 300):
        # 128 held (--max-connections-per-source), the other 172 closed unanswered, and counted
        assert wait_for(lambda: chart_serve.metric(closed) == start_count + 172, 10), chart_serve.metric(closed)
        assert post_webhook(chart_serve.serve.port, 1) == 202  # another address still gets in at once


def test_one_address_cannot_take_every_probe_connection(chart_serve: Remediator) -> None:
    port, _, _ = chart_serve.probe_url("livenessProbe")
    with Drippers(port, ["127.0.0.6"], 40):  # 8 held, 32 closed
        tries, failed = _probe_for(chart_serve, 2)
    assert failed == [] and tries >= 10


def test_four_addresses_dripping_into_every_probe_connection_do_not_fail_the_probes(chart_serve: Remediator) -> None:
    port, _, _ = chart_serve.probe_url("livenessProbe")
    shed = 'gpuhealth_remediator_http_rejected_total{reason="shed_slow_client"}'
    start_count = chart_serve.metric(shed) or 0.0
    # 8 from each of 4 addresses: under the cap per address, together every one of the port's 32 slots
    with Drippers(port, ["127.0.0.7", "127.0.0.8", "127.0.0.9", "127.0.0.10"], 8):
        tries, failed = _probe_for(chart_serve, 4.5)
    assert failed == [] and tries >= 20
    assert (chart_serve.metric(shed) or 0.0) > start_count  # room was made by closing the slow clients


def test_each_port_serves_only_its_own_paths(chart_serve: Remediator) -> None:
    webhook_port, metrics_port = chart_serve.local["http"], chart_serve.local["metrics"]
    for path in ("/healthz", "/readyz", "/metrics"):
        status, body = get(webhook_port, path, 5)
        assert status == 404 and f"on 127.0.0.1:{metrics_port}" in json.loads(body)["error"]
        assert get(metrics_port, path, 5)[0] == 200
    assert post_webhook(metrics_port, 5) == 404
    assert post_webhook(webhook_port, 5) == 202


# The header and body deadlines of the idle-timeout test: an answer within a third of them came from the idle timeout.
SLOW_DEADLINE_S = 60


def test_a_request_that_goes_silent_part_way_is_answered_408_at_the_idle_timeout(tmp_path: Path) -> None:
    with FakeCluster() as cluster:
        (tmp_path / "token").write_text(TOKEN)
        serve = ServeProcess(cluster, tmp_path, tmp_path / "token", ready="/healthz",
                             args=["--idle-timeout=1", f"--header-timeout={SLOW_DEADLINE_S}",
                                   f"--body-timeout={SLOW_DEADLINE_S}"])
        serve.start(30)
        try:
            # the loop's process answers for its half of /metrics a moment after /healthz: read the counters once
            # both halves are there (on a busy machine that moment was longer than the test's first read)
            assert wait_for(lambda: get(serve.port, "/metrics", 5)[0] == 200, 60)
            short_body = socket.create_connection(("127.0.0.1", serve.port), timeout=5)
            short_body.sendall(b"POST /alerts HTTP/1.1\r\nHost: remediator\r\nAuthorization: Bearer "
                               + TOKEN.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
                               b"\r\n{\"alerts\": [")
            half_headers = socket.create_connection(("127.0.0.1", serve.port), timeout=5)
            half_headers.sendall(b"POST /alerts HTTP/1.1\r\nHost: rem")
            started = time.monotonic()
            with short_body, half_headers:
                for s, what, reason in ((short_body, "body", "body_timeout"),
                                        (half_headers, "headers", "header_timeout")):
                    data = until_closed(s, SLOW_DEADLINE_S / HEADROOM)
                    assert data.startswith(b"HTTP/1.1 408 "), data[:200]  # not closed without a word
                    error = json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
                    assert error == f"408 Request Timeout: request {what} not received: nothing sent for 1 s"
                    _, body = get(serve.port, "/metrics", 5)
                    assert f'gpuhealth_remediator_http_rejected_total{{reason="{reason}"}} 1.0' in body.decode()
            # at the idle timeout (1 s, swept every second), long before the header and body deadlines
            assert time.monotonic() - started < SLOW_DEADLINE_S / HEADROOM
        finally:
            serve.stop()
