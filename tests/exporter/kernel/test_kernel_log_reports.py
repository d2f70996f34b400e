"""One fault printed over several lines counts once, in every wording kernels have used: the lines public bug
reports quoted (tests/fixtures/kmsg/reports, see its SOURCES.md), and the driver's own format strings where no
report quotes a line (EFA's, marked so). Lines the kernel did not write never count."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.exporter.kernel.kmsg_file_harness import event_totals, events, file_probe, settle, settled_copy, xids
from tests.support import paths

REPORTS = paths.FIXTURES / "kmsg" / "reports"

EXPECTED: dict[str, dict[tuple[str, str], float]] = {
    # the header alone is the corrected error; the Non-Fatal header and its detail are one error
    "aer_6x_header_only_corrected_journal.txt": {
        ("pcie_aer_corrected", "00000000:80:1B.4"): 1, ("pcie_aer_nonfatal", "00000000:80:1B.4"): 1},
    # the first detail's header is above the quote: it is one error, and each header without details another
    "aer_4x_id_header_only_raw.txt": {("pcie_aer_corrected", "00000000:00:1C.5"): 3},
    "aer_5x_header_and_details_dmesg.txt": {("pcie_aer_corrected", "00000000:00:1C.1"): 3},
    # a header alone, then a `Multiple` header whose two devices' detail blocks are part of it
    "aer_6x_multiple_dmesg_T.txt": {("pcie_aer_corrected", "00000000:06:00.0"): 2},
    # announced, then printed: one uncorrected record (status a6..: bit 61 set)
    "mce_logged_then_record_journal.txt": {("mce", ""): 1},
    "mce_edac_sbridge_corrected_journal.txt": {("mce_corrected", ""): 1},
    "mce_events_logged_alone_dmesg.txt": {("mce_corrected", ""): 3},
    "mce_fatal_panic_raw.txt": {("mce", ""): 1},
    "soft_lockup_4x_nmi_watchdog_dmesg.txt": {("soft_lockup", ""): 1},
    "soft_lockup_3x_dmesg.txt": {("soft_lockup", ""): 1},
    "soft_lockup_printk_caller_console.txt": {("soft_lockup", ""): 1},
    "hard_lockup_4x_nmi_watchdog_raw.txt": {("hard_lockup", ""): 5},
    "hard_lockup_3x_warn_dmesg.txt": {("hard_lockup", ""): 1},
}


def test_every_report_file_has_an_expectation() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in REPORTS.glob("*.txt"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_reported_capture_counts_each_fault_once(name: str, tmp_path: Path) -> None:
    assert events(file_probe(settled_copy(REPORTS / name, tmp_path)).collect(5)) == EXPECTED[name]


def _count(tmp_path: Path, text: str) -> dict[tuple[str, str], float]:
    log = tmp_path / "kern.log"
    log.write_text(text)
    settle(log)
    return events(file_probe(log).collect(5))


def test_a_machine_check_announced_in_one_read_and_printed_in_the_next_is_still_counted(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[  5.000001] mce: [Hardware Error]: Machine check events logged\n")
    settle(log)
    probe = file_probe(log)
    assert event_totals(probe.collect(5)) == {"mce_corrected": 1}  # nothing followed it in this read
    with log.open("a") as f:
        f.write("[  5.000004] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408\n")
    assert event_totals(probe.collect(5)) == {"mce_corrected": 1, "mce": 1}


def test_aer_detail_lines_after_a_header_of_another_severity_are_their_own_error(tmp_path: Path) -> None:
    # the 6.x journal report above, read without its Non-Fatal header: the Correctable header does not
    # absorb the Non-Fatal detail
    lines = (REPORTS / "aer_6x_header_only_corrected_journal.txt").read_text().splitlines()
    assert _count_lines(tmp_path, [lines[0], *lines[2:]]) == {
        ("pcie_aer_corrected", "00000000:80:1B.4"): 1, ("pcie_aer_nonfatal", "00000000:80:1B.4"): 1}


def _count_lines(tmp_path: Path, lines: list[str]) -> dict[tuple[str, str], float]:
    return _count(tmp_path, "\n".join(lines) + "\n")


def test_aer_details_far_apart_in_time_are_separate_errors(tmp_path: Path) -> None:
    # firmware-first (GHES) reports print detail blocks without a header
    assert _count(tmp_path, "[ 10.000001] pcieport 0000:00:03.0: AER: PCIe Bus Error: severity=Corrected, "
                            "type=Physical Layer, (Receiver ID)\n"
                            "[ 70.000001] pcieport 0000:00:03.0: AER: PCIe Bus Error: severity=Corrected, "
                            "type=Physical Layer, (Receiver ID)\n") == {("pcie_aer_corrected", "00000000:00:03.0"): 2}


# Built from amzn/amzn-drivers efa_com.c format strings (../shared/fixtures/efa/efa_kmsg_templates.txt) and its
# kcompat.h (ibdev_err is dev_err on the IB device where the kernel lacks ibdev_printk): no public capture of
# an EFA error line was found. The ENA lines use ena_com.c's identical wording under its own prefixes.
EFA_UNDER_IB_NAME = [
    "[ 6001.000001] infiniband efa_0: Failed to process command CREATE_QP (opcode 1) err -110",
    "[ 6002.000001] infiniband rdmap0s27: The device didn't send any completion for admin cmd CREATE_QP(1) status 0 "
    "(id: 3, sq producer: 5, sq consumer: 4, cq consumer: 4)",
    "[ 6003.000001] infiniband rdmap16s27: Admin queue is closed",
    "[ 6004.000001] efa 0000:10:1b.0 rdmap16s27: Failed to submit command DESTROY_QP (opcode 2) err -19",
]
ENA_SAME_WORDING = [
    "[ 7001.000001] ena 0000:00:05.0: Reset indication didn't turn on",
    "[ 7002.000001] ena: Reset indication didn't turn off",
    "[ 7003.000001] ena 0000:00:05.0 eth0: Device isn't ready, abort com init",
    "[ 7004.000001] infiniband mlx5_0: Failed to process command CREATE_QP (opcode 1) err -110",
]


def test_efa_errors_count_under_the_rdma_device_name_and_ena_lines_do_not(tmp_path: Path) -> None:
    assert _count_lines(tmp_path, EFA_UNDER_IB_NAME + ENA_SAME_WORDING) == {
        ("efa_error", "efa_0"): 1, ("efa_error", "rdmap0s27"): 1, ("efa_error", "rdmap16s27"): 1,
        ("efa_error", "00000000:10:1B.0"): 1}


XID79 = "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


@pytest.mark.parametrize("echo", [
    f"2025-06-01T12:00:00.123456789Z stdout F {XID79}",  # containerd/CRI-O container log
    f'{{"log":"{XID79}\\n","stream":"stdout","time":"2025-06-01T12:00:00.1Z"}}',  # Docker json-file
    f"2025-06-01 12:00:00,123 ERROR healthcheck: dmesg shows {XID79}",  # an application's own log
    f"[INFO] {XID79}",  # a bracketed word is not a dmesg time stamp
    f"Jun  1 12:00:00 gpu-node-7 node-health[4242]: {XID79}",  # a program's syslog line
])
def test_text_that_quotes_a_kernel_xid_line_is_not_an_xid(tmp_path: Path, echo: str) -> None:
    log = tmp_path / "app.log"
    log.write_text(f"{echo}\n[ 9.000001] {XID79}\n")
    settle(log)
    assert xids(file_probe(log).collect(5)) == {("00000000:05:00.0", "79", ""): 1}  # the kernel's own line only
