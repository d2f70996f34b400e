"""What a probe hands to the exporter: metric samples and the GPUs it saw."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    """One value of a metric family declared in exporter.catalog (name without `_total`)."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class GpuIdentity:
    """A GPU as one source knows it. pci_bus_id is normalised by pci.normalize_bus_id."""

    pci_bus_id: str
    index: str = ""
    uuid: str = ""


@dataclass
class ProbeResult:
    samples: list[Sample] = field(default_factory=list)
    # GPUs this probe can vouch for; the highest-priority successful source gives gpus_visible.
    gpus: list[GpuIdentity] | None = None
    # Facts the node-condition evaluator reads (e.g. recent fatal Xids); free-form per probe.
    facts: dict[str, object] = field(default_factory=dict)
    # A probe may ask to run again sooner than its interval (a failed diagnostic is re-checked soon,
    # so a fix is seen quickly); None keeps the interval.
    run_again_after: float | None = None

    def add(self, name: str, value: float, **labels: str) -> None:
        self.samples.append(Sample(name, labels, float(value)))
