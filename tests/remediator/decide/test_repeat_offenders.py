"""Repeat offenders in `decide()`: a node's past hardware episodes (gpuhealth.io/history) escalate its current episode
to replace, on both sides of each rule's threshold; and the history each plan carries to write (decide/history.py)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.devices import Device, NodeDevices
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.history import (
    HISTORY_ANNOTATION,
    MAX_HISTORY_BYTES,
    Episode,
    history_json,
    read_history,
)
from gpuhealth.remediator.decide.ladder import decide
from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState
from gpuhealth.remediator.decide.undo import undo_node
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import Rung, RungStatus
from gpuhealth.remediator.policy import Policy, parse_policy

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
POLICY = parse_policy("alertmanager: {url: none}\nevidence: {enabled: false}  # tests/remediator/evidence/\n")
POOL_SIZE = 20
DAY = timedelta(days=1)


def alert(remediation: str = "reset_gpu", gpu: str | None = "0000:9b:00", component: str = "gpu",
          status: str = "firing") -> AlertRecord:
    return AlertRecord("GPUXidFatal", remediation, status, starts_at=NOW - timedelta(minutes=5),
                       last_seen=NOW - timedelta(minutes=1), gpu=gpu, component=component)


def episode(days_ago: float, rung: str = "reset_gpu", gpus: tuple[str, ...] = ("0000:9b:00",)) -> Episode:
    start = NOW - timedelta(days=days_ago)
    return Episode(start, start + timedelta(hours=1), rung, gpus)


def view(history: tuple[Episode, ...] = (), record: AlertRecord | None = None, **kw: Any) -> NodeView:
    st = kw.pop("state", None) or NodeState(alerts={"fp": record or alert()}, episode=NOW - timedelta(minutes=5))
    ours = st.rung is not None
    fields: dict[str, Any] = dict(name="gpu-1", pool="gpu", labels={}, unschedulable=ours, our_taint=ours, state=st,
                                  hold=None, excluded=False, ready=True, boot_id="boot-1", resource_version="7",
                                  history=history)
    return NodeView(**{**fields, **kw})


def plan(v: NodeView, policy: Policy = POLICY) -> NodePlan:
    idle = [view(name=f"idle-{i}", state=NodeState()) for i in range(POOL_SIZE - 1)]
    views = [v, *idle]
    return next(p for p in decide(views, policy, NOW, Ledger.from_views(views, policy, NOW)) if p.node == v.name)


def steps(p: NodePlan) -> list[tuple[str, str]]:
    return [(d.action, d.decision) for d in p.decisions]


REPLACED = [("cordon", "execute"), ("drain", "execute"), ("replace", "execute")]
RESET = [("cordon", "execute"), ("drain", "execute"), ("reset_gpu", "execute")]


def test_two_hardware_episodes_in_a_week_do_not_escalate_the_alerts_own_rung() -> None:
    p = plan(view((episode(3, gpus=("0000:1a:00",)),)))
    assert steps(p) == RESET
    assert p.final_state.offence.rule is None and not p.notes


def test_the_third_hardware_episode_in_a_week_escalates_to_replace_and_says_why() -> None:
    p = plan(view((episode(2, gpus=("0000:1a:00",)), episode(6, gpus=("0000:1a:00",)))))
    assert steps(p) == REPLACED
    assert p.final_state.rung == Rung.REPLACE and p.final_state.offence.rule == "episodes"
    cordon, _, repl = p.decisions
    assert "3rd hardware episode in 7d" in cordon.reason and "escalating to replace" in repl.reason
    assert "the alerts ask for reset_gpu" in repl.reason
    (note,) = p.notes
    assert note.reason == EventReason.REPEAT_OFFENDER and note.warning


@pytest.mark.parametrize("rungs", [("cordon", "cordon"), ("cordon", "drain"), ("drain", "drain")])
def test_a_third_episode_after_episodes_that_never_repaired_the_node_is_not_escalated(rungs: tuple[str, str]) -> None:
    """A flapping alert: its earlier episodes cordoned or drained the node and resolved; no repair was tried, so none
    failed to hold: the ladder is climbed one rung at a time, never skipped to replace (issue 35, item 6)."""
    record = dataclasses.replace(alert(remediation="cordon", gpu=None, component="thermal"), max_rung="replace")
    p = plan(view((episode(0.03, rungs[0], ()), episode(0.06, rungs[1], ())), record))
    assert steps(p) == [("cordon", "execute")] and p.final_state.offence.rule is None


@pytest.mark.parametrize("max_rung", ["drain", "reset_gpu"])
def test_a_third_episode_whose_alerts_may_not_climb_to_replace_is_not_escalated(max_rung: str) -> None:
    """A cable's alert (max_rung drain) or one that stops at its reset: no node swap fixes what it sees."""
    record = dataclasses.replace(alert(remediation="drain" if max_rung == "drain" else "reset_gpu"), max_rung=max_rung)
    p = plan(view((episode(2, gpus=("0000:1a:00",)), episode(6, gpus=("0000:1a:00",))), record))
    assert p.final_state.offence.rule is None and ("replace", "execute") not in steps(p)


