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
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from exporter.kernel_events import RECOVERY_ACTIONS, KernelEventMatcher, Match
from exporter.kernel_log import KernelRecord
from exporter.pci import normalize_bus_id
from exporter.probes.base import BAD_OUTPUT, ProbeError
from exporter.probes.kmsg_sources import Batch, DeviceSource, FileSource, Position
from exporter.samples import ProbeResult

log = logging.getLogger(__name__)

STATE_VERSION = 2
RECENT_EVENTS = 1000  # recent faults kept for node conditions
# The driver reports one GPU falling off the bus both as "Xid 79" and as "GPU has fallen off the bus";
# the two lines for one GPU within this many seconds are one event.
SAME_EVENT_SECONDS = 10.0
SAME_EVENT_RECORDS = 8
# The lines of one multi-line report (an AER header and its details, a machine check record) come within
# microseconds: within this many seconds, where both lines carry the kernel's time, and SAME_EVENT_RECORDS.
SAME_REPORT_SECONDS = 1.0


class Source(Protocol):
    kind: str
    path: str

    def read(self, position: Position, until: float) -> Batch: ...

    def close(self) -> None: ...


def read_boot_id(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def read_boot_time(proc_stat: str = "/proc/stat") -> float:
    """Unix time the machine booted (`btime`), so /dev/kmsg timestamps become wall-clock times."""
    try:
        for line in Path(proc_stat).read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return time.time() - time.monotonic()


Key = tuple[str, tuple[tuple[str, str], ...]]


def _key(family: str, labels: dict[str, str]) -> Key:
    return family, tuple(sorted(labels.items()))


_KERNEL_RECORDS = _key("gpuhealth_kmsg_records", {"origin": "kernel"})
_USERSPACE_RECORDS = _key("gpuhealth_kmsg_records", {"origin": "userspace"})
_UNRECOGNISED = _key("gpuhealth_kmsg_lines_unrecognised", {})
_TRUNCATED = _key("gpuhealth_kmsg_lines_truncated", {})
Stamp = tuple[int, float | None]  # (kernel record number, kernel time in seconds) of a line


class KmsgProbe:
    name = "kmsg"

    def __init__(
        self,
        source: Source,
        state_file: str | None = None,
        boot_id_file: str = "/proc/sys/kernel/random/boot_id",
        matcher: KernelEventMatcher | None = None,
        proc_stat: str = "/proc/stat",
    ) -> None:
        self.source = source
        self.state_file = state_file
        self.matcher = matcher or KernelEventMatcher()
        self.boot_id = read_boot_id(boot_id_file)
        self.boot_time = read_boot_time(proc_stat)
        self.position = Position()
        self.counts: dict[Key, float] = {}
        self.gpu_uuids: dict[str, str] = {}
        self.recovery: dict[str, tuple[int, str, float]] = {}  # pci -> (code, action, announced at)
        self.recent: deque[dict[str, str | float]] = deque(maxlen=RECENT_EVENTS)
        self._state_warned = False
        self._records_seen = 0
        self._last_79: dict[str, tuple[float | None, int, bool]] = {}  # pci -> (time, record number, implied)
        self._last_line: dict[str, Stamp] = {}  # event pattern -> its last line (or a line of its event)
        self._announced: list[tuple[Match, KernelRecord, Stamp]] = []  # `announces` lines not yet settled
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
        # Without a boot id a reboot cannot be told from a restart: trusting the old position then
        # would skip the new boot's records, so the state is dropped instead.
        same_boot = self.source.kind == "file" or (bool(self.boot_id) and doc.get("boot_id") == self.boot_id)
        if doc.get("version") != STATE_VERSION or not same_source or not same_boot:
            log.info("kmsg state %s is from another boot or source: starting afresh", self.state_file)
            return
        try:
            position = Position(doc.get("last_seq"), doc.get("inode"), int(doc.get("offset", 0)),
                                bool(doc.get("skipping", False)))
            counts = {_key(str(f), dict(labels)): float(v) for f, labels, v in doc.get("counts", [])}
            recovery = {str(k): (int(v[0]), str(v[1]), float(v[2])) for k, v in doc.get("recovery", {}).items()}
            recent = [dict(e) for e in doc.get("recent", [])]
        except (TypeError, ValueError, IndexError) as exc:
            log.warning("kmsg state %s malformed (%s): starting from the whole log", self.state_file, exc)
            return
        self.position, self.counts, self.recovery = position, counts, recovery
        self.gpu_uuids = {str(k): str(v) for k, v in doc.get("gpu_uuids", {}).items()}
        self.recent.extend(recent)

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
            "skipping": self.position.skipping,
            "counts": [[family, dict(labels), value] for (family, labels), value in self.counts.items()],
            "gpu_uuids": self.gpu_uuids,
            "recovery": self.recovery,
            "recent": list(self.recent),
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

    def _event_time(self, record: KernelRecord) -> float:
        """When it happened: from the record on /dev/kmsg (so a restart agrees); when read, for a file."""
        if self.source.kind == "device" and record.usec is not None:
            return self.boot_time + record.usec / 1e6
        return time.time()

    def _remember(self, record: KernelRecord, kind: str, labels: dict[str, str]) -> None:
        self.recent.append({"time": self._event_time(record), "kind": kind, **labels})

    def _handle(self, record: KernelRecord) -> None:
        if not record.kernel:  # every record is counted: no per-record label dict
            key = _USERSPACE_RECORDS if record.known else _UNRECOGNISED
            self.counts[key] = self.counts.get(key, 0) + 1
            return  # user space can write anything to /dev/kmsg; only the kernel is believed
        self.counts[_KERNEL_RECORDS] = self.counts.get(_KERNEL_RECORDS, 0) + 1
        self._records_seen += 1
        if self._announced:
            self._settle_announced(None, (self._records_seen, record.usec / 1e6 if record.usec is not None else None))
        match = self.matcher.match(record.text)
        if match is None or match.kind == "ignore":
            return
        if match.kind == "xid":
            self._on_xid(match, record)
        elif match.kind == "gpu_map":
            self.gpu_uuids[normalize_bus_id(match.fields["pci"])] = match.fields["uuid"]
        elif match.kind == "sxid":
            labels = {"sxid": match.fields["sxid"], "pci_bus_id": normalize_bus_id(match.fields["pci"]),
                      "fatal": str(match.fields["fatal"] == "Fatal").lower()}
            self._count("gpuhealth_nvswitch_sxid_errors", labels)
            self._remember(record, "sxid", labels)
        elif match.kind == "event":
            self._on_event(match, record)
        elif match.kind == "unparsed_xid":
            self._count("gpuhealth_kmsg_unparsed_xid_records", {})

    def _on_event(self, m: Match, record: KernelRecord) -> None:
        stamp: Stamp = (self._records_seen, record.usec / 1e6 if record.usec is not None else None)
        if m.part_of:
            for name in m.part_of:
                last = self._last_line.get(name)
                if last is not None and self._same_report(last, stamp):
                    self._last_line[name] = stamp  # the event goes on: its next detail block is part of it too
                    return
        self._last_line[m.pattern] = stamp
        if m.announces:
            self._announced.append((m, record, stamp))
            return
        if self._announced:
            self._settle_announced(m.pattern, stamp)
        self._count_event(m, record)

    def _count_event(self, m: Match, record: KernelRecord) -> None:
        labels = {"event": m.fields["event"], "device": normalize_bus_id(m.fields.get("device", ""))}
        self._count("gpuhealth_kernel_events", labels)
        self._remember(record, "event", labels)

    def _same_report(self, earlier: Stamp, later: Stamp) -> bool:
        if later[0] - earlier[0] > SAME_EVENT_RECORDS:
            return False
        return earlier[1] is None or later[1] is None or abs(later[1] - earlier[1]) <= SAME_REPORT_SECONDS

    def _settle_announced(self, announced: str | None, stamp: Stamp) -> None:
        """Drop an announcing line when the line it announces (`announced`) follows; count it once none can."""
        waiting = []
        for m, record, at in self._announced:
            same = self._same_report(at, stamp)
            if not same:
                self._count_event(m, record)
            elif announced not in m.announces:
                waiting.append((m, record, at))
        self._announced = waiting

    def _flush_announced(self) -> None:
        for m, record, _ in self._announced:
            self._count_event(m, record)
        self._announced = []

    def _same_fall_off_the_bus(self, m: Match, pci: str, record: KernelRecord) -> bool:
        """The driver reports one GPU falling off the bus as "Xid 79" and as a plain line: count it once.

        The two are one event when they name the same GPU and are close: within SAME_EVENT_SECONDS by
        their kernel timestamps, or, in captures without them, within a few records of each other.
        """
        if m.fields["xid"] != "79" or not pci:
            return False
        when = record.usec / 1e6 if record.usec is not None else None
        last = self._last_79.get(pci)
        self._last_79[pci] = (when, self._records_seen, m.implied)
        if last is None or last[2] == m.implied:
            return False
        if when is not None and last[0] is not None:
            return abs(when - last[0]) <= SAME_EVENT_SECONDS
        return self._records_seen - last[1] <= SAME_EVENT_RECORDS

    def _on_xid(self, m: Match, record: KernelRecord) -> None:
        pci = normalize_bus_id(m.fields["pci"]) if m.fields.get("pci") else ""
        if self._same_fall_off_the_bus(m, pci, record):
            return
        fatal = m.fields.get("fatal", "").lower()  # only Xid 144-150 lines say Fatal/Nonfatal
        labels = {"xid": m.fields["xid"], "pci_bus_id": pci, "gpu_instance": m.fields.get("gpu_instance") or "",
                  "fatal": fatal and str(fatal == "fatal").lower()}
        self._count("gpuhealth_xid_errors", labels)
        if "action_code" in m.fields:
            code = int(m.fields["action_code"], 16)
            self.recovery[pci] = (code, RECOVERY_ACTIONS.get(code, f"unknown_{code}"), self._event_time(record))
        self._remember(record, "xid", labels)

    # --- the probe ---
    def collect(self, deadline: float) -> ProbeResult:
        """Read what is new and count it; all or nothing, so a failure part-way loses no record."""
        until = time.monotonic() + deadline * 0.8
        position = replace(self.position)
        records, missed, truncated = self.source.read(position, until)
        saved = (dict(self.counts), dict(self.gpu_uuids), dict(self.recovery), deque(self.recent, RECENT_EVENTS))
        try:
            for record in records:
                self._handle(record)
            # Lines a report printed later than this batch are taken as another report.
            self._flush_announced()
        except Exception:
            self.counts, self.gpu_uuids, self.recovery, self.recent = saved
            self._announced = []
            self.source.close()  # the device is re-read from the committed position
            raise
        moved, self.position = position != self.position, position
        if missed:
            self._count("gpuhealth_kmsg_records_missed", {}, missed)
        if truncated:
            self._count("gpuhealth_kmsg_lines_truncated", {}, truncated)
        if records or missed or truncated or moved:
            self._save_state()
        self._fail_unless_a_kernel_log()
        return self._result()

    def _fail_unless_a_kernel_log(self) -> None:
        """Fail closed on input that is mostly not a kernel log (a binary file, the wrong file)."""
        garbage = self.counts.get(_UNRECOGNISED, 0)
        records = self.counts.get(_KERNEL_RECORDS, 0) + self.counts.get(_USERSPACE_RECORDS, 0)
        if garbage > records:
            raise ProbeError(BAD_OUTPUT, f"{self.source.path}: not a kernel log: {garbage:.0f} of "
                                         f"{garbage + records:.0f} lines are in no kernel-log shape")

    def _result(self) -> ProbeResult:
        # Series that exist from the start, so that increase() sees the first event.
        totals: dict[Key, float] = {
            _key("gpuhealth_kmsg_records_missed", {}): 0.0,
            _key("gpuhealth_kmsg_unparsed_xid_records", {}): 0.0,
            _key("gpuhealth_kmsg_records", {"origin": "kernel"}): 0.0,
            _key("gpuhealth_kmsg_records", {"origin": "userspace"}): 0.0,
            _UNRECOGNISED: 0.0,
            _TRUNCATED: 0.0,
        }
        totals.update(self.counts)
        result = ProbeResult()
        for (family, labels), value in totals.items():
            sample_labels = dict(labels)
            if family == "gpuhealth_xid_errors":
                sample_labels.update(gpu="", uuid=self.gpu_uuids.get(sample_labels["pci_bus_id"], ""))
                sample_labels.setdefault("gpu_instance", "")  # counts kept by an exporter before MIG labels
            result.add(family, value, **sample_labels)
        for pci, (code, action, when) in self.recovery.items():
            gpu = {"gpu": "", "uuid": self.gpu_uuids.get(pci, ""), "pci_bus_id": pci, "action": action}
            result.add("gpuhealth_gpu_recovery_action", code, **gpu)
            result.add("gpuhealth_gpu_recovery_action_timestamp_seconds", when, **gpu)
        result.add("gpuhealth_node_boot_time_seconds", self.boot_time)
        result.facts["gpu_uuids"] = dict(self.gpu_uuids)
        result.facts["recent_events"] = list(self.recent)
        return result
