"""NvmlProbe against pynvml's real error types: fake GPUs, real pynvml where there is no driver."""

from __future__ import annotations

import ctypes
import sys
import threading

import pynvml
import pytest

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.probes.base import ERROR, MISSING_TOOL, NOT_FOUND, PERMISSION_DENIED, TIMEOUT, ProbeError
from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.probes.registry import BY_NAME
from gpuhealth.exporter.samples import GpuIdentity, ProbeResult, Sample
from tests.fakes.nvml import P5_BUS_IDS, FakeGpu, FakeMig, FakeNvml, p5_fleet, uuid_of


def gpu_labels(index: int) -> dict[str, str]:
    return {"gpu": str(index), "uuid": uuid_of(index), "pci_bus_id": P5_BUS_IDS[index], "source": "nvml"}


def samples(result: ProbeResult, name: str, gpu: int | None = None) -> list[Sample]:
    return [s for s in result.samples if s.name == name and (gpu is None or s.labels["gpu"] == str(gpu))]


def values(result: ProbeResult, name: str, gpu: int, key: str) -> dict[str, float]:
    return {s.labels[key]: s.value for s in samples(result, name, gpu)}


def value(result: ProbeResult, name: str, gpu: int) -> float:
    (sample,) = samples(result, name, gpu)
    return sample.value


def collect(gpus: list[FakeGpu]) -> ProbeResult:
    return NvmlProbe(FakeNvml(gpus)).collect(deadline=10)


@pytest.fixture
def p5() -> ProbeResult:
    return collect(p5_fleet())


def libnvidia_ml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# --- what the GPUs say ---

def test_visible_gpus_are_those_that_answered_not_the_lost_one(p5: ProbeResult) -> None:
    assert p5.gpus == [GpuIdentity(P5_BUS_IDS[i], str(i), uuid_of(i)) for i in (0, 1, 2, 3, 4, 6, 7)]


def test_gpu_info_carries_index_uuid_bus_id_source_and_model(p5: ProbeResult) -> None:
    (info,) = samples(p5, "gpuhealth_gpu_info", 0)
    assert info == Sample(FAMILIES["gpuhealth_gpu_info"], {**gpu_labels(0), "model": "NVIDIA H100 80GB HBM3"}, 1.0)


def test_kernel_style_bus_id_is_normalised() -> None:
    result = collect([FakeGpu(uuid_of(0), "0000:9b:00.0")])
    assert result.gpus == [GpuIdentity("00000000:9B:00.0", "0", uuid_of(0))]


def test_bytes_from_older_bindings_become_text() -> None:
    result = collect([FakeGpu(uuid_of(0), "00000000:53:00.0", old_bindings=True)])
    assert result.gpus == [GpuIdentity("00000000:53:00.0", "0", uuid_of(0))]
    assert samples(result, "gpuhealth_gpu_info")[0].labels["model"] == "NVIDIA H100 80GB HBM3"


def test_ecc_errors_by_type_and_scope(p5: ProbeResult) -> None:
    ecc = {(s.labels["type"], s.labels["scope"]): s.value for s in samples(p5, "gpuhealth_gpu_ecc_errors", 2)}
    assert ecc == {
        ("double_bit", "volatile"): 2,
        ("double_bit", "aggregate"): 9,
        ("single_bit", "volatile"): 0,
        ("single_bit", "aggregate"): 4,
    }


def test_remapped_rows_pending_and_failure(p5: ProbeResult) -> None:
    assert values(p5, "gpuhealth_gpu_remapped_rows", 2, "cause") == {"correctable": 1, "uncorrectable": 7}
    assert value(p5, "gpuhealth_gpu_row_remap_failure", 2) == 1
    assert value(p5, "gpuhealth_gpu_row_remap_pending", 2) == 0
    assert value(p5, "gpuhealth_gpu_row_remap_failure", 0) == 0


def test_gpu_problems_name_remap_failure_double_bit_ecc_and_lost_gpu(p5: ProbeResult) -> None:
    assert list(p5.problems.gpu) == [
        f"gpu 2 {uuid_of(2)} {P5_BUS_IDS[2]}: 2 volatile double-bit ECC errors",
        f"gpu 2 {uuid_of(2)} {P5_BUS_IDS[2]}: row remap failure",
        "gpu 5: lost (NVML_ERROR_GPU_IS_LOST)",
    ]


