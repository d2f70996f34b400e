"""Properties of the state annotation's reading (issue 35, item 4): any text is a state or a ValueError (the node
fails closed alone), never another exception; and every state gpuhealth writes reads back as itself, so the check
on read never refuses gpuhealth's own write."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.decide.vocabulary import (
    AlertStatus,
    EvidenceOutcome,
    Purpose,
    Remediation,
    ResetPhase,
    Rung,
    RungStatus,
    Scope,
)
from tests.remediator.properties.objects import state_texts, states

STATES = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# What each declared type holds in memory once read (None allowed where the type says so)
_HOLDS: dict[str, type | tuple[type, ...]] = {
    "bool": bool, "int": int, "str": str, "datetime": datetime, "Scope": Scope, "Rung": Rung,
    "RungStatus": RungStatus, "ResetPhase": ResetPhase, "EvidenceOutcome": EvidenceOutcome,
    "Remediation": Remediation, "AlertStatus": AlertStatus, "Purpose": Purpose}


def _holds(value: Any, declared: str) -> bool:
    if declared.endswith(" | None"):
        return value is None or _holds(value, declared.removesuffix(" | None"))
    if declared.startswith("tuple["):
        inner = declared.removeprefix("tuple[").removesuffix(", ...]")
        return isinstance(value, tuple) and all(_holds(v, inner) for v in value)
    if declared == "dict[str, AlertRecord]":
        return all(isinstance(k, str) and _well_typed(a) for k, a in value.items())
    if is_dataclass(value) and type(value).__name__ == declared:  # a record of the state's (decide/state_records.py)
        return _well_typed(value)
    return isinstance(value, _HOLDS[declared]) and not (declared == "int" and isinstance(value, bool))


def _well_typed(record: Any) -> bool:
    return all(_holds(getattr(record, f.name), str(f.type)) for f in fields(record))


@STATES
@given(states())
def test_every_state_gpuhealth_writes_reads_back_as_itself(state: NodeState) -> None:
    assert NodeState.from_json(state.to_json()) == state


@STATES
@given(state_texts() | st.text(max_size=60))
def test_any_state_annotation_is_a_state_or_a_value_error_naming_why(text: str) -> None:
    try:
        state = NodeState.from_json(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert _well_typed(state), state  # every field as declared: nothing of another type left to raise in a pass
    assert NodeState.from_json(state.to_json()) == state  # what is read is written back unchanged
