"""What a probe hands to the exporter: metric samples, the GPUs it saw, and typed facts for the node conditions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuhealth.exporter.catalog import Family


@dataclass(frozen=True)
class Sample:
    """One value of a metric family, by its handle in gpuhealth.exporter.catalog."""

    family: Family
    labels: dict[str, str]
    value: float

    @property
    def name(self) -> str:
        """The family's name (without `_total`)."""
        return self.family.name


@dataclass(frozen=True)
class GpuIdentity:
    """A GPU as one source knows it. pci_bus_id is normalised by pci.normalize_bus_id."""

    pci_bus_id: str
    index: str = ""
    uuid: str = ""


@dataclass(frozen=True)
class Problems:
    """Faults a probe sees in the hardware's current state, in words (nvml, dcgm, diag, dcgm_exporter).

    They make the node conditions False while the probe keeps reporting them; the words are the
    conditions' messages.
    """

    gpu: tuple[str, ...] = ()  # for GpuhealthGPUHealthy
    nvlink: tuple[str, ...] = ()  # for GpuhealthNVLinkHealthy


@dataclass(frozen=True)
class KernelFault:
    """One fault the kernel log reported, as the kmsg probe keeps it for the node conditions.

    The fields a kind has: xid (xid, pci_bus_id, gpu_instance, fatal, decoded), sxid (sxid, pci_bus_id, fatal),
    event (event, device). The others are empty.
    """

    time: float  # unix time it happened (the kernel's clock on /dev/kmsg, the time it was read for a file)
    kind: str  # "xid" | "sxid" | "event"
    condition: str  # the node condition its pattern sets (`condition:` in kernel_patterns.yaml); "" for none
    xid: str = ""
    sxid: str = ""
    event: str = ""
    pci_bus_id: str = ""  # the GPU (xid) or the NVSwitch (sxid)
    device: str = ""  # the device an event line names, if it names one
    gpu_instance: str = ""  # the MIG GPU instance an Xid line names
    fatal: bool | None = None  # what the line says (SXids, Xid 144-150); None where it says nothing
    decoded: str = ""  # Xid 74 and 144-150: the action their registers decode to (gpuhealth/contract/xid_decode.py)


@dataclass(frozen=True)
class RecoveryAction:
    """The driver's latest recovery action for a GPU (Xid 154)."""

    pci_bus_id: str
    code: int  # 0 none, 1 gpu_reset_required, 2 node_reboot_required, 3 drain_p2p, 4 drain_and_reset
    action: str
    announced_at: float  # unix time


@dataclass(frozen=True)
class KernelFacts:
    """What the kmsg probe knows beyond its counters: GPU identities, recent faults, recovery actions."""

    gpu_uuids: Mapping[str, str] = field(default_factory=dict)  # PCI bus id -> GPU UUID, from NVRM's lines
    recent: tuple[KernelFault, ...] = ()  # the latest faults, oldest first
    recovery: tuple[RecoveryAction, ...] = ()  # one per GPU that announced one this boot


@dataclass
class ProbeResult:
    samples: list[Sample] = field(default_factory=list)
    # GPUs this probe can vouch for; the highest-priority successful source gives gpus_visible.
    gpus: list[GpuIdentity] | None = None
    # What the node-condition evaluator reads besides the samples.
    problems: Problems = field(default_factory=Problems)
    kernel: KernelFacts | None = None  # the kmsg probe's
    # A probe may ask to run again sooner than its interval (a failed diagnostic is re-checked soon,
    # so a fix is seen quickly); None keeps the interval.
    run_again_after: float | None = None

    def add(self, family: Family, value: float, **labels: str) -> None:
        self.samples.append(Sample(family, labels, float(value)))
