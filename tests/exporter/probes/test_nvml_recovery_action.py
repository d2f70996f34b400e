"""The driver's GPU recovery action (NVML field 230), read by the NVML probe each run, with the fake NVML."""

from __future__ import annotations

import pynvml
import pytest

from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.samples import ProbeResult, Sample
from tests.fakes.nvml import FakeGpu, FakeNvml, p5_fleet

FIELD = "gpuhealth_gpu_recovery_action_field"
SUPPORTED = "gpuhealth_gpu_recovery_action_field_supported"
# Each code of the installed pynvml and the action label the probe gives it.
CODES = [
    (pynvml.NVML_GPU_RECOVERY_ACTION_NONE, "none"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "gpu_reset_required"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, "node_reboot_required"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, "drain_p2p"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET, "drain_and_reset"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN, "recover_imex_domain"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_BUS_RESET, "bus_reset"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT, "system_reboot"),
]


def of(result: ProbeResult, name: str, gpu: int = 0) -> list[Sample]:
    return [s for s in result.samples if s.family.name == name and s.labels["gpu"] == str(gpu)]


def fleet(action: int | None) -> list[FakeGpu]:
    gpus = p5_fleet()[:2]
    for gpu in gpus:
        gpu.lost, gpu.remapped_rows, gpu.ecc = False, (0, 0, 0, 0), {}
    gpus[0].recovery_action = action
    return gpus


@pytest.mark.parametrize(("code", "action"), CODES)
def test_each_recovery_action_code_is_exported_with_its_action_label(
    code: int, action: str
) -> None:
    result = NvmlProbe(FakeNvml(fleet(code))).collect(deadline=10)
    assert [(s.labels["action"], s.value) for s in of(result, FIELD)] == [(action, float(code))]
    assert [s.value for s in of(result, SUPPORTED)] == [1.0]
    assert result.problems.gpu == ()  # the node condition reads the field itself (test_recovery_condition.py)


def test_a_code_newer_than_the_installed_pynvml_is_exported_with_an_unknown_label() -> None:
    result = NvmlProbe(FakeNvml(fleet(42))).collect(deadline=10)
    assert [(s.labels["action"], s.value) for s in of(result, FIELD)] == [("unknown_42", 42.0)]


def test_a_driver_without_the_field_is_reported_unsupported_and_the_probe_still_succeeds() -> None:
    probe = NvmlProbe(FakeNvml(fleet(None)))
    result = probe.collect(deadline=10)
    assert of(result, FIELD) == []
    assert [s.value for s in of(result, SUPPORTED)] == [0.0]
    assert [s.value for s in of(result, SUPPORTED, gpu=1)] == [1.0]  # the other GPU's driver answers
    assert of(result, "gpuhealth_gpu_temperature_celsius")  # the rest of the GPU was read


def test_bindings_without_the_field_constant_report_unsupported_and_never_call_for_it() -> None:
    nv = FakeNvml(fleet(1))
    del nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    result = NvmlProbe(nv).collect(deadline=10)
    assert of(result, FIELD) == []
    assert [s.value for s in of(result, SUPPORTED)] == [0.0]
    assert all(fn != "nvmlDeviceGetFieldValues" for _, fn in nv.calls)


def test_the_field_is_read_every_run_and_follows_the_driver_back_to_none() -> None:
    gpus = fleet(pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET)
    probe = NvmlProbe(FakeNvml(gpus))
    first = probe.collect(deadline=10)
    gpus[0].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NONE  # the reset is done
    second = probe.collect(deadline=10)
    assert [s.value for s in of(first, FIELD)] == [1.0]
    assert [(s.labels["action"], s.value) for s in of(second, FIELD)] == [("none", 0.0)]


def test_a_field_read_that_fails_with_another_nvml_error_fails_the_probe_as_any_call_does() -> None:
    gpus = fleet(0)
    gpus[0].errors["nvmlDeviceGetFieldValues"] = pynvml.NVMLError_Unknown
    with pytest.raises(Exception, match="nvmlDeviceGetFieldValues"):
        NvmlProbe(FakeNvml(gpus)).collect(deadline=10)
