"""Slow and stalled clients against the real `gpuhealth-remediator serve` (a process of its own, against the fake
API server), over real sockets on 127.0.0.1: they must not take the receiver's capacity. While 150 clients stall
or drip their headers or bodies a byte at a time, /healthz and a normal webhook are answered at once; the slow
ones are answered 408 in JSON and closed once their deadline passes; the connection cap holds."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.apiserver import FakeCluster
from tests.remediator.http.socket_reads import until_closed
from tests.remediator.real_remediator import ServeProcess
from tests.support.remediator_harness import webhook

TOKEN = "slow-clients-token"
TIMEOUTS = 2.0  # the test server's header, body and idle timeouts (production: 10 s, 30 s, 10 s)


@dataclass
class Server:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def request(self, method: str, path: str, body: bytes | None = None, timeout: float = 5.0,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, float]:
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read(), time.monotonic() - started
        finally:
            conn.close()

    def post_webhook(self, node: str, timeout: float = 5.0) -> tuple[int, bytes, float]:
        return self.request("POST", "/alerts", json.dumps(webhook(node, "cordon")).encode(), timeout,
                            {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})

    def sockets(self) -> int:
        """Open sockets of the server process."""
        count = 0
        for fd in Path(f"/proc/{self.proc.pid}/fd").iterdir():
            with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                count += os.readlink(fd).startswith("socket:")
        return count


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    max_connections = getattr(request, "param", 400)
    with FakeCluster() as cluster:
        for i in range(4):
            cluster.add_node(f"gpu-{i}")
        (tmp_path / "token").write_text(TOKEN)
        serve = ServeProcess(cluster, tmp_path, tmp_path / "token", args=[
            "--header-timeout", str(TIMEOUTS), "--body-timeout", str(TIMEOUTS),
            "--idle-timeout", str(int(TIMEOUTS)), "--max-connections", str(max_connections),
            # every client here is 127.0.0.1: the cap per address has a test of its own (test_remediator_probe_port)
            "--max-connections-per-source", str(max_connections)])
        try:
            yield Server(serve.port, serve.start(30), serve.log)
        finally:
            serve.stop()


class SlowClients:
    """`n` connections of each kind: stalled (connected, nothing sent), dripping headers, dripping a body;
    the drippers send a byte every `every` seconds from one thread."""

    def __init__(self, port: int, n: int, every: float = 0.2) -> None:
        self.every = every
        self.stalled = [self._connect(port) for _ in range(n)]
        self.headers = [self._connect(port) for _ in range(n)]
        self.bodies = [self._connect(port) for _ in range(n)]
        for s in self.headers:
            s.sendall(b"POST /alerts HTTP/1.1\r\nHost: remediator\r\n")
        for s in self.bodies:
            s.sendall(b"POST /alerts HTTP/1.1\r\nHost: remediator\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 100000\r\n\r\n{")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    @staticmethod
    def _connect(port: int) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def _drip(self) -> None:
        while not self.stop.wait(self.every):
            for s in self.headers:
                with contextlib.suppress(OSError):
                    s.send(b"x")  # an endless header line
            for s in self.bodies:
                with contextlib.suppress(OSError):
                    s.send(b" ")

    def all(self) -> list[socket.socket]:
        return self.stalled + self.headers + self.bodies

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.all():
            s.close()


def test_slow_and_stalled_clients_do_not_stop_health_checks_or_webhooks(server: Server) -> None:
    clients = SlowClients(server.port, 50)  # 150 connections, 3 x 50, against 4 threads
    try:
        time.sleep(0.3)  # every slow client is in, and dripping
        health, hooks = [], []
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < TIMEOUTS * 0.8:  # all within the slow clients' deadline
            status, body, took = server.request("GET", "/healthz", timeout=3)
            assert status == 200, body
            health.append(took)
            if i % 3 == 0:
                status, body, took = server.post_webhook(f"gpu-{i % 4}", timeout=3)
                assert status == 202, body
                hooks.append(took)
            i += 1
        assert server.sockets() >= 150  # the slow clients were all still connected meanwhile
        print(f"\n150 slow clients: /healthz {len(health)} answers, median {statistics.median(health) * 1000:.1f} ms, "
              f"max {max(health) * 1000:.1f} ms; webhook {len(hooks)} answers, median "
              f"{statistics.median(hooks) * 1000:.1f} ms, max {max(hooks) * 1000:.1f} ms")
        assert len(health) >= 10 and len(hooks) >= 4
        assert max(health) < 1.0 and max(hooks) < 1.0  # not held up (a gunicorn gthread server timed out)
        assert statistics.median(health) < 0.1 and statistics.median(hooks) < 0.1
        # past the deadline each slow client is answered 408 in JSON (headers, body) or closed (stalled)
        for s in clients.headers + clients.bodies:
            data = until_closed(s, TIMEOUTS * 3)
            assert data.startswith(b"HTTP/1.1 408 "), data[:200]
            reason = json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
            assert "not received within" in reason
        for s in clients.stalled:
            assert until_closed(s, TIMEOUTS * 3) == b""
        elapsed = time.monotonic() - started
        assert elapsed < TIMEOUTS * 3
        status, body, _ = server.request("GET", "/metrics")
        text = body.decode()
        for reason in ("header_timeout", "body_timeout"):
            line = f'gpuhealth_remediator_http_rejected_total{{reason="{reason}"}} 50.0'
            assert line in text
    finally:
        clients.close()
    assert server.request("GET", "/healthz")[0] == 200


@pytest.mark.parametrize("server", [20], indirect=True)
def test_the_connection_cap_holds_and_stalled_connections_are_cut_so_probes_get_in_again(server: Server) -> None:
    before = server.sockets()
    stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(40)]
    try:
        time.sleep(0.5)
        assert server.sockets() - before <= 20  # the other 20 wait in the listen backlog, not in the process
        # a probe waits for a slot: the idle deadline cuts the stalled connections, then it is answered
        status, _, took = server.request("GET", "/healthz", timeout=TIMEOUTS * 4)
        assert status == 200 and took < TIMEOUTS * 3
    finally:
        for s in stalled:
            s.close()


def test_the_servers_own_refusals_are_json_too(server: Server) -> None:
    over = json.dumps(webhook("gpu-1", "cordon")).encode() + b" " * (1 << 20)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(over[i:i + 65536]), over[i:i + 65536])
                      for i in range(0, len(over), 65536)) + b"0\r\n\r\n"
    status, body, _ = server.request("POST", "/alerts", chunks, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    assert status == 413 and "Request Entity Too Large" in json.loads(body)["error"]
    status, body, _ = server.request("GET", "/healthz", headers={"X-Pad": "x" * 20000})
    assert status == 431 and json.loads(body)["error"].startswith("431")
    status, body, _ = server.request("GET", "/nope")
    assert status == 404 and json.loads(body)["error"].startswith("404")
    status, body, _ = server.request("POST", "/alerts", b"[" * 100_000 + b"]" * 100_000, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert status == 400 and "nested too deeply" in json.loads(body)["error"]
    assert "Traceback" not in server.log.read_text()


def test_sigterm_stops_the_server_cleanly(server: Server) -> None:
    assert server.post_webhook("gpu-2")[0] == 202
    os.killpg(server.proc.pid, signal.SIGTERM)
    assert server.proc.wait(15) == 0
    assert "Traceback" not in server.log.read_text()
