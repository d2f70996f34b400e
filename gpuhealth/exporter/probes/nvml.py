"""NVML probe: per-GPU health counters read through nvidia-ml-py (`pynvml`).

The module is injected (tests pass a fake exposing pynvml's names and real exception classes), and
imported lazily so the exporter runs on nodes without nvidia-ml-py. Errors are judged per call:
NotSupported skips one metric, GpuIsLost marks one GPU lost, anything else fails the whole probe.

nvmlInit is called once and kept across runs (nvmlShutdown after a failed run, and before a GPU reset:
`pause` shuts NVML down and no NVML call is made until `resume`; the next run calls nvmlInit again).
"""

from __future__ import annotations

import contextlib
import importlib
import time
import types
from dataclasses import dataclass, field
from typing import Any

from gpuhealth.contract.pci import normalize_bus_id
from gpuhealth.exporter import catalog
from gpuhealth.exporter.catalog import Family
from gpuhealth.exporter.clock_events import clock_event_samples
from gpuhealth.exporter.probes.base import (
    ERROR,
    MISSING_TOOL,
    NOT_FOUND,
    PERMISSION_DENIED,
    TIMEOUT,
    PausingProbe,
    ProbeError,
)
from gpuhealth.exporter.samples import GpuIdentity, ProbeResult, Problems, Sample

SOURCE = "nvml"

