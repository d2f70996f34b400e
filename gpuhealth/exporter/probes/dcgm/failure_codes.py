"""DCGM's failure codes (DCGM_FR_*) and the action gpuhealth takes for each.

`dcgmi diag -j` gives each failed or warned result's code as `error_id` (nvvs/include/NvvsJsonStrings.h). The codes,
their severities and NVIDIA's suggestions are DCGM's own: NVIDIA/DCGM 4.6.0 (commit 72fa3fe), dcgmlib/dcgm_errors.h
(dcgmError_t, the DCGM_FR_*_NEXT suggestions) and dcgmlib/src/dcgm_errors.c (dcgmErrorMeta: each code's
dcgmErrorSeverity_t, NONE/MONITOR/ISOLATE/UNKNOWN/TRIAGE/CONFIG/RESET). Row remapping and page retirement follow
NVIDIA's GPU memory error management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt): a pending remap is
cleared by a GPU reset; a failed remap, or the retired-page limit, means the board is replaced (RMA).

A code not in the table (a newer DCGM) stays fail-closed: cordon, as for a failure gpuhealth cannot name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Action(str, Enum):
    """What a code asks of gpuhealth, weakest first. The label value on gpuhealth_dcgm_failure_code."""

    NONE = "none"  # benign or informational: counted, no node action
    CONFIG = "config"  # the node's software or configuration: page a person, the GPU is not at fault
    CORDON = "cordon"  # no new work until a person looks (DCGM: TRIAGE or ISOLATE without a known repair)
    RESET = "reset"  # drain and reset the GPU
    REBOOT = "reboot"  # drain and reboot the node
    REPLACE = "replace"  # the board is faulty for good: drain, cordon, open a replacement


@dataclass(frozen=True)
class FailureCode:
    code: int
    name: str
    action: Action
    source: str  # where the action comes from: DCGM's severity (dcgm_errors.c) or the document followed


_C = "dcgm_errors.c severity"
_MEM = "NVIDIA GPU memory error management"

# One row per code the exporter can see: in dcgmi diag -j (error_id) and, by its message, in dcgmi health -c -j
# (the codes modules/health/DcgmHealthWatch.cpp raises). Rows not listed fall to UNKNOWN_ACTION.
FAILURE_CODES: dict[int, FailureCode] = {row.code: row for row in (
    FailureCode(3, "DCGM_FR_PCI_REPLAY_RATE", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(4, "DCGM_FR_VOLATILE_DBE_DETECTED", Action.RESET, f"{_C} ISOLATE; {_MEM}: a DBE is cleared by a reset"),
    FailureCode(5, "DCGM_FR_VOLATILE_SBE_DETECTED", Action.NONE, f"{_C} MONITOR"),
    FailureCode(6, "DCGM_FR_PENDING_PAGE_RETIREMENTS", Action.RESET, f"{_C} RESET"),
    FailureCode(7, "DCGM_FR_RETIRED_PAGES_LIMIT", Action.REPLACE, f"{_C} ISOLATE; {_MEM}: retired-page limit, RMA"),
    FailureCode(8, "DCGM_FR_RETIRED_PAGES_DBE_LIMIT", Action.REPLACE, f"{_C} ISOLATE; {_MEM}: retired-page limit, RMA"),
    FailureCode(9, "DCGM_FR_CORRUPT_INFOROM", Action.CORDON, f"{_C} TRIAGE (flash the InfoROM, NVIDIA support)"),
    FailureCode(10, "DCGM_FR_CLOCKS_EVENT_THERMAL", Action.NONE, f"{_C} MONITOR (clocks optimised, benign)"),
    FailureCode(11, "DCGM_FR_POWER_UNREADABLE", Action.NONE, f"{_C} MONITOR"),
    FailureCode(12, "DCGM_FR_CLOCKS_EVENT_POWER", Action.NONE, f"{_C} MONITOR (clocks optimised, benign)"),
    FailureCode(13, "DCGM_FR_NVLINK_ERROR_THRESHOLD", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(14, "DCGM_FR_NVLINK_DOWN", Action.CORDON, f"{_C} TRIAGE"),
    FailureCode(15, "DCGM_FR_NVSWITCH_FATAL_ERROR", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(16, "DCGM_FR_NVSWITCH_NON_FATAL_ERROR", Action.NONE, f"{_C} MONITOR"),
    FailureCode(23, "DCGM_FR_DENYLISTED_DRIVER", Action.CONFIG, f"{_C} CONFIG"),
    FailureCode(25, "DCGM_FR_GRAPHICS_PROCESSES", Action.CONFIG,
                f"{_C} RESET; gpuhealth: a process, not the GPU (stop it, rerun)"),
    FailureCode(28, "DCGM_FR_BAD_CUDA_ENV", Action.CONFIG, f"{_C} CONFIG"),
    FailureCode(29, "DCGM_FR_PERSISTENCE_MODE", Action.CONFIG, f"{_C} CONFIG"),
    FailureCode(33, "DCGM_FR_FIELD_VIOLATION", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(36, "DCGM_FR_FIELD_THRESHOLD_DBL", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(40, "DCGM_FR_THERMAL_VIOLATIONS", Action.NONE, f"{_C} MONITOR"),
    FailureCode(42, "DCGM_FR_TEMP_VIOLATION", Action.NONE, f"{_C} MONITOR"),
    FailureCode(43, "DCGM_FR_CLOCKS_EVENT_VIOLATION", Action.NONE, f"{_C} MONITOR"),
    FailureCode(48, "DCGM_FR_TEST_DISABLED", Action.NONE, "dcgm_errors.h: the test is disabled for this GPU"),
    FailureCode(52, "DCGM_FR_FAULTY_MEMORY", Action.REPLACE, f"{_C} ISOLATE; {_MEM}"),
    FailureCode(57, "DCGM_FR_CUDA_DBE", Action.RESET, f"{_C} ISOLATE; {_MEM}: a DBE is cleared by a reset"),
    FailureCode(58, "DCGM_FR_MEMORY_MISMATCH", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(70, "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(71, "DCGM_FR_NVLINK_ERROR_CRITICAL", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(80, "DCGM_FR_ROW_REMAP_FAILURE", Action.REPLACE,
                f"{_C} RESET; {_MEM}: a failed remap is an RMA (deviation: replace, not reset)"),
    FailureCode(81, "DCGM_FR_UNCONTAINED_ERROR", Action.REBOOT, f"{_C} ISOLATE; Xid 95 uncontained: reboot"),
    FailureCode(83, "DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS", Action.RESET, f"{_C} RESET"),
    FailureCode(84, "DCGM_FR_UNCORRECTABLE_ROW_REMAP", Action.RESET,
                f"{_C} RESET; {_MEM}: the remap is applied at the next reset"),
    FailureCode(85, "DCGM_FR_PENDING_ROW_REMAP", Action.RESET, f"{_C} RESET; {_MEM}: a reset applies the remap"),
    FailureCode(101, "DCGM_FR_XID_ERROR", Action.CORDON, f"{_C} TRIAGE (the kernel log's Xid decides)"),
    FailureCode(103, "DCGM_FR_DBE_VIOLATION", Action.RESET, f"{_C} ISOLATE; {_MEM}: a DBE is cleared by a reset"),
    FailureCode(117, "DCGM_FR_TEST_SKIPPED", Action.NONE, "dcgm_errors.h: the test was skipped"),
    FailureCode(118, "DCGM_FR_SRAM_THRESHOLD", Action.REPLACE, f"{_C} ISOLATE (SRAM threshold exceeded)"),
    FailureCode(119, "DCGM_FR_NVLINK_EFFECTIVE_BER_THRESHOLD", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(120, "DCGM_FR_FALLEN_OFF_BUS", Action.REBOOT, f"{_C} ISOLATE; Xid 79: reboot"),
    FailureCode(121, "DCGM_FR_NVLINK_SYMBOL_BER_THRESHOLD", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(122, "DCGM_FR_IMEX_UNHEALTHY", Action.CORDON, f"{_C} ISOLATE"),
    FailureCode(123, "DCGM_FR_FABRIC_PROBE_STATE", Action.NONE, f"{_C} MONITOR"),
    FailureCode(125, "DCGM_FR_GPU_RECOVERY_RESET", Action.RESET, f"{_C} RESET"),
    FailureCode(126, "DCGM_FR_GPU_RECOVERY_REBOOT", Action.REBOOT, f"{_C} ISOLATE; dcgm_errors.h: node reboot"),
    FailureCode(127, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P", Action.RESET, f"{_C} RESET"),
    FailureCode(128, "DCGM_FR_GPU_RECOVERY_DRAIN_RESET", Action.RESET, f"{_C} RESET"),
    FailureCode(131, "DCGM_FR_CONTAINED_ERROR", Action.NONE, f"{_C} MONITOR"),
    FailureCode(132, "DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT", Action.REPLACE,
                f"{_C} TRIAGE; {_MEM}: remap limit exceeded, RMA"),
)}

UNKNOWN_ACTION = Action.CORDON  # fail closed: a code we cannot name keeps new work off the GPU


def code_action(code: int) -> Action:
    row = FAILURE_CODES.get(code)
    return row.action if row else UNKNOWN_ACTION
