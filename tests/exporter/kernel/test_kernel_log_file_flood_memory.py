"""A flooded --kmsg-file costs the exporter a bounded amount of memory, and loses no record for it.

Before, one run of the kmsg probe held up to 16 MiB of the file four times over (the bytes, joined, as
text, as lines) and all of its records at once: 200 MB of short lines took the real exporter to 254 MiB
of RSS against the chart's 160Mi limit (issue 23, item 14; bench/kmsg_file_memory.py). Now it reads
1 MiB at a time and handles each read's records before the next read.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from tests.exporter.kernel.kmsg_file_harness import file_probe, settle, total, xids

MiB = 1 << 20


def short_lines(first: int, size: int) -> bytes:
    """`size` bytes or a little more of 46-byte dmesg lines (the most lines, so objects, per byte)."""
    count = size // 46 + 1
    return "".join(f"[{n / 1000:12.6f}] eth0: renamed from tmp{n:08x}\n"
                   for n in range(first, first + count)).encode()


def test_a_kernel_log_flood_is_read_in_bounded_memory_and_every_line_is_counted(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    flood = short_lines(1, 8 * MiB)
    log.write_bytes(flood)
    settle(log)
    probe = file_probe(log)
    tracemalloc.start()
    try:
        result = probe.collect(60)  # one run reads up to 16 MiB: all of it
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total(result, "gpuhealth_kmsg_records") == flood.count(b"\n")
    assert probe.position.offset == len(flood)
    # Before: 70 MiB of Python allocations; now about 8.
    assert peak < 24 * MiB, f"peak {peak / MiB:.1f} MiB of Python allocations for an 8 MiB file"


def test_a_record_whose_continuation_lines_are_past_the_first_mib_is_still_one_record(tmp_path: Path) -> None:
    """Guard (passes before and after): the first line of a three-line record (dmesg of the NVIDIA driver's
    "fallen off the bus", tests/fixtures/kmsg/samples.txt) ends just before the 1 MiB a read takes, its
    continuation lines come after it. They are not taken as records of their own."""
    first = b"[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    rest = (b"               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
            b"               NVRM: fallen off the bus and is not responding to commands.\n")
    lines = short_lines(1, MiB)
    filler = lines[:lines.rindex(b"\n", 0, MiB - len(first) - 100) + 1]
    filler += b"[    0.000001] " + b"x" * (MiB - len(filler) - len(first) - 16) + b"\n"
    assert len(filler) + len(first) == MiB
    after = (b"[ 1843.400000] NVRM: Xid (PCI:0000:b3:00): 79, pid='<unknown>', name=<unknown>, "
             b"GPU has fallen off the bus.\n")
    log = tmp_path / "kern.log"
    log.write_bytes(filler + first + rest + after)
    settle(log)
    result = file_probe(log).collect(60)
    assert total(result, "gpuhealth_kmsg_records") == filler.count(b"\n") + 2
    assert xids(result) == {("00000000:B3:00.0", "79", ""): 1}


def test_a_record_longer_than_a_read_is_read_through_and_what_follows_it_is_counted(tmp_path: Path) -> None:
    """Guard (passes before and after): 2 MiB of continuation lines after one record leave no record start
    for a read to stop at; the reads go on between lines, and the Xid after them is seen."""
    continued = b"".join(b"  more text of the record above " + b"y" * 960 + b"\n" for _ in range(2 * MiB // 993))
    xid = b"[ 101.000001] NVRM: Xid (PCI:0000:9b:00): 48\n"
    log = tmp_path / "kern.log"
    log.write_bytes(b"[ 100.000001] a record that goes on and on\n" + continued + xid)
    settle(log)
    probe = file_probe(log)
    result = probe.collect(60)
    assert probe.position.offset == log.stat().st_size
    assert xids(result) == {("00000000:9B:00.0", "48", ""): 1}
