"""What gpuhealth keeps on a Node: the ladder state annotation, the hold annotation and our taint.

The remediator holds no state of its own. Everything it knows about a node's episode (the alerts
seen, the rung reached, when it started) is JSON in one annotation on the Node, so a restarted or
newly elected replica carries on where the last one stopped, and budgets can be counted from the
cluster.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from gpuhealth.contract.names import GPU_RESET_REQUEST_ANNOTATION, RELEASED_FOR_GPU_RESET
from gpuhealth.remediator.decide import json_text, state_records, state_schema
from gpuhealth.remediator.decide.state_records import DiagnosticRun, EvidenceRun, GpuScope, Offence, Reset, kept, record
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

PREFIX = "gpuhealth.io"
ALL_GPUS = "all"  # a gpu label that names no single GPU: the fault takes (and a reset resets) them all
STATE_ANNOTATION = f"{PREFIX}/state"
HOLD_ANNOTATION = f"{PREFIX}/hold"
LAST_EPISODE_ANNOTATION = f"{PREFIX}/last-episode"
LAST_SWEEP_ANNOTATION = f"{PREFIX}/last-sweep"  # when the node's last idle-node sweep started (decide/sweep.py)
TAINT_KEY = f"{PREFIX}/unhealthy"
# Karpenter's opt-out of voluntary disruption (consolidation, drift) on a Node: gpuhealth sets it from the
# drain until return to service or replacement, and removes it only when it set it (NodeState.do_not_disrupt)
DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
TAINT_EFFECT = "NoSchedule"
# While the node's GPU clients stop for a reset, this annotation (value: the reset Job's name) asks gpuhealth's
# exporter on the node to release NVML and pause DCGM; it answers on its GpuhealthProbesHealthy condition.
RESET_REQUEST_ANNOTATION = GPU_RESET_REQUEST_ANNOTATION
RELEASED_REASON = RELEASED_FOR_GPU_RESET  # that condition's reason once the exporter let go
# The reason of the condition replace.method: condition sets (gpuhealth/remediator/act/replace.py): how cleanup tells it
# from the same condition set by someone else (the EKS node monitoring agent)
REPLACE_CONDITION_REASON = "GpuhealthReplace"
# 2: GPU scope (scope, devices, node_floor). A state with a GPU scope episode is written as version 2, so that an
# older remediator (a rollback) fails closed on it (counted as disrupted, left alone) instead of reading a node
# without gpuhealth's taint as one a person took over; every other state is still written as version 1.
# 3: a reset under way that stopped the node's GPU clients (reset_phase, paused): an older remediator would create
# the reset Job with them stopped and never restore them, so it fails closed on such a state too.
# 4: a Job rung that failed because its Job did not start (not_started): an older remediator would read it as the
# hardware's failure and climb (reboot, replace), so it fails closed on such a state.
# 5: a sweep that failed (sweep_rung): an older remediator would read an episode without alerts as resolved and return
# the node with the fault the sweep found, so it fails closed on such a state.
# 6: a repair whose validation failed (validation_failed): an older remediator would return the node to service once
# its alerts resolved, so it fails closed on such a state.
STATE_VERSION = 6
# The state annotation is bounded: the API server refuses a Node whose annotations total over 256 KiB (every write
# to it would then fail), and each watcher of Nodes gets the whole object on every change. Past either cap the
# records least needed are forgotten (bounded_alerts): resolved ones first, then firing ones that ask for no action,
# then the lowest rung's; the oldest start first within each. A forgotten alert still firing comes back with its
# next webhook or sync, and is dropped again while the others outrank it.
MAX_ALERT_RECORDS = 100
MAX_STATE_BYTES = 64 * 1024
# What a pass may add to a state a recording just filled (the rung, its times and Job, a GPU scope's devices, paused
# operand labels, monitoring-fault fingerprints): the records leave this much of MAX_STATE_BYTES to it
PASS_RESERVE_BYTES = 4 * 1024
MAX_RECORDS_BYTES = MAX_STATE_BYTES - PASS_RESERVE_BYTES  # what a recording may fill

RUNGS: tuple[str, ...] = tuple(Rung)  # the ladder's order, by name
REMEDIATIONS: tuple[str, ...] = tuple(Remediation)  # an alert's remediation label: "none" or a rung

_FRACTION = re.compile(r"\.(\d+)")
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def _compact_json(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def parse_time(value: str) -> datetime:
    """RFC 3339 as Alertmanager and Kubernetes write it (Z suffix, up to nanoseconds)."""
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), value.strip(), count=1)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {value!r}")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00:00-05:00: past year 9999 in UTC
        raise ValueError(f"timestamp out of range in UTC: {value!r}") from None


def fmt_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds (`2026-12-02T09:37:37.851000Z`). isoformat, not strftime: its %Y writes a
    year before 1000 without its zeros (`1-01-01...`, Go's zero time), which no RFC 3339 reader takes back."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def time_text(value: datetime | None) -> str | None:
    """A time of the state as its annotation writes it (None stays None): for messages, audit lines and names."""
    return fmt_time(value) if value is not None else None


def elapsed(now: datetime, since: datetime | None) -> timedelta:
    """How long since a time the state holds (none: no time at all)."""
    return now - since if since else timedelta(0)


def rung_index(rung: str | None) -> int:
    """-1 for no rung, 0 for cordon ... 4 for replace."""
    return RUNGS.index(rung) if rung in RUNGS else -1


def max_rung_of(label: str | None, remediation: str) -> Rung | None:
    """An alert's ceiling as its max_rung label says (None: no label). A label that names no rung, or one below the
    alert's own rung, is the alert's own rung: a ceiling the rule does not say clearly never lets a fault climb."""
    if not label:
        return None
    if label not in RUNGS or remediation not in RUNGS or RUNGS.index(label) < RUNGS.index(remediation):
        return Rung(remediation) if remediation in RUNGS else None
    return Rung(label)


@dataclass(frozen=True)
class AlertRecord:
    """One alert (by Alertmanager fingerprint) as last seen for this node."""

    name: str
    remediation: Remediation
    status: AlertStatus
    starts_at: datetime
    last_seen: datetime
    ends_at: datetime | None = None
    gpu: str | None = None
    severity: str = ""
    component: str = ""
    # the MIG device (its UUID, MIG-...) an Xid on one MIG GPU instance names; its GPU is `gpu`. Absent in states
    # written before MIG (read as None), and ignored by an older remediator, which reads the alert as the GPU's.
    mig_uuid: str | None = None
    # the pods on the alert's GPU as the node agent maps them (the kubelet's pod-resources API), "ns/name ..." or ""
    # for none; None: not known (no mapping, or an alert without one): a drain takes the whole node
    gpu_pods: str | None = None
    # "sync": the resolution was inferred from Alertmanager no longer listing the alert (alert_sync.py),
    # not sent by it; ends_at is then when the list was asked for. A firing copy with the same start
    # (Alertmanager lists it again) reopens such a resolution, and one recorded after ends_at outlives it.
    resolved_by: str | None = None
    # the alert's probe and reason labels (gpuhealth's own alerts, rules/alerts/probe.yaml): with the name, what a
    # monitoring fault counts as the same failure (decide/monitoring_fault.py). None where the alert has none.
    probe: str | None = None
    reason: str | None = None
    # the highest rung the alert's fault may climb to when it persists (its max_rung label; None: ladder.max_rung).
    # A label that names no rung is recorded as the alert's own rung: such a fault does not climb.
    max_rung: Rung | None = None
    # its page label is "true" (a person is asked for beside the action): evidence at the cordon rung too (evidence.py)
    page: bool = False

    @property
    def asks_action(self) -> bool:
        """Firing, and asking for a rung (a remediation other than none)."""
        return self.status == AlertStatus.FIRING and self.remediation != Remediation.NONE

    def order_key(self) -> tuple[datetime, int]:
        """Newer wins: a later start (a re-fire), or the same start resolved by Alertmanager's word."""
        return self.starts_at, 1 if self.status == AlertStatus.RESOLVED and self.resolved_by is None else 0


