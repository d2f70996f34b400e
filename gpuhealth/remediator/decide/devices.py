"""A node's GPUs as a DRA driver publishes them (ResourceSlices), and which pods hold each (ResourceClaims).

NVIDIA's DRA driver (`gpu.nvidia.com`) publishes one pool per node, named after the node, with a device per
GPU (`gpu-<index>`: attributes `type: gpu`, `uuid`, `resource.kubernetes.io/pciBusID`) and, on a MIG GPU, a
device per MIG instance (`type: mig`, `uuid`, `parentUUID`, `profile`). See tests/fixtures/dra for recorded
slices. An alert names its GPU by PCI bus id (the kernel log's `0000:9b:00`, NVML's `00000000:9B:00.0`), by
UUID, or by index; `NodeDevices.find` accepts each.

A reset takes every MIG instance of the GPU with it, so quarantining a GPU for a reset quarantines its whole
family: the GPU's device and the devices whose parent it is. A fault on one MIG instance that asks for no reset
(an alert naming its `mig_uuid`) is that instance's alone: `NodeDevices.find_mig` finds its device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuhealth.contract.pci import short_bus_id
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.dra_objects import RawDevice, RawResourceClaim, RawResourceSlice

DRA_DRIVER = "gpu.nvidia.com"
PCI_ATTRIBUTE = "resource.kubernetes.io/pciBusID"


def _attr(device: RawDevice, key: str) -> Any:
    attributes = (device.get("basic") or device).get("attributes") or {}  # v1alpha3 wraps devices in `basic`
    value = attributes.get(key) or {}
    return next((value[k] for k in ("string", "int", "version", "bool") if k in value), None)


@dataclass(frozen=True)
class Device:
    name: str  # the DRA device name (gpu-0, gpu-0-mig-19-6-1)
    uuid: str
    kind: str  # gpu | mig
    pci_bus_id: str | None = None  # domain:bus:device, lower-case (short_bus_id)
    parent_uuid: str | None = None  # a MIG device's GPU
    index: int | None = None


@dataclass(frozen=True)
class NodeDevices:
    """One node's pool of a DRA driver's devices."""

    driver: str
    pool: str
    devices: tuple[Device, ...] = ()

    def find(self, gpu: str) -> Device | None:
        """The GPU an alert's `gpu` label names: a PCI bus id, a UUID (a MIG UUID names its GPU), or an index."""
        gpus = [d for d in self.devices if d.kind == "gpu"]
        pci = short_bus_id(gpu)
        for d in gpus:
            if (pci is not None and d.pci_bus_id == pci) or d.uuid == gpu:
                return d
        for d in self.devices:
            if d.kind == "mig" and d.uuid == gpu:
                return next((g for g in gpus if g.uuid == d.parent_uuid), None)
        if gpu.isascii() and gpu.isdigit():
            return next((g for g in gpus if g.index == int(gpu) or g.name == f"gpu-{gpu}"), None)
        return None

    def find_mig(self, uuid: str) -> Device | None:
        """The MIG device with this UUID (an alert's `mig_uuid`): the one device an Xid on a MIG GPU instance
        names. (`find` maps the same UUID to its GPU, for the reset.)"""
        return next((d for d in self.devices if d.kind == "mig" and d.uuid == uuid), None)

    def parent(self, mig: Device) -> Device | None:
        """A MIG device's GPU, when the driver publishes it too."""
        return next((g for g in self.devices if g.kind == "gpu" and g.uuid == mig.parent_uuid), None)

    def gpu_of(self, name: str) -> Device | None:
        """The GPU a device name belongs to: the GPU itself, or a MIG device's parent; None when not published."""
        device = next((d for d in self.devices if d.name == name), None)
        if device is None or device.kind == "gpu":
            return device
        return self.parent(device)

    def family(self, gpu: Device) -> tuple[Device, ...]:
        """The GPU and its MIG devices: what one reset takes, and so what one quarantine covers."""
        return (gpu, *(d for d in self.devices if d.kind == "mig" and d.parent_uuid == gpu.uuid))

    @property
    def gpu_count(self) -> int:
        return sum(1 for d in self.devices if d.kind == "gpu")


