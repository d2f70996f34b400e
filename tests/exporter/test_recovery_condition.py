"""GpuhealthGPUHealthy and the driver's recovery action: the NVML field's NONE is the all-clear where the driver
has the field; an Xid 154 announcement stands for the boot where it does not. Real kmsg and NVML probes (fake NVML)."""

from __future__ import annotations

from pathlib import Path

import pynvml

from gpuhealth.exporter.collector import Expectations
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.nvml import P5_BUS_IDS, FakeGpu, FakeNvml, p5_fleet

ANNOUNCED = ("[ 5.0] NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
             "(GPU Reset Required)\n")
GPU0 = P5_BUS_IDS[0]  # 00000000:53:00.0, the GPU the line names


def healthy_fleet(action: int | None) -> list[FakeGpu]:
    gpus = p5_fleet()
    for gpu in gpus:
        gpu.lost, gpu.remapped_rows, gpu.ecc, gpu.nvlink_up = False, (0, 0, 0, 0), {}, [1] * len(gpu.nvlink_up)
    gpus[0].recovery_action = action
    return gpus


class Node:
    """A node's snapshot fed by the real kmsg probe (a kernel log file) and the real NVML probe (fake NVML)."""

    def __init__(self, log: Path, gpus: list[FakeGpu]) -> None:
        self.snapshot = Snapshot()
        self.gpus = gpus
        self.runners = [ProbeRunner(KmsgProbe.for_path(str(log), True), self.snapshot, 10, 2),  # type: ignore[arg-type]
                        ProbeRunner(NvmlProbe(FakeNvml(gpus)), self.snapshot, 10, 2)]

    def gpu_condition(self) -> tuple[str, str, str]:
        for runner in self.runners:
            runner.run_once()
        (cond,) = [c for c in evaluate(self.snapshot.view(), Expectations(gpus=8), 900)
                   if c.type == "GpuhealthGPUHealthy"]
        return cond.status, cond.reason, cond.message


def test_the_condition_clears_once_the_driver_reads_none_after_an_xid_154_where_the_field_is_supported(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(ANNOUNCED)
    node = Node(log, healthy_fleet(pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET))
    assert node.gpu_condition() == ("False", "GPURecoveryAction", f"driver asks gpu_reset_required for GPU {GPU0}")
    node.gpus[0].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NONE  # the reset is done
    assert node.gpu_condition()[:2] == ("True", "GPUsHealthy")  # the same boot, the Xid 154 line still read


def test_the_field_alone_turns_the_condition_false_with_the_action_it_names(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    node = Node(log, healthy_fleet(pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT))
    assert node.gpu_condition() == ("False", "GPURecoveryAction", f"driver asks system_reboot for GPU {GPU0}")


def test_without_the_field_an_xid_154_announcement_keeps_the_condition_false_for_the_boot(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(ANNOUNCED)
    node = Node(log, healthy_fleet(None))
    assert node.gpu_condition() == ("False", "GPURecoveryAction", f"driver asks gpu_reset_required for GPU {GPU0}")
    assert node.gpu_condition()[0] == "False"  # read again: still announced, nothing says it is done
