"""The decode of Xid 74 and 144-150 (gpuhealth/contract/xid_decode.py) against NVIDIA's catalog: the 144-150 table is
the catalog's "XID 144-150 Decode" sheet cell by cell (tests/fixtures/xid), each of its rows decodes to its own
bucket, the driver's branch picks the intrInfo layout (both, the stronger winning, where it is unknown), and 74's
bits follow the workflow text (WORKFLOW_NVLINK_ERR)."""

from __future__ import annotations

import csv

import pytest

from gpuhealth.contract import xid_decode
from gpuhealth.contract.nvlink5_decode_sheet import SHEET, SheetRow
from gpuhealth.contract.xid_catalog import CATALOG
from gpuhealth.contract.xid_decode import Decoded, decode_nvlink5, decode_xid74, driver_branch
from tests.support import paths

FIXTURES = paths.REPO / "tests" / "fixtures" / "xid"
DECODE_SHEET = FIXTURES / "nvidia_xid_catalog_sheet_144-150_decode.csv"
# The sheet's columns the table holds, in SheetRow's order (xid, unit, status, bucket, v1, v2, the action-2 three).
COLUMNS = (0, 1, 4, 5, 2, 3, 6, 7, 8)
SHEET_ROWS = 95
V1_DRIVER, V2_DRIVER = 570, 575  # a driver before R575 and the first from R575


def _csv_rows() -> list[list[str]]:
    with DECODE_SHEET.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[1:]


def _cells(row: SheetRow) -> tuple[str, ...]:
    return (str(row.xid), row.unit, row.status, row.bucket, row.v1, row.v2, row.v1_action2, row.v2_action2,
            row.bucket2)


def test_the_table_is_the_catalog_s_decode_sheet_cell_by_cell() -> None:
    # A new row, a row gone or a changed cell of the sheet fails here: update nvlink5_decode_sheet.py with it.
    rows = _csv_rows()
    assert len(rows) == len(SHEET) == SHEET_ROWS
    for i, (csv_row, row) in enumerate(zip(rows, SHEET, strict=True)):
        assert tuple(csv_row[c] for c in COLUMNS) == _cells(row), f"sheet row {i + 2}"


def test_the_decode_sheet_fixture_names_the_catalog_version_the_table_follows() -> None:
    readme = (FIXTURES / "README.md").read_text()
    assert DECODE_SHEET.name in readme and CATALOG.sha256 in readme


def _word(pattern: str, fill: str) -> int:
    """A 32-bit word that matches a sheet pattern, its "-" bits all `fill`."""
    return int(pattern.replace("-", fill), 2)


def _status(row: SheetRow) -> int:
    return int(row.status.split("/")[-1], 16) if row.status else 0x12345678  # an empty cell: any status


@pytest.mark.parametrize("row", SHEET, ids=lambda r: f"{r.xid}-{r.unit}-{r.status}-{r.v1}")
def test_every_row_of_the_sheet_decodes_to_its_bucket_in_the_driver_s_layout(row: SheetRow) -> None:
    # Its "-" bits all 0, then all 1: by either of its names, in each layout with the driver that has it.
    expected = xid_decode.BUCKET_ACTION[row.bucket]
    for name in row.unit.split("/"):
        for fill in "01":
            for branch, pattern in ((V1_DRIVER, row.v1), (V2_DRIVER, row.v2)):
                got = decode_nvlink5(row.xid, name, [_word(pattern, fill), _status(row)], branch)
                assert got == expected, (name, fill, branch)


def test_a_word_in_the_second_pattern_of_an_action_2_row_takes_the_second_action() -> None:
    rows = [r for r in SHEET if r.bucket2]
    assert rows, "the sheet has action-2 rows (145 RLW_RXPIPE)"
    for row in rows:
        for branch, pattern in ((V1_DRIVER, row.v1_action2), (V2_DRIVER, row.v2_action2)):
            got = decode_nvlink5(row.xid, row.unit, [_word(pattern, "0"), _status(row)], branch)
            assert got == xid_decode.BUCKET_ACTION[row.bucket2] == Decoded.RESET_GPU


# Real words (tests/fixtures/kmsg/peers/gpud_gb200_*.txt): all in the V1 layout.
BER_IGNORE = (149, "NETIR_BER_EVENT", [0x00086226, 0x00000001])
LINK_DOWN_RESET = (149, "NETIR_LINK_EVT", [0x021425c6, 0x00000000])
SRC_TRACK_154 = (145, "RLW_SRC_TRACK", [0x040868e2, 0x00000008])


@pytest.mark.parametrize(("line", "v1", "v2"), [
    (BER_IGNORE, Decoded.NONE, Decoded.UNDECODED),
    (LINK_DOWN_RESET, Decoded.RESET_GPU, Decoded.UNDECODED),
    (SRC_TRACK_154, Decoded.DRIVER_RECOVERY, Decoded.UNDECODED),
])
def test_the_driver_s_branch_picks_the_layout_and_an_unknown_branch_decodes_either(
        line: tuple[int, str, list[int]], v1: Decoded, v2: Decoded) -> None:
    xid, unit, words = line
    assert decode_nvlink5(xid, unit, words, 565) == v1
    assert decode_nvlink5(xid, unit, words, 580) == v2
    assert decode_nvlink5(xid, unit, words, None) == v1  # the line matches the V1 layout only


