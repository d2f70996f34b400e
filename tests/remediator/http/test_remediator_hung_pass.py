"""A loop that is alive but whose pass never ends is not healthy (issue 35, item 8): /healthz fails once the pass has
run past its bound (act/reconciler.py pass_liveness_bound, from policy leader.lease_duration), on the loop's own
clock, whether the loop runs in a thread (the receiver's /healthz reads it) or in its own process (its status says
so). The pass is held in the one call a test may hold forever: the silence check the remediator is given (a call to
Alertmanager that never returns), against the real remediator and the fake API server."""

from __future__ import annotations

import threading
from datetime import timedelta
from multiprocessing import Pipe

from gpuhealth.remediator.act.reconciler import pass_liveness_bound
from gpuhealth.remediator.decide.decision import SilenceAnswer
from gpuhealth.remediator.loop_process import LoopStatus, _Child
from tests.fakes.apiserver import FakeCluster
from tests.support.polling import wait_for
from tests.support.remediator_harness import Harness

POLICY = "leader: {lease_duration: 15s}\n"


class HeldSilenceCheck:
    """A silence check that does not return until released (as a call to Alertmanager that hangs would not)."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, node: str, fingerprints: list[str]) -> SilenceAnswer:
        self.entered.set()
        self.release.wait(60)
        return SilenceAnswer()


def _held_pass(cluster: FakeCluster) -> tuple[Harness, HeldSilenceCheck, threading.Thread]:
    held = HeldSilenceCheck()
    h = Harness(cluster, POLICY, silences=held)
    h.fire("gpu-1", "drain")  # a disruptive step: the ladder asks the silence check first
    thread = threading.Thread(target=h.rem.run_once, daemon=True)
    thread.start()
    assert held.entered.wait(30), "the pass never asked the silence check"
    return h, held, thread


def test_healthz_fails_once_a_pass_runs_past_its_bound_and_recovers_when_it_ends(cluster: FakeCluster) -> None:
    h, held, thread = _held_pass(cluster)
    bound = pass_liveness_bound(h.policy)
    assert bound == timedelta(minutes=2)
    try:
        h.advance(seconds=bound.total_seconds() - 1)
        assert h.http.get("/healthz").status_code == 200  # a long pass is not yet a hung one
        h.advance(seconds=2)
        answer = h.http.get("/healthz")
        assert answer.status_code == 503
        assert "has run over 120 s (8 x leader.lease_duration): it is stuck" in answer.get_json()["loop"]
    finally:
        held.release.set()
        thread.join(30)
    assert h.http.get("/healthz").status_code == 200


def test_the_loop_process_status_says_its_pass_is_stuck(cluster: FakeCluster) -> None:
    h, held, thread = _held_pass(cluster)
    reports_in, reports_out = Pipe(duplex=False)
    stop = threading.Event()
    child = _Child(h.rem, stop, reports_out)
    sender = threading.Thread(target=child.statuses, daemon=True)
    sender.start()
    seen: list[LoopStatus] = []

    def stuck_reported() -> bool:
        while reports_in.poll():
            seen.append(reports_in.recv()[1])
        return any(s.stuck for s in seen)

    try:
        assert wait_for(lambda: bool(seen) or stuck_reported(), 10) and not any(s.stuck for s in seen)
        h.advance(seconds=pass_liveness_bound(h.policy).total_seconds() + 1)
        assert wait_for(stuck_reported, 10)
        assert "it is stuck" in str(next(s.stuck for s in seen if s.stuck))
    finally:
        stop.set()
        held.release.set()
        thread.join(30)
        sender.join(5)
