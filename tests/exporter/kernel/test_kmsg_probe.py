"""The kmsg probe: counts per GPU and Xid, follows the log, survives restarts without double counting."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.probes.base import NOT_FOUND, ProbeError
from gpuhealth.exporter.runner import validate
from gpuhealth.exporter.samples import ProbeResult


def values(result: ProbeResult, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in result.samples if s.name == name}


def xids(result: ProbeResult) -> dict[tuple[str, str, str], float]:
    return {(s.labels["pci_bus_id"], s.labels["xid"], s.labels["fatal"]): s.value
            for s in result.samples if s.name == "gpuhealth_xid_errors"}


def file_probe(path: Path, state: Path | None = None, boot: Path | None = None) -> KmsgProbe:
    kwargs: dict[str, str] = {"boot_id_file": str(boot)} if boot else {}
    return KmsgProbe.for_path(str(path), True, state_file=str(state) if state else None, **kwargs)


def test_samples_give_one_xid_counter_per_gpu_and_xid(fixtures: Path) -> None:
    result = file_probe(fixtures / "kmsg" / "samples.txt").collect(5)
    assert xids(result) == {
        ("00000000:05:00.0", "79", ""): 1, ("00000000:01:00.0", "79", ""): 1,
        ("00000000:29:00.0", "79", ""): 1, ("00000000:B3:00.0", "79", ""): 1,
        ("00000000:9B:00.0", "119", ""): 1, ("00000000:38:00.0", "13", ""): 3,
        ("00000000:66:00.0", "32", ""): 1, ("00000000:B5:00.0", "13", ""): 1,
        ("00000008:06:00.0", "48", ""): 1, ("00000003:00:00.0", "74", ""): 1,
        ("00000018:01:00.0", "149", "true"): 1, ("00000009:01:00.0", "149", "true"): 1,
        ("00000009:01:00.0", "154", ""): 1, ("00000019:01:00.0", "154", ""): 1,
        ("00000018:01:00.0", "145", "false"): 1, ("00000008:01:00.0", "145", "false"): 1,
        ("00000008:01:00.0", "149", "true"): 1, ("00000008:01:00.0", "154", ""): 1,
    }


def test_gpu_map_lines_label_xids_with_the_uuid(fixtures: Path) -> None:
    result = file_probe(fixtures / "kmsg" / "samples.txt").collect(5)
    (xid119,) = [s for s in result.samples if s.name == "gpuhealth_xid_errors" and s.labels["xid"] == "119"]
    assert xid119.labels["uuid"] == "GPU-509665ad-b600-ac93-3616-d754b23d636d"


def test_xid_154_sets_the_latest_recovery_action_per_gpu(fixtures: Path) -> None:
    result = file_probe(fixtures / "kmsg" / "samples.txt").collect(5)
    actions = {(s.labels["pci_bus_id"], s.labels["action"]): s.value
               for s in result.samples if s.name == "gpuhealth_gpu_recovery_action"}
    assert actions == {("00000009:01:00.0", "drain_and_reset"): 4, ("00000019:01:00.0", "gpu_reset_required"): 1,
                       ("00000008:01:00.0", "gpu_reset_required"): 1}


def test_host_and_nic_events_are_counted_by_event_and_device(fixtures: Path, tmp_path: Path) -> None:
    log = tmp_path / "all.log"
    kmsg = fixtures / "kmsg"
    log.write_text((kmsg / "samples.txt").read_text() + (kmsg / "constructed.txt").read_text())
    events = {(s.labels["event"], s.labels["device"]): s.value
              for s in file_probe(log).collect(5).samples if s.name == "gpuhealth_kernel_events"}
    assert events == {
        ("nvlink_error", ""): 2, ("mlx5_fatal", "00000000:03:00.0"): 1, ("mlx5_fatal", "00000000:D2:00.0"): 1,
        ("mlx5_fatal", ""): 1, ("netdev_tx_timeout", "eth0"): 1, ("mlx5_error", "00000000:5C:00.0"): 2,
        ("mlx5_link_down", "00000000:41:00.1"): 1, ("hung_task", ""): 1, ("soft_lockup", ""): 1,
        ("nccl_segfault", ""): 1, ("peermem_error", ""): 1, ("pcie_aer_fatal", "00000000:17:00.0"): 1,
        ("pcie_aer_nonfatal", "00000000:18:00.0"): 1, ("pcie_aer_corrected", "00000000:00:03.0"): 1, ("mce", ""): 1,
        ("mce_corrected", ""): 1, ("hard_lockup", ""): 1, ("efa_error", "00000000:00:1B.0"): 1,
    }
    sxids = values(file_probe(log).collect(5), "gpuhealth_nvswitch_sxid_errors")
    assert sxids[(("fatal", "true"), ("pci_bus_id", "00000000:C3:00.0"), ("sxid", "24007"))] == 1
    assert len(sxids) == 3


# NVIDIA's documented MIG form (Xid catalog, "XID messages on MIG-enabled GPUs"): the GPU instance in the prefix
MIG_XID = ("[ 5.0] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=2804, name=python3, Contained: CE User Channel "
           "(0x9). RST: No, D-RST: No\n")


def test_an_xid_on_a_mig_instance_is_counted_with_its_gpu_instance_not_as_unparsed(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(MIG_XID + "[ 6.0] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n")
    result = file_probe(log).collect(5)
    by_instance = {(s.labels["pci_bus_id"], s.labels["xid"], s.labels["gpu_instance"]): s.value
                   for s in result.samples if s.name == "gpuhealth_xid_errors"}
    assert by_instance == {("00000000:01:00.0", "94", "05"): 1, ("00000000:01:00.0", "13", ""): 1}
    unparsed = [s.value for s in result.samples if s.name == "gpuhealth_kmsg_unparsed_xid_records"]
    assert unparsed == [0.0], unparsed


def _documented_xid_lines(fixtures: Path) -> list[str]:
    """The driver's Xid printf formats (tests/fixtures/mig/xid_mig_attribution_documented.txt, from kernel_rc.c),
    filled in as the driver prints them: PCI 0000:01:00, GPU instance 5, compute instance 1, Xid 94."""
    text = (fixtures / "mig" / "xid_mig_attribution_documented.txt").read_text()
    formats = [line[2:] for line in text.splitlines() if line.startswith("# NVRM: Xid (")]
    lines = []
    for fmt in formats:
        line = fmt.replace("%04x", "0000", 1).replace("%02x", "01", 1).replace("%02x", "00", 1)
        line = line.replace("GPU-I:%02u", "GPU-I:05").replace("GPU-CI:%02u", "GPU-CI:01").replace("%d", "94", 1)
        line = line.replace("pid=%s, name=%s, ", "pid=7194, name=python3, ")
        line = line.replace("%s%s", "Contained: CE User Channel (0x9). RST: No, D-RST: No")
        assert "%" not in line, line
        lines.append(line)
    return lines


def test_every_documented_xid_attribution_is_counted_with_its_gpu_instance_and_none_is_unparsed(
        fixtures: Path, tmp_path: Path) -> None:
    lines = _documented_xid_lines(fixtures)
    assert sum("GPU-CI:01" in line for line in lines) == 2 and sum("GPU-I:05" in line for line in lines) == 4
    log = tmp_path / "kern.log"
    log.write_text("".join(f"[ {i}.0] {line}\n" for i, line in enumerate(lines, 1)))
    result = file_probe(log).collect(5)
    by_instance = {(s.labels["pci_bus_id"], s.labels["xid"], s.labels["gpu_instance"]): s.value
                   for s in result.samples if s.name == "gpuhealth_xid_errors"}
    # GPU instance and compute instance (2 formats), GPU instance alone (2), no MIG attribution (2)
    assert by_instance == {("00000000:01:00.0", "94", "05"): 4, ("00000000:01:00.0", "94", ""): 2}
    unparsed = [s.value for s in result.samples if s.name == "gpuhealth_kmsg_unparsed_xid_records"]
    assert unparsed == [0.0], unparsed


def test_counts_kept_before_the_gpu_instance_label_are_exported_with_it_empty(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, pid=1, name=a, x\n")
    file_probe(log, state).collect(5)
    doc = json.loads(state.read_text())  # as an exporter of the last release wrote it: no gpu_instance
    doc["counts"] = [[f, {k: v for k, v in labels.items() if k != "gpu_instance"}, v] for f, labels, v in doc["counts"]]
    state.write_text(json.dumps(doc))
    samples = [s for s in file_probe(log, state).collect(5).samples if s.name == "gpuhealth_xid_errors"]
    assert [(s.labels["xid"], s.labels["gpu_instance"], s.value) for s in samples] == [("13", "", 1.0)]


def test_following_a_file_counts_only_what_was_appended(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, pid=1, name=a, x\n")
    probe = file_probe(log)
    assert xids(probe.collect(5)) == {("00000000:05:00.0", "13", ""): 1}
    with log.open("a") as f:
        f.write("[ 2.0] NVRM: Xid (PCI:0000:05:00): 13, pid=2, name=b, x\n[ 3.0] NVRM: Xid (PCI:0000:05:")
    assert xids(probe.collect(5)) == {("00000000:05:00.0", "13", ""): 2}  # the half-written line waits
    with log.open("a") as f:
        f.write("00): 79, GPU has fallen off the bus.\n")
    assert xids(probe.collect(5)) == {("00000000:05:00.0", "13", ""): 2, ("00000000:05:00.0", "79", ""): 1}


def test_restart_neither_recounts_old_records_nor_loses_new_ones(tmp_path: Path) -> None:
    log, state, boot = tmp_path / "kern.log", tmp_path / "state.json", tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.\n")
    assert xids(file_probe(log, state, boot).collect(5)) == {("00000000:05:00.0", "79", ""): 1}
    with log.open("a") as f:  # arrives while the exporter is down
        f.write("[ 2.0] NVRM: Xid (PCI:0000:9b:00): 48\n")
    restarted = file_probe(log, state, boot)
    assert xids(restarted.collect(5)) == {("00000000:05:00.0", "79", ""): 1, ("00000000:9B:00.0", "48", ""): 1}
    assert xids(file_probe(log, state, boot).collect(5)) == xids(restarted.collect(5))


def test_a_replaced_log_file_is_read_from_its_start(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, x\n" * 3)
    file_probe(log, state).collect(5)
    log.unlink()
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, x\n")
    assert xids(file_probe(log, state).collect(5)) == {("00000000:05:00.0", "13", ""): 4}


def test_a_corrupt_state_file_means_starting_over_not_crashing(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, x\n")
    state.write_text("{not json")
    assert xids(file_probe(log, state).collect(5)) == {("00000000:05:00.0", "13", ""): 1}


def test_a_count_a_newer_exporter_kept_is_left_out_after_a_rollback_and_the_rest_of_the_state_is_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A newer exporter may keep counts of a kernel-log family this one does not declare (same state version): served,
    it would fail every run of the probe as garbage for the rest of the boot. It is left out, once logged."""
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, x\n")
    file_probe(log, state).collect(5)
    doc = json.loads(state.read_text())
    doc["counts"].append(["gpuhealth_kmsg_lines_from_the_future", {}, 7])
    state.write_text(json.dumps(doc))
    with log.open("a") as f:
        f.write("[ 2.0] NVRM: Xid (PCI:0000:05:00): 13, x\n")
    result = validate(file_probe(log, state).collect(5))
    assert xids(result) == {("00000000:05:00.0", "13", ""): 2}  # the position and the known counts were kept
    assert not any(s.name == "gpuhealth_kmsg_lines_from_the_future" for s in result.samples)
    assert [r.message for r in caplog.records if "gpuhealth_kmsg_lines_from_the_future" in r.message] == [
        f"kmsg state {state}: counts of gpuhealth_kmsg_lines_from_the_future, no metric family of this exporter "
        "(a newer one's?), left out"]


