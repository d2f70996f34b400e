"""The kmsg probe: NVIDIA Xids and host faults from the kernel log, counted per GPU, kept across restarts.

It works when DCGM and NVML do not (the kernel log is the fallback path). Counts are per boot and
survive a restart of the exporter (state.py). Each record is matched against the patterns
(patterns.py); event lines are grouped into events (events.py); faults are kept for the node
conditions (KernelFacts).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuhealth.contract import xid_decode
from gpuhealth.contract.pci import normalize_bus_id
from gpuhealth.exporter import catalog
from gpuhealth.exporter.catalog import Family
from gpuhealth.exporter.kernel.events import EventGrouper
from gpuhealth.exporter.kernel.patterns import KernelEventMatcher, Match
from gpuhealth.exporter.kernel.records import KernelRecord
from gpuhealth.exporter.kernel.sources import MAX_READS_PER_RUN, DeviceSource, FileSource, Source
from gpuhealth.exporter.kernel.state import Key, Saved, StateFile, fault, key
from gpuhealth.exporter.probes.base import BAD_OUTPUT, ProbeError
from gpuhealth.exporter.samples import KernelFacts, KernelFault, ProbeResult, RecoveryAction

RECENT_EVENTS = 1000  # recent faults kept for node conditions
# The loaded NVIDIA driver's version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03 ..."): which
# intrInfo layout its Xid 144-150 lines have (gpuhealth/contract/xid_decode.py). Read for /dev/kmsg only: a log file
# may have been written by another driver (a capture, a journal from before an upgrade), so its lines are decoded in
# both layouts, the stronger action winning.
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"

# Xid 154 recovery actions, by the code the driver prints: the pinned nvidia-ml-py's NVML_GPU_RECOVERY_ACTION_*
# values, named as the NVML probe names them (gpuhealth/exporter/probes/nvml.py; a test checks both against pynvml).
# A code past these stays unknown_<code> (GPURecoveryActionUnknown cordons).
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu_reset_required",
    2: "node_reboot_required",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}


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


_KERNEL_RECORDS = key(catalog.KMSG_RECORDS, {"origin": "kernel"})
_USERSPACE_RECORDS = key(catalog.KMSG_RECORDS, {"origin": "userspace"})
_UNRECOGNISED = key(catalog.KMSG_LINES_UNRECOGNISED, {})
_TRUNCATED = key(catalog.KMSG_LINES_TRUNCATED, {})


class KmsgProbe:
    name = "kmsg"

    def __init__(
        self,
        source: Source,
        state_file: str | None = None,
        boot_id_file: str = "/proc/sys/kernel/random/boot_id",
        matcher: KernelEventMatcher | None = None,
        proc_stat: str = "/proc/stat",
        driver_version_file: str = "",  # default: DRIVER_VERSION_FILE for /dev/kmsg, none for a file
    ) -> None:
        self.source = source
        self.matcher = matcher or KernelEventMatcher()
        self.boot_id = read_boot_id(boot_id_file)
        self.boot_time = read_boot_time(proc_stat)
        self.driver_version_file = driver_version_file or (DRIVER_VERSION_FILE if source.kind == "device" else "")
        self.state = StateFile(state_file, source, self.boot_id) if state_file else None
        saved = (self.state.load(self.matcher.condition_of) if self.state else None) or Saved()
        self.position = saved.position
        self.counts: dict[Key, float] = saved.counts
        self.gpu_uuids: dict[str, str] = saved.gpu_uuids
        self.recovery: dict[str, tuple[int, str, float]] = saved.recovery  # pci -> (code, action, announced at)
        self.recent: deque[KernelFault] = deque(saved.recent, maxlen=RECENT_EVENTS)
        self.events = EventGrouper()

    @classmethod
    def for_path(cls, path: str, is_file: bool, **kwargs: Any) -> KmsgProbe:
        return cls(FileSource(path) if is_file else DeviceSource(path), **kwargs)

    # --- records ---
    def _count(self, family: Family, labels: dict[str, str], by: float = 1) -> None:
        k = key(family, labels)
        self.counts[k] = self.counts.get(k, 0) + by

    def _event_time(self, record: KernelRecord) -> float:
        """When it happened: from the record on /dev/kmsg (so a restart agrees); when read, for a file."""
        if self.source.kind == "device" and record.usec is not None:
            return self.boot_time + record.usec / 1e6
        return time.time()

    def _remember(self, record: KernelRecord, kind: str, condition: str, labels: dict[str, str]) -> None:
        self.recent.append(fault(self._event_time(record), kind, condition, labels))

    def _handle(self, record: KernelRecord) -> None:
        if not record.kernel:  # every record is counted: no per-record label dict
            k = _USERSPACE_RECORDS if record.known else _UNRECOGNISED
            self.counts[k] = self.counts.get(k, 0) + 1
            return  # user space can write anything to /dev/kmsg; only the kernel is believed
        self.counts[_KERNEL_RECORDS] = self.counts.get(_KERNEL_RECORDS, 0) + 1
        events = self.events
        for m, r in events.next_record(record):
            self._count_event(m, r)
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
            self._count(catalog.NVSWITCH_SXID_ERRORS, labels)
            self._remember(record, "sxid", match.condition, labels)
        elif match.kind == "event":
            for m, r in events.event(match, record):
                self._count_event(m, r)
        elif match.kind == "unparsed_xid":
            self._count(catalog.KMSG_UNPARSED_XID_RECORDS, {})

    def _count_event(self, m: Match, record: KernelRecord) -> None:
        labels = {"event": m.fields["event"], "device": normalize_bus_id(m.fields.get("device", ""))}
        self._count(catalog.KERNEL_EVENTS, labels)
        self._remember(record, "event", m.condition, labels)

    def _on_xid(self, m: Match, record: KernelRecord) -> None:
        pci = normalize_bus_id(m.fields["pci"]) if m.fields.get("pci") else ""
        if self.events.same_fall_off_the_bus(m, pci, record):
            return
        fatal = m.fields.get("fatal", "").lower()  # only Xid 144-150 lines say Fatal/Nonfatal
        labels = {"xid": m.fields["xid"], "pci_bus_id": pci, "gpu_instance": m.fields.get("gpu_instance") or "",
                  "fatal": fatal and str(fatal == "fatal").lower()}
        self._count(catalog.XID_ERRORS, labels)
        if "action_code" in m.fields:
            code = int(m.fields["action_code"], 16)
            self.recovery[pci] = (code, RECOVERY_ACTIONS.get(code, f"unknown_{code}"), self._event_time(record))
        decoded = xid_decode.decode(int(m.fields["xid"]), m.fields, self._driver_branch)
        if decoded is not None:
            self._count(catalog.XID_DECODED, {"xid": m.fields["xid"], "pci_bus_id": pci, "action": decoded.value})
            labels = {**labels, "decoded": decoded.value}
        self._remember(record, "xid", m.condition, labels)

    @property
    def _driver_branch(self) -> int | None:
        """The loaded driver's branch, read when a line needs it (a driver can be reloaded without a reboot); None
        where the file is missing or names none: then both intrInfo layouts are decoded and the stronger wins."""
        if not self.driver_version_file:
            return None
        try:
            return xid_decode.driver_branch(Path(self.driver_version_file).read_text(errors="replace"))
        except OSError:
            return None

    # --- the probe ---
    def collect(self, deadline: float) -> ProbeResult:
        """Read what is new and count it; all or nothing, so a failure part-way loses no record."""
        until = time.monotonic() + deadline * 0.8
        position = replace(self.position)
        saved = (dict(self.counts), dict(self.gpu_uuids), dict(self.recovery), deque(self.recent, RECENT_EVENTS))
        records = missed = truncated = 0
        try:
            # Each read's records are handled before the next read, so only one read's are ever held.
            for _ in range(MAX_READS_PER_RUN):
                batch = self.source.read(position, until)
                for record in batch.records:
                    self._handle(record)
                records += len(batch.records)
                missed += batch.missed
                truncated += batch.truncated
                more = batch.more
                del batch  # not held while the next read builds its own
                if not more or time.monotonic() >= until:
                    break
            # Lines a report printed later than this batch are taken as another report.
            for m, r in self.events.flush():
                self._count_event(m, r)
        except Exception:
            self.counts, self.gpu_uuids, self.recovery, self.recent = saved
            self.events.waiting = []
            self.source.close()  # the device is re-read from the committed position
            raise
        moved, self.position = position != self.position, position
        if missed:
            self._count(catalog.KMSG_RECORDS_MISSED, {}, missed)
        if truncated:
            self._count(catalog.KMSG_LINES_TRUNCATED, {}, truncated)
        if self.state is not None and (records or missed or truncated or moved):
            self.state.save(Saved(self.position, self.counts, self.gpu_uuids, self.recovery, self.recent))
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
            key(catalog.KMSG_RECORDS_MISSED, {}): 0.0,
            key(catalog.KMSG_UNPARSED_XID_RECORDS, {}): 0.0,
            _KERNEL_RECORDS: 0.0,
            _USERSPACE_RECORDS: 0.0,
            _UNRECOGNISED: 0.0,
            _TRUNCATED: 0.0,
        }
        totals.update(self.counts)
        result = ProbeResult()
        for (family, labels), value in totals.items():
            sample_labels = dict(labels)
            if family is catalog.XID_ERRORS:
                sample_labels.update(gpu="", uuid=self.gpu_uuids.get(sample_labels["pci_bus_id"], ""))
                sample_labels.setdefault("gpu_instance", "")  # counts kept by an exporter before MIG labels
            result.add(family, value, **sample_labels)
        for pci, (code, action, when) in self.recovery.items():
            gpu = {"gpu": "", "uuid": self.gpu_uuids.get(pci, ""), "pci_bus_id": pci, "action": action}
            result.add(catalog.GPU_RECOVERY_ACTION, code, **gpu)
            result.add(catalog.GPU_RECOVERY_ACTION_TIMESTAMP_SECONDS, when, **gpu)
        result.add(catalog.NODE_BOOT_TIME_SECONDS, self.boot_time)
        recovery = tuple(RecoveryAction(pci, *action) for pci, action in self.recovery.items())
        result.kernel = KernelFacts(gpu_uuids=dict(self.gpu_uuids), recent=tuple(self.recent), recovery=recovery)
        return result