def test_lost_gpu_reports_only_that_it_is_lost(p5: ProbeResult) -> None:
    lost = [s for s in p5.samples if s.labels.get("gpu") == "5"]
    unknown = {"gpu": "5", "uuid": "", "pci_bus_id": "", "source": "nvml"}
    assert lost == [Sample(FAMILIES["gpuhealth_gpu_lost"], unknown, 1)]
    assert value(p5, "gpuhealth_gpu_lost", 0) == 0


def test_gpu_lost_mid_read_drops_its_partial_readings_but_keeps_its_identity() -> None:
    gpus = p5_fleet()[:2]
    gpus[1].lost, gpus[1].lost_after = True, "nvmlDeviceGetTemperature"
    result = collect(gpus)
    gpu1 = [s for s in result.samples if s.labels["gpu"] == "1"]
    assert gpu1 == [Sample(FAMILIES["gpuhealth_gpu_lost"], gpu_labels(1), 1)]
    assert result.gpus == [GpuIdentity(P5_BUS_IDS[0], "0", uuid_of(0))]
    assert list(result.problems.gpu) == [
        f"gpu 1 {uuid_of(1)} {P5_BUS_IDS[1]}: lost (NVML_ERROR_GPU_IS_LOST)"
    ]


def test_temperature_of_the_gpu_die(p5: ProbeResult) -> None:
    (temp,) = samples(p5, "gpuhealth_gpu_temperature_celsius", 3)
    assert temp == Sample(FAMILIES["gpuhealth_gpu_temperature_celsius"], {**gpu_labels(3), "sensor": "gpu"}, 91)


def test_clock_event_bitmask_and_active_reasons(p5: ProbeResult) -> None:
    assert value(p5, "gpuhealth_gpu_clock_event_reasons", 3) == 0x48
    active = values(p5, "gpuhealth_gpu_clock_event_active", 3, "reason")
    assert {r for r, v in active.items() if v == 1} == {"hw_slowdown", "hw_thermal_slowdown"}
    assert active["sw_power_cap"] == 0


def test_clock_events_fall_back_to_throttle_reasons_on_older_drivers() -> None:
    gpu = FakeGpu(uuid_of(0), P5_BUS_IDS[0], clock_events=0x4)
    gpu.errors["nvmlDeviceGetCurrentClocksEventReasons"] = pynvml.NVMLError_FunctionNotFound
    result = collect([gpu])
    assert value(result, "gpuhealth_gpu_clock_event_reasons", 0) == 0x4


def test_nvlink_links_are_counted_per_gpu_and_a_link_going_down_is_a_problem_naming_it() -> None:
    fleet = p5_fleet()
    fleet[6].nvlink_up[17] = 1
    probe = NvmlProbe(FakeNvml(fleet))
    result = probe.collect(deadline=10)
    assert list(result.problems.nvlink) == []
    links = (value(result, "gpuhealth_gpu_nvlink_links", 6), value(result, "gpuhealth_gpu_nvlink_links_down", 6))
    assert links == (18, 0)
    fleet[6].nvlink_up[17] = 0
    fleet[6].nvlink_up[3] = 0
    result = probe.collect(deadline=10)
    assert value(result, "gpuhealth_gpu_nvlink_links_down", 6) == 2
    assert value(result, "gpuhealth_gpu_nvlink_links_down", 4) == 0
    assert list(result.problems.nvlink) == [f"gpu 6 {uuid_of(6)} {P5_BUS_IDS[6]}: NVLink link {link} down"
                                               for link in (3, 17)]


def test_a_link_down_since_start_is_exported_but_not_a_condition_problem(p5: ProbeResult) -> None:
    # A PCIe GPU without an NVLink bridge reports its unused links as down from the start.
    assert value(p5, "gpuhealth_gpu_nvlink_links_down", 6) == 1
    assert list(p5.problems.nvlink) == []


def test_nvlink_errors_are_summed_over_links(p5: ProbeResult) -> None:
    errors = values(p5, "gpuhealth_gpu_nvlink_errors", 6, "type")
    assert errors == {"replay": 42, "recovery": 3, "crc_flit": 5, "crc_data": 0}


def test_gpu_without_nvlink_has_no_link_samples() -> None:
    result = collect([FakeGpu(uuid_of(0), P5_BUS_IDS[0], name="NVIDIA A10G", nvlink_up=[])])
    assert samples(result, "gpuhealth_gpu_nvlink_links") == samples(result, "gpuhealth_gpu_nvlink_links_down") == []
    assert samples(result, "gpuhealth_gpu_nvlink_errors") == []
    assert list(result.problems.nvlink) == []


