"""The kmsg probe's state file: what it keeps across restarts of the exporter.

Counts are per boot: the boot id, the source and the read position are kept with the counts, so a
restart neither counts old records again nor loses the ones that arrived while the exporter was down,
and a state from another boot or another source is not trusted. The file is JSON, written whole to a
temporary file and renamed over the old one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhealth.exporter.catalog import FAMILIES, Family
from gpuhealth.exporter.kernel.sources import Position, Source
from gpuhealth.exporter.samples import KernelFault

log = logging.getLogger(__name__)

STATE_VERSION = 2

Key = tuple[Family, tuple[tuple[str, str], ...]]  # a counter: its family and its labels, sorted


def key(family: Family, labels: dict[str, str]) -> Key:
    return family, tuple(sorted(labels.items()))


def _counts(entries: Iterable[Any], path: str) -> dict[Key, float]:
    """The counts kept in the file, each under its family's handle. A count of a family this exporter does not
    declare (kept by a newer one, before a rollback) is left out with one warning: served, it would fail every run
    of the probe as garbage; the other counts and the read position stay good."""
    counts: dict[Key, float] = {}
    unknown: set[str] = set()
    for name, labels, value in entries:
        family = FAMILIES.get(str(name))
        if family is None:
            unknown.add(str(name))
            continue
        counts[key(family, dict(labels))] = float(value)
    if unknown:
        log.warning("kmsg state %s: counts of %s, no metric family of this exporter (a newer one's?), left out",
                    path, ", ".join(sorted(unknown)))
    return counts


@dataclass
class Saved:
    """What the probe has counted this boot, and where it stopped reading."""

    position: Position = field(default_factory=Position)
    counts: dict[Key, float] = field(default_factory=dict)
    gpu_uuids: dict[str, str] = field(default_factory=dict)
    recovery: dict[str, tuple[int, str, float]] = field(default_factory=dict)  # pci -> (code, action, at)
    recent: Sequence[KernelFault] = ()  # oldest first


_FATAL = {"true": True, "false": False}


def fault(time: float, kind: str, condition: str, labels: dict[str, str]) -> KernelFault:
    """A fault from the labels it is counted with (fatal "true", "false", or "" where the line says nothing), and
    for a decoded Xid the action it decoded to (`decoded`, not a label of its counter)."""
    return KernelFault(time, kind, condition, xid=labels.get("xid", ""), sxid=labels.get("sxid", ""),
                       event=labels.get("event", ""), pci_bus_id=labels.get("pci_bus_id", ""),
                       device=labels.get("device", ""), gpu_instance=labels.get("gpu_instance", ""),
                       fatal=_FATAL.get(labels.get("fatal", "")), decoded=labels.get("decoded", ""))


def fault_labels(f: KernelFault) -> dict[str, str]:
    """The labels a fault of its kind is kept with in the file (as in its counter; a decoded Xid's decode too)."""
    fatal = "" if f.fatal is None else str(f.fatal).lower()
    if f.kind == "xid":
        labels = {"xid": f.xid, "pci_bus_id": f.pci_bus_id, "gpu_instance": f.gpu_instance, "fatal": fatal}
        return {**labels, "decoded": f.decoded} if f.decoded else labels
    if f.kind == "sxid":
        return {"sxid": f.sxid, "pci_bus_id": f.pci_bus_id, "fatal": fatal}
    if f.kind == "event":
        return {"event": f.event, "device": f.device}
    return {}


def _recent(entries: Iterable[Any], condition_of: Callable[[str, str], str], path: str) -> list[KernelFault]:
    out: list[KernelFault] = []
    for entry in entries:
        try:
            kind = str(entry["kind"])
            labels = {str(k): str(v) for k, v in entry.items() if k not in ("time", "kind", "condition")}
            # An exporter from before patterns named their condition kept none: the patterns say it now.
            condition = entry.get("condition")
            condition = condition_of(kind, labels.get("event", "")) if condition is None else str(condition)
            out.append(fault(float(entry["time"]), kind, condition, labels))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.warning("kmsg state %s: a recent fault is malformed (%r), left out", path, exc)
    return out


class StateFile:
    def __init__(self, path: str, source: Source, boot_id: str) -> None:
        self.path = path
        self.source = source
        self.boot_id = boot_id
        self._warned = False

    def load(self, condition_of: Callable[[str, str], str]) -> Saved | None:
        """The state of this boot and source, or None (no file, another boot or source, unreadable)."""
        try:
            doc = json.loads(Path(self.path).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("kmsg state %s unreadable (%s): starting from the whole log", self.path, exc)
            return None
        same_source = doc.get("source") == self.source.path and doc.get("kind") == self.source.kind
        # Without a boot id a reboot cannot be told from a restart: trusting the old position then
        # would skip the new boot's records, so the state is dropped instead.
        same_boot = self.source.kind == "file" or (bool(self.boot_id) and doc.get("boot_id") == self.boot_id)
        if doc.get("version") != STATE_VERSION or not same_source or not same_boot:
            log.info("kmsg state %s is from another boot or source: starting afresh", self.path)
            return None
        try:
            position = Position(doc.get("last_seq"), doc.get("inode"), int(doc.get("offset", 0)),
                                bool(doc.get("skipping", False)))
            counts = _counts(doc.get("counts", []), self.path)
            recovery = {str(k): (int(v[0]), str(v[1]), float(v[2])) for k, v in doc.get("recovery", {}).items()}
        except (TypeError, ValueError, IndexError) as exc:
            log.warning("kmsg state %s malformed (%s): starting from the whole log", self.path, exc)
            return None
        gpu_uuids = {str(k): str(v) for k, v in doc.get("gpu_uuids", {}).items()}
        return Saved(position, counts, gpu_uuids, recovery, _recent(doc.get("recent", []), condition_of, self.path))

    def save(self, state: Saved) -> None:
        """Written whole or not at all; a failure is logged once (a restart would count this boot again)."""
        doc = {
            "version": STATE_VERSION,
            "boot_id": self.boot_id,
            "kind": self.source.kind,
            "source": self.source.path,
            "last_seq": state.position.last_seq,
            "inode": state.position.inode,
            "offset": state.position.offset,
            "skipping": state.position.skipping,
            "counts": [[family.name, dict(labels), value] for (family, labels), value in state.counts.items()],
            "gpu_uuids": state.gpu_uuids,
            "recovery": state.recovery,
            "recent": [{"time": f.time, "kind": f.kind, **fault_labels(f), "condition": f.condition}
                       for f in state.recent],
        }
        try:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kmsg-state-")
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot write kmsg state %s (%s): a restart would count this boot again", self.path, exc)
                self._warned = True