@dataclass(frozen=True)
class NodeState:
    alerts: dict[str, AlertRecord] = field(default_factory=dict)
    episode: datetime | None = None  # when the current episode started
    rung: Rung | None = None  # highest rung started in this episode
    rung_status: RungStatus | None = None
    rung_started: datetime | None = None
    rung_done: datetime | None = None
    cordoned: bool = False  # we set spec.unschedulable (so we may unset it)
    do_not_disrupt: bool = False  # we set karpenter.sh/do-not-disrupt (so we may remove it)
    gpu: str | None = None  # GPU the reset job targets
    job: str | None = None  # reset/reboot Job name
    boot_id: str | None = None  # bootID before the reboot
    healthy_since: datetime | None = None
    quiet: bool = False  # the episode went quiet: escalation stopped
    timed_out: bool = False  # the running rung passed its timeout (reported once)
    drain_failed: bool = False  # a drain failed this episode: never climb above the alerts' own rung
    actions: tuple[datetime, ...] = ()  # start times of actions in the last hour (rate cap)
    # the episode quarantines one GPU (DRA device taints), the node stays in service
    scope: Scope = field(default=Scope.NODE, metadata=kept(since=2))
    # GPU scope: the DRA devices quarantined; after a GPU step failed, the node ladder's first rung
    gpu_scope: GpuScope = field(default_factory=GpuScope, metadata=record(GpuScope))
    # reset_gpu stopping the GPU's clients, and what it paused
    reset: Reset = field(default_factory=Reset, metadata=record(Reset))
    # the failed rung's Job never ran its container (why: job_start.py): gpuhealth's breakage, so no climb from it
    not_started: str | None = field(default=None, metadata=kept(since=4))
    # fingerprints of the firing alerts counted as a monitoring fault (gpuhealth's own failure on many nodes): they
    # start nothing; reported (an Event) when they join, and they stay one while min_nodes still fire them
    monitoring_faults: tuple[str, ...] = ()
    # fingerprints of the firing alerts counted as a correlated fault (the same alert on nodes behind one switch or
    # rack, decide/correlated.py): they climb no higher than their own rung, and stay counted while they fire
    correlated: tuple[str, ...] = field(default=(), metadata=kept(omitted=True))
    # the diagnostic Job of this rung, and its result once read
    diagnostic: DiagnosticRun = field(default_factory=DiagnosticRun, metadata=record(DiagnosticRun))
    # the Karpenter-watched conditions another agent set False that this episode already reported (once each)
    repair_reported: tuple[str, ...] = ()
    # acts this state was written for that are not a part of its write (Action.REPLACE: the hand-over;
    # Action.QUARANTINE_GPU: the devices' DeviceTaintRules), not yet seen done: set in the write before them, cleared
    # in a write after them, so that a remediator killed in between does them (again, idempotently) on its next pass
    pending: tuple[str, ...] = field(default=(), metadata=kept(omitted=True))
    # the episode's evidence Job before its first rung past drain
    evidence_run: EvidenceRun = field(default_factory=EvidenceRun, metadata=record(EvidenceRun))
    # the repeat-offender rule that escalated this episode to replace, and why
    offence: Offence = field(default_factory=Offence, metadata=record(Offence))
    # an idle-node sweep's diagnostic failed (decide/sweep.py): the rung its failure asks for, which the episode climbs
    # to as a hardware fault with no alert behind it. Absent from the annotation while None
    sweep_rung: str | None = field(default=None, metadata=kept(omitted=True, since=5))
    # a new node's burn-in (decide/burn_in.py): how many of its diagnostic Jobs were started again because the one
    # before was gone before its result was read (bounded: MAX_BURN_IN_JOBS). Absent from the annotation while 0
    burn_in_restarts: int = field(default=0, metadata=kept(omitted=True))
    # the validation of this episode's reset or reboot failed (decide/validation.py): the rung and what failed; the node
    # stays out, climbing from it, until a later rung or a person's `release`. Absent while None
    validation_failed: str | None = field(default=None, metadata=kept(omitted=True, since=6))
    # when a diagnostic passed while the GPU alerts still fired (decide/diagnose_step.py). Absent while None
    probation: datetime | None = field(default=None, metadata=kept("probation_since", omitted=True))

    # --- reading ---------------------------------------------------------------------------
    def firing(self, now: datetime, quiet_after: timedelta) -> dict[str, AlertRecord]:
        return {fp: a for fp, a in self.alerts.items()
                if a.status == AlertStatus.FIRING and now - a.last_seen < quiet_after}

    def stale(self, now: datetime, quiet_after: timedelta) -> dict[str, AlertRecord]:
        return {fp: a for fp, a in self.alerts.items()
                if a.status == AlertStatus.FIRING and now - a.last_seen >= quiet_after}

    def actions_since(self, since: datetime) -> int:
        return sum(1 for t in self.actions if t >= since)

    @property
    def active(self) -> bool:
        return self.episode is not None

    @property
    def reset_request(self) -> str | None:
        """What gpuhealth.io/gpu-reset-request says while the GPU's clients are stopped for this rung: the reset Job
        and when the rung started, so an answer to an earlier stop (of the same Job) is not taken for this one."""
        if self.reset.phase is None or not self.job:
            return None
        started = str(time_text(self.rung_started))  # as the annotation writes it
        return f"{self.job}.{hashlib.sha1(started.encode()).hexdigest()[:6]}"

    # --- writing ---------------------------------------------------------------------------
    def with_action(self, now: datetime, **changes: Any) -> NodeState:
        recent = tuple(t for t in self.actions if now - t < timedelta(hours=1))
        return replace(self, actions=(*recent, now), **changes)

    def to_json(self) -> str:
        """The annotation: each field under its key (decide/state_records.py), times as RFC 3339; a key added since
        version 1 left out while unset, and the version the newest field set asks for (STATE_VERSION's notes)."""
        data: dict[str, Any] = {}
        version = 1
        for k, value in state_records.values(self, _STATE_KEYS):
            if k.omitted and not value:  # the annotation as before where there is none
                continue
            if value and value != k.default:
                version = max(version, k.since)
            data[k.key] = fmt_time(value) if isinstance(value, datetime) else value
        data["alerts"] = {fp: _alert_json(a) for fp, a in self.alerts.items()}
        data["actions"] = [fmt_time(t) for t in self.actions]
        return _compact_json({"v": version, **data})

    @classmethod
    def from_json(cls, text: str | None) -> NodeState:
        """A missing annotation is no state. A damaged one, or one written by a newer remediator, raises
        ValueError: callers fail closed (the node counts as disrupted and is left alone). Unknown keys
        (in the state or in an alert record) are ignored."""
        if not text:
            return cls()
        try:
            data = json_text.loads(text)
        except ValueError as exc:
            raise ValueError(f"state annotation is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError("state annotation is not a JSON object")
        version = data.pop("v", 1)
        if not isinstance(version, int) or version > STATE_VERSION:
            raise ValueError(f"state annotation version {version!r} is newer than this remediator's "
                             f"({STATE_VERSION})")
        raw_alerts = data.pop("alerts", None) or {}
        if not isinstance(raw_alerts, dict):
            raise ValueError("state annotation: alerts is not a mapping")
        alert_fields = set(AlertRecord.__dataclass_fields__)
        try:
            alerts = {str(fp): AlertRecord(**_read_times(_checked_alert(fp, a, alert_fields), _ALERT_TIMES))
                      for fp, a in raw_alerts.items()}
            known = {k.key for k in _STATE_KEYS}
            _check_state(data, "state annotation: ")
            rest = _read_times({k: v for k, v in data.items() if k in known}, _STATE_TIMES)
            rest["actions"] = tuple(parse_time(t) for t in rest.get("actions") or ())
            for k in _STATE_KEYS:
                if k.type == "tuple[str, ...]":
                    rest[k.key] = tuple(rest.get(k.key) or ())
            _read_words(rest)
            return cls(alerts=alerts, **state_records.grouped(cls, rest, _STATE_KEYS))
        except (TypeError, AttributeError, OverflowError) as exc:  # overflow: a time past year 9999 in UTC
            raise ValueError(f"state annotation is damaged: {exc}") from exc


# The keys the annotation holds (decide/state_records.py), and of them the times: RFC 3339 text there, datetime in
# memory (to_json / from_json). The times are read off the fields' types, so a new one is never written as a time
# and read as text.
_STATE_KEYS = state_records.keys_of(NodeState, skip=("alerts",))
_ALERT_FIELDS = tuple(f.name for f in fields(AlertRecord))
_STATE_TIMES = tuple(k.key for k in _STATE_KEYS if k.type in ("datetime", "datetime | None"))
# The words of the vocabulary the state holds, by their declared type: read into their enums on read
_WORDS: dict[str, type[StrEnum]] = {"Rung": Rung, "RungStatus": RungStatus, "ResetPhase": ResetPhase, "Scope": Scope,
                                    "EvidenceOutcome": EvidenceOutcome, "Purpose": Purpose}


def _read_words(rest: dict[str, Any]) -> None:
    """The words of the vocabulary read into their types: an unknown one is a damaged state (fail closed). A null
    where the type allows none (every state has a scope) is unknown too."""
    for k in _STATE_KEYS:
        kind = _WORDS.get(k.type.removesuffix(" | None"))
        if kind is not None and k.key in rest and (rest[k.key] is not None or not k.type.endswith(" | None")):
            try:
                rest[k.key] = kind(rest[k.key])
            except ValueError:
                raise ValueError(f"state annotation: {k.key} {rest[k.key]!r} is unknown") from None
_ALERT_TIMES = tuple(f.name for f in fields(AlertRecord) if f.type in ("datetime", "datetime | None"))


def _fields_json(record: AlertRecord, names: tuple[str, ...]) -> dict[str, Any]:
    """A record's fields as its JSON holds them: times as RFC 3339 (the words are str, the tuples lists as they are).
    Not dataclasses.asdict: its deep copy of every value cost a recording more than all the rest of it."""
    return {name: fmt_time(v) if isinstance(v := getattr(record, name), datetime) else v for name in names}


def _alert_json(alert: AlertRecord) -> dict[str, Any]:
    """An alert record's JSON; without max_rung where the alert has no ceiling of its own, and without page where it
    asks for no person (as before those labels)."""
    data = _fields_json(alert, _ALERT_FIELDS)
    if alert.max_rung is None:
        del data["max_rung"]
    if not alert.page:
        del data["page"]
    return data


_check_state = state_schema.checker(NodeState, skip=("alerts",))
_check_alert = state_schema.checker(AlertRecord)


def _checked_alert(fingerprint: str, record: Any, known: set[str]) -> dict[str, Any]:
    """An alert record's known keys, each of its field's JSON type, its status, remediation and max_rung words the
    webhook records (intake/webhook.py) read into their enums: ValueError otherwise."""
    where = f"state annotation: alert {fingerprint[:40]!r}: "
    if not isinstance(record, dict):
        raise ValueError(f"{where}not a JSON object")
    _check_alert(record, where)
    status, remediation, max_rung = record.get("status"), record.get("remediation"), record.get("max_rung")
    if status not in tuple(AlertStatus):
        raise ValueError(f"{where}status {status!r} is neither firing nor resolved")
    if remediation not in REMEDIATIONS:
        raise ValueError(f"{where}remediation {remediation!r} is unknown")
    if max_rung is not None and max_rung not in RUNGS:
        raise ValueError(f"{where}max_rung {max_rung!r} is unknown")
    words = {"status": AlertStatus(status), "remediation": Remediation(remediation),
             "max_rung": None if max_rung is None else Rung(max_rung)}
    return {k: v for k, v in {**record, **words}.items() if k in known}


def _read_times(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """`data` with its times read (a missing or null optional one stays as it is; a required one missing is the
    dataclass's TypeError): what is not RFC 3339 text is a damaged state."""
    for key in keys:
        value = data.get(key)
        if value is not None:
            try:
                data[key] = parse_time(value)
            except ValueError as exc:
                raise ValueError(f"state annotation is damaged: {key}: {exc}") from None
    return data


def record_alerts(state: NodeState, alerts: list[tuple[str, AlertRecord]], now: datetime) -> NodeState:
    """Merge alerts from a webhook into the state: idempotent, order-independent per alert.

    Duplicates change nothing but `last_seen`; an older copy arriving late (out of order) never
    overwrites a newer one; a resolved alert that fires again (a later startsAt) reopens.
    """
    merged = dict(state.alerts)
    for fp, incoming in alerts:
        seen = replace(incoming, last_seen=now)
        current = merged.get(fp)
        if (incoming.resolved_by == "sync" and current is not None and current.status == AlertStatus.FIRING
                and incoming.ends_at is not None and current.last_seen >= incoming.ends_at):
            continue  # seen firing after Alertmanager's list was read: the list is older news
        if current is None or incoming.order_key() >= current.order_key():
            merged[fp] = seen
    firing_any = any(a.asks_action for a in merged.values())
    episode = state.episode
    healthy_since = state.healthy_since
    quiet = state.quiet
    if firing_any:
        episode = episode or now
        healthy_since = None
        quiet = False
    elif episode is not None and healthy_since is None:
        healthy_since = now
    return bounded_alerts(replace(state, alerts=merged, episode=episode, healthy_since=healthy_since, quiet=quiet))


def _keep_rank(fingerprint: str, a: AlertRecord) -> tuple[bool, bool, int, datetime, str]:
    """Which records a full state keeps, highest first. Only what a record's next copy keeps (not last_seen), so a
    forgotten alert recorded again is forgotten again: the state does not churn."""
    firing = a.status == AlertStatus.FIRING
    acting = a.asks_action
    return firing, acting, rung_index(a.remediation) if acting else -1, a.starts_at, fingerprint


def bounded_alerts(state: NodeState) -> NodeState:
    """`state` with at most MAX_ALERT_RECORDS alert records and its annotation at most MAX_RECORDS_BYTES long: the
    records it keeps are those of highest _keep_rank that fit."""
    if len(state.alerts) <= MAX_ALERT_RECORDS and len(state.to_json()) <= MAX_RECORDS_BYTES:
        return state
    size = len(replace(state, alerts={}).to_json())
    kept: set[str] = set()
    for fp, a in sorted(state.alerts.items(), key=lambda item: _keep_rank(*item), reverse=True):
        if len(kept) == MAX_ALERT_RECORDS:
            break
        entry = len(_compact_json({fp: _alert_json(a)})) - 1  # "fp":{...} and a comma
        if size + entry <= MAX_RECORDS_BYTES:
            kept.add(fp)
            size += entry
    return replace(state, alerts={fp: a for fp, a in state.alerts.items() if fp in kept})


def hold_of(annotations: dict[str, str]) -> dict[str, Any] | None:
    raw = annotations.get(HOLD_ANNOTATION)
    if raw is None:
        return None
    try:
        value = json_text.loads(raw)
    except ValueError:
        return {"reason": raw}
    return value if isinstance(value, dict) else {"reason": str(value)}
