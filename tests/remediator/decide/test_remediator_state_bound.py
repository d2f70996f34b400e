"""The remediator's state annotation is bounded (decide/nodestate.bounded_alerts): at most MAX_ALERT_RECORDS alert
records in at most MAX_STATE_BYTES; a full state forgets resolved records first, then firing ones that ask for no
action, then the lowest rung's, the oldest start first within each, and a forgotten alert recorded again changes
nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpuhealth.remediator.decide.nodestate import (
    MAX_ALERT_RECORDS,
    MAX_STATE_BYTES,
    STATE_ANNOTATION,
    AlertRecord,
    NodeState,
    record_alerts,
)
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import T0, Harness

NODE = "gpu-1"


# --- the state's caps ---------------------------------------------------------------------------------------------
def record(remediation: str = "cordon", status: str = "firing", minutes: int = 0, **kw: Any) -> AlertRecord:
    start = T0 + timedelta(minutes=minutes)
    return AlertRecord(name=kw.pop("name", "GPUFault"), remediation=remediation, status=status, starts_at=start,
                       last_seen=start, **kw)


def test_a_full_state_forgets_resolved_then_no_action_then_the_lowest_rung_oldest_first() -> None:
    state = NodeState()
    # the oldest, highest rung first; then MAX_ALERT_RECORDS newer cordon alerts, and newer resolved / none ones
    state = record_alerts(state, [("fp-replace", record("replace", minutes=-100))], T0)
    state = record_alerts(state, [(f"fp-cordon-{i}", record("cordon", minutes=i)) for i in range(MAX_ALERT_RECORDS)]
                          + [("fp-resolved", record("drain", "resolved", minutes=500)),
                             ("fp-none", record("none", minutes=500))], T0)
    assert len(state.alerts) == MAX_ALERT_RECORDS
    kept = set(state.alerts)
    assert "fp-replace" in kept  # the highest rung outranks every newer lower one
    assert {"fp-resolved", "fp-none", "fp-cordon-0"}.isdisjoint(kept)  # gone first: resolved, none, the oldest
    assert f"fp-cordon-{MAX_ALERT_RECORDS - 1}" in kept


def test_a_state_stays_within_its_bytes_and_skips_a_record_too_big_to_fit() -> None:
    huge = record(minutes=10, name="X" * MAX_STATE_BYTES)  # alone larger than the cap: never kept
    long_labels = [(f"fp-{i}", record(minutes=i, name=f"GPUFault{i}", component="c" * 2000)) for i in range(60)]
    state = record_alerts(NodeState(), [("fp-huge", huge), *long_labels], T0)
    assert len(state.to_json()) <= MAX_STATE_BYTES
    assert "fp-huge" not in state.alerts and "fp-59" in state.alerts  # the newest that fit are kept
    assert NodeState.from_json(state.to_json()) == state


def test_a_forgotten_alert_recorded_again_changes_nothing() -> None:
    # The sync lists a forgotten alert again on every pass: it must not displace another one each time (churn).
    full = record_alerts(NodeState(), [(f"fp-{i}", record(minutes=i + 1)) for i in range(MAX_ALERT_RECORDS)], T0)
    again = record_alerts(full, [("fp-old", record(minutes=0))], T0)
    assert again == full


def test_an_over_full_state_written_before_the_cap_is_trimmed_on_its_next_recording() -> None:
    with FakeCluster() as c:
        old = NodeState(alerts={f"fp-{i}": record(minutes=i) for i in range(3 * MAX_ALERT_RECORDS)},
                        episode=T0)
        c.add_node(NODE, annotations={STATE_ANNOTATION: old.to_json()})
        h = Harness(c)
        h.fire(NODE, "cordon", fingerprint="fp-new", starts=T0 + timedelta(hours=10))
        state = h.state(NODE)
        assert len(state.alerts) == MAX_ALERT_RECORDS and "fp-new" in state.alerts
