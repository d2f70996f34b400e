"""The kmsg probe: NVIDIA Xids and host faults from the kernel log, counted per GPU, kept across restarts.

It works when DCGM and NVML do not (the kernel log is the fallback path). Counts are per boot: the
boot id and the last record handled are persisted in a state file, so a restart of the exporter
neither counts old records again nor loses the ones that arrived while it was down.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol

from exporter.kernel_events import RECOVERY_ACTIONS, KernelEventMatcher, Match
from exporter.kernel_log import KernelRecord
from exporter.pci import normalize_bus_id
from exporter.probes.kmsg_sources import DeviceSource, FileSource, Position
from exporter.samples import ProbeResult

log = logging.getLogger(__name__)

STATE_VERSION = 1
RECENT_EVENTS = 1000  # recent faults kept for node conditions
# The driver reports one GPU falling off the bus both as "Xid 79" and as "GPU has fallen off the bus";
# the two lines for one GPU within this many seconds are one event.
SAME_EVENT_SECONDS = 10.0


class Source(Protocol):
    kind: str
    path: str

    def read(self, position: Position, until: float) -> tuple[list[KernelRecord], int]: ...

    def close(self) -> None: ...


def read_boot_id(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _key(family: str, labels: dict[str, str]) -> str:
    return json.dumps([family, labels], sort_keys=True)


class KmsgProbe:
    name = "kmsg"

    def __init__(
        self,
        source: Source,
        state_file: str | None = None,
        boot_id_file: str = "/proc/sys/kernel/random/boot_id",
        matcher: KernelEventMatcher | None = None,
    ) -> None:
        self.source = source
        self.state_file = state_file
        self.matcher = matcher or KernelEventMatcher()
        self.boot_id = read_boot_id(boot_id_file)
        self.position = Position()
        self.counts: dict[str, float] = {}
        self.gpu_uuids: dict[str, str] = {}
        self.recovery: dict[str, tuple[int, str]] = {}
        self.recent: deque[dict[str, str | float]] = deque(maxlen=RECENT_EVENTS)
        self._state_warned = False
        self._last_79: dict[str, tuple[float, bool]] = {}
        self._load_state()

    @classmethod
    def for_path(cls, path: str, is_file: bool, **kwargs: Any) -> KmsgProbe:
        return cls(FileSource(path) if is_file else DeviceSource(path), **kwargs)

    # --- persistence ---
    def _load_state(self) -> None:
        if not self.state_file:
            return
        try:
            doc = json.loads(Path(self.state_file).read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("kmsg state %s unreadable (%s): starting from the whole log", self.state_file, exc)
            return
        same_source = doc.get("source") == self.source.path and doc.get("kind") == self.source.kind
        same_boot = self.source.kind == "file" or doc.get("boot_id") == self.boot_id
        if doc.get("version") != STATE_VERSION or not same_source or not same_boot:
            log.info("kmsg state %s is from another boot or source: starting afresh", self.state_file)
            return
        self.position = Position(doc.get("last_seq"), doc.get("inode"), int(doc.get("offset", 0)))
        self.counts = {str(k): float(v) for k, v in doc.get("counts", {}).items()}
        self.gpu_uuids = dict(doc.get("gpu_uuids", {}))
        self.recovery = {k: (int(v[0]), str(v[1])) for k, v in doc.get("recovery", {}).items()}

    def _save_state(self) -> None:
        if not self.state_file:
            return
        doc = {
            "version": STATE_VERSION,
            "boot_id": self.boot_id,
            "kind": self.source.kind,
            "source": self.source.path,
            "last_seq": self.position.last_seq,
            "inode": self.position.inode,
            "offset": self.position.offset,
            "counts": self.counts,
            "gpu_uuids": self.gpu_uuids,
            "recovery": self.recovery,
        }
        try:
            directory = os.path.dirname(os.path.abspath(self.state_file))
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kmsg-state-")
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.state_file)
        except OSError as exc:
            if not self._state_warned:
                log.warning("cannot write kmsg state %s (%s): a restart would count this boot again",
                            self.state_file, exc)
                self._state_warned = True

    # --- records ---
    def _count(self, family: str, labels: dict[str, str], by: float = 1) -> None:
        key = _key(family, labels)
        self.counts[key] = self.counts.get(key, 0) + by

    def _handle(self, record: KernelRecord) -> None:
        self._count("gpuhealth_kmsg_records", {"origin": "kernel" if record.kernel else "userspace"})
        if not record.kernel:
            return  # user space can write anything to /dev/kmsg; only the kernel is believed
        match = self.matcher.match(record.text)
        if match is None or match.kind == "ignore":
            return
        if match.kind == "xid":
            self._on_xid(match, record)
        else:
            getattr(self, f"_on_{match.kind}")(match)

    def _same_fall_off_the_bus(self, m: Match, pci: str, record: KernelRecord) -> bool:
        if m.fields["xid"] != "79" or not pci:
            return False
        now = record.usec / 1e6 if record.usec is not None else time.monotonic()
        last = self._last_79.get(pci)
        self._last_79[pci] = (now, m.implied)
        return last is not None and last[1] != m.implied and abs(now - last[0]) <= SAME_EVENT_SECONDS

    def _on_xid(self, m: Match, record: KernelRecord) -> None:
        pci = normalize_bus_id(m.fields["pci"]) if m.fields.get("pci") else ""
        if self._same_fall_off_the_bus(m, pci, record):
            return
        fatal = m.fields.get("fatal", "").lower()  # only Xid 144-150 lines say Fatal/Nonfatal
        labels = {"xid": m.fields["xid"], "pci_bus_id": pci, "fatal": fatal and str(fatal == "fatal").lower()}
        self._count("gpuhealth_xid_errors", labels)
        if "action_code" in m.fields:
            code = int(m.fields["action_code"], 16)
            self.recovery[pci] = (code, RECOVERY_ACTIONS.get(code, f"unknown_{code}"))
        self.recent.append({"time": time.time(), "kind": "xid", **labels})

    def _on_gpu_map(self, m: Match) -> None:
        self.gpu_uuids[normalize_bus_id(m.fields["pci"])] = m.fields["uuid"]

    def _on_sxid(self, m: Match) -> None:
        labels = {"sxid": m.fields["sxid"], "pci_bus_id": normalize_bus_id(m.fields["pci"]),
                  "fatal": str(m.fields["fatal"] == "Fatal").lower()}
        self._count("gpuhealth_nvswitch_sxid_errors", labels)
        self.recent.append({"time": time.time(), "kind": "sxid", **labels})

    def _on_event(self, m: Match) -> None:
        labels = {"event": m.fields["event"], "device": m.fields.get("device", "")}
        self._count("gpuhealth_kernel_events", labels)
        self.recent.append({"time": time.time(), "kind": "event", **labels})

    def _on_unparsed_xid(self, m: Match) -> None:
        self._count("gpuhealth_kmsg_unparsed_xid_records", {})

    # --- the probe ---
    def collect(self, deadline: float) -> ProbeResult:
        until = time.monotonic() + deadline * 0.8
        records, missed = self.source.read(self.position, until)
        for record in records:
            self._handle(record)
        if missed:
            self._count("gpuhealth_kmsg_records_missed", {}, missed)
        if records or missed:
            self._save_state()
        return self._result()

    def _result(self) -> ProbeResult:
        # Series that exist from the start, so that increase() sees the first event.
        totals = {_key("gpuhealth_kmsg_records_missed", {}): 0.0,
                  _key("gpuhealth_kmsg_unparsed_xid_records", {}): 0.0,
                  _key("gpuhealth_kmsg_records", {"origin": "kernel"}): 0.0,
                  _key("gpuhealth_kmsg_records", {"origin": "userspace"}): 0.0}
        for key, value in self.counts.items():
            family, labels = json.loads(key)
            if family == "gpuhealth_xid_errors":
                labels = {**labels, "gpu": "", "uuid": self.gpu_uuids.get(labels["pci_bus_id"], "")}
            totals[_key(family, labels)] = value
        result = ProbeResult()
        for key, value in totals.items():
            family, labels = json.loads(key)
            result.add(family, value, **labels)
        for pci, (code, action) in self.recovery.items():
            result.add("gpuhealth_gpu_recovery_action", code, gpu="", uuid=self.gpu_uuids.get(pci, ""),
                       pci_bus_id=pci, action=action)
        result.facts["gpu_uuids"] = dict(self.gpu_uuids)
        result.facts["recent_events"] = list(self.recent)
        return result