def test_three_episodes_spread_over_more_than_the_window_do_not_escalate() -> None:
    p = plan(view((episode(4, gpus=("0000:1a:00",)), episode(7.5, gpus=("0000:1a:00",)))))
    assert steps(p) == RESET and p.final_state.offence.rule is None


def test_the_same_gpu_failing_again_after_a_reset_escalates_even_on_the_second_episode() -> None:
    p = plan(view((episode(5, rung="reset_gpu", gpus=("0000:9b:00",)),), alert(gpu="00000000:9B:00.0")))
    assert steps(p) == REPLACED and p.final_state.offence.rule == "same_gpu"
    assert "GPU 0000:9b:00 fails again after the reset_gpu" in p.decisions[-1].reason


def test_a_different_gpu_after_a_reset_does_not_escalate() -> None:
    p = plan(view((episode(5, rung="reset_gpu", gpus=("0000:1a:00",)),)))
    assert steps(p) == RESET and p.final_state.offence.rule is None


def test_the_same_gpu_after_an_episode_that_never_reset_it_does_not_escalate() -> None:
    p = plan(view((episode(5, rung="cordon"),)))
    assert steps(p) == RESET


def test_the_same_gpu_after_a_reset_longer_ago_than_the_window_does_not_escalate() -> None:
    p = plan(view((episode(8, rung="reboot"),)))
    assert steps(p) == RESET


def test_the_same_gpu_rule_matches_an_index_alert_to_a_uuid_history_through_dra() -> None:
    devices = NodeDevices("gpu.nvidia.com", "gpu-1", (Device("gpu-3", "GPU-5a1c", "gpu", "0000:9b:00", index=3),))
    p = plan(view((episode(5, rung="reboot", gpus=("GPU-5a1c",)),), alert(gpu="3"), devices=devices))
    assert p.final_state.offence.rule == "same_gpu"


def test_the_rules_switched_off_leave_the_alerts_rung() -> None:
    history = (episode(2, gpus=("0000:9b:00",)), episode(6))
    off = parse_policy("alertmanager: {url: none}\nrepeat_offenders: {enabled: false}\nevidence: {enabled: false}\n")
    assert steps(plan(view(history), off)) == RESET
    no_same = parse_policy("alertmanager: {url: none}\nrepeat_offenders: {same_gpu_after_reset: false}\n"
                           "evidence: {enabled: false}\n")
    assert steps(plan(view((episode(5),)), no_same)) == RESET
    four = parse_policy("alertmanager: {url: none}\nrepeat_offenders: {episodes: 4, same_gpu_after_reset: false}\n"
                        "evidence: {enabled: false}\n")
    assert steps(plan(view(history), four)) == RESET


def test_alerts_of_gpuhealths_own_monitoring_are_no_hardware_episode() -> None:
    history = (episode(2, gpus=()), episode(6, gpus=()))
    p = plan(view(history, alert("cordon", gpu=None, component="probe")))
    assert steps(p) == [("cordon", "execute")] and p.final_state.offence.rule is None
    assert p.history is None  # nor is it written down as one


def test_below_replace_in_the_ladder_a_repeat_offender_is_drained_and_left_for_a_person() -> None:
    capped = parse_policy("alertmanager: {url: none}\nladder: {max_rung: reboot}\n")
    p = plan(view((episode(2), episode(6))), capped)
    assert steps(p) == [("cordon", "execute"), ("drain", "execute"), ("none", "skipped")]
    assert p.final_state.rung == Rung.DRAIN and "needs a person" in p.decisions[-1].reason
    assert "above ladder.max_rung (reboot)" in p.decisions[-1].reason
    again = plan(view((episode(2), episode(6)), state=p.final_state, unschedulable=True, our_taint=True), capped)
    assert steps(again) == [("none", "skipped")] and not again.notes  # said once; no reset, no reboot


