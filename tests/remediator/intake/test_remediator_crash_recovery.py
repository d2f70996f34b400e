"""Nothing acknowledged is lost: the real `gpuhealth-remediator serve` is SIGKILLed right after it answered 202
for a 40-node post, before (or while) its intake writes the alerts on the Nodes, and restarted. Debian's real
Alertmanager still lists the 40 alerts, so the new leader's first sync records every node."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.remediator.real_remediator import ServeProcess
from tests.support.headroom import HEADROOM
from tests.support.real_alertmanager import RealAlertmanager, webhook_of

TOKEN = "crash-test-token"
NODES = 40
SYNC_SECONDS = 2.0
LEASE_SECONDS = 3
STARTUP_SECONDS = 5  # serve's start and its first listing of the fleet, on a quiet machine


def post(serve: ServeProcess, body: dict[str, object]) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{serve.port}/alerts", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return int(r.status)


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
        (tmp_path / "token").write_text(TOKEN)
        policy = yaml.safe_dump({
            "alertmanager": {"url": am.url, "sync_interval": f"{SYNC_SECONDS:g}s", "min_uptime": "0s"},
            "leader": {"lease_duration": f"{LEASE_SECONDS}s"}})
        serve = ServeProcess(fleet, tmp_path, tmp_path / "token", policy)
        try:
            serve.start()
            assert post(serve, webhook_of(listed)) == 202
            time.sleep(kill_after_ms / 1000)
            serve.kill()
            at_kill = recorded(fleet)

            restarted = time.monotonic()
            serve.start()
            # a new process waits out the dead one's Lease, then syncs before its first action: with the process's
            # start and its first listing, on a busy machine too
            bound = HEADROOM * (LEASE_SECONDS + 2 * SYNC_SECONDS + STARTUP_SECONDS)
            deadline = restarted + bound + 10
            while recorded(fleet) < NODES and time.monotonic() < deadline:
                time.sleep(0.05)
            took = time.monotonic() - restarted
            print(f"killed {kill_after_ms} ms after the 202: {at_kill}/{NODES} recorded; all {recorded(fleet)} "
                  f"recorded {took:.1f} s after the restart (lease {LEASE_SECONDS} s, sync every {SYNC_SECONDS:g} s)")
            assert recorded(fleet) == NODES
            assert took < bound
        finally:
            serve.stop()
