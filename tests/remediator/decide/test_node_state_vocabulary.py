"""The state annotation's words are read into the decision's types at the JSON boundary (NodeState.from_json):
the rung, its status, the reset's step and the scope are enums in memory and the same strings on the Node, and a
word the remediator does not know is a damaged state (the node is left alone and counted as disrupted: fail
closed), never a status the ladder would read as "done"."""

from __future__ import annotations

import json

import pytest

from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.decide.vocabulary import AlertStatus, Remediation, ResetPhase, Rung, RungStatus, Scope

WRITTEN = {"v": 3, "alerts": {}, "episode": "2026-12-02T10:00:00Z", "rung": "reset_gpu", "rung_status": "running",
           "rung_started": "2026-12-02T10:01:00Z", "scope": "gpu", "reset_phase": "stopping"}


def test_the_words_on_the_node_are_enums_in_memory_and_the_same_words_written_back() -> None:
    state = NodeState.from_json(json.dumps(WRITTEN))
    assert (type(state.rung), type(state.rung_status), type(state.reset.phase), type(state.scope)) == (
        Rung, RungStatus, ResetPhase, Scope)
    assert (state.rung, state.rung_status, state.reset.phase, state.scope) == (
        Rung.RESET_GPU, RungStatus.RUNNING, ResetPhase.STOPPING, Scope.GPU)
    written = json.loads(state.to_json())
    assert {k: written[k] for k in ("rung", "rung_status", "reset_phase", "scope")} == {
        "rung": "reset_gpu", "rung_status": "running", "reset_phase": "stopping", "scope": "gpu"}


def test_a_state_without_the_optional_words_reads_as_before() -> None:
    state = NodeState.from_json(json.dumps({"v": 1, "alerts": {}}))
    assert (state.rung, state.rung_status, state.reset.phase, state.scope) == (None, None, None, Scope.NODE)


@pytest.mark.parametrize("key,word", [("rung", "defrag"), ("rung_status", "paused"), ("reset_phase", "flashing"),
                                      ("scope", "rack"), ("scope", None)])
def test_an_unknown_word_is_a_damaged_state_not_a_guess(key: str, word: str | None) -> None:
    with pytest.raises(ValueError, match=f"state annotation: {key} {word!r} is unknown"):
        NodeState.from_json(json.dumps({**WRITTEN, key: word}))


def test_times_are_datetimes_in_memory_and_rfc3339_on_the_node_even_go_s_zero_time() -> None:
    """A record kept from before the webhook refused a zero startsAt (Go's 0001-01-01) is written back in a form
    every RFC 3339 reader takes, and reads back as the same instant: the state is never damaged by its own write."""
    from datetime import UTC, datetime

    raw = ('{"v": 1, "episode": "2026-12-02T10:00:00Z", "alerts": {"fp": {"name": "GPUFault", "remediation": "cordon", '
           '"status": "firing", "starts_at": "0001-01-01T00:00:00Z", "last_seen": "2026-12-02T10:00:00.5Z"}}}')
    state = NodeState.from_json(raw)
    assert state.episode == datetime(2026, 12, 2, 10, tzinfo=UTC)
    assert state.alerts["fp"].starts_at == datetime(1, 1, 1, tzinfo=UTC)
    written = json.loads(state.to_json())
    assert written["alerts"]["fp"]["starts_at"] == "0001-01-01T00:00:00.000000Z"
    assert written["alerts"]["fp"]["last_seen"] == "2026-12-02T10:00:00.500000Z"
    assert NodeState.from_json(state.to_json()) == state


def test_a_time_past_what_a_datetime_holds_is_a_damaged_state_not_a_crash() -> None:
    """Year 9999 at UTC-1 is past year 9999 in UTC: read as a damaged state (the node left alone), not an
    OverflowError that would fail the whole pass."""
    with pytest.raises(ValueError, match="damaged"):
        NodeState.from_json('{"v": 1, "episode": "9999-12-31T23:59:59-01:00"}')


ALERT = {"name": "GPUFallenOffBus", "remediation": "reboot", "status": "firing", "starts_at": "2026-12-02T10:00:00Z",
         "last_seen": "2026-12-02T10:00:00Z", "max_rung": "replace"}


def test_an_alert_records_words_are_enums_in_memory_and_the_same_words_written_back() -> None:
    text = json.dumps({"v": 1, "alerts": {"fp": ALERT}, "episode": "2026-12-02T10:00:00Z"})
    alert = NodeState.from_json(text).alerts["fp"]
    assert (type(alert.remediation), type(alert.status), type(alert.max_rung)) == (Remediation, AlertStatus, Rung)
    assert (alert.remediation, alert.status, alert.max_rung) == (Remediation.REBOOT, AlertStatus.FIRING, Rung.REPLACE)
    written = json.loads(NodeState.from_json(text).to_json())["alerts"]["fp"]
    assert {k: written[k] for k in ("remediation", "status", "max_rung")} == {
        "remediation": "reboot", "status": "firing", "max_rung": "replace"}


def test_an_alerts_remediation_is_none_or_a_rung_of_the_ladder_in_its_order() -> None:
    assert [str(r) for r in Remediation] == ["none", *(str(r) for r in Rung)]


@pytest.mark.parametrize("key,word", [("status", "pending"), ("remediation", "defrag"), ("max_rung", "defrag")])
def test_an_alert_record_with_a_word_the_remediator_does_not_know_is_a_damaged_state(key: str, word: str) -> None:
    with pytest.raises(ValueError, match=f"alert 'fp': {key} '{word}' is"):
        NodeState.from_json(json.dumps({"v": 1, "alerts": {"fp": {**ALERT, key: word}}}))