def test_the_rule_holds_for_the_episode_once_it_applied() -> None:
    st = replace(plan(view((episode(2), episode(6)))).final_state, rung=Rung.DRAIN, rung_status=RungStatus.DONE,
                 rung_done=NOW - timedelta(minutes=1))
    later = plan(view((), state=st, unschedulable=True, our_taint=True))  # the history read back without them
    assert steps(later) == [("replace", "execute")] and not later.notes


def test_the_history_records_the_episode_once_it_acts_and_closes_it_at_return_to_service() -> None:
    started = plan(view())
    (current,) = started.history or ()
    # the reset is under way, not done: the drain before it is what was carried out so far
    assert current.start == NOW - timedelta(minutes=5) and current.end is None and current.rung == Rung.DRAIN
    assert current.gpus == ("0000:9b:00",)
    healthy = replace(started.final_state, rung_status=RungStatus.DONE, rung_done=NOW - timedelta(hours=1),
                      alerts={"fp": alert(status="resolved")}, healthy_since=NOW - timedelta(hours=1))
    closed = plan(view((current,), state=healthy, unschedulable=True, our_taint=True))
    assert steps(closed) == [("uncordon", "execute")] and not closed.final_state.active
    # outlives the state reset to NodeState(), with the reset its Job carried out
    assert closed.history == (replace(current, end=NOW, rung=Rung.RESET_GPU),)


def test_an_episode_that_started_within_a_second_is_one_episode_of_its_history_not_an_earlier_one() -> None:
    """Alertmanager's startsAt has milliseconds: the episode written, read back from its annotation and written again
    as it climbs stays one entry, and its own entry never counts as an earlier episode (found in the e2e)."""
    st = NodeState(alerts={"fp": alert()}, episode=NOW - timedelta(minutes=5, microseconds=-851000))
    first = plan(view(state=st))
    stored = read_history(history_json(first.history or ()))
    again = plan(view(stored, state=first.final_state, unschedulable=True, our_taint=True))
    assert len(again.history or stored) == 1 and again.final_state.offence.rule is None
    assert [e.start for e in read_history(history_json(again.history or stored))] == [st.episode]


def test_an_episode_a_person_took_over_is_dropped_from_the_history() -> None:
    started = plan(view()).final_state
    mine = Episode(started.episode or NOW, None, "reset_gpu", ("0000:9b:00",))
    resolved = replace(started, alerts={"fp": alert(status="resolved")})
    p = plan(view((mine, episode(3)), state=resolved, unschedulable=True, our_taint=False))
    assert not p.final_state.active and p.history == (episode(3),)


def test_a_history_of_many_episodes_stays_under_its_byte_cap_newest_kept() -> None:
    gpus = tuple(f"GPU-{i:02d}-0123456789abcdef0123456789abcdef" for i in range(16))
    many = [Episode(NOW - timedelta(hours=i), NOW, "reboot", gpus) for i in range(100)]
    text = history_json(many)
    kept = read_history(text)
    assert len(text) <= MAX_HISTORY_BYTES and 2 < len(kept) < 100
    assert kept[0].start == NOW and kept == tuple(many[:len(kept)])


def test_episodes_older_than_the_window_leave_the_history_as_a_new_one_is_written() -> None:
    p = plan(view((episode(3), episode(8), episode(30))))
    assert [e.start for e in p.history or ()] == [NOW - timedelta(minutes=5), NOW - 3 * DAY]


def test_an_unreadable_history_reads_as_none() -> None:
    assert read_history("{not json") == () and read_history('[{"s": "yesterday"}]') == ()


def test_cleanup_removes_the_history_annotation() -> None:
    node = {"metadata": {"name": "gpu-1", "annotations": {HISTORY_ANNOTATION: history_json([episode(1)])}},
            "spec": {}}
    undo = undo_node(node, POLICY)
    assert undo.body["metadata"]["annotations"] == {HISTORY_ANNOTATION: None}
    assert json.loads(history_json([episode(1)]))[0]["r"] == "reset_gpu"
