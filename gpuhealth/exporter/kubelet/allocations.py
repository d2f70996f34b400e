"""Which container holds which GPU, from the kubelet's List answer, and the GPU each device id names.

Only device-plugin resources count (DRA devices are the remediator's own business, through ResourceClaims):
`nvidia.com/gpu`, `nvidia.com/mig-<profile>` (the mixed MIG strategy) and their `.shared` renames (time-slicing),
and any other `nvidia.com/` resource whose device ids are GPU ids: the device plugin's sharing config may rename a
shared resource freely (`rename: gpu-0`, an MPS `nvidia.com/gpu-24gb`), so the name alone cannot say, and a GPU
dropped for its name would read as "no pod holds it". Other `nvidia.com/` resources are NICs (the network
operator's RDMA and SR-IOV plugins: PCI addresses or plugin-made ids), not GPUs.

NVIDIA's device plugin names a device by its UUID (`GPU-...`; a MIG device `MIG-...`, or `MIG-GPU-<uuid>/<gi>/<ci>`
before driver R470), or by its index (`0`; a MIG device `0:1`) with `--device-id-strategy=index`; a time-sliced
replica carries `::<n>`. The GPU a device id names is found in what the exporter already knows about its GPUs
(NVML, dcgm-exporter, the kernel log's `GPU at PCI:...` lines); a MIG device by its parent, from NVML's
gpuhealth_gpu_mig_instance_info. A device whose GPU is not known gets empty gpu and pci_bus_id labels, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuhealth.exporter.catalog import GPU_MIG_INSTANCE_INFO, GPU_POD_INFO
from gpuhealth.exporter.kubelet import api_pb2
from gpuhealth.exporter.samples import GpuIdentity, Sample

DRA_GPU_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver for GPUs (and their MIG devices)
_GPU_RESOURCE = re.compile(r"^nvidia\.com/(?:gpu|mig-[0-9a-z.+-]+?)(?:\.shared)?$")
# The ids only NVIDIA's GPU device plugin makes: a GPU or MIG UUID (`::<n>` on a shared replica), or an index with
# a replica suffix (a renamed resource is always a shared one, so an index id there carries `::<n>`).
_GPU_DEVICE_ID = re.compile(r"^(?:(?:GPU|MIG)-[0-9A-Za-z/-]+(?:::\d+)?|\d+(?::\d+)?::\d+)$")
_REPLICA = re.compile(r"::\d+$")
_MIG_BY_INDEX = re.compile(r"^(\d+):\d+$")
_OLD_MIG = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/\d+/\d+$")


def is_gpu_resource(name: str, device_ids: Iterable[str] = ()) -> bool:
    """A GPU resource by its name, or a renamed one (an unknown `nvidia.com/` name) by its device ids."""
    if _GPU_RESOURCE.match(name):
        return True
    return name.startswith("nvidia.com/") and any(_GPU_DEVICE_ID.match(d.strip()) for d in device_ids)


@dataclass(frozen=True)
class Allocation:
    """One device-plugin GPU device that one container holds."""

    resource: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared
    device: str  # the device plugin's id, as the kubelet reports it
    namespace: str
    pod: str
    container: str

    @property
    def is_mig(self) -> bool:
        return _device_id(self.device).startswith("MIG-")


def gpu_allocations(response: api_pb2.ListPodResourcesResponse) -> tuple[Allocation, ...]:
    """Every GPU device a container holds, once each, in the kubelet's order."""
    found: dict[Allocation, None] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, devices.device_ids):
                    continue
                for device in devices.device_ids:
                    found[Allocation(devices.resource_name, device, pod.namespace, pod.name, container.name)] = None
    return tuple(found)


def advertised_gpus(allocatable: api_pb2.AllocatableResourcesResponse) -> tuple[str, ...]:
    """The GPU device ids the device plugins advertise to the kubelet (GetAllocatableResources); none on a node
    whose GPUs a DRA driver publishes: there List cannot say which pod holds a GPU, so the mapping is unknown."""
    return tuple(d for devices in allocatable.devices if is_gpu_resource(devices.resource_name, devices.device_ids)
                 for d in devices.device_ids)


def dra_gpu_holders(response: api_pb2.ListPodResourcesResponse) -> tuple[str, ...]:
    """The pods (namespace/name) holding a GPU through a DRA claim. A node may run both (the DRA driver beside the
    device plugin while a cluster moves): List names the claim's device by its DRA name, not a GPU the exporter
    knows, so while any pod holds one the mapping cannot say which pods hold which GPU."""
    return tuple(dict.fromkeys(
        f"{pod.namespace}/{pod.name}" for pod in response.pod_resources for container in pod.containers
        for claim in container.dynamic_resources for resource in claim.claim_resources
        if resource.driver_name == DRA_GPU_DRIVER))


def mig_parents(samples: Iterable[Sample]) -> dict[str, GpuIdentity]:
    """MIG device UUID -> its GPU, from NVML's gpuhealth_gpu_mig_instance_info samples."""
    return {s.labels["mig_uuid"]: GpuIdentity(s.labels["pci_bus_id"], s.labels["gpu"], s.labels["uuid"])
            for s in samples if s.family is GPU_MIG_INSTANCE_INFO and s.labels.get("mig_uuid")}


def _device_id(device: str) -> str:
    return _REPLICA.sub("", device.strip())


def resolve(device: str, gpus: Iterable[GpuIdentity], migs: Mapping[str, GpuIdentity]) -> GpuIdentity | None:
    """The GPU a device-plugin id names (a MIG device's parent), or None when the exporter does not know it."""
    known = [g for g in gpus if g.pci_bus_id]
    ref = _device_id(device)
    if ref.startswith("GPU-"):
        return next((g for g in known if g.uuid == ref), None)
    old = _OLD_MIG.match(ref)
    if old:
        return next((g for g in known if g.uuid == old.group(1)), None)
    if ref.startswith("MIG-"):
        parent = migs.get(ref)
        return next((g for g in known if g.pci_bus_id == parent.pci_bus_id), parent) if parent else None
    by_index = _MIG_BY_INDEX.match(ref)
    index = by_index.group(1) if by_index else ref if ref.isdigit() else None
    return next((g for g in known if g.index == index), None) if index is not None else None


def info_samples(allocations: Iterable[Allocation], gpus: Iterable[GpuIdentity],
                 migs: Mapping[str, GpuIdentity]) -> list[Sample]:
    """gpuhealth_gpu_pod_info, one sample per allocation: the GPU's labels (empty where it is not known)."""
    known = list(gpus)
    out: list[Sample] = []
    for a in allocations:
        gpu = resolve(a.device, known, migs)
        ref = _device_id(a.device)
        identity = gpu or GpuIdentity("", "", ref if ref.startswith("GPU-") else "")
        out.append(Sample(GPU_POD_INFO, {
            "gpu": identity.index if gpu else "", "uuid": identity.uuid, "pci_bus_id": identity.pci_bus_id,
            "resource": a.resource, "device": a.device,
            "pod_namespace": a.namespace, "pod_name": a.pod, "container_name": a.container,
        }, 1.0))
    return out
