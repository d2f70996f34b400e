"""A stand-in for the `pynvml` module with GPUs that cannot exist on a machine without one.

Only the hardware is fake: every NVML_* constant, every NVMLError_* class and the ctypes structures
returned (nvmlPciInfo_t, c_nvmlViolationTime_t) are pynvml's own, so the probe's error handling
runs against the real exception types.
"""

from __future__ import annotations

import threading
import types
from dataclasses import dataclass, field
from typing import Any

import pynvml

H100 = "NVIDIA H100 80GB HBM3"
H100_NVLINKS = 18
# p5.48xlarge GPU bus ids, in NVML's form.
P5_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("53", "64", "75", "86", "97", "A8", "B9", "CA")]


@dataclass(frozen=True)
class FakeMig:
    """A MIG device: its slot among the GPU's MIG device handles, GPU and compute instance, profile, UUID."""

    slot: int
    gpu_instance: int
    compute_instance: int
    profile: str
    uuid: str


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str
    name: str = H100
    # (NVML_MEMORY_ERROR_TYPE_*, NVML_VOLATILE_ECC|NVML_AGGREGATE_ECC) -> count
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, unc, pending, failure
    temperature: int = 34
    clock_events: int = 0
    nvlink_up: list[int] = field(default_factory=lambda: [1] * H100_NVLINKS)
    # (link, NVML_NVLINK_ERROR_DL_*) -> count
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    pcie_replays: int = 0
    violation_ns: dict[int, int] = field(default_factory=dict)  # NVML_PERF_POLICY_* -> ns
    # NVML_PAGE_RETIREMENT_CAUSE_* -> page addresses; None: NotSupported, as on Ampere and later.
    retired_pages: dict[int, list[int]] | None = None
    # (current, pending) NVML_DEVICE_MIG_*; None: NotSupported (a GPU without MIG)
    mig_mode: tuple[int, int] | None = None
    mig_devices: list[FakeMig] = field(default_factory=list)
    max_mig_devices: int = 7
    # The driver's recovery action (NVML field 230, NVML_GPU_RECOVERY_ACTION_*); None: a driver without the field
    # (it answers NVML_ERROR_NOT_SUPPORTED in the field's own return code, as NVML does, not by raising).
    recovery_action: int | None = 0
    lost: bool = False
    lost_after: str = ""  # function name from which on the GPU answers GpuIsLost ("" = from the handle)
    # function name -> NVMLError subclass that call raises on this GPU
    errors: dict[str, type[pynvml.NVMLError]] = field(default_factory=dict)
    blocker: threading.Event | None = None  # the next nvmlDeviceGetTemperature waits for it
    blocked: threading.Event = field(default_factory=threading.Event)  # set once a call is waiting
    old_bindings: bool = False  # nvidia-ml-py before 12.535 handed out bytes, not str