def test_pcie_replays_and_violation_seconds(p5: ProbeResult) -> None:
    assert value(p5, "gpuhealth_gpu_pcie_replays", 7) == 12
    assert values(p5, "gpuhealth_gpu_violation_seconds", 3, "reason") == {"thermal": 250.0, "power": 1.5}


def test_retired_pages_where_the_gpu_supports_them() -> None:
    dbe, sbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, \
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    gpu = FakeGpu(uuid_of(0), P5_BUS_IDS[0], name="Tesla V100-SXM2-32GB",
                  retired_pages={dbe: [0x1000, 0x2000], sbe: [0x3000, 0x4000, 0x5000]})
    result = collect([gpu])
    assert values(result, "gpuhealth_gpu_retired_pages", 0, "cause") == {"double_bit": 2, "single_bit": 3}
    assert value(result, "gpuhealth_gpu_retired_pages_pending", 0) == 0


def test_h100_has_no_retired_page_samples(p5: ProbeResult) -> None:
    assert samples(p5, "gpuhealth_gpu_retired_pages") == []
    assert samples(p5, "gpuhealth_gpu_retired_pages_pending") == []


def test_not_supported_call_skips_only_that_metric() -> None:
    gpu = FakeGpu(uuid_of(0), P5_BUS_IDS[0])
    gpu.errors["nvmlDeviceGetPcieReplayCounter"] = pynvml.NVMLError_NotSupported
    gpu.errors["nvmlDeviceGetTotalEccErrors"] = pynvml.NVMLError_NotSupported
    result = collect([gpu])
    assert samples(result, "gpuhealth_gpu_pcie_replays") == []
    assert samples(result, "gpuhealth_gpu_ecc_errors") == []
    assert value(result, "gpuhealth_gpu_temperature_celsius", 0) == 34
    assert result.gpus == [GpuIdentity(P5_BUS_IDS[0], "0", uuid_of(0))]


def test_every_sample_is_a_catalog_family_with_its_labels(p5: ProbeResult) -> None:
    mig = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    extra = collect([FakeGpu(uuid_of(0), P5_BUS_IDS[0], retired_pages={}, mig_mode=mig,
                             mig_devices=[FakeMig(0, 1, 0, "7g.80gb", "MIG-0")])])
    names = set()
    for sample in p5.samples + extra.samples:
        assert sample.name in FAMILIES, sample.name
        assert set(sample.labels) == set(FAMILIES[sample.name].labels), sample
        names.add(sample.name)
    assert names == {family.name for family in BY_NAME["nvml"].families}


# --- failing closed ---

def test_unexpected_nvml_error_fails_the_whole_probe() -> None:
    gpus = p5_fleet()
    gpus[4].errors["nvmlDeviceGetTemperature"] = pynvml.NVMLError_Unknown
    with pytest.raises(ProbeError) as err:
        collect(gpus)
    assert err.value.reason == ERROR
    assert "nvmlDeviceGetTemperature" in err.value.message


def test_no_permission_is_permission_denied() -> None:
    gpu = FakeGpu(uuid_of(0), P5_BUS_IDS[0])
    gpu.errors["nvmlDeviceGetRemappedRows"] = pynvml.NVMLError_NoPermission
    with pytest.raises(ProbeError) as err:
        collect([gpu])
    assert err.value.reason == PERMISSION_DENIED


def test_driver_not_loaded_is_not_found() -> None:
    with pytest.raises(ProbeError) as err:
        NvmlProbe(FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded)).collect(10)
    assert err.value.reason == NOT_FOUND


@pytest.mark.skipif(libnvidia_ml_present(), reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_driver_is_missing_tool() -> None:
    with pytest.raises(ProbeError) as err:
        NvmlProbe().collect(10)
    assert err.value.reason == MISSING_TOOL
    assert err.value.message == "NVML library not found (no NVIDIA driver?)"


@pytest.mark.skipif(not libnvidia_ml_present(), reason="needs an NVIDIA driver (a GPU machine)")
def test_real_nvml_on_a_gpu_machine_reads_every_gpu_within_the_catalog() -> None:
    result = NvmlProbe().collect(30)
    assert result.gpus, "NVML answered but reported no GPUs"
    for sample in result.samples:
        assert set(sample.labels) == set(FAMILIES[sample.name].labels), sample


def test_missing_pynvml_module_is_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ProbeError) as err:
        NvmlProbe().collect(10)
    assert err.value.reason == MISSING_TOOL


# --- NVML's lifecycle ---

def test_nvml_is_initialised_once_across_runs() -> None:
    nvml = FakeNvml(p5_fleet())
    probe = NvmlProbe(nvml)
    probe.collect(10)
    probe.collect(10)
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 0)