def devices_by_node(slices: Iterable[RawResourceSlice], driver: str = DRA_DRIVER) -> dict[str, NodeDevices]:
    """Each node's devices of `driver`, from ResourceSlices (`kubectl get resourceslices -o json` items). A
    pool spread over several slices is joined; slices of other drivers (compute-domain.nvidia.com) are not GPUs.

    As the scheduler reads a pool, only the slices of its newest `pool.generation` count (older ones are being
    replaced). When one node has several pools of the driver (one left behind by an earlier install or an earlier
    Node of the same name), the one a quarantine must name is `current_pool`'s choice."""
    pools: dict[tuple[str, str], list[RawResourceSlice]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != driver or not node:
            continue
        pools.setdefault((node, (spec.get("pool") or {}).get("name") or node), []).append(obj)
    by_node: dict[str, dict[str, list[RawResourceSlice]]] = {}
    for (node, pool), objs in pools.items():
        newest = max(_pool_generation(o) for o in objs)
        by_node.setdefault(node, {})[pool] = [o for o in objs if _pool_generation(o) == newest]
    out = {}
    for node, node_pools in by_node.items():
        pool = current_pool(node, node_pools)
        devices = [_device(d) for o in node_pools[pool] for d in (o.get("spec") or {}).get("devices") or []]
        out[node] = NodeDevices(driver, pool, tuple(sorted((d for d in devices if d is not None),
                                                           key=lambda d: d.name)))
    return out


def current_pool(node: str, pools: dict[str, list[RawResourceSlice]]) -> str:
    """Of one node's pools (each its newest generation's slices), the one its driver publishes now: a complete pool
    (all of `resourceSliceCount` slices present: the scheduler allocates from no other) before an incomplete one,
    then the most recently created (a pool left behind is older than its successor), then the pool named after the
    node (NVIDIA's driver names it so), then by name, so that every replica chooses the same."""
    def rank(pool: str) -> tuple[bool, str, bool, str]:
        objs = pools[pool]
        count = max(int((((o.get("spec") or {}).get("pool") or {}).get("resourceSliceCount")) or 1) for o in objs)
        created = max(str(api_objects.meta(o).get("creationTimestamp") or "") for o in objs)
        return len(objs) >= count, created, pool == node, pool
    return max(pools, key=rank)


def _pool_generation(obj: RawResourceSlice) -> int:
    value = (((obj.get("spec") or {}).get("pool") or {}).get("generation")) or 0
    return value if isinstance(value, int) else 0


def _device(d: RawDevice) -> Device | None:
    kind = str(_attr(d, "type") or "gpu")
    if kind not in ("gpu", "mig"):
        return None
    index = _attr(d, "index")
    return Device(name=d.get("name", ""), uuid=str(_attr(d, "uuid") or ""), kind=kind,
                  pci_bus_id=short_bus_id(_attr(d, PCI_ATTRIBUTE)), parent_uuid=_attr(d, "parentUUID"),
                  index=index if isinstance(index, int) else None)


@dataclass(frozen=True)
class ClaimIndex:
    """Pods by the device their claims were allocated: (driver, pool, device) -> namespace/name."""

    pods: dict[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)

    def using(self, driver: str, pool: str, devices: Iterable[str]) -> tuple[str, ...]:
        out: list[str] = []
        for name in devices:
            out += [p for p in self.pods.get((driver, pool, name), ()) if p not in out]
        return tuple(out)


def claim_index(claims: Iterable[RawResourceClaim]) -> ClaimIndex:
    """From ResourceClaims (`kubectl get resourceclaims -A -o json` items): status.allocation's results and the
    pods in status.reservedFor."""
    pods: dict[tuple[str, str, str], list[str]] = {}
    for claim in claims:
        ns = api_objects.namespace(claim)
        status = claim.get("status") or {}
        holders = [f"{ns}/{r['name']}" for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
            key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
            pods.setdefault(key, [])
            pods[key] += [h for h in holders if h not in pods[key]]
    return ClaimIndex({k: tuple(v) for k, v in pods.items()})
