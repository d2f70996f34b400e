"""The intake's retries: a node's own rejection is final, an API failure is retried, and neither makes another
node's posts wait. Real parts: the official client against the fake API server, the receiver's Flask app."""

from __future__ import annotations

import gc
import json
import threading
import time
import zlib
from collections.abc import Iterator

import pytest

from gpuhealth.remediator.intake.queue import Intake
from gpuhealth.remediator.intake.receiver import Receiver
from gpuhealth.remediator.intake.recorder import UNCHANGED_PAUSE_S
from gpuhealth.remediator.intake.webhook import parse_webhook
from gpuhealth.remediator.service import _freeze_when_synced
from tests.fakes.apiserver import FakeCluster
from tests.support.headroom import HEADROOM
from tests.support.remediator_harness import Harness, webhook

A, B = "gpu-a", "gpu-b"
assert zlib.crc32(A.encode()) % 2 == zlib.crc32(B.encode()) % 2, "the test needs two nodes on one worker"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node(A)
        c.add_node(B)
        yield c


def slow_retries(h: Harness, retry: tuple[float, ...], hold_off: float = 0.5) -> Intake:
    """The harness's intake with retries as long as production's (it retries after 10 and 20 ms)."""
    h.intake.stop()
    h.intake = h.rem.start_intake(retry=retry, hold_off=hold_off)
    h.cluster.on_close.append(h.intake.stop)
    return h.intake


# The retry delay these tests give the intake: what is asserted is that an answer did not wait for it (under a third
# of it) or did (over it, under three times it): a busy CI machine's delays stay inside both bounds.
RETRY_S = 6.0


def patches(cluster: FakeCluster, node: str) -> int:
    return cluster.requests.count(("PATCH", f"/api/v1/nodes/{node}"))


def post(h: Harness, node: str, status: str = "firing") -> None:
    response = h.http.post("/alerts", json=webhook(node, "reboot", status=status),
                           headers={"Authorization": "Bearer s3cret-token"})
    assert response.status_code == 202, response.get_json()


def wait_until(check: object, timeout: float) -> float:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.005)
    return time.monotonic() - started


@pytest.mark.parametrize("status", [403, 422])
def test_a_nodes_permanent_rejection_is_not_retried_and_does_not_delay_the_next_node(cluster: FakeCluster,
                                                                                      status: int) -> None:
    h = Harness(cluster)
    intake = slow_retries(h, (RETRY_S, RETRY_S, RETRY_S))
    cluster.fail("PATCH", f"/api/v1/nodes/{A}$", status, times=100)  # an admission webhook refuses this node
    started = time.monotonic()
    post(h, A)
    post(h, B)
    assert intake.join(RETRY_S) and time.monotonic() - started < RETRY_S / HEADROOM  # no retry was waited for
    assert h.state(B).active and not h.state(A).alerts
    assert patches(cluster, A) == 1  # tried once: retrying a 4xx cannot help
    assert h.metric("gpuhealth_remediator_webhook_errors_total", reason="record_failed") == 1  # counted, logged
    assert h.post(webhook(B, "reboot")).status_code == 202  # one node's rejection refuses no other webhook