def test_failed_run_shuts_nvml_down_and_the_next_run_initialises_again() -> None:
    gpus = p5_fleet()
    gpus[0].errors["nvmlDeviceGetPcieReplayCounter"] = pynvml.NVMLError_Unknown
    nvml = FakeNvml(gpus)
    probe = NvmlProbe(nvml)
    with pytest.raises(ProbeError):
        probe.collect(10)
    gpus[0].errors.clear()
    result = probe.collect(10)
    assert (nvml.init_calls, nvml.shutdown_calls) == (2, 1)
    assert result.gpus is not None and len(result.gpus) == 7


def test_error_counting_gpus_fails_the_run_and_nvml_is_initialised_again() -> None:
    nvml = FakeNvml(p5_fleet())
    nvml.count_error = pynvml.NVMLError_GpuIsLost
    probe = NvmlProbe(nvml)
    with pytest.raises(ProbeError) as err:
        probe.collect(10)
    assert err.value.reason == ERROR
    nvml.count_error = None
    probe.collect(10)
    assert (nvml.init_calls, nvml.shutdown_calls) == (2, 1)


def test_failed_init_is_retried_on_the_next_run() -> None:
    nvml = FakeNvml(p5_fleet(), init_error=pynvml.NVMLError_Unknown)
    probe = NvmlProbe(nvml)
    with pytest.raises(ProbeError):
        probe.collect(10)
    nvml.init_error = None
    assert probe.collect(10).gpus is not None
    assert nvml.init_calls == 2


# --- time: a hung NVML call is the exporter's to abandon; the probe adds no waits of its own ---

def test_slow_run_stops_between_gpus_once_past_the_deadline() -> None:
    gpus = p5_fleet()
    gpus[0].blocker = threading.Event()
    threading.Timer(0.3, gpus[0].blocker.set).start()
    nvml = FakeNvml(gpus)
    with pytest.raises(ProbeError) as err:
        NvmlProbe(nvml).collect(deadline=0.1)
    assert err.value.reason == TIMEOUT
    assert {handle for handle, _ in nvml.calls} == {0}


def test_run_blocked_inside_nvml_does_not_block_another_run_of_the_probe() -> None:
    gpus = p5_fleet()
    probe = NvmlProbe(FakeNvml(gpus))
    probe.collect(10)
    release = gpus[0].blocker = threading.Event()
    stuck = threading.Thread(target=probe.collect, args=(10,), daemon=True)
    stuck.start()
    try:
        assert gpus[0].blocked.wait(timeout=5)
        result = probe.collect(10)
        assert stuck.is_alive()
        assert result.gpus is not None and len(result.gpus) == 7
    finally:
        release.set()
        stuck.join(timeout=5)


def test_mig_mode_and_each_mig_device_are_reported_and_a_pending_change_is_a_finding() -> None:
    gpus = p5_fleet()[:3]
    gpus[0].mig_mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    gpus[0].mig_devices = [FakeMig(0, 1, 0, "3g.40gb", "MIG-11111111-2222-3333-4444-555555555555"),
                           FakeMig(2, 5, 0, "1g.10gb", "MIG-66666666-7777-8888-9999-000000000000")]  # slot 1 empty
    gpus[1].mig_mode = (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE)  # waits for a reset
    result = collect(gpus)  # gpus[2]: mig_mode None, a GPU without MIG
    assert value(result, "gpuhealth_gpu_mig_mode", 0) == 1 and value(result, "gpuhealth_gpu_mig_mode_pending", 0) == 0
    assert value(result, "gpuhealth_gpu_mig_mode", 1) == 0 and value(result, "gpuhealth_gpu_mig_mode_pending", 1) == 1
    assert not samples(result, "gpuhealth_gpu_mig_mode", 2)
    instances = [{k: s.labels[k] for k in ("gpu_instance", "compute_instance", "profile", "mig_uuid")}
                 for s in samples(result, "gpuhealth_gpu_mig_instance_info", 0)]
    assert instances == [
        {"gpu_instance": "1", "compute_instance": "0", "profile": "3g.40gb",
         "mig_uuid": "MIG-11111111-2222-3333-4444-555555555555"},
        {"gpu_instance": "5", "compute_instance": "0", "profile": "1g.10gb",
         "mig_uuid": "MIG-66666666-7777-8888-9999-000000000000"}]
    assert not samples(result, "gpuhealth_gpu_mig_instance_info", 1)  # MIG not on yet: no MIG devices
