"""Nothing acknowledged is lost: the real `gpuhealth-remediator serve` is SIGKILLed right after it answered 202
for a 40-node post, before (or while) its intake writes the alerts on the Nodes, and restarted. Debian's real
Alertmanager still lists the 40 alerts, so the new leader's first sync records every node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fake_cluster import FakeCluster
from real_alertmanager import RealAlertmanager, free_port, webhook_of

from remediator.nodestate import STATE_ANNOTATION

BIN = Path(sys.executable).parent
TOKEN = "crash-test-token"
NODES = 40
SYNC_SECONDS = 2.0
LEASE_SECONDS = 3


class Serve:
    def __init__(self, workdir: Path, cluster: FakeCluster, alertmanager: str) -> None:
        self.workdir, self.port = workdir, free_port()
        (workdir / "token").write_text(TOKEN)
        (workdir / "kubeconfig").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": cluster.url}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
            "users": [{"name": "t", "user": {"token": "unused"}}]}))
        (workdir / "policy.yaml").write_text(yaml.safe_dump({
            "alertmanager": {"url": alertmanager, "sync_interval": f"{SYNC_SECONDS:g}s", "min_uptime": "0s"},
            "leader": {"lease_duration": f"{LEASE_SECONDS}s"}}))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.workdir / "remediator.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [str(BIN / "gpuhealth-remediator"), "serve", "--policy", str(self.workdir / "policy.yaml"),
             "--listen", f"127.0.0.1:{self.port}", "--token-file", str(self.workdir / "token"),
             "--kubeconfig", str(self.workdir / "kubeconfig"), "--interval", "1"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.workdir / "remediator.log").read_text()[-3000:])
            time.sleep(0.05)

    def post(self, body: dict[str, object]) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/alerts", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {TOKEN}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def fleet() -> Iterator[FakeCluster]:
    with FakeCluster() as cluster:
        for i in range(NODES):
            cluster.add_node(f"gpu-{i}")
        yield cluster


def recorded(cluster: FakeCluster) -> int:
    return sum(1 for i in range(NODES) if STATE_ANNOTATION in cluster.annotations(f"gpu-{i}"))


@pytest.mark.parametrize("kill_after_ms", [0, 50])
def test_a_post_answered_202_and_then_killed_is_recorded_by_the_restarted_leader(
        fleet: FakeCluster, tmp_path: Path, kill_after_ms: int) -> None:
    with RealAlertmanager() as am:  # it holds the alerts; its own webhook is not configured, so only the API helps
        for i in range(NODES):
            am.push(f"gpu-{i}", "GPUXidFatal", remediation="cordon")
        listed = am.wait_listed(NODES)
        serve = Serve(tmp_path, fleet, am.url)
        try:
            serve.start()
            assert serve.post(webhook_of(listed)) == 202
            time.sleep(kill_after_ms / 1000)
            serve.kill()
            at_kill = recorded(fleet)

            restarted = time.monotonic()
            serve.start()
            deadline = restarted + LEASE_SECONDS + SYNC_SECONDS + 30
            while recorded(fleet) < NODES and time.monotonic() < deadline:
                time.sleep(0.05)
            took = time.monotonic() - restarted
            print(f"killed {kill_after_ms} ms after the 202: {at_kill}/{NODES} recorded; all {recorded(fleet)} "
                  f"recorded {took:.1f} s after the restart (lease {LEASE_SECONDS} s, sync every {SYNC_SECONDS:g} s)")
            assert recorded(fleet) == NODES
            # a new process waits out the dead one's Lease, then syncs before its first action
            assert took < LEASE_SECONDS + 2 * SYNC_SECONDS + 10
        finally:
            serve.stop()
