"""Clock-event (throttle) reason bits, shared by the NVML and DCGM probes.

NVML's nvmlClocksEventReasons / DCGM_FI_DEV_CLOCKS_EVENT_REASONS use the same bitmask.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuhealth.exporter.catalog import GPU_CLOCK_EVENT_ACTIVE, GPU_CLOCK_EVENT_REASONS
from gpuhealth.exporter.samples import Sample

CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


def clock_event_samples(bitmask: int, labels: Mapping[str, str]) -> list[Sample]:
    """The raw bitmask plus one 0/1 `active` sample per known reason.

    `labels` are the GPU labels (gpu, uuid, pci_bus_id, source); every reason is emitted, active or
    not, so a reason that clears goes to 0 instead of vanishing.
    """
    base = dict(labels)
    samples = [Sample(GPU_CLOCK_EVENT_REASONS, base, float(bitmask))]
    for reason, bit in CLOCK_EVENT_BITS.items():
        samples.append(Sample(GPU_CLOCK_EVENT_ACTIVE, {**base, "reason": reason}, 1.0 if bitmask & bit else 0.0))
    return samples
