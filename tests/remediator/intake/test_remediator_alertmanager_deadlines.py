"""An Alertmanager member that answers one byte at a time (tests/fakes/dripping_server.py) must not stall remediation:
every call to it has a total deadline (alertmanager.timeout), the pass's deadline bounds it too, and a leader whose
pass does not end by its deadline lets the Lease go, so that a standby (a second remediator on the same fake API
server) takes over. Deadlines are scaled down through the policy: a 0.5 s timeout, a 3 s Lease."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from gpuhealth.remediator.decide.decision import NodePlan
from tests.fakes.apiserver import FakeCluster
from tests.fakes.dripping_server import DrippingServer
from tests.support.headroom import HEADROOM
from tests.support.polling import wait_for
from tests.support.remediator_harness import Harness


@pytest.fixture
def dripping() -> Iterator[DrippingServer]:
    with DrippingServer(every=0.05) as server:  # 100 kB at 20 bytes a second: 80 minutes an answer
        yield server


def policy(url: str, timeout: str, lease: str = "15s") -> str:
    return yaml.safe_dump({"alertmanager": {"url": url, "timeout": timeout, "sync_interval": "30s", "min_uptime": "0s"},
                           "leader": {"lease_duration": lease}, "budget": {"max_disrupted": 5, "max_cordoned": 10}})


def timed_pass(h: Harness, limit: float) -> tuple[list[NodePlan] | None, float]:
    """One pass, in a thread so that a pass that never ends fails the test instead of hanging it."""
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(plans=h.step()), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"the pass was still running after {limit:g}s"
    return result["plans"], time.monotonic() - started


def test_a_member_that_drips_its_answer_is_cut_at_the_timeout_and_the_pass_goes_on(
        cluster: FakeCluster, dripping: DrippingServer) -> None:
    h = Harness(cluster, policy(dripping.url, "0.5s"))
    h.fire("gpu-1", "cordon")
    h.fire("gpu-2", "drain")
    plans, took = timed_pass(h, 15)
    decisions = h.decisions(plans)
    assert ("gpu-1", "cordon", "execute") in decisions and cluster.taints("gpu-1")  # remediation went on
    assert ("gpu-2", "drain", "deferred") in decisions  # its silence check was cut too: on_error defer
    assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="error") == 1
    assert h.metric("gpuhealth_remediator_alertmanager_calls_cut_total", reason="deadline") >= 2
    assert took < 5, f"the pass took {took:.1f}s"
    assert dripping.dripped < 100  # a few bytes each: no call waited for the answer


def test_the_passs_deadline_bounds_a_call_whose_own_timeout_is_longer(cluster: FakeCluster,
                                                                      dripping: DrippingServer) -> None:
    h = Harness(cluster, policy(dripping.url, "60s", lease="3s"))  # a renew deadline of 2 s bounds the pass
    h.fire("gpu-1", "cordon")
    plans, took = timed_pass(h, 15)
    assert ("gpu-1", "cordon", "execute") in h.decisions(plans)
    assert h.metric("gpuhealth_remediator_alertmanager_calls_cut_total", reason="deadline") == 1
    assert 1.5 < took < 2 * HEADROOM, f"the pass took {took:.1f}s"  # cut at the renew deadline, 2 s


class LiveHarness(Harness):
    """A remediator on the real clock: its Lease, its renewals and its passes take real time."""

    @property
    def now(self) -> datetime:
        return datetime.now(UTC)

    @now.setter
    def now(self, value: datetime) -> None:
        pass


def holder(cluster: FakeCluster) -> str:
    leases = list(cluster.leases.values())
    return str(leases[0]["spec"].get("holderIdentity")) if leases else ""


def test_a_leader_whose_pass_does_not_end_by_its_deadline_lets_the_lease_go_and_the_standby_takes_over(
        cluster: FakeCluster, dripping: DrippingServer) -> None:
    text = policy(dripping.url, "60s", lease="3s")  # passes end within 2 s; a renewal every second
    a = LiveHarness(cluster, text, identity="replica-a", timeout=30.0, start=datetime.now(UTC))
    b = LiveHarness(cluster, text, identity="replica-b", timeout=30.0, start=datetime.now(UTC))
    a.fire("gpu-1", "cordon")
    cluster.delay("PATCH", r"^/api/v1/nodes/gpu-1$", 10, times=1)  # a's cordon hangs in the API server
    patched = cluster.requests.count(("PATCH", "/api/v1/nodes/gpu-1"))  # the webhook's record
    stop = threading.Event()
    loops = [threading.Thread(target=h.rem.run_forever, args=(stop, 0.2), daemon=True) for h in (a, b)]
    try:
        loops[0].start()
        assert wait_for(lambda: holder(cluster) == "replica-a", 5)
        loops[1].start()
        assert wait_for(lambda: cluster.requests.count(("PATCH", "/api/v1/nodes/gpu-1")) > patched, 10)  # stuck
        stuck_at = time.monotonic()
        assert wait_for(lambda: holder(cluster) == "replica-b", 8), f"the Lease is still {holder(cluster)!r}'s"
        took_over = time.monotonic() - stuck_at
        assert not a.rem.is_leader()
        assert a.metric("gpuhealth_remediator_lease_releases_total") == 1
        assert wait_for(lambda: bool(cluster.taints("gpu-1")), 8)  # the new leader acted
        print(f"standby took over {took_over:.1f}s after the leader's pass got stuck (renew deadline 2s)")
        assert took_over < 6  # the 2 s deadline, a renewal period (1 s) of grace, the ticks of both replicas
    finally:
        stop.set()
        for loop in loops:
            loop.join(15)
