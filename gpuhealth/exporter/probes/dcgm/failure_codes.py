"""DCGM's failure codes (DCGM_FR_*) and the action gpuhealth takes for each.

`dcgmi diag -j` gives each failed or warned result's code as `error_id` (nvvs/include/NvvsJsonStrings.h). The codes,
their severities and NVIDIA's suggestions are DCGM's own: NVIDIA/DCGM 4.6.0 (commit 72fa3fe), dcgmlib/dcgm_errors.h
(dcgmError_t, the DCGM_FR_*_NEXT suggestions) and dcgmlib/src/dcgm_errors.c (dcgmErrorMeta: each code's
dcgmErrorSeverity_t, NONE/MONITOR/ISOLATE/UNKNOWN/TRIAGE/CONFIG/RESET). Row remapping and page retirement follow
NVIDIA's GPU memory error management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt): a pending remap is
cleared by a GPU reset; a failed remap, or the retired-page limit, means the board is replaced (RMA).

A code not in the table (a newer DCGM) stays fail-closed: cordon in dcgmi health, reset in a failed dcgmi diag test (as
every failed test did before its codes were read).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    """What a code asks of gpuhealth, weakest first: the `action` label of the failure-code families."""

    NONE = "none"  # benign or informational: counted, no node action
    CONFIG = "config"  # the node's software or configuration, not the GPU: page a person
    CORDON = "cordon"  # no new work until a person looks (DCGM: TRIAGE, or ISOLATE without a known repair)
    RESET = "reset"  # drain and reset the GPU
    REBOOT = "reboot"  # drain and reboot the node
    REPLACE = "replace"  # the board is faulty for good: drain, cordon, replace


class Severity(StrEnum):
    """DCGM's dcgmErrorSeverity_t (dcgm_errors.h), each code's in dcgm_errors.c's dcgmErrorMeta."""

    NONE = "NONE"
    MONITOR = "MONITOR"  # can perform workload, but needs to be monitored
    ISOLATE = "ISOLATE"  # cannot perform workload: the GPU should be isolated
    UNKNOWN = "UNKNOWN"
    TRIAGE = "TRIAGE"  # this error should be triaged
    CONFIG = "CONFIG"  # this error can be configured
    RESET = "RESET"  # drain and reset the GPU


# gpuhealth's action for each DCGM severity; a row that takes another says why.
SEVERITY_ACTION: dict[Severity, Action] = {
    Severity.NONE: Action.NONE,
    Severity.MONITOR: Action.NONE,
    Severity.ISOLATE: Action.CORDON,
    Severity.UNKNOWN: Action.CORDON,
    Severity.TRIAGE: Action.CORDON,
    Severity.CONFIG: Action.CONFIG,
    Severity.RESET: Action.RESET,
}


@dataclass(frozen=True)
class _Row:
    code: int
    name: str  # DCGM_FR_* in dcgm_errors.h's dcgmError_t
    severity: Severity  # DCGM's, from dcgm_errors.c
    action: Action  # gpuhealth's
    why: str = ""  # the source of an action other than SEVERITY_ACTION[severity], or a note


