"""A node's GPUs from the ResourceSlices NVIDIA's DRA driver published on real clusters (tests/fixtures/dra,
sources in its SOURCES.md), and the pods that hold each from real ResourceClaims."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from gpuhealth.contract.pci import short_bus_id
from gpuhealth.remediator.decide.devices import claim_index, devices_by_node
from tests.support import paths

FIXTURES = paths.FIXTURES / "dra"


def _items(name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load((FIXTURES / name).read_text())["items"]
    return items


def test_an_eks_h100_node_has_its_eight_gpus_and_not_its_compute_domain_devices() -> None:
    nodes = devices_by_node(_items("resourceslices_eks_2x8_h100_v1.yaml"))
    node = nodes["ip-10-0-171-111.ec2.internal"]
    assert node.pool == "ip-10-0-171-111.ec2.internal" and node.gpu_count == 8
    assert [d.name for d in node.devices] == [f"gpu-{i}" for i in range(8)]
    assert all(d.uuid.startswith("GPU-") and d.pci_bus_id for d in node.devices)


def test_an_alert_finds_its_gpu_by_the_kernel_logs_bus_id_nvmls_bus_id_its_uuid_or_its_index() -> None:
    node = devices_by_node(_items("resourceslices_eks_2x8_h100_v1.yaml"))["ip-10-0-171-111.ec2.internal"]
    gpu = next(d for d in node.devices if d.pci_bus_id == "0000:64:00")
    assert node.find("0000:64:00") == gpu  # the kernel log's Xid line
    assert node.find("00000000:64:00.0") == gpu  # NVML and dcgm-exporter
    assert node.find(gpu.uuid) == gpu
    assert node.find(gpu.name.removeprefix("gpu-")) == gpu
    assert node.find("0000:ff:00") is None and node.find("unknown") is None


def test_a_mig_gpus_family_is_the_gpu_and_every_instance_on_it() -> None:
    mig = _items("resourceslice_kind_a100_80gb_mig_v1alpha3_excerpt.yaml")
    slice_ = mig[0]
    parent = slice_["spec"]["devices"][0]["basic"]["attributes"]["parentUUID"]["string"]
    # Its author cut the excerpt to one MIG device, before the spec's driver, nodeName and pool, and without the
    # GPU itself: those are added as NVIDIA's driver publishes them.
    slice_["spec"].update(driver="gpu.nvidia.com", nodeName="k8s-dra-driver-cluster-worker",
                          pool={"name": "k8s-dra-driver-cluster-worker", "generation": 1, "resourceSliceCount": 1})
    slice_["spec"]["devices"].append({"name": "gpu-0", "basic": {"attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": parent}, "index": {"int": 0}}}})
    node = devices_by_node(mig)["k8s-dra-driver-cluster-worker"]
    gpu = node.find("0")
    assert gpu is not None and gpu.uuid == parent
    family = node.family(gpu)
    assert [d.name for d in family] == ["gpu-0", "gpu-0-mig-19-6-1"] and family[1].kind == "mig"
    assert node.find("MIG-a280f2d0-03b7-5a7c-adea-94cb1d0726ba") == gpu  # an instance's UUID names its GPU
    mig = node.find_mig("MIG-a280f2d0-03b7-5a7c-adea-94cb1d0726ba")  # and the instance itself, for instance scope
    assert mig == family[1] and node.parent(mig) == gpu
    assert node.find_mig(parent) is None and node.find_mig("MIG-00000000-0000-0000-0000-000000000000") is None


def test_claims_say_which_pods_hold_a_device() -> None:
    index = claim_index(_items("resourceclaims_vks_allocated_reserved_v1.yaml"))
    pods = index.using("gpu.nvidia.com", "conformance-test-np1-qcqc8-bpdtl-wv2gs", ["gpu-0"])
    assert pods == ("gpu-test1/dra-gpu-example-798fccd4d-sfl2p",)
    assert index.using("gpu.nvidia.com", "conformance-test-np1-qcqc8-bpdtl-wv2gs", ["gpu-1"]) == ()


def test_pci_bus_ids_are_compared_whatever_their_width() -> None:
    assert short_bus_id("0000:9B:00") == short_bus_id("00000000:9b:00.0") == "0000:9b:00"
    assert short_bus_id("GPU-1234") is None


# --- a node with more than one pool of the driver, and pools being republished --------------------------------------

EKS_NODE = "ip-10-0-171-111.ec2.internal"


def _gpu_slice() -> dict[str, Any]:
    return next(o for o in _items("resourceslices_eks_2x8_h100_v1.yaml")
                if o["spec"]["driver"] == "gpu.nvidia.com" and o["spec"]["nodeName"] == EKS_NODE)


def _left_behind(current: dict[str, Any], pool: str, created: str) -> dict[str, Any]:
    """The node's GPU slice as an earlier install published it: another pool name, created earlier."""
    stale = copy.deepcopy(current)
    stale["metadata"].update(name=f"{EKS_NODE}-gpu.nvidia.com-old", creationTimestamp=created)
    stale["spec"]["pool"] = {"name": pool, "generation": 1, "resourceSliceCount": 1}
    return stale


def test_a_pool_left_behind_by_an_earlier_install_does_not_take_the_quarantine() -> None:
    current = _gpu_slice()
    stale = _left_behind(current, "gpu-pool-old", "2026-01-05T10:00:00Z")  # before the current slice (2026-03-10)
    for order in ([stale, current], [current, stale]):
        node = devices_by_node(order)[EKS_NODE]
        assert node.pool == EKS_NODE, order[0]["spec"]["pool"]["name"]
        assert [d.name for d in node.devices] == [f"gpu-{i}" for i in range(8)]  # once each, not joined twice


def test_a_pool_the_scheduler_cannot_use_because_slices_are_missing_loses_to_a_complete_one() -> None:
    current = _gpu_slice()
    newer_but_incomplete = _left_behind(current, "gpu-pool-next", "2026-06-01T00:00:00Z")
    newer_but_incomplete["spec"]["pool"]["resourceSliceCount"] = 2  # the second of its slices is not published
    assert devices_by_node([newer_but_incomplete, current])[EKS_NODE].pool == EKS_NODE


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    current = _gpu_slice()
    outdated = copy.deepcopy(current)
    outdated["metadata"]["name"] += "-gen0"
    outdated["spec"]["pool"]["generation"] = current["spec"]["pool"]["generation"] - 1
    outdated["spec"]["devices"] = [dict(current["spec"]["devices"][0], name="gpu-9")]  # a GPU no longer published
    node = devices_by_node([outdated, current])[EKS_NODE]
    assert [d.name for d in node.devices] == [f"gpu-{i}" for i in range(8)]