def test_a_retried_node_waits_alone_while_the_next_node_is_recorded_at_once(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    intake = slow_retries(h, (RETRY_S, RETRY_S), hold_off=0.0)  # no hold-off: B is taken while A's failure is fresh
    cluster.fail("PATCH", f"/api/v1/nodes/{A}$", 500, times=1)  # the API fails A's write once
    started = time.monotonic()
    post(h, A)
    wait_until(lambda: patches(cluster, A) == 1, RETRY_S / HEADROOM)
    post(h, B)  # queued on the same worker, behind A's retry
    assert wait_until(lambda: h.state(B).active, RETRY_S / HEADROOM) < RETRY_S / HEADROOM  # not behind A's retry
    assert not h.state(A).alerts  # A is still waiting for its retry
    assert intake.join(RETRY_S * HEADROOM)
    assert h.state(A).active and RETRY_S - 0.1 < time.monotonic() - started < RETRY_S * HEADROOM  # by its retry
    assert patches(cluster, A) == 2
    assert h.metric("gpuhealth_remediator_webhook_errors_total", reason="record_failed") == 0


def test_a_nodes_later_post_waits_behind_its_retry_and_they_are_recorded_in_order(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    intake = slow_retries(h, (0.5, 0.5), hold_off=0.0)
    cluster.fail("PATCH", f"/api/v1/nodes/{A}$", 503, times=1)
    post(h, A)  # firing: fails once, waits for its retry
    wait_until(lambda: patches(cluster, A) == 1, 2)
    post(h, A, status="resolved")  # must not overtake the firing post
    time.sleep(0.1)
    assert not h.state(A).alerts and intake.pending() == 2  # both wait for A's retry, in order
    assert intake.join(5)
    assert h.state(A).alerts["fp-gpu-a-GPUFault"].status == "resolved"


def test_an_api_failure_that_outlasts_the_retries_is_dropped_counted_and_the_queue_empties(
        cluster: FakeCluster) -> None:
    h = Harness(cluster)
    intake = slow_retries(h, (0.1, 0.1), hold_off=0.0)
    cluster.fail("PATCH", f"/api/v1/nodes/{A}$", 500, times=3)  # the first try and both retries
    post(h, A)
    post(h, B)
    assert intake.join(3) and intake.pending() == 0
    assert patches(cluster, A) == 3 and not h.state(A).alerts and h.state(B).active
    assert h.metric("gpuhealth_remediator_webhook_errors_total", reason="record_failed") == 1


def test_a_worker_lets_go_of_the_interpreter_after_each_node_it_need_not_write_and_only_then(
        cluster: FakeCluster) -> None:
    h = Harness(cluster)
    assert h.rem.receiver.pause is time.sleep, "the intake's workers record with the pause"
    pauses: list[float] = []
    h.rem.receiver.pause = pauses.append
    h.fire(A, "reboot")  # new: written (the worker let go while its PATCH was under way)
    assert (pauses, patches(cluster, A)) == ([], 1)
    h.advance(seconds=30)
    h.fire(A, "reboot")  # Alertmanager's repeat within a minute: nothing to write, and the worker lets go
    h.fire(B, "reboot")
    assert (pauses, patches(cluster, A), patches(cluster, B)) == ([UNCHANGED_PAUSE_S], 1, 1)
    h.advance(minutes=2)
    h.fire(A, "reboot")  # seen again after a minute: last_seen is written
    assert (pauses, patches(cluster, A)) == ([UNCHANGED_PAUSE_S], 2)


def test_recording_before_the_answer_and_the_alertmanager_sync_never_pause(cluster: FakeCluster) -> None:
    """Where the answer (no intake) or the loop's pass (the Alertmanager sync) waits for the recording, there is no
    answer to make way for."""
    h = Harness(cluster)
    pauses: list[float] = []
    receiver = Receiver(h.kube, h.rem.recorder, h.rem.metrics, lambda: h.now)  # no intake: recorded, then answered
    receiver.pause = h.rem.receiver.pause = pauses.append
    batch = parse_webhook(json.dumps(webhook(A, "reboot")), h.policy)
    assert receiver.accept(batch).queued == [A] and patches(cluster, A) == 1
    h.advance(seconds=30)
    assert receiver.accept(batch).queued == [A] and patches(cluster, A) == 1  # seen again: nothing written
    assert h.rem.recorder.record(batch).recorded == [A] and patches(cluster, A) == 1  # as the sync records
    assert pauses == []


def test_the_receiver_freezes_what_it_holds_once_the_nodes_are_listed_and_not_before(cluster: FakeCluster) -> None:
    """A full collection walked every object the receiver's process holds (its modules, 10,000 nodes' metadata) and
    stopped the answering threads for 120-160 ms: once the Nodes are listed those leave the collector's walk.
    The process-wide freeze count is not this test's to read before the end: another test of the same worker may
    have frozen (or may yet freeze) the collector, so what is asserted is what this freezer did and when."""
    h = Harness(cluster)
    stop = threading.Event()
    froze: list[bool] = []
    try:
        gate = threading.Event()
        synced = h.kube.cache.wait_synced  # type: ignore[union-attr]
        h.kube.cache.wait_synced = lambda timeout: gate.is_set() and synced(timeout)  # type: ignore[union-attr,method-assign]
        freezer = threading.Thread(target=lambda: froze.append(_freeze_when_synced(h.kube, stop)))
        freezer.start()
        time.sleep(0.05)
        assert freezer.is_alive() and froze == []  # not listed yet: still waiting, nothing frozen by it
        gate.set()
        freezer.join(15)
        assert not freezer.is_alive() and froze == [True] and gc.get_freeze_count() > 1000
    finally:
        stop.set()
        gc.unfreeze()  # the other tests of this worker run with the collector as it was


def test_the_freeze_waits_for_nothing_without_a_cache_and_ends_with_the_process(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    stop = threading.Event()
    cache, h.kube.cache = h.kube.cache, None
    assert _freeze_when_synced(h.kube, stop) is False  # returns at once: no cache to wait for
    h.kube.cache = cache
    stop.set()
    assert _freeze_when_synced(h.kube, stop) is False  # stopped: returns without freezing