# One row per code the exporter can see: in dcgmi diag -j (error_id) and, by its message, in dcgmi health -c -j
# (the codes modules/health/DcgmHealthWatch.cpp raises). A code not listed falls to UNKNOWN_ACTION.
FAILURE_CODES: dict[int, _Row] = {row.code: row for row in (
    _Row(3, "DCGM_FR_PCI_REPLAY_RATE", Severity.ISOLATE, Action.CORDON),
    _Row(4, "DCGM_FR_VOLATILE_DBE_DETECTED", Severity.ISOLATE, Action.RESET,
         "NVIDIA GPU memory error management: a volatile DBE is contained by a GPU reset"),
    _Row(5, "DCGM_FR_VOLATILE_SBE_DETECTED", Severity.MONITOR, Action.NONE),
    _Row(6, "DCGM_FR_PENDING_PAGE_RETIREMENTS", Severity.RESET, Action.RESET),
    _Row(7, "DCGM_FR_RETIRED_PAGES_LIMIT", Severity.ISOLATE, Action.REPLACE,
         "NVIDIA GPU memory error management: the retired-page limit means the board is replaced (RMA)"),
    _Row(8, "DCGM_FR_RETIRED_PAGES_DBE_LIMIT", Severity.ISOLATE, Action.REPLACE,
         "NVIDIA GPU memory error management: the retired-page limit means the board is replaced (RMA)"),
    _Row(9, "DCGM_FR_CORRUPT_INFOROM", Severity.TRIAGE, Action.CORDON, "TRIAGE: NVIDIA support reflashes the InfoROM"),
    _Row(10, "DCGM_FR_CLOCKS_EVENT_THERMAL", Severity.MONITOR, Action.NONE, "clocks optimised for temperature: benign"),
    _Row(11, "DCGM_FR_POWER_UNREADABLE", Severity.MONITOR, Action.NONE),
    _Row(12, "DCGM_FR_CLOCKS_EVENT_POWER", Severity.MONITOR, Action.NONE,
         "clocks optimised for the power limit: benign"),
    _Row(13, "DCGM_FR_NVLINK_ERROR_THRESHOLD", Severity.ISOLATE, Action.CORDON),
    _Row(14, "DCGM_FR_NVLINK_DOWN", Severity.TRIAGE, Action.CORDON),
    _Row(15, "DCGM_FR_NVSWITCH_FATAL_ERROR", Severity.ISOLATE, Action.CORDON),
    _Row(16, "DCGM_FR_NVSWITCH_NON_FATAL_ERROR", Severity.MONITOR, Action.NONE),
    _Row(23, "DCGM_FR_DENYLISTED_DRIVER", Severity.CONFIG, Action.CONFIG),
    _Row(25, "DCGM_FR_GRAPHICS_PROCESSES", Severity.RESET, Action.CONFIG,
         "a graphics process on the GPU is a workload, not a fault: page to stop it and rerun"),
    _Row(28, "DCGM_FR_BAD_CUDA_ENV", Severity.CONFIG, Action.CONFIG),
    _Row(29, "DCGM_FR_PERSISTENCE_MODE", Severity.CONFIG, Action.CONFIG),
    _Row(33, "DCGM_FR_FIELD_VIOLATION", Severity.ISOLATE, Action.CORDON),
    _Row(36, "DCGM_FR_FIELD_THRESHOLD_DBL", Severity.ISOLATE, Action.CORDON),
    _Row(40, "DCGM_FR_THERMAL_VIOLATIONS", Severity.MONITOR, Action.NONE),
    _Row(42, "DCGM_FR_TEMP_VIOLATION", Severity.MONITOR, Action.NONE),
    _Row(43, "DCGM_FR_CLOCKS_EVENT_VIOLATION", Severity.MONITOR, Action.NONE),
    _Row(48, "DCGM_FR_TEST_DISABLED", Severity.CONFIG, Action.NONE,
         "the test did not run on this GPU: its result is a skip, evidence of nothing"),
    _Row(52, "DCGM_FR_FAULTY_MEMORY", Severity.ISOLATE, Action.REPLACE,
         "NVIDIA GPU memory error management: memory that fails a test again after a reset is an RMA"),
    _Row(57, "DCGM_FR_CUDA_DBE", Severity.ISOLATE, Action.RESET,
         "NVIDIA GPU memory error management: a volatile DBE is contained by a GPU reset"),
    _Row(58, "DCGM_FR_MEMORY_MISMATCH", Severity.ISOLATE, Action.CORDON),
    _Row(62, "DCGM_FR_MEMORY_BANDWIDTH", Severity.TRIAGE, Action.CORDON),
    _Row(63, "DCGM_FR_TARGET_POWER", Severity.TRIAGE, Action.CORDON),
    _Row(70, "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD", Severity.ISOLATE, Action.CORDON),
    _Row(71, "DCGM_FR_NVLINK_ERROR_CRITICAL", Severity.ISOLATE, Action.CORDON),
    _Row(80, "DCGM_FR_ROW_REMAP_FAILURE", Severity.RESET, Action.REPLACE,
         "NVIDIA GPU memory error management and Xid 64's catalog row: a failed row remap is the RMA criterion; "
         "DCGM says RESET, which cannot give the bank a spare row"),
    _Row(81, "DCGM_FR_UNCONTAINED_ERROR", Severity.ISOLATE, Action.RESET,
         "NVIDIA Xid catalog: Xid 95 (uncontained ECC error) is RESET_GPU"),
    _Row(83, "DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS", Severity.RESET, Action.RESET),
    _Row(84, "DCGM_FR_UNCORRECTABLE_ROW_REMAP", Severity.RESET, Action.RESET,
         "NVIDIA GPU memory error management: the remap is applied at the next reset"),
    _Row(85, "DCGM_FR_PENDING_ROW_REMAP", Severity.RESET, Action.RESET,
         "NVIDIA GPU memory error management: a GPU reset applies the pending remap"),
    _Row(95, "DCGM_FR_EUD_TEST_FAILED", Severity.ISOLATE, Action.CORDON),
    _Row(101, "DCGM_FR_XID_ERROR", Severity.TRIAGE, Action.CORDON, "the kernel log's Xid decides the repair"),
    _Row(103, "DCGM_FR_DBE_VIOLATION", Severity.ISOLATE, Action.RESET,
         "NVIDIA GPU memory error management: a volatile DBE is contained by a GPU reset"),
    _Row(117, "DCGM_FR_TEST_SKIPPED", Severity.CONFIG, Action.NONE,
         "the test did not run: its result is a skip, evidence of nothing"),
    _Row(118, "DCGM_FR_SRAM_THRESHOLD", Severity.ISOLATE, Action.REPLACE,
         "SRAM errors past the threshold do not heal: NVIDIA support replaces the board"),
    _Row(119, "DCGM_FR_NVLINK_EFFECTIVE_BER_THRESHOLD", Severity.ISOLATE, Action.CORDON),
    _Row(120, "DCGM_FR_FALLEN_OFF_BUS", Severity.ISOLATE, Action.REBOOT,
         "NVIDIA Xid catalog: Xid 79 (fallen off the bus) is RESTART_BM"),
    _Row(121, "DCGM_FR_NVLINK_SYMBOL_BER_THRESHOLD", Severity.ISOLATE, Action.CORDON),
    _Row(122, "DCGM_FR_IMEX_UNHEALTHY", Severity.ISOLATE, Action.CORDON),
    _Row(123, "DCGM_FR_FABRIC_PROBE_STATE", Severity.MONITOR, Action.NONE),
    _Row(125, "DCGM_FR_GPU_RECOVERY_RESET", Severity.RESET, Action.RESET),
    _Row(126, "DCGM_FR_GPU_RECOVERY_REBOOT", Severity.ISOLATE, Action.REBOOT,
         "dcgm_errors.h: the node requires a reboot (NODE_REBOOT)"),
    _Row(127, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P", Severity.RESET, Action.RESET),
    _Row(128, "DCGM_FR_GPU_RECOVERY_DRAIN_RESET", Severity.RESET, Action.RESET),
    _Row(131, "DCGM_FR_CONTAINED_ERROR", Severity.MONITOR, Action.NONE),
    _Row(132, "DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT", Severity.TRIAGE, Action.REPLACE,
         "NVIDIA GPU memory error management: past the remap limit the board is replaced (RMA)"),
)}


UNKNOWN_ACTION = Action.CORDON  # fail closed: a code we cannot name keeps new work off the GPU
# In a failed dcgmi diag test, a code we cannot name resets the GPU, as any failed test did before codes were read.
UNKNOWN_DIAG_ACTION = Action.RESET


def code_action(code: int, unknown: Action = UNKNOWN_ACTION) -> Action:
    row = FAILURE_CODES.get(code)
    return row.action if row else unknown


def diag_code_action(code: int) -> Action:
    """gpuhealth's action for a code of a failed or warned dcgmi diag result (the metric's `action` label)."""
    return code_action(code, UNKNOWN_DIAG_ACTION)


def failed_test_action(codes: Iterable[int]) -> Action:
    """What a failed dcgmi diag test asks for: the strongest action of its codes (diag_code_action); a test that
    failed without a code resets (fail closed), as GPUDiagFailed does (rules/alerts/gpu.yaml)."""
    actions = [diag_code_action(code) for code in codes]
    return max(actions, key=list(Action).index) if actions else Action.RESET


def code_name(code: int) -> str:
    """DCGM's name for a code (DCGM_FR_*), or "code <n>" for one the table does not know."""
    row = FAILURE_CODES.get(code)
    return row.name if row else f"code {code}"
