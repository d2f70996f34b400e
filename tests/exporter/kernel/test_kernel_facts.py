"""The kmsg probe's typed facts (KernelFacts), the state file that carries them across restarts, and the
event grouping between a pattern match and a count: the seams between gpuhealth/exporter/kernel/ and the conditions."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpuhealth.exporter.collector import Expectations
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.kernel.events import EventGrouper
from gpuhealth.exporter.kernel.patterns import Match
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.kernel.records import KernelRecord
from gpuhealth.exporter.kernel.sources import FileSource
from gpuhealth.exporter.kernel.state import Saved, StateFile
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.samples import KernelFault, RecoveryAction
from gpuhealth.exporter.snapshot import Snapshot
from tests.exporter.kernel.kmsg_file_harness import file_probe

GPU, NVLINK, KERNEL = "GpuhealthGPUHealthy", "GpuhealthNVLinkHealthy", "GpuhealthKernelHealthy"


def test_the_probe_hands_over_uuids_recent_faults_and_recovery_actions_typed(fixtures: Path) -> None:
    facts = file_probe(fixtures / "kmsg" / "samples.txt").collect(5).kernel
    assert facts is not None
    assert facts.gpu_uuids == {"00000000:9B:00.0": "GPU-509665ad-b600-ac93-3616-d754b23d636d"}
    assert [(a.pci_bus_id, a.code, a.action) for a in facts.recovery] == [
        ("00000009:01:00.0", 4, "drain_and_reset"), ("00000019:01:00.0", 1, "gpu_reset_required"),
        ("00000008:01:00.0", 1, "gpu_reset_required")]
    assert all(isinstance(a, RecoveryAction) and a.announced_at > 0 for a in facts.recovery)
    first = facts.recent[0]
    assert (first.kind, first.xid, first.pci_bus_id, first.condition, first.fatal) == (
        "xid", "79", "00000000:05:00.0", GPU, None)
    fatal = {(f.xid, f.fatal) for f in facts.recent if f.kind == "xid" and f.xid in ("145", "149")}
    assert fatal == {("149", True), ("145", False)}  # what the line says, typed
    sxids = {(f.sxid, f.fatal, f.condition) for f in facts.recent if f.kind == "sxid"}
    assert sxids == {("24007", True, NVLINK), ("20009", False, NVLINK), ("20034", True, NVLINK)}
    events = {(f.event, f.condition) for f in facts.recent if f.kind == "event"}
    assert ("hung_task", KERNEL) in events and ("mlx5_error", "") in events  # no condition: counted only


def _state_of_an_older_exporter(log: Path, state: Path, recent: list[object]) -> None:
    """A state file as the exporter wrote it before patterns named conditions: faults without `condition`."""
    state.write_text(json.dumps({
        "version": 2, "boot_id": "", "kind": "file", "source": str(log), "last_seq": None,
        "inode": log.stat().st_ino, "offset": log.stat().st_size, "skipping": False,
        "counts": [["gpuhealth_xid_errors", {"xid": "48", "pci_bus_id": "00000000:05:00.0", "gpu_instance": "",
                                             "fatal": ""}, 1.0]],
        "gpu_uuids": {}, "recovery": {}, "recent": recent,
    }))


def _conditions(probe: KmsgProbe) -> dict[str, tuple[str, str, str]]:
    snapshot = Snapshot()
    ProbeRunner(probe, snapshot, interval=10, deadline=2).run_once()
    return {c.type: (c.status, c.reason, c.message) for c in evaluate(snapshot.view(), Expectations(), 900)}


def test_faults_an_older_exporter_kept_still_set_their_conditions_after_the_upgrade(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 48\n")  # read before the upgrade: not read again
    now = time.time()
    _state_of_an_older_exporter(log, state, [
        {"time": now, "kind": "xid", "xid": "48", "pci_bus_id": "00000000:05:00.0", "gpu_instance": "", "fatal": ""},
        {"time": now, "kind": "sxid", "sxid": "24007", "pci_bus_id": "00000000:C3:00.0", "fatal": "true"},
        {"time": now, "kind": "event", "event": "mce", "device": ""},
        {"time": now, "kind": "event", "event": "mce_corrected", "device": ""},
    ])
    with log.open("a") as f:
        f.write("[ 2.0] usb 1-1: new high-speed USB device\n")  # something new to read: the state is written again
    got = _conditions(KmsgProbe.for_path(str(log), True, state_file=str(state)))
    assert got[GPU] == ("False", "FatalXid", "Xid 48 on GPU 00000000:05:00.0")
    assert got[NVLINK] == ("False", "FatalSXid", "SXid 24007 on NVSwitch 00000000:C3:00.0")
    assert got[KERNEL] == ("False", "KernelFault", "mce")  # mce_corrected sets none
    saved = json.loads(state.read_text())
    assert [e["condition"] for e in saved["recent"]] == [GPU, NVLINK, KERNEL, ""]  # written with them now


def test_a_malformed_fault_in_the_state_is_left_out_and_the_rest_is_kept(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 48\n")
    _state_of_an_older_exporter(log, state, [
        {"kind": "xid", "xid": "79"},  # no time
        "not a fault",
        {"time": time.time(), "kind": "xid", "xid": "48", "pci_bus_id": "00000000:05:00.0", "gpu_instance": "",
         "fatal": "", "condition": GPU},
    ])
    probe = KmsgProbe.for_path(str(log), True, state_file=str(state))
    assert [f.xid for f in probe.recent] == ["48"]
    assert probe.position.offset == log.stat().st_size  # the position and the counts are still trusted
    assert sum(probe.counts.values()) == 1


def test_every_field_of_a_fault_survives_the_state_file(tmp_path: Path) -> None:
    log, path = tmp_path / "kern.log", str(tmp_path / "state.json")
    log.write_text("")
    faults = [KernelFault(1.5, "xid", GPU, xid="149", pci_bus_id="00000018:01:00.0", gpu_instance="5", fatal=True,
                          decoded="none"),
              KernelFault(2.5, "xid", GPU, xid="145", pci_bus_id="00000018:01:00.0", fatal=False),
              KernelFault(3.5, "xid", GPU, xid="79", pci_bus_id="00000000:05:00.0"),
              KernelFault(4.5, "sxid", NVLINK, sxid="20009", pci_bus_id="00000000:06:00.0", fatal=False),
              KernelFault(5.5, "event", "", event="pcie_aer_corrected", device="00000000:00:03.0")]
    source = FileSource(str(log))
    StateFile(path, source, "").save(Saved(recent=faults))
    loaded = StateFile(path, source, "").load(lambda kind, event: "never asked: each fault names its own")
    assert loaded is not None and list(loaded.recent) == faults


# --- events.py: which lines are one event ---

def _event(pattern: str, part_of: tuple[str, ...] = (), announces: tuple[str, ...] = ()) -> Match:
    return Match(pattern, "event", {"event": pattern}, part_of=part_of, announces=announces)


def _feed(grouper: EventGrouper, lines: list[tuple[Match | None, float | None]]) -> list[str]:
    """The patterns of the lines counted, in the order they are counted (None: a record no pattern matched)."""
    counted: list[str] = []
    for m, seconds in lines:
        record = KernelRecord("", usec=None if seconds is None else int(seconds * 1e6))
        counted += [c.pattern for c, _ in grouper.next_record(record)]
        if m is not None:
            counted += [c.pattern for c, _ in grouper.event(m, record)]
    return counted + [c.pattern for c, _ in grouper.flush()]


def test_a_detail_line_just_after_its_header_is_part_of_it_and_one_long_after_is_an_event() -> None:
    header, detail = _event("header"), _event("detail", part_of=("header",))
    assert _feed(EventGrouper(), [(header, 1.0), (detail, 1.0001), (detail, 1.0002)]) == ["header"]
    assert _feed(EventGrouper(), [(header, 1.0), (detail, 5.0)]) == ["header", "detail"]
    assert _feed(EventGrouper(), [(header, None), *[(None, None)] * 9, (detail, None)]) == ["header", "detail"]


def test_an_announcing_line_is_dropped_for_the_line_it_announces_and_counted_when_none_follows() -> None:
    logged, record = _event("logged", announces=("record",)), _event("record")
    assert _feed(EventGrouper(), [(logged, 1.0), (record, 1.0001)]) == ["record"]
    assert _feed(EventGrouper(), [(logged, 1.0), (None, 9.0), (record, 9.0)]) == ["logged", "record"]
    assert _feed(EventGrouper(), [(logged, 1.0)]) == ["logged"]  # the end of the batch settles it
