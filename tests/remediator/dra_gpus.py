"""A GPU node whose GPUs NVIDIA's DRA driver publishes (tests/fakes/apiserver/dra.py, publish_gpus), each held by a
training pod's ResourceClaim; and a published GPU's bus id as gpuhealth's alerts name it."""

from __future__ import annotations

from typing import Any

from tests.fakes.apiserver import FakeCluster

DRIVER = "gpu.nvidia.com"


def dra_node(c: FakeCluster, name: str = "gpu-1", pool: str = "gpu",
             labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The node, its 8 GPUs published, and on each GPU a pod train-<node>-<device> whose claim holds that GPU.
    Returns the devices."""
    c.add_node(name, pool=pool, labels=labels)
    devices = c.dra.publish_gpus(name)
    for d in devices:
        pod = f"train-{name}-{d['name']}"
        c.add_pod(name, pod, labels={"app": "train"})
        c.dra.add_claim("default", f"claim-{name}-{d['name']}", [(DRIVER, name, d["name"])], [pod])
    return devices


def alert_gpu(device: dict[str, Any]) -> str:
    """The GPU's bus id as an Xid alert's gpu label carries it: the exporter writes NVML's form (00000000:64:00.0)
    whatever the kernel line printed; the DRA driver publishes 0000:64:00.0."""
    return f"0000{device['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper()
