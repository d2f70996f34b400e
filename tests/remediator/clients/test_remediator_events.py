"""The audit trail survives API trouble: Events the API does not take (5xx, no answer) are kept and sent later,
in order and once each; a pass never waits long on them; an Event the API refuses (4xx) is dropped and counted.
Real parts: the official client against the fake API server, the ladder through the receiver."""

from __future__ import annotations

import time

from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness

POLICY = ("budget: {max_disrupted: 2, max_cordoned: 6}\nreturn_to_service: {healthy_delay: 10m}\n"
          "evidence: {enabled: false}\n")  # evidence before a rung: tests/remediator/evidence/
EVENTS = "/api/v1/namespaces/default/events$"


def harness(cluster: FakeCluster, retry: tuple[float, ...] = (0.01,),
            backoff: tuple[float, ...] = (3600.0,)) -> Harness:
    h = Harness(cluster, POLICY)
    h.kube.events.retry, h.kube.events.backoff = retry, backoff  # (3600,): no background flush in the test
    return h


def event_posts(cluster: FakeCluster) -> int:
    """Node Events' creations (the breaker's Event on the Lease goes to its own namespace)."""
    return cluster.requests.count(("POST", "/api/v1/namespaces/default/events"))


def test_a_reboot_during_an_event_outage_leaves_no_hole_in_the_audit_trail(cluster: FakeCluster) -> None:
    h = harness(cluster)
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    cluster.fail("POST", EVENTS, 500, times=5)  # the API fails Event creations for a while
    h.fire("gpu-2", "reboot")
    h.step()  # Cordoned (tried twice), Draining (one try: the API is still failing): both kept
    assert cluster.reasons("gpu-2") == [] and h.metric("gpuhealth_remediator_events_pending") == 2
    h.advance(seconds=30)
    h.step()  # DrainFinished and Reboot: one try each, kept
    assert cluster.reasons("gpu-2") == [] and h.metric("gpuhealth_remediator_events_pending") == 4
    assert h.state("gpu-2").rung == "reboot" and cluster.jobs  # the ladder went on: Events never block it
    cluster.update_node("gpu-2", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    h.advance(minutes=2)
    h.step()  # the API takes Events again: the kept ones first, then RebootSucceeded
    assert cluster.reasons("gpu-2") == ["Cordoned", "Draining", "DrainFinished", "Reboot", "RebootSucceeded"]
    assert h.metric("gpuhealth_remediator_events_pending") == 0
    assert h.metric("gpuhealth_remediator_events_sent_late_total") == 4
    assert h.metric("gpuhealth_remediator_events_dropped_total", reason="outbox_full") == 0


def test_kept_events_are_sent_by_a_background_flush_without_a_later_event(cluster: FakeCluster) -> None:
    h = harness(cluster, backoff=(0.05, 0.1))
    cluster.fail("POST", EVENTS, 503, times=3)  # both tries of the pass, and the first flush
    h.fire("gpu-1", "cordon")
    h.step()
    assert cluster.reasons("gpu-1") == []
    deadline = time.monotonic() + 5
    # the API has the Event a moment before its answer reaches the outbox, which then lets it go
    while cluster.reasons("gpu-1") != ["Cordoned"] or h.metric("gpuhealth_remediator_events_pending") != 0:
        assert time.monotonic() < deadline, "the kept Event was never sent"
        time.sleep(0.01)
    assert cluster.reasons("gpu-1") == ["Cordoned"]
    assert event_posts(cluster) == 4  # tried twice in the pass, once by a flush that failed, then sent once


def test_a_pass_is_not_held_up_by_failing_events_and_the_outbox_is_bounded(cluster: FakeCluster) -> None:
    h = harness(cluster, retry=(0.1, 0.4))  # production's in-pass retries
    h.kube.events.capacity = 3
    cluster.fail("POST", EVENTS, 500, times=1000)  # the outage lasts the whole test
    for i in range(1, 6):
        h.fire(f"gpu-{i}", "cordon")
    started = time.monotonic()
    plans = h.step()
    elapsed = time.monotonic() - started
    assert [d for d in h.decisions(plans) if d[2] == "execute"] == [(f"gpu-{i}", "cordon", "execute")
                                                                    for i in range(1, 6)]
    assert elapsed < 1.5  # the first Event's retries (0.5 s), then one try for each of the others
    # one Event's 3 tries, then at most one try for each of the others: 3 + 4 when the nodes' plans run one after
    # another; written side by side (kube_api.parallel_writes), an Event kept while another's retries run gets none
    assert 3 <= event_posts(cluster) <= 3 + 4
    assert h.metric("gpuhealth_remediator_events_pending") == 3
    assert h.metric("gpuhealth_remediator_events_dropped_total", reason="outbox_full") == 2  # the oldest two


def test_an_event_the_api_refuses_is_dropped_and_counted_not_retried(cluster: FakeCluster) -> None:
    h = harness(cluster, backoff=(0.01,))
    cluster.fail("POST", EVENTS, 422, times=10)
    h.fire("gpu-1", "cordon")
    h.step()
    time.sleep(0.1)
    assert event_posts(cluster) == 1 and cluster.reasons("gpu-1") == []
    assert h.metric("gpuhealth_remediator_events_dropped_total", reason="rejected") == 1
    assert h.metric("gpuhealth_remediator_events_pending") == 0
    assert cluster.taints("gpu-1")  # the cordon itself stands
