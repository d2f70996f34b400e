"""A node's past hardware episodes: the gpuhealth.io/history annotation, what the repeat-offender rules read
(decide/offenders.py).

The state annotation (nodestate.py) holds the episode under way and is reset at return to service; the history
outlives it. It is its own annotation, compact JSON, newest episode first:

    [{"s":"2026-12-02T10:00:00Z","e":"2026-12-02T11:20:00Z","r":"reset_gpu","g":["0000:9b:00","GPU-5a..."]}, ...]

s: when the episode started, e: when it ended (absent while under way, or when it never closed: replaced, released
by a person), r: the highest rung it carried out (done_rung: a reset or a reboot counts once its Job ran to an end,
done or failed; one cancelled before its Job began, or whose Job never started, is not written), g: the GPUs its
alerts named (each as the alert's label names it, a PCI bus id in its short form, and the GPU's UUID where DRA
publishes it). An episode is written in the same Node patch as
the state: once it starts a rung for a hardware alert, again as it climbs, and when it ends (return to service). It is
bounded: no episode that started longer ago than repeat_offenders.window (the one under way excepted), at most
MAX_EPISODES, at most MAX_HISTORY_BYTES (the oldest go first). An episode a person took over (removed gpuhealth's
taint) is dropped from it: what a person did to the node is not gpuhealth's evidence.

What counts as a hardware episode: one that started a rung (cordon or above, or a GPU's quarantine) for an alert with a
remediation other than none, whose component is not gpuhealth's own monitoring (NOT_HARDWARE_COMPONENTS), and which is
not a monitoring fault (decide/monitoring_fault.py). Episodes whose alerts resolved before any action, remediation=none
alerts and monitoring faults start no rung, so they are never written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from gpuhealth.contract.pci import short_bus_id
from gpuhealth.remediator.decide import json_text
from gpuhealth.remediator.decide.devices import NodeDevices
from gpuhealth.remediator.decide.nodestate import (
    ALL_GPUS,
    PREFIX,
    AlertRecord,
    NodeState,
    fmt_time,
    parse_time,
    rung_index,
)
from gpuhealth.remediator.decide.vocabulary import JOB_RUNGS, AlertStatus, Remediation, Rung, RungStatus, Scope

log = logging.getLogger("gpuhealth.remediator")

HISTORY_ANNOTATION = f"{PREFIX}/history"
MAX_EPISODES = 32
MAX_HISTORY_BYTES = 8 * 1024  # well under the state's 64 KiB: the Node's annotations total at most 256 KiB
MAX_GPU_IDS = 16  # per episode: a node's 8 GPUs by label and by UUID
# the alerts' component label of gpuhealth's own monitoring (rules/alerts/probe.yaml: a probe failing or stale, the
# exporter down): what gpuhealth cannot see is no evidence that the hardware failed
NOT_HARDWARE_COMPONENTS = ("probe",)
_NO_GPU = ("", ALL_GPUS, "unknown")


@dataclass(frozen=True)
class Episode:
    start: datetime
    end: datetime | None = None  # None: under way, or never closed (replaced, released by a person)
    rung: str | None = None  # the highest rung it carried out (done_rung)
    gpus: tuple[str, ...] = ()  # the GPUs its alerts named (labels, short PCI bus ids, UUIDs)

    def to_dict(self) -> dict[str, Any]:
        # the start to the microsecond, as the state's episode: it is the episode's identity (an episode under way is
        # found in its history by it, and is never counted as an earlier one of its own)
        out: dict[str, Any] = {"s": fmt_time(self.start)}
        if self.end is not None:
            out["e"] = _stamp(self.end)
        if self.rung is not None:
            out["r"] = self.rung
        if self.gpus:
            out["g"] = list(self.gpus)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Episode:
        end, rung, gpus = data.get("e"), data.get("r"), data.get("g") or []
        if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
            raise ValueError(f"g is not a list of GPU names: {gpus!r}")
        return cls(start=parse_time(str(data["s"])), end=parse_time(str(end)) if end else None,
                   rung=str(rung) if rung else None, gpus=tuple(gpus))


def _stamp(value: datetime) -> str:
    """RFC 3339 to the second: the history is read by people too (kubectl get node -o yaml)."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value.year >= 1000 else value.isoformat()


def read_history(text: str | None, node: str = "") -> tuple[Episode, ...]:
    """The history as written, newest first. A damaged one is no history (logged): it can only make the ladder
    escalate, so it fails towards doing less; the next episode's write replaces it."""
    if not text:
        return ()
    try:
        data = json_text.loads(text)
        if not isinstance(data, list):
            raise ValueError("not a JSON list")
        episodes = [Episode.from_dict(e) for e in data]
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        log.warning("node %s: unreadable %s annotation (%s): read as no history", node, HISTORY_ANNOTATION, exc)
        return ()
    return tuple(sorted(episodes, key=lambda e: e.start, reverse=True))