# (label value, pynvml constant name)
_ECC_TYPES = (
    ("double_bit", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
    ("single_bit", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
)
_ECC_SCOPES = (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC"))
_NVLINK_ERRORS = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
)
_VIOLATIONS = (("thermal", "NVML_PERF_POLICY_THERMAL"), ("power", "NVML_PERF_POLICY_POWER"))
# The driver's GPU recovery action (NVML field 230), by the action label the kmsg probe also uses for 0-4
# (gpuhealth/exporter/kernel/probe.py); the codes are read from the installed pynvml, never written here, and a
# constant the installed pynvml lacks is simply not named.
_RECOVERY_ACTIONS = (
    ("none", "NVML_GPU_RECOVERY_ACTION_NONE"),
    ("gpu_reset_required", "NVML_GPU_RECOVERY_ACTION_GPU_RESET"),
    ("node_reboot_required", "NVML_GPU_RECOVERY_ACTION_NODE_REBOOT"),
    ("drain_p2p", "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P"),
    ("drain_and_reset", "NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET"),
    ("recover_imex_domain", "NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN"),
    ("bus_reset", "NVML_GPU_RECOVERY_ACTION_BUS_RESET"),
    ("system_reboot", "NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT"),
)
_RECOVERY_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
_RETIREMENT_CAUSES = (
    ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
    ("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
)


class NvmlProbe(PausingProbe):
    name = "nvml"

    def __init__(self, nvml: types.ModuleType | None = None) -> None:
        self._nvml = nvml
        self._initialised = False
        # (uuid, link) of every NVLink seen up since start. Only such a link going down is a node
        # condition problem: a PCIe GPU without a bridge reports its unused links as down from the start.
        self._links_seen_up: set[tuple[str, int]] = set()
        super().__init__()

    def _let_go(self) -> None:
        """nvmlShutdown (once no run is using NVML), and no NVML call until resume(): a GPU reset needs it."""
        if self._nvml is not None:
            self._forget_init(self._nvml)

    def _run(self, deadline: float) -> ProbeResult:
        give_up_at = time.monotonic() + deadline
        nv = self._module()
        self._ensure_init(nv)
        try:
            return _collect(nv, give_up_at, self._links_seen_up)
        except ProbeError:
            self._forget_init(nv)
            raise
        except nv.NVMLError as exc:  # e.g. GpuIsLost from nvmlDeviceGetCount itself
            self._forget_init(nv)
            raise _probe_error(nv, "NVML", exc) from exc

    def _module(self) -> types.ModuleType:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise ProbeError(MISSING_TOOL, f"pynvml (nvidia-ml-py) not importable: {exc}") from exc
        return self._nvml

    def _ensure_init(self, nv: Any) -> None:
        if self._initialised:
            return
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise _probe_error(nv, "nvmlInit", exc) from exc
        self._initialised = True

    def _forget_init(self, nv: Any) -> None:
        # The driver may have been reloaded or a handle gone stale: start from nvmlInit next run.
        if not self._initialised:
            return
        self._initialised = False
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()


def _probe_error(nv: Any, call: str, exc: BaseException) -> ProbeError:
    if isinstance(exc, nv.NVMLError_LibraryNotFound):
        return ProbeError(MISSING_TOOL, "NVML library not found (no NVIDIA driver?)")
    if isinstance(exc, nv.NVMLError_DriverNotLoaded):
        return ProbeError(NOT_FOUND, "NVIDIA driver not loaded")
    if isinstance(exc, nv.NVMLError_NoPermission):
        return ProbeError(PERMISSION_DENIED, f"{call}: {exc}")
    if isinstance(exc, nv.NVMLError_Timeout):
        return ProbeError(TIMEOUT, f"{call}: {exc}")
    return ProbeError(ERROR, f"{call}: {type(exc).__name__}: {exc}")


def _collect(nv: Any, give_up_at: float, links_seen_up: set[tuple[str, int]]) -> ProbeResult:
    result = ProbeResult()
    gpus: list[GpuIdentity] = []
    gpu_problems: list[str] = []
    nvlink_problems: list[str] = []
    count = nv.nvmlDeviceGetCount()
    for index in range(count):
        # NVML calls cannot be interrupted; between GPUs is the only place a slow run can stop.
        if time.monotonic() > give_up_at:
            raise ProbeError(TIMEOUT, f"NVML: past the deadline before GPU {index} of {count}")
        report = _read_gpu(nv, index, links_seen_up)
        result.samples.extend(report.samples)
        gpu_problems.extend(report.gpu_problems)
        nvlink_problems.extend(report.nvlink_problems)
        if report.identity is not None:
            gpus.append(report.identity)
    result.gpus = gpus
    result.problems = Problems(gpu=tuple(gpu_problems), nvlink=tuple(nvlink_problems))
    return result


@dataclass
class _GpuReport:
    identity: GpuIdentity | None
    samples: list[Sample] = field(default_factory=list)
    gpu_problems: list[str] = field(default_factory=list)
    nvlink_problems: list[str] = field(default_factory=list)


def _read_gpu(nv: Any, index: int, links_seen_up: set[tuple[str, int]]) -> _GpuReport:
    reader = _GpuReader(nv, index, links_seen_up)
    try:
        reader.read_identity()
        reader.read_health()
    except nv.NVMLError_GpuIsLost:
        # What was read before the loss is dropped: a lost GPU reports only that it is lost.
        return _GpuReport(
            identity=None,
            samples=[Sample(catalog.GPU_LOST, dict(reader.labels), 1.0)],
            gpu_problems=[f"{reader.who()}: lost (NVML_ERROR_GPU_IS_LOST)"],
        )
    reader.add(catalog.GPU_LOST, 0)
    identity = GpuIdentity(reader.labels["pci_bus_id"], str(index), reader.labels["uuid"])
    return _GpuReport(identity, reader.samples, reader.gpu_problems, reader.nvlink_problems)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _GpuReader:
    """Reads one GPU; every call goes through `call`, which decides what an NVMLError means."""

    def __init__(self, nv: Any, index: int, links_seen_up: set[tuple[str, int]]) -> None:
        self.nv = nv
        self.index = index
        self.links_seen_up = links_seen_up
        self.handle: Any = None
        self.labels = {"gpu": str(index), "uuid": "", "pci_bus_id": "", "source": SOURCE}
        self.samples: list[Sample] = []
        self.gpu_problems: list[str] = []
        self.nvlink_problems: list[str] = []

    @staticmethod
    def call(nv: Any, fn: str, *args: Any, skip: tuple[type[BaseException], ...] = ()) -> Any:
        """Call pynvml's `fn`. Returns None when the GPU or driver does not support it (or raises one
        of `skip`); lets GpuIsLost through; turns any other NVMLError into a ProbeError."""
        try:
            return getattr(nv, fn)(*args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, *skip):
            return None
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as exc:
            raise _probe_error(nv, fn, exc) from exc

    def dev(self, fn: str, *args: Any, skip: tuple[type[BaseException], ...] = ()) -> Any:
        return self.call(self.nv, fn, self.handle, *args, skip=skip)

    def const(self, name: str) -> Any:
        return getattr(self.nv, name)

    def add(self, family: Family, value: float, **extra: str) -> None:
        self.samples.append(Sample(family, {**self.labels, **extra}, float(value)))

    def who(self) -> str:
        return " ".join(x for x in (f"gpu {self.index}", self.labels["uuid"], self.labels["pci_bus_id"]) if x)

    def read_identity(self) -> None:
        self.handle = self.call(self.nv, "nvmlDeviceGetHandleByIndex", self.index)
        if self.handle is None:
            raise ProbeError(ERROR, f"nvmlDeviceGetHandleByIndex({self.index}): not supported")
        self.labels["uuid"] = _text(self.dev("nvmlDeviceGetUUID") or "")
        pci = self.dev("nvmlDeviceGetPciInfo")
        if pci is not None:
            self.labels["pci_bus_id"] = normalize_bus_id(_text(pci.busId))
        model = _text(self.dev("nvmlDeviceGetName") or "")
        self.add(catalog.GPU_INFO, 1, model=model)

    def read_health(self) -> None:
        self.read_ecc()
        self.read_remapped_rows()
        self.read_retired_pages()
        self.read_temperature()
        self.read_clock_events()
        self.read_nvlink()
        self.read_pcie_replays()
        self.read_violations()
        self.read_mig()
        self.read_recovery_action()

    def read_mig(self) -> None:
        """MIG mode (current, and whether a change waits for a GPU reset) and each MIG device's GPU and compute
        instance, profile and UUID. Nothing for a GPU without MIG (NotSupported)."""
        mode = self.dev("nvmlDeviceGetMigMode")
        if mode is None:
            return
        current, pending = mode
        enabled = self.const("NVML_DEVICE_MIG_ENABLE")
        self.add(catalog.GPU_MIG_MODE, 1 if current == enabled else 0)
        self.add(catalog.GPU_MIG_MODE_PENDING, 1 if pending != current else 0)
        if current != enabled:
            return
        nv = self.nv
        for slot in range(self.dev("nvmlDeviceGetMaxMigDeviceCount") or 0):
            mig = self.dev("nvmlDeviceGetMigDeviceHandleByIndex", slot, skip=(nv.NVMLError_NotFound,))
            if mig is None:
                continue  # an empty slot
            gpu_instance = self.call(nv, "nvmlDeviceGetGpuInstanceId", mig)
            compute_instance = self.call(nv, "nvmlDeviceGetComputeInstanceId", mig)
            name = _text(self.call(nv, "nvmlDeviceGetName", mig) or "")
            self.add(catalog.GPU_MIG_INSTANCE_INFO, 1, gpu_instance=str(gpu_instance),
                     compute_instance=str(compute_instance), profile=name.rpartition(" MIG ")[2] if " MIG " in name
                     else "", mig_uuid=_text(self.call(nv, "nvmlDeviceGetUUID", mig) or ""))

    def read_ecc(self) -> None:
        for type_label, type_const in _ECC_TYPES:
            for scope_label, scope_const in _ECC_SCOPES:
                count = self.dev("nvmlDeviceGetTotalEccErrors", self.const(type_const),
                                 self.const(scope_const))
                if count is None:
                    continue
                self.add(catalog.GPU_ECC_ERRORS, count, type=type_label, scope=scope_label)
                if type_label == "double_bit" and scope_label == "volatile" and count > 0:
                    self.gpu_problems.append(f"{self.who()}: {count} volatile double-bit ECC errors")

    def read_remapped_rows(self) -> None:
        rows = self.dev("nvmlDeviceGetRemappedRows")
        if rows is None:
            return
        correctable, uncorrectable, pending, failure = rows
        self.add(catalog.GPU_REMAPPED_ROWS, correctable, cause="correctable")
        self.add(catalog.GPU_REMAPPED_ROWS, uncorrectable, cause="uncorrectable")
        self.add(catalog.GPU_ROW_REMAP_PENDING, 1 if pending else 0)
        self.add(catalog.GPU_ROW_REMAP_FAILURE, 1 if failure else 0)
        if failure:
            self.gpu_problems.append(f"{self.who()}: row remap failure")

    def read_retired_pages(self) -> None:
        # Pre-Ampere only; Ampere and later remap rows instead and answer NotSupported.
        for cause_label, cause_const in _RETIREMENT_CAUSES:
            pages = self.dev("nvmlDeviceGetRetiredPages", self.const(cause_const))
            if pages is not None:
                self.add(catalog.GPU_RETIRED_PAGES, len(pages), cause=cause_label)
        pending = self.dev("nvmlDeviceGetRetiredPagesPendingStatus")
        if pending is not None:
            self.add(catalog.GPU_RETIRED_PAGES_PENDING, 1 if pending else 0)

    def read_temperature(self) -> None:
        celsius = self.dev("nvmlDeviceGetTemperature", self.const("NVML_TEMPERATURE_GPU"))
        if celsius is not None:
            self.add(catalog.GPU_TEMPERATURE_CELSIUS, celsius, sensor="gpu")

    def read_clock_events(self) -> None:
        # EventReasons replaced ThrottleReasons (driver 535); older drivers/bindings lack it.
        mask = None
        if hasattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons"):
            mask = self.dev("nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None and hasattr(self.nv, "nvmlDeviceGetCurrentClocksThrottleReasons"):
            mask = self.dev("nvmlDeviceGetCurrentClocksThrottleReasons")
        if mask is not None:
            self.samples.extend(clock_event_samples(int(mask), self.labels))

    def read_nvlink(self) -> None:
        no_such_link = (self.nv.NVMLError_InvalidArgument,)
        totals: dict[str, int] = {}
        links = down = 0
        for link in range(self.const("NVML_NVLINK_MAX_LINKS")):
            state = self.dev("nvmlDeviceGetNvLinkState", link, skip=no_such_link)
            if state is None:
                continue
            up = state == self.const("NVML_FEATURE_ENABLED")
            links += 1
            down += 0 if up else 1
            key = (self.labels["uuid"], link)
            if up:
                self.links_seen_up.add(key)
            elif key in self.links_seen_up:
                self.nvlink_problems.append(f"{self.who()}: NVLink link {link} down")
            for type_label, counter_const in _NVLINK_ERRORS:
                count = self.dev("nvmlDeviceGetNvLinkErrorCounter", link, self.const(counter_const),
                                 skip=no_such_link)
                if count is not None:
                    totals[type_label] = totals.get(type_label, 0) + count
        if links:  # counts per GPU, not a series per link: 2 series instead of 18 on an H100 (docs/scaling.md)
            self.add(catalog.GPU_NVLINK_LINKS, links)
            self.add(catalog.GPU_NVLINK_LINKS_DOWN, down)
        for type_label, _ in _NVLINK_ERRORS:
            if type_label in totals:
                self.add(catalog.GPU_NVLINK_ERRORS, totals[type_label], type=type_label)

    def read_pcie_replays(self) -> None:
        replays = self.dev("nvmlDeviceGetPcieReplayCounter")
        if replays is not None:
            self.add(catalog.GPU_PCIE_REPLAYS, replays)

    def read_violations(self) -> None:
        for reason_label, policy_const in _VIOLATIONS:
            status = self.dev("nvmlDeviceGetViolationStatus", self.const(policy_const))
            if status is not None:
                self.add(catalog.GPU_VIOLATION_SECONDS, status.violationTime / 1e9, reason=reason_label)

    def read_recovery_action(self) -> None:
        """The driver's recovery action field, each run: its code (action label named from pynvml), or
        supported=0 where the driver, the GPU or the installed pynvml has no such field (never a failure)."""
        code = self.recovery_field()
        self.add(catalog.GPU_RECOVERY_ACTION_FIELD_SUPPORTED, 0 if code is None else 1)
        if code is None:
            return
        names = {getattr(self.nv, const): label for label, const in _RECOVERY_ACTIONS if hasattr(self.nv, const)}
        action = names.get(code, f"unknown_{code}")
        self.add(catalog.GPU_RECOVERY_ACTION_FIELD, code, action=action)  # the node condition reads it (conditions.py)

    def recovery_field(self) -> int | None:
        field_id = getattr(self.nv, _RECOVERY_FIELD, None)
        if field_id is None or not hasattr(self.nv, "nvmlDeviceGetFieldValues"):
            return None
        values = self.dev("nvmlDeviceGetFieldValues", [field_id], skip=(self.nv.NVMLError_InvalidArgument,))
        if not values or values[0].nvmlReturn != self.const("NVML_SUCCESS"):
            return None  # a driver before the field answers NotSupported or InvalidArgument for it alone
        return int(values[0].value.uiVal)