class FakeNvml(types.ModuleType):
    def __init__(self, gpus: list[FakeGpu], *, init_error: type[pynvml.NVMLError] | None = None) -> None:
        super().__init__("fake_pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = False
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls: list[tuple[int, str]] = []
        self.touches = 0  # every call into the library, nvmlInit and nvmlShutdown included
        self.lost_seen: set[int] = set()
        self.count_error: type[pynvml.NVMLError] | None = None

    # --- library ---
    def nvmlInit(self) -> None:
        self.touches += 1
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error()
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.shutdown_calls += 1
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        if self.count_error is not None:
            raise self.count_error()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check_init()
        gpu = self.gpus[index]
        if gpu.lost and not gpu.lost_after:
            raise pynvml.NVMLError_GpuIsLost()
        return index

    # --- per device ---
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        if isinstance(handle, tuple):
            return self._mig(handle).uuid
        gpu = self._gpu(handle, "nvmlDeviceGetUUID")
        return gpu.uuid.encode() if gpu.old_bindings else gpu.uuid

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
        if gpu.old_bindings:
            return types.SimpleNamespace(busId=gpu.bus_id.encode())
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        return info

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        if isinstance(handle, tuple):  # a MIG device: the parent's name and the profile, as NVML names it
            return f"{self.gpus[handle[0]].name} MIG {self._mig(handle).profile}"
        gpu = self._gpu(handle, "nvmlDeviceGetName")
        return gpu.name.encode() if gpu.old_bindings else gpu.name

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetTotalEccErrors").ecc.get((error_type, counter_type), 0)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        return self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped_rows

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetRetiredPages")
        if gpu.retired_pages is None:
            raise pynvml.NVMLError_NotSupported()
        return gpu.retired_pages.get(cause, [])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetRetiredPagesPendingStatus")
        if gpu.retired_pages is None:
            raise pynvml.NVMLError_NotSupported()
        return 0  # NVML_FEATURE_DISABLED

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        blocker, gpu.blocker = gpu.blocker, None  # blocks one call only
        if blocker is not None:
            gpu.blocked.set()
            blocker.wait(timeout=30)
        return gpu.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_events

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkState")
        if not gpu.nvlink_up:
            raise pynvml.NVMLError_NotSupported()
        if link >= len(gpu.nvlink_up):
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.nvlink_up[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, counter: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkErrorCounter")
        if link >= len(gpu.nvlink_up):
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replays

    def nvmlDeviceGetViolationStatus(self, handle: int, policy: int) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetViolationStatus")
        return pynvml.c_nvmlViolationTime_t(
            referenceTime=10**12, violationTime=gpu.violation_ns.get(policy, 0)
        )

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        if gpu.mig_mode is None:
            raise pynvml.NVMLError_NotSupported()
        return list(gpu.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if gpu.mig_mode is None:
            raise pynvml.NVMLError_NotSupported()
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int) -> tuple[int, int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= gpu.max_mig_devices:
            raise pynvml.NVMLError_InvalidArgument()
        if not any(m.slot == index for m in gpu.mig_devices):
            raise pynvml.NVMLError_NotFound()  # an empty slot, as NVML answers
        return (handle, index)

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list[int]) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for slot, field_id in zip(values, field_ids, strict=True):
            slot.fieldId = field_id
            known = field_id == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and gpu.recovery_action is not None
            slot.nvmlReturn = pynvml.NVML_SUCCESS if known else pynvml.NVML_ERROR_NOT_SUPPORTED
            slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            slot.value.uiVal = gpu.recovery_action or 0
        return values

    def _mig(self, handle: Any) -> FakeMig:
        self._check_init()
        parent, slot = handle
        return next(m for m in self.gpus[parent].mig_devices if m.slot == slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[int, int]) -> int:
        return self._mig(handle).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[int, int]) -> int:
        return self._mig(handle).compute_instance

    def _check_init(self) -> None:
        self.touches += 1
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()

    def _gpu(self, handle: int, fn: str) -> FakeGpu:
        self._check_init()
        self.calls.append((handle, fn))
        gpu = self.gpus[handle]
        if gpu.lost and fn == gpu.lost_after:
            self.lost_seen.add(handle)
        if handle in self.lost_seen:
            raise pynvml.NVMLError_GpuIsLost()
        if fn in gpu.errors:
            raise gpu.errors[fn]()
        return gpu


def uuid_of(index: int) -> str:
    return f"GPU-8c1f2a3b-0000-4000-8000-00000000000{index}"


def p5_fleet() -> list[FakeGpu]:
    """Eight H100s as on a p5.48xlarge: gpu 2 has a failed row remap (and double-bit ECC errors),
    gpu 5 is lost, gpu 6 has NVLink link 17 down, gpu 3 is thermally throttled."""
    gpus = [FakeGpu(uuid_of(i), P5_BUS_IDS[i]) for i in range(8)]
    for gpu in gpus:
        gpu.ecc[(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC)] = 4
        gpu.violation_ns = {pynvml.NVML_PERF_POLICY_POWER: 1_500_000_000}
    gpus[2].ecc.update({
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): 2,
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC): 9,
    })
    gpus[2].remapped_rows = (1, 7, 0, 1)
    gpus[3].clock_events = 0x48  # hw_slowdown | hw_thermal_slowdown
    gpus[3].temperature = 91
    gpus[3].violation_ns[pynvml.NVML_PERF_POLICY_THERMAL] = 250_000_000_000
    gpus[5].lost = True
    gpus[6].nvlink_up[17] = 0
    gpus[6].nvlink_errors = {
        (17, pynvml.NVML_NVLINK_ERROR_DL_REPLAY): 40,
        (16, pynvml.NVML_NVLINK_ERROR_DL_REPLAY): 2,
        (17, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY): 3,
        (0, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 5,
    }
    gpus[7].pcie_replays = 12
    return gpus