def history_json(episodes: Iterable[Episode]) -> str:
    """The annotation's text: newest first, the oldest left out past MAX_EPISODES or MAX_HISTORY_BYTES."""
    kept: list[dict[str, Any]] = []
    size = 2
    for e in sorted(episodes, key=lambda e: e.start, reverse=True)[:MAX_EPISODES]:
        entry = e.to_dict()
        cost = len(json.dumps(entry, separators=(",", ":"))) + 1
        if size + cost > MAX_HISTORY_BYTES:
            break
        kept.append(entry)
        size += cost
    return json.dumps(kept, separators=(",", ":"))


def hardware_alerts(state: NodeState, firing_only: bool = False) -> dict[str, AlertRecord]:
    """The alerts of the state that make its episode a hardware one (the module's docstring)."""
    return {fp: a for fp, a in state.alerts.items()
            if a.remediation != Remediation.NONE and a.component not in NOT_HARDWARE_COMPONENTS
            and fp not in state.monitoring_faults and (a.status == AlertStatus.FIRING or not firing_only)}


def gpu_ids(alerts: Iterable[AlertRecord], devices: NodeDevices | None) -> tuple[str, ...]:
    """The names of the GPUs these alerts name: the label (a PCI bus id in its short form), and the UUID and PCI bus
    id DRA publishes for it, so that two episodes match whichever way each named it."""
    ids: set[str] = set()
    for a in alerts:
        label = (a.gpu or "").strip()
        if label.lower() in _NO_GPU:
            continue
        ids.add(short_bus_id(label) or label)
        device = devices.find(label) if devices is not None else None
        if device is not None:
            ids.update(x for x in (device.uuid, device.pci_bus_id) if x)
    return tuple(sorted(ids))


def done_rung(st: NodeState | None) -> str | None:
    """The state's rung as the history writes it: what was carried out. A reset or a reboot counts once its Job ran to
    an end (done, or failed for the node's own reason); while it runs, when its Job never started (not_started:
    gpuhealth's breakage) or when no Job was made for it (no GPU named), only the drain before it was done (a reset or
    a reboot starts only on a drained node or GPU). A reset cancelled before its Job began leaves the ladder at that
    drain, and so the history too."""
    if st is None or st.rung is None:
        return None
    if st.rung in JOB_RUNGS and (st.rung_status not in (RungStatus.DONE, RungStatus.FAILED) or st.not_started
                                 or st.job is None):
        return Rung.DRAIN
    return st.rung


def in_window(history: Iterable[Episode], since: datetime) -> list[Episode]:
    return [e for e in history if e.start >= since]


def history_after(history: tuple[Episode, ...], devices: NodeDevices | None, taken_over: bool,
                  before: NodeState, after: NodeState, now: datetime, window: timedelta,
                  seen: NodeState | None = None) -> tuple[Episode, ...] | None:
    """The history to write with a plan's state (None: as it is). The episode under way is added once it reached a
    rung for a hardware alert and kept up to date as it climbs; it ends when the state closes it; a person's (its
    taint removed) is dropped. `seen`: the state as the pass observed the rung under way (a Job that ended), before
    the climb went on from it in the same pass."""
    if before == after:
        return None
    episodes = list(history)
    if after.active and after.rung is not None and hardware_alerts(after):
        same = seen if seen is not None and seen.episode == after.episode else None
        episodes = _upsert(episodes, after, devices, None, max(done_rung(same), done_rung(after), key=rung_index))
    elif before.active and not after.active and before.rung is not None:
        if taken_over and before.scope == Scope.NODE:
            episodes = [e for e in episodes if e.start != before.episode]
        elif hardware_alerts(before):
            episodes = _upsert(episodes, before, devices, now, max(done_rung(seen), done_rung(before), key=rung_index))
    open_start = after.episode if after.active else None
    episodes = [e for e in episodes if e.start >= now - window or e.start == open_start]
    new = tuple(sorted(episodes, key=lambda e: e.start, reverse=True))
    return None if new == history else new


def _upsert(episodes: list[Episode], st: NodeState, devices: NodeDevices | None,
            end: datetime | None, done: str | None) -> list[Episode]:
    """The episode of `st` in the list, up to date: its highest rung carried out (`done` now), every GPU its alerts
    named, its end."""
    assert st.episode is not None
    old = next((e for e in episodes if e.start == st.episode), Episode(st.episode))
    rung = old.rung if rung_index(old.rung) >= rung_index(done) else done
    gpus = tuple(sorted({*old.gpus, *gpu_ids(hardware_alerts(st).values(), devices)}))[:MAX_GPU_IDS]
    new = replace(old, rung=rung, gpus=gpus, end=end or old.end)
    return [new, *(e for e in episodes if e.start != st.episode)]
