"""A --kmsg-file input loses no record and is never stuck: the last line without a newline, a line of many
megabytes, and input that is not a kernel log at all (which fails the probe instead of passing as a quiet log)."""

from __future__ import annotations

import random
from pathlib import Path

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot
from tests.exporter.kernel.kmsg_file_harness import file_probe, settle, total, xids

XID79 = "[ 100.000001] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
FELL_OFF = {("00000000:05:00.0", "79", ""): 1}


def run(probe: KmsgProbe) -> tuple[bool, str, str]:
    snapshot = Snapshot()
    ProbeRunner(probe, snapshot, interval=1, deadline=5).run_once()
    state = snapshot.view()["kmsg"]
    return state.success, state.reason, state.message


def test_a_one_line_capture_without_a_newline_counts_its_xid(tmp_path: Path) -> None:
    log = tmp_path / "pasted.txt"
    log.write_text(XID79)
    settle(log)
    assert xids(file_probe(log).collect(5)) == FELL_OFF


def test_a_last_line_still_being_written_waits_until_the_file_settles_and_counts_once(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID79)  # just written: a writer may be part-way through the line
    probe = file_probe(log)
    assert xids(probe.collect(5)) == {}
    settle(log)
    assert xids(probe.collect(5)) == FELL_OFF
    assert xids(probe.collect(5)) == FELL_OFF


def test_a_17_mib_line_without_a_newline_is_cut_counted_and_the_xid_after_it_is_seen(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    with log.open("wb") as f:
        f.write(b"[ 99.000001] " + b"x" * (17 << 20))
    settle(log)
    success, _, _ = run(file_probe(log, state))  # the first 16 MiB: no newline anywhere
    assert success
    with log.open("ab") as f:
        f.write(f"\n{XID79}\n".encode())
    probe = file_probe(log, state)  # a restart in the middle of the long line: still skipping it
    result = probe.collect(5)
    assert xids(result) == FELL_OFF
    assert total(result, "gpuhealth_kmsg_lines_truncated") == 1
    assert total(result, "gpuhealth_kmsg_records") == 2  # the long line's first 64 KiB, then the Xid
    assert probe.position.offset == log.stat().st_size


def test_an_over_long_line_keeps_its_first_64_kib_as_the_record(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(f"{XID79} {'y' * 200_000}\n[ 101.000001] NVRM: Xid (PCI:0000:9b:00): 48\n")
    settle(log)
    result = file_probe(log).collect(5)
    assert xids(result) == {**FELL_OFF, ("00000000:9B:00.0", "48", ""): 1}
    assert total(result, "gpuhealth_kmsg_lines_truncated") == 1


def test_ten_megabytes_of_random_bytes_fail_the_probe_as_not_a_kernel_log(tmp_path: Path) -> None:
    log = tmp_path / "random.bin"
    log.write_bytes(random.Random(11).randbytes(10_000_000))
    settle(log)
    probe = file_probe(log)
    success, reason, message = run(probe)
    assert (success, reason) == (False, "bad_output")
    assert "not a kernel log" in message
    kernel = probe.counts.get((FAMILIES["gpuhealth_kmsg_records"], (("origin", "kernel"),)), 0)
    unrecognised = probe.counts[(FAMILIES["gpuhealth_kmsg_lines_unrecognised"], ())]
    assert unrecognised > 30 * kernel
    assert run(probe)[:2] == (False, "bad_output")  # read to its end, still not a kernel log


def test_a_binary_blob_inside_a_kernel_log_is_counted_and_reading_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    chatter = "".join(f"[ {i}.000001] eth0: renamed from tmp{i}\n" for i in range(1, 40))
    blob = random.Random(3).randbytes(4096)
    log.write_bytes(chatter.encode() + blob + f"\n{XID79}\n".encode())
    settle(log)
    probe = file_probe(log)
    assert run(probe)[0]
    result = probe.collect(5)
    assert xids(result) == FELL_OFF
    assert total(result, "gpuhealth_kmsg_lines_unrecognised") >= 1


def test_a_line_that_is_not_text_is_not_parsed_nor_joined_to_the_record_before_it(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(f"{XID79}\n".encode() + b" \x00\x01\xfe NVRM: Xid (PCI:0000:9b:00): 48\n")
    settle(log)
    result = file_probe(log).collect(5)
    assert xids(result) == FELL_OFF
    assert total(result, "gpuhealth_kmsg_lines_unrecognised") == 1