def test_where_the_branch_is_unknown_a_line_that_decodes_in_both_layouts_takes_the_stronger_action(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # In this sheet a printed name and its intrInfo fit both layouts only for 150 (both RESET_GPU), so the rule is
    # shown on a sheet of two rows that disagree: V1 reads IGNORE, V2 RESET_GPU.
    assert decode_nvlink5(150, "MSE_WATCHDOG", [0x0, 0x0], None) == Decoded.RESET_GPU
    rows = [SheetRow(145, "RLW_X", "0x00000001", "IGNORE", "-" * 32, "0" * 32),
            SheetRow(145, "RLW_X", "0x00000001", "RESET_GPU", "0" * 32, "-" * 32)]
    monkeypatch.setattr(xid_decode, "_RULES", xid_decode._index(rows))
    assert decode_nvlink5(145, "RLW_X", [0x5, 0x1], V1_DRIVER) == Decoded.NONE
    assert decode_nvlink5(145, "RLW_X", [0x5, 0x1], V2_DRIVER) == Decoded.RESET_GPU
    assert decode_nvlink5(145, "RLW_X", [0x5, 0x1], None) == Decoded.RESET_GPU
    assert xid_decode.strongest([Decoded.NONE, Decoded.DRIVER_RECOVERY]) == Decoded.DRIVER_RECOVERY


@pytest.mark.parametrize(("unit", "words", "why"), [
    ("RLW_SRC_TRACK", [0x040868e2, 0x00000040], "a status the sheet does not list for the row"),
    ("RLW_SRC_TRACK", [0x040868e2], "the error status missing"),
    ("RLW_RXPIPE", [0x040868e2, 0x00000008], "a sub component the intrInfo is not"),
    ("RLW_NEW_UNIT", [0x040868e2, 0x00000008], "a sub component the sheet does not know"),
])
def test_a_line_that_cannot_be_decoded_is_undecoded(unit: str, words: list[int], why: str) -> None:
    assert decode_nvlink5(145, unit, words, None) == Decoded.UNDECODED, why


def test_149_link_down_rows_decode_by_their_reason_bits_whatever_the_status() -> None:
    # The sheet's link-down rows leave the status empty; bits 25:20 say why: 100110 and 101000 are IGNORE.
    for reason, expected in ((0b100110, Decoded.NONE), (0b101000, Decoded.NONE), (0b100001, Decoded.RESET_GPU)):
        word = 0x1C6 | reason << 20
        for status in (0, 0xFFFFFFFF):
            assert decode_nvlink5(149, "NETIR_LINK_DOWN", [word, status], 565) == expected, bin(reason)


def _regs(**bits: tuple[int, ...]) -> list[int]:
    """Seven registers with the given bits set: first=(0, 23), fifth=(20,)."""
    names = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh")
    return [sum(1 << b for b in bits.get(n, ())) for n in names]


@pytest.mark.parametrize(("registers", "expected"), [
    (_regs(first=(0, 23, 30)), Decoded.NONE),  # "Can be safely ignored"
    (_regs(fifth=(20, 23, 26, 29)), Decoded.NONE),  # a threshold exceeded, no uncorrectable error: continue
    (_regs(first=(0,), fifth=(26,)), Decoded.NONE),
    (_regs(third=(16,)), Decoded.RESET_GPU),  # the real line's 0x10000 (tests/fixtures/kmsg/samples.txt)
    (_regs(first=(1,)), Decoded.RESET_GPU),  # sympathetic, seen solo: "report a bug"
    (_regs(first=(0, 4)), Decoded.RESET_GPU),  # an ignorable bit beside ECC/parity
    (_regs(fifth=(20, 21)), Decoded.RESET_GPU),  # a threshold bit beside ECC/parity
    (_regs(fourth=(18,)), Decoded.RESET_GPU),  # "a reset of the fabric is required"
    (_regs(second=(0,)), Decoded.RESET_GPU),  # a register not valid for Hopper: a bit the catalog does not list
    (_regs(third=(0,)), Decoded.RESET_GPU),  # bit 0 is ignorable in the first register only
    (_regs(first=(20,)), Decoded.RESET_GPU),  # bit 20 is threshold-only in the fifth register only
    (_regs(), Decoded.UNDECODED),  # nothing set: nothing to decode
    ([0x1, 0x0, 0x0], Decoded.UNDECODED),  # fewer than seven registers
])
def test_xid_74_takes_no_action_only_when_every_set_bit_is_ignorable_or_threshold_only(
        registers: list[int], expected: Decoded) -> None:
    assert decode_xid74(registers) == expected


@pytest.mark.parametrize(("text", "branch"), [
    # The file's first line as NVIDIA's README and distributions' documentation show it.
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n", 535),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.42.06  Release Build  (abuild@host)  "
     "Thu Jul 11 12:00:00 UTC 2024\nGCC version:  gcc version 7.5.0 (SUSE Linux)\n", 555),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build\n", 580),
    ("", None),
    ("NVRM version: something else\n", None),
])
def test_the_driver_s_branch_is_read_from_its_version_file(text: str, branch: int | None) -> None:
    assert driver_branch(text) == branch
