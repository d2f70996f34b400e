"""Properties of the kernel-log path over arbitrary input (hypothesis)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.kernel.patterns import KernelEventMatcher
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.kernel.records import iter_text_records, parse_kmsg_record
from gpuhealth.exporter.probes.base import BAD_OUTPUT, ProbeError
from tests.support import paths

MATCHER = KernelEventMatcher()
REAL_LINES = [line for line in (paths.FIXTURES / "kmsg" / "samples.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
FAULT_TEXTS = [
    "NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.",
    "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.",
    "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 sourcetrack timeout error (First)",
    "INFO: task kcompactd1:1177 blocked for more than 120 seconds.",
    "mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 17: fe00000000800400",
]

lines = st.one_of(st.text(max_size=300), st.sampled_from(REAL_LINES),
                  st.builds(lambda a, b: a + b, st.sampled_from(REAL_LINES), st.text(max_size=40)))


@given(st.lists(lines, max_size=30))
@settings(max_examples=200, deadline=None)
def test_parsing_and_matching_never_raise(raw: list[str]) -> None:
    for record in iter_text_records(raw):
        MATCHER.match(record.text)
    for line in raw:
        parse_kmsg_record(line)


@st.composite
def user_space_records(draw: st.DrawFn) -> str:
    facility = draw(st.integers(min_value=1, max_value=23))
    level = draw(st.integers(min_value=0, max_value=7))
    seq = draw(st.integers(min_value=0, max_value=2**40))
    usec = draw(st.integers(min_value=0, max_value=2**50))
    text = draw(st.one_of(st.sampled_from(FAULT_TEXTS), st.text(max_size=100).filter(lambda t: "\n" not in t)))
    return f"{facility * 8 + level},{seq},{usec},-;{text}"


_FACILITY_NAMES = ["user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp",
                   "local0", "local7"]


@st.composite
def user_space_text_lines(draw: st.DrawFn) -> str:
    """The same records as `dmesg -x`, `dmesg -r` or syslog print them: never from the kernel facility."""
    text = draw(st.sampled_from(FAULT_TEXTS))
    stamp = draw(st.sampled_from(["[   12.345678] ", "[Sun Feb 23 16:24:18 2025] ", "2025-01-21T04:41:44,283302+00:00 ",
                                  ""]))
    shape = draw(st.integers(0, 2))
    if shape == 0:
        return f"{draw(st.sampled_from(_FACILITY_NAMES)):<6}:warn  : {stamp}{text}"
    if shape == 1:
        return f"<{draw(st.integers(8, 191))}>{stamp if stamp.startswith('[') else ''}{text}"
    return f"Feb 23 16:24:18{draw(st.sampled_from(['', '.123456']))} node-7 {draw(st.sampled_from(['job', 'a.b']))}" \
           f"[{draw(st.integers(1, 99999))}]: {text}"


@given(st.lists(st.one_of(user_space_records(), user_space_text_lines()), min_size=1, max_size=20))
@settings(max_examples=150, deadline=None)
def test_records_not_from_the_kernel_facility_never_count(records: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "kmsg.txt"
        log.write_text("\n".join(records) + "\n")
        result = KmsgProbe.for_path(str(log), True).collect(5)
    counted = {s.name for s in result.samples if s.value and s.name not in ("gpuhealth_kmsg_records",
                                                                           "gpuhealth_node_boot_time_seconds")}
    assert counted == set()
    by_origin = {s.labels["origin"]: s.value for s in result.samples if s.name == "gpuhealth_kmsg_records"}
    assert by_origin == {"kernel": 0, "userspace": len(records)}


LAST_XID = "[ 9.000001] NVRM: Xid (PCI:0000:ee:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
_LAST_XID_KEY = (FAMILIES["gpuhealth_xid_errors"],
                 (("fatal", ""), ("gpu_instance", ""), ("pci_bus_id", "00000000:EE:00.0"), ("xid", "79")))
pieces = st.one_of(st.binary(max_size=600), st.sampled_from([(line + "\n").encode() for line in REAL_LINES]),
                   st.just(b"z" * 70_000), st.just(b"\n"))


@given(st.lists(pieces, max_size=25), st.integers(min_value=1, max_value=4))
@settings(max_examples=120, deadline=None)
def test_whatever_comes_before_it_the_last_xid_of_a_file_is_counted_once(before: list[bytes], runs: int) -> None:
    data = b"".join(before) + b"\n" + LAST_XID.encode()  # and no newline after it
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "kern.log"
        log.write_bytes(data)
        an_hour_ago = time.time() - 3600
        os.utime(log, (an_hour_ago, an_hour_ago))
        probe = KmsgProbe.for_path(str(log), True)
        for _ in range(runs):
            try:
                probe.collect(5)
            except ProbeError as err:  # mostly bytes: not a kernel log, and it says so
                assert err.reason == BAD_OUTPUT
    assert probe.position.offset == len(data)
    assert probe.counts[_LAST_XID_KEY] == 1
