"""The decoded Xids: the action NVIDIA's catalog gives one Xid 74 or 144-150 line, from the registers it prints.

The catalog (gpuhealth/contract/xid_catalog.py records its version) gives these Xids no single action but a workflow:
- 74 (WORKFLOW_NVLINK_ERR): seven registers; some bits "can be safely ignored", some are "a threshold of ECC errors
  being exceeded. There was no uncorrectable error at this time. Continue operation"; every other bit is a hardware,
  ECC/parity, signal-integrity or sympathetic error, or one the catalog does not list ("please report a bug").
- 144-150 (WORKFLOW_NVLINK5_ERR): `<Xid> <sub component> <fatal vs nonfatal> <Crosscontain> <injected> <link>
  (<intrInfo> <errorStatus> <errorDebugData...>)`; intrInfo and errorStatus are looked up in the decode sheet
  (gpuhealth/contract/nvlink5_decode_sheet.py).
The action is one of Decoded's values: the exporter counts it (gpuhealth_xid_decoded_total), the rules act on it
(rules/alerts/gpu.yaml, GPUNVLinkXidFatal) and GpuhealthGPUHealthy follows it (gpuhealth/contract/xids.py). A line
that cannot be decoded (a field missing, a status or pattern not in the sheet) is UNDECODED: the rules and the
condition then do what they did before any decode (144-150 by the printed Fatal/Nonfatal, 74 a reset).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

from gpuhealth.contract.nvlink5_decode_sheet import SHEET, SheetRow


class Decoded(StrEnum):
    """The action a decoded line asks for (the `action` label of gpuhealth_xid_decoded_total)."""

    RESET_GPU = "reset_gpu"  # the sheet's RESET_GPU; 74 with any bit but the ignorable and threshold ones
    DRIVER_RECOVERY = "driver_recovery"  # the sheet's XID_154_EVAL: the driver's Xid 154 / recovery field decides
    NONE = "none"  # the sheet's IGNORE; 74 whose set bits are all ignorable or threshold-only: counted only
    UNDECODED = "undecoded"  # not decodable: the rules fall back to the printed line (144-150) or a reset (74)


# Where two decodes disagree (a driver of unknown version, several rows), the stronger wins: fail closed.
STRENGTH = {Decoded.NONE: 0, Decoded.DRIVER_RECOVERY: 1, Decoded.RESET_GPU: 2}
BUCKET_ACTION = {"RESET_GPU": Decoded.RESET_GPU, "XID_154_EVAL": Decoded.DRIVER_RECOVERY, "IGNORE": Decoded.NONE}

XID_74 = 74
NVLINK5_XIDS = frozenset(range(144, 151))
DECODED_XIDS = frozenset({XID_74, *NVLINK5_XIDS})

# --- Xid 74: the seven registers (WORKFLOW_NVLINK_ERR) ---
XID_74_REGISTERS = 7  # "there should be seven fields in the Xid"; a line with fewer or more is not decoded
# The bits that take no action, per register (0-based: the catalog's "first register" is 0). Every bit not named
# here resets: the first register's 1, 20 (sympathetic: "if seen solo, please report a bug"), 4, 5 (ECC/parity),
# 8, 9, 12, 16, 17, 24, 28 (possibly hardware: re-seat, diagnostics), 21, 22 (marginal signal integrity), 27, 29;
# the third's 0, 1, 2, 6, 13, 16-19; the fourth's 16-18 (18: "a reset of the fabric is required"); the fifth's
# 18, 19, 21, 22, 24, 25, 27, 28 (ECC/parity); and any bit the catalog does not list ("please report a bug").
XID_74_IGNORABLE = {0: frozenset({0, 23, 30})}  # first register: "Can be safely ignored"
# Fifth register: "a threshold of ECC errors being exceeded. There was no uncorrectable error at this time.
# Continue operation."
XID_74_THRESHOLD_ONLY = {4: frozenset({20, 23, 26, 29})}
_74_NO_ACTION = {reg: XID_74_IGNORABLE.get(reg, frozenset()) | XID_74_THRESHOLD_ONLY.get(reg, frozenset())
                 for reg in range(XID_74_REGISTERS)}

# --- Xid 144-150: the decode sheet ---
R575 = 575  # the first driver branch whose intrInfo has the sheet's V2 layout; earlier ones have V1
V1, V2 = "v1", "v2"
NVLINK5_REGISTERS = 2  # intrInfo and errorStatus: the two the sheet decodes (the debug data after them is not)


def _bits(pattern: str) -> tuple[int, int]:
    """A sheet pattern (bit 31 first, "-" any bit) as (mask, value): a word w matches when w & mask == value."""
    mask = value = 0
    for i, ch in enumerate(pattern):
        bit = 1 << (len(pattern) - 1 - i)
        if ch != "-":
            mask |= bit
            value |= bit if ch == "1" else 0
    return mask, value


def _statuses(text: str) -> frozenset[int] | None:
    """The error statuses a row matches; None for any (the sheet leaves the cell empty)."""
    return frozenset(int(s, 16) for s in text.split("/")) if text else None


Rule = tuple[str, tuple[int, int], frozenset[int] | None, Decoded]  # (layout, intrInfo (mask, value), status, action)


def _rules(row: SheetRow) -> Iterable[Rule]:
    status = _statuses(row.status)
    yield V1, _bits(row.v1), status, BUCKET_ACTION[row.bucket]
    yield V2, _bits(row.v2), status, BUCKET_ACTION[row.bucket]
    if row.bucket2:
        yield V1, _bits(row.v1_action2), status, BUCKET_ACTION[row.bucket2]
        yield V2, _bits(row.v2_action2), status, BUCKET_ACTION[row.bucket2]


def _index(sheet: Iterable[SheetRow]) -> dict[tuple[int, str], list[Rule]]:
    """(Xid, sub component as the driver prints it: any of a row's names) -> the rules of its rows."""
    index: dict[tuple[int, str], list[Rule]] = {}
    for row in sheet:
        for name in row.unit.split("/"):
            index.setdefault((row.xid, name), []).extend(_rules(row))
    return index


_RULES = _index(SHEET)


def layouts(driver_branch: int | None) -> tuple[str, ...]:
    """The intrInfo layouts a driver's lines may have: one where its branch is known, both where it is not."""
    if driver_branch is None:
        return V1, V2
    return (V1,) if driver_branch < R575 else (V2,)


def strongest(actions: Iterable[Decoded]) -> Decoded:
    """The strongest of several decodes (fail closed); UNDECODED where there is none."""
    return max(actions, key=STRENGTH.__getitem__, default=Decoded.UNDECODED)


def decode_nvlink5(xid: int, unit: str, registers: list[int], driver_branch: int | None) -> Decoded:
    """A 144-150 line's action from the sheet: the rows of its Xid and printed sub component whose intrInfo pattern
    (in the driver's layout, or either where the driver's branch is unknown) and error status match. A line that
    matches in both layouts, or several rows, takes the strongest action."""
    if len(registers) < NVLINK5_REGISTERS:
        return Decoded.UNDECODED
    intr_info, status = registers[0], registers[1]
    wanted = layouts(driver_branch)
    return strongest(action for layout, (mask, value), statuses, action in _RULES.get((xid, unit), ())
                     if layout in wanted and intr_info & mask == value and (statuses is None or status in statuses))


def decode_xid74(registers: list[int]) -> Decoded:
    """A 74 line's action from its seven registers: none when every set bit is ignorable or threshold-only."""
    if len(registers) != XID_74_REGISTERS or not any(registers):
        return Decoded.UNDECODED  # a field missing, or nothing to decode: the catalog's strongest branch
    for reg, word in enumerate(registers):
        if any(word >> bit & 1 for bit in range(word.bit_length()) if bit not in _74_NO_ACTION[reg]):
            return Decoded.RESET_GPU
    return Decoded.NONE


_HEX = re.compile(r"0x[0-9a-fA-F]+")


def registers(text: str) -> list[int]:
    """The hex words of a register list as the driver prints it ("0x0, 0x10000, ..." or "0x025525c6 0x00000000")."""
    return [int(word, 16) for word in _HEX.findall(text)]


def decode(xid: int, fields: Mapping[str, str], driver_branch: int | None) -> Decoded | None:
    """The action for one Xid line, from the fields the kernel-log pattern extracted (kernel_patterns.yaml, nvrm_xid:
    `xid74_registers`; `nvlink5` and `nvlink5_unit`); None for an Xid that is not decoded."""
    if xid == XID_74:
        return decode_xid74(registers(fields.get("xid74_registers", "")))
    if xid in NVLINK5_XIDS:
        return decode_nvlink5(xid, fields.get("nvlink5_unit", ""), registers(fields.get("nvlink5", "")),
                              driver_branch)
    return None


_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(?P<branch>\d+)\.\d+")


def driver_branch(version_text: str) -> int | None:
    """The driver's branch (535 of 535.129.03) from /proc/driver/nvidia/version's first line; None if it names none."""
    m = _VERSION.search(version_text)
    return int(m["branch"]) if m else None