def test_user_space_records_in_a_kmsg_capture_never_count(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.txt"
    log.write_text("14,10,100,-;NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.\n"
                   "4,11,200,-;NVRM: Xid (PCI:0000:05:00): 13, pid=1, name=a, x\n")
    result = file_probe(log).collect(5)
    assert xids(result) == {("00000000:05:00.0", "13", ""): 1}
    assert values(result, "gpuhealth_kmsg_records") == {(("origin", "kernel"),): 1, (("origin", "userspace"),): 1}


def test_a_missing_log_file_is_a_probe_failure(tmp_path: Path) -> None:
    with pytest.raises(ProbeError) as err:
        file_probe(tmp_path / "nope.log").collect(5)
    assert err.value.reason == NOT_FOUND


# --- the real /dev/kmsg of this machine ---

def _can_write_kmsg() -> bool:
    return os.path.exists("/dev/kmsg") and os.access("/dev/kmsg", os.R_OK | os.W_OK)


@pytest.mark.skipif(not _can_write_kmsg(), reason="needs read/write access to /dev/kmsg (root)")
def test_real_dev_kmsg_forged_xid_from_user_space_is_ignored_and_restart_is_exact(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    marker = uuid.uuid4().hex

    def device_probe() -> KmsgProbe:
        return KmsgProbe.for_path("/dev/kmsg", False, state_file=str(state))

    def write(text: str) -> None:
        with open("/dev/kmsg", "w") as f:  # user space: the kernel stamps facility LOG_USER on it
            f.write(f"<3>{text}\n")

    first = device_probe()
    before = values(first.collect(5), "gpuhealth_kmsg_records")[(("origin", "userspace"),)]
    write(f"NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus. {marker}")
    after = first.collect(5)
    assert values(after, "gpuhealth_kmsg_records")[(("origin", "userspace"),)] == before + 1
    assert not [s for s in after.samples if s.name == "gpuhealth_xid_errors" and s.labels["pci_bus_id"] ==
                "00000000:05:00.0"]
    first.source.close()
    write(f"gpuhealth test record written while the exporter is down {marker}")  # must not be lost
    restarted = device_probe().collect(5)
    assert values(restarted, "gpuhealth_kmsg_records")[(("origin", "userspace"),)] == before + 2


def test_one_gpu_falling_off_the_bus_reported_in_two_shapes_counts_once(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 100.000001] NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.\n"
                   "[ 100.000950] NVRM: Xid (PCI:0000:29:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                   "the bus.\n"
                   "[ 900.000000] NVRM: Xid (PCI:0000:29:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                   "the bus.\n"
                   "[ 900.000100] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                   "the bus.\n")
    assert xids(file_probe(log).collect(5)) == {("00000000:29:00.0", "79", ""): 2, ("00000000:05:00.0", "79", ""): 1}


def test_a_log_that_blocks_forever_is_a_timeout_not_a_hung_exporter(tmp_path: Path) -> None:
    import time

    from gpuhealth.exporter.runner import ProbeRunner
    from gpuhealth.exporter.snapshot import Snapshot

    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes: none will
    snapshot = Snapshot()
    started = time.monotonic()
    ProbeRunner(file_probe(fifo), snapshot, interval=1, deadline=0.2).run_once()
    assert time.monotonic() - started < 3
    state = snapshot.view()["kmsg"]
    assert (state.success, state.reason) == (False, "timeout")
    with open(fifo, "w"):  # let the abandoned reader go
        pass


# --- /dev/kmsg semantics at the syscall boundary: one record per read(2), EAGAIN at the end,
# EPIPE when the ring buffer overwrote unread records ---

class FakeKmsgDevice:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import gpuhealth.exporter.kernel.sources as sources

        self.records: list[str] = []
        self.first = 0  # index of the oldest record still in the ring
        self.fail_at: dict[int, OSError] = {}
        self._cursor: dict[int, int] = {}
        self._next_fd = 1000
        real_open, real_read, real_close = os.open, os.read, os.close

        def fake_open(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
            if path != "/dev/kmsg":
                return real_open(path, flags, *args, **kwargs)
            self._next_fd += 1
            self._cursor[self._next_fd] = self.first
            return self._next_fd

        def fake_read(fd: int, size: int) -> bytes:
            if fd not in self._cursor:
                return real_read(fd, size)
            i = self._cursor[fd]
            if i < self.first:
                self._cursor[fd] = self.first
                raise BrokenPipeError(32, "Broken pipe")
            if i in self.fail_at:
                raise self.fail_at.pop(i)
            if i >= len(self.records):
                raise BlockingIOError(11, "Resource temporarily unavailable")
            self._cursor[fd] = i + 1
            return self.records[i].encode()

        def fake_close(fd: int) -> None:
            if self._cursor.pop(fd, None) is None:
                real_close(fd)

        monkeypatch.setattr(sources.os, "open", fake_open)
        monkeypatch.setattr(sources.os, "read", fake_read)
        monkeypatch.setattr(sources.os, "close", fake_close)

    def add(self, text: str, prio: int = 4) -> None:
        seq = len(self.records)
        self.records.append(f"{prio},{seq},{seq * 1000},-;{text}\n")


def device_probe(tmp_path: Path, boot: str = "boot-1") -> KmsgProbe:
    (tmp_path / "boot_id").write_text(boot)
    return KmsgProbe.for_path("/dev/kmsg", False, state_file=str(tmp_path / "state.json"),
                              boot_id_file=str(tmp_path / "boot_id"))


def test_device_overwritten_records_are_counted_as_missed_and_reading_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dev = FakeKmsgDevice(monkeypatch)
    dev.add("NVRM: Xid (PCI:0000:05:00): 13, x")
    probe = device_probe(tmp_path)
    probe.collect(5)
    for _ in range(5):
        dev.add("NVRM: Xid (PCI:0000:05:00): 13, x")
    dev.first = 4  # records 1-3 were overwritten before they were read
    result = probe.collect(5)
    assert values(result, "gpuhealth_kmsg_records_missed") == {(): 3}
    assert xids(result) == {("00000000:05:00.0", "13", ""): 3}


def test_device_error_mid_batch_loses_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import errno

    dev = FakeKmsgDevice(monkeypatch)
    dev.add("NVRM: Xid (PCI:0000:05:00): 48")
    dev.add("NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.")
    dev.fail_at[1] = OSError(errno.EIO, "Input/output error")
    probe = device_probe(tmp_path)
    with pytest.raises(OSError):
        probe.collect(5)
    assert xids(probe.collect(5)) == {("00000000:05:00.0", "48", ""): 1, ("00000000:05:00.0", "79", ""): 1}


def test_device_state_of_another_boot_is_not_trusted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dev = FakeKmsgDevice(monkeypatch)
    for _ in range(3):
        dev.add("NVRM: Xid (PCI:0000:05:00): 48")
    assert xids(device_probe(tmp_path).collect(5)) == {("00000000:05:00.0", "48", ""): 3}
    assert xids(device_probe(tmp_path).collect(5)) == {("00000000:05:00.0", "48", ""): 3}  # same boot: no recount
    dev.records.clear()  # reboot: sequence numbers start again
    dev.add("NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.")
    assert xids(device_probe(tmp_path, boot="boot-2").collect(5)) == {("00000000:05:00.0", "79", ""): 1}
    (tmp_path / "boot_id").write_text("")  # unreadable boot id: cannot tell a reboot, so no old position
    assert xids(device_probe(tmp_path, boot="").collect(5)) == {("00000000:05:00.0", "79", ""): 1}


def test_device_events_are_timed_by_the_kernel_so_a_restart_keeps_a_fault_in_its_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dev = FakeKmsgDevice(monkeypatch)
    dev.add("NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.")
    first = device_probe(tmp_path).collect(5).kernel
    again = device_probe(tmp_path).collect(5).kernel
    assert first is not None and again is not None
    assert first.recent == again.recent and len(first.recent) == 1  # restored from the state file, same time


def test_same_gpu_falling_off_the_bus_hours_apart_in_a_capture_without_timestamps_counts_twice(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kern.log"
    xid79 = "NVRM: Xid (PCI:0000:29:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    plain = "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus."
    filler = "\n".join(f"[Sun Feb 23 17:{m:02d}:00 2025] usb 1-1: new device" for m in range(20))
    log.write_text(f"[Sun Feb 23 16:24:18 2025] {plain}\n[Sun Feb 23 16:24:18 2025] {xid79}\n{filler}\n"
                   f"[Sun Feb 23 19:00:00 2025] {xid79}\n")
    assert xids(file_probe(log).collect(5)) == {("00000000:29:00.0", "79", ""): 2}


def test_recovery_actions_carry_when_the_kernel_announced_them_and_the_boot_time_is_exported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n")
    dev = FakeKmsgDevice(monkeypatch)
    dev.add("filler")
    dev.add("NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")
    (tmp_path / "boot_id").write_text("boot-1")
    probe = KmsgProbe.for_path("/dev/kmsg", False, boot_id_file=str(tmp_path / "boot_id"),
                               proc_stat=str(tmp_path / "stat"))
    result = probe.collect(5)
    assert values(result, "gpuhealth_node_boot_time_seconds") == {(): 1700000000}
    (when,) = values(result, "gpuhealth_gpu_recovery_action_timestamp_seconds").values()
    assert when == 1700000000 + 1000 / 1e6  # boot time + the record's microseconds since boot


def test_xid_154_codes_5_to_7_are_named_as_the_pinned_nvidia_ml_py_names_them(tmp_path: Path) -> None:
    # The line is the real Xid 154 form (samples.txt, GPUD's capture); the driver's words in the last parentheses
    # for codes 5-7 are not in any capture we hold, and the reader takes only the code.
    log = tmp_path / "kern.log"
    log.write_text("".join(
        f"[17116{i}.621162] NVRM: Xid (PCI:000{i}:01:00): 154, GPU recovery action changed from 0x0 (None) to "
        f"0x{i} (action {i})\n" for i in (5, 6, 7, 8)))
    actions = {(s.labels["pci_bus_id"], s.labels["action"]): s.value
               for s in file_probe(log).collect(5).samples if s.name == "gpuhealth_gpu_recovery_action"}
    assert actions == {("00000005:01:00.0", "recover_imex_domain"): 5, ("00000006:01:00.0", "bus_reset"): 6,
                       ("00000007:01:00.0", "system_reboot"): 7, ("00000008:01:00.0", "unknown_8"): 8}


def test_the_kernel_log_names_every_recovery_action_as_the_nvml_probe_and_pynvml_do() -> None:
    import pynvml

    from gpuhealth.exporter.kernel.probe import RECOVERY_ACTIONS
    from gpuhealth.exporter.probes.nvml import _RECOVERY_ACTIONS as NVML_NAMES
    assert {getattr(pynvml, constant): name for name, constant in NVML_NAMES} == RECOVERY_ACTIONS
