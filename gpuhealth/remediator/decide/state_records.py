"""NodeState's records per concern, and how each of its fields is kept in the state annotation's JSON.

The annotation is flat, as it has been since version 1: each field of a record is a key of its own (a reset's phase
is `reset_phase`, a diagnostic's Job `diagnosis_job`), so that grouping the fields in memory changed no key, no
version and nothing an older remediator reads. Each field says in its metadata (`kept`) the JSON key it is kept
under, whether the key is left out while it is unset (the fields added since version 1), and the annotation version
a state that uses it is written as (an older remediator must fail closed on it: nodestate.STATE_VERSION's notes).
The codec (nodestate.NodeState.to_json, from_json) and the read check (state_schema) are derived from these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields
from datetime import datetime
from typing import Any

from gpuhealth.remediator.decide.vocabulary import EvidenceOutcome, Purpose, ResetPhase, Rung


def kept(key: str | None = None, omitted: bool = False, since: int = 1) -> dict[str, Any]:
    """A field's metadata: kept under JSON key `key` (None: its own name); `omitted`: left out of the annotation while
    unset (empty, None, 0); `since`: a state that sets it is written as at least this annotation version."""
    return {"key": key, "omitted": omitted, "since": since}


@dataclass(frozen=True)
class Reset:
    """reset_gpu's step while it stops the GPU's clients, and what it paused (restored when the rung ends). Version 3:
    an older remediator would create the reset Job with them stopped and never restore them."""

    phase: ResetPhase | None = field(default=None, metadata=kept("reset_phase", since=3))  # None: neither
    # the operand labels gpuhealth set to the pause value, and the value (a policy changed meanwhile still finds them)
    paused: tuple[str, ...] = field(default=(), metadata=kept("paused", since=3))
    pause_value: str | None = field(default=None, metadata=kept("pause_value", since=3))


@dataclass(frozen=True)
class GpuScope:
    """A GPU-scoped episode's quarantine: the DRA devices it holds (the GPU and its MIG devices; version 2: an older
    remediator would read a node without gpuhealth's taint as one a person took over), and once a GPU step failed,
    the rung the node ladder starts at (above it, e.g. reboot)."""

    devices: tuple[str, ...] = field(default=(), metadata=kept("devices", since=2))
    node_floor: Rung | None = field(default=None, metadata=kept("node_floor"))


@dataclass(frozen=True)
class DiagnosticRun:
    """The diagnostic Job of this rung (decide/validation.py, diagnose_step.py, sweep.py, burn_in.py): its name, why
    it runs (decide/diagnosis.py Purpose), when it was asked for, and its result once read ("passed", "failed: ...",
    "not started: ..."), which outlives the Job (deleted jobs.ttl_seconds_after_finished after it ends)."""

    job: str | None = field(default=None, metadata=kept("diagnosis_job", omitted=True))
    purpose: Purpose | None = field(default=None, metadata=kept("diagnosis_purpose", omitted=True))
    started: datetime | None = field(default=None, metadata=kept("diagnosis_started", omitted=True))
    result: str | None = field(default=None, metadata=kept("diagnosis_result", omitted=True))


@dataclass(frozen=True)
class EvidenceRun:
    """The episode's evidence before its first rung past drain (decide/evidence.py): the Job's name, when it was made,
    and once the rung went on, how it ended (collected | incomplete)."""

    job: str | None = field(default=None, metadata=kept("evidence_job", omitted=True))
    started: datetime | None = field(default=None, metadata=kept("evidence_started", omitted=True))
    outcome: EvidenceOutcome | None = field(default=None, metadata=kept("evidence", omitted=True))


@dataclass(frozen=True)
class Offence:
    """The repeat-offender rule that escalated this episode to replace (decide/offenders.py: "episodes" or
    "same_gpu") and why, said once (an Event) when it applied; None: none did."""

    rule: str | None = field(default=None, metadata=kept("repeat_offender", omitted=True))  # offenders.EPISODES...
    why: str | None = field(default=None, metadata=kept("repeat_offender_why", omitted=True))


@dataclass(frozen=True)
class Kept:
    """One key of the annotation: the field (`record`.`name`, or `name` for a field of the state itself) and how it
    is kept."""

    key: str
    record: str | None  # the state's field holding the record; None: the state's own field
    name: str
    type: str  # the declared type, as written (the schema check and the codec read it)
    default: Any
    omitted: bool
    since: int


def _kept(f: Field[Any], record: str | None) -> Kept:
    meta = f.metadata
    return Kept(meta.get("key") or f.name, record, f.name, str(f.type), f.default, bool(meta.get("omitted")),
                int(meta.get("since", 1)))


def keys_of(cls: type, skip: tuple[str, ...] = ()) -> tuple[Kept, ...]:
    """Every key `cls`'s JSON holds, in field order: a record's fields each as their own key."""
    out: list[Kept] = []
    for f in fields(cls):
        if f.name in skip:
            continue
        if f.metadata.get("record"):
            out.extend(_kept(sub, f.name) for sub in fields(f.metadata["record"]))
        else:
            out.append(_kept(f, None))
    return tuple(out)


def record(cls: type) -> dict[str, Any]:
    """The metadata of a field of the state that holds a record of class `cls`: its fields each kept under their own
    key (the field's default_factory is `cls`: unset, each of them is)."""
    return {"record": cls}


def values(obj: Any, keys: tuple[Kept, ...]) -> Iterator[tuple[Kept, Any]]:
    """Each key's value in `obj` (a state: its records' fields read through)."""
    for k in keys:
        holder = getattr(obj, k.record) if k.record else obj
        yield k, getattr(holder, k.name)


def grouped(cls: type, flat: dict[str, Any], keys: tuple[Kept, ...]) -> dict[str, Any]:
    """`flat` (by field name, the records' fields by their JSON key) as `cls`'s keyword arguments: each record built
    from its fields present (the others their defaults)."""
    out = {k.name: flat[k.key] for k in keys if k.record is None and k.key in flat}
    parts: dict[str, dict[str, Any]] = {}
    for k in keys:
        if k.record is not None and k.key in flat:
            parts.setdefault(k.record, {})[k.name] = flat[k.key]
    for f in fields(cls):
        if f.name in parts:
            out[f.name] = f.metadata["record"](**parts[f.name])
    return out
