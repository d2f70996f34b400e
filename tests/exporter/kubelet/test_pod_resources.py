"""Which pod holds which GPU: the exporter reads the kubelet's pod-resources API (a real gRPC server on a Unix
socket, tests/fakes/kubelet_podresources.py) and serves gpuhealth_gpu_pod_info with the GPU labels NVML knows.
A socket that is missing or hangs is no fault of the node: the mapping is unknown, nothing else changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.config import ConfigError, load_file
from gpuhealth.exporter.kubelet import api_pb2
from gpuhealth.exporter.kubelet.allocations import resolve
from gpuhealth.exporter.kubelet.client import (
    DRA_GPU_CLAIMS,
    ERROR,
    NO_DEVICE_PLUGIN_GPUS,
    NO_SOCKET,
    NOT_A_SOCKET,
    TIMEOUT,
)
from gpuhealth.exporter.kubelet.reader import STALE, PodResourcesReader
from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.samples import GpuIdentity
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.kubelet_podresources import (
    MIG_UUID,
    FakeKubelet,
    _container,
    _devices,
    device_plugin_allocatable,
    device_plugin_node,
    dra_node,
)
from tests.fakes.nvml import P5_BUS_IDS, FakeMig, FakeNvml, p5_fleet, uuid_of
from tests.support.headroom import HEADROOM

EXPORTER = shutil.which("gpuhealth-exporter", path=str(Path(sys.executable).parent)) or "gpuhealth-exporter"
Series = dict[str, dict[tuple[tuple[str, str], ...], float]]


def nvml_snapshot() -> Snapshot:
    """The p5 node's eight GPUs as NVML reports them; GPU 7 is in MIG mode with the notebook's 1g.10gb device."""
    gpus = p5_fleet()
    gpus[7].mig_mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    gpus[7].mig_devices = [FakeMig(0, 9, 0, "1g.10gb", MIG_UUID)]
    snapshot = Snapshot()
    assert ProbeRunner(NvmlProbe(FakeNvml(gpus)), snapshot, 15, 10).run_once()
    return snapshot


def scrape(snapshot: Snapshot, reader: PodResourcesReader | None) -> Series:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, Expectations(gpus=8), pod_resources=reader))
    out: Series = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def pods(series: Series) -> set[tuple[str, ...]]:
    keys = ("gpu", "uuid", "pci_bus_id", "resource", "device", "pod_namespace", "pod_name", "container_name")
    return {tuple(dict(labels)[k] for k in keys) for labels in series.get("gpuhealth_gpu_pod_info", {})}


def test_the_scrape_maps_each_gpu_a_pod_holds_to_the_gpu_nvml_knows(tmp_path: Path) -> None:
    snapshot = nvml_snapshot()
    with FakeKubelet(tmp_path / "kubelet.sock", device_plugin_node()):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert reader.read_once()
    m = scrape(snapshot, reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 1}
    assert 0 < m["gpuhealth_pod_resources_duration_seconds"][()] < 5
    gpu = "nvidia.com/gpu"
    assert pods(m) == {
        # the pod with two GPUs: one series per GPU, each with the GPU's index, UUID and PCI bus id
        ("0", uuid_of(0), P5_BUS_IDS[0], gpu, uuid_of(0), "ml", "train-llama-0", "trainer"),
        ("1", uuid_of(1), P5_BUS_IDS[1], gpu, uuid_of(1), "ml", "train-llama-0", "trainer"),
        ("2", uuid_of(2), P5_BUS_IDS[2], gpu, uuid_of(2), "serving", "infer-7f9c6d-hx2lq", "server"),
        # a MIG device names its GPU (7), where a GPU reset takes it too
        ("7", uuid_of(7), P5_BUS_IDS[7], "nvidia.com/mig-1g.10gb", MIG_UUID, "research", "notebook-0", "notebook"),
    }  # no series for the EFA device, the CPU-only pod, the log shipper or the DaemonSet pods
    # Nothing of it touches the probes' own health.
    assert m["gpuhealth_probe_success"] == {(("probe", "nvml"),): 1}


def test_on_a_dra_node_no_device_plugin_gpu_means_the_mapping_is_unknown(tmp_path: Path) -> None:
    # Pods hold GPUs there through ResourceClaims: "no pod on this GPU" would be false, so the mapping is unknown.
    pods, allocatable = dra_node()
    with FakeKubelet(tmp_path / "kubelet.sock", pods, allocatable=allocatable):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert not reader.read_once()
    assert reader.view().reason == NO_DEVICE_PLUGIN_GPUS
    m = scrape(nvml_snapshot(), reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 0} and "gpuhealth_gpu_pod_info" not in m


def test_the_mapping_follows_the_kubelet_and_a_pod_that_ends_leaves_it(tmp_path: Path) -> None:
    snapshot = nvml_snapshot()
    node = device_plugin_node()
    reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
    with FakeKubelet(tmp_path / "kubelet.sock", node):
        assert reader.read_once()
    del node.pod_resources[2]  # train-llama-0 ended
    with FakeKubelet(tmp_path / "kubelet.sock", node):  # the kubelet restarted, on a new socket
        assert reader.read_once()
    assert {p[6] for p in pods(scrape(snapshot, reader))} == {"infer-7f9c6d-hx2lq", "notebook-0"}


def test_a_device_the_exporter_cannot_place_has_empty_gpu_labels(tmp_path: Path) -> None:
    with FakeKubelet(tmp_path / "kubelet.sock", device_plugin_node()):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert reader.read_once()
    m = scrape(Snapshot(), reader)  # NVML off: no GPU is known
    assert m["gpuhealth_pod_resources_success"] == {(): 1}
    placed = {(p[0], p[1], p[2], p[4]) for p in pods(m)}
    assert placed == {("", uuid_of(0), "", uuid_of(0)), ("", uuid_of(1), "", uuid_of(1)),
                      ("", uuid_of(2), "", uuid_of(2)), ("", "", "", MIG_UUID)}


def test_each_device_id_shape_the_device_plugin_uses_names_its_gpu() -> None:
    gpus = [GpuIdentity(P5_BUS_IDS[i], str(i), uuid_of(i)) for i in range(8)]
    migs = {MIG_UUID: GpuIdentity(P5_BUS_IDS[7], "7", uuid_of(7))}
    assert resolve(uuid_of(3), gpus, migs) == gpus[3]
    assert resolve(f"{uuid_of(3)}::2", gpus, migs) == gpus[3]  # a time-sliced replica
    assert resolve(MIG_UUID, gpus, migs) == gpus[7]
    assert resolve(f"MIG-{uuid_of(4)}/1/0", gpus, migs) == gpus[4]  # the MIG id of drivers before R470
    assert resolve("5", gpus, migs) == gpus[5]  # --device-id-strategy=index
    assert resolve("6:1", gpus, migs) == gpus[6]  # a MIG device by index
    assert resolve("6::0", gpus, migs) == gpus[6]
    for unknown in ("GPU-ffffffff-0000-4000-8000-000000000000", "MIG-ffffffff-0000-4000-8000-000000000000", "8",
                    "efa0", ""):
        assert resolve(unknown, gpus, migs) is None, unknown


def test_a_missing_socket_means_the_mapping_is_unknown(tmp_path: Path) -> None:
    snapshot = nvml_snapshot()
    reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
    assert not reader.read_once()
    assert reader.view().reason == NO_SOCKET
    m = scrape(snapshot, reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 0}
    assert "gpuhealth_gpu_pod_info" not in m
    assert m["gpuhealth_probe_success"] == {(("probe", "nvml"),): 1} and "gpuhealth_probe_error" not in m


def test_without_the_read_there_is_no_pod_resources_series() -> None:
    m = scrape(nvml_snapshot(), None)
    assert not {"gpuhealth_pod_resources_success", "gpuhealth_gpu_pod_info"} & set(m)


KUBELET_TIMEOUT_S = 3.0


def test_a_kubelet_that_hangs_times_out_within_the_deadline_and_scrapes_do_not_wait(tmp_path: Path) -> None:
    snapshot = nvml_snapshot()
    with FakeKubelet(tmp_path / "kubelet.sock", device_plugin_node(), hang=True) as kubelet:
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"), interval=15, timeout=KUBELET_TIMEOUT_S)
        outcome: list[bool] = []
        thread = threading.Thread(target=lambda: outcome.append(reader.read_once()))
        started = time.monotonic()
        thread.start()
        assert kubelet.hanging.wait(5)
        t = time.monotonic()
        assert scrape(snapshot, reader)["gpuhealth_pod_resources_success"] == {(): 0}  # not read yet
        assert time.monotonic() - t < KUBELET_TIMEOUT_S / HEADROOM  # the scrape did not wait for the read
        thread.join(KUBELET_TIMEOUT_S * HEADROOM)
        took = time.monotonic() - started
    window = (KUBELET_TIMEOUT_S - 0.1, KUBELET_TIMEOUT_S * HEADROOM)  # at the deadline, not before, not long after
    assert outcome == [False] and window[0] <= took < window[1], took
    view = reader.view()
    assert view.reason == TIMEOUT and not view.allocations and window[0] <= view.duration < window[1]
    m = scrape(snapshot, reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 0} and "gpuhealth_gpu_pod_info" not in m


def test_an_answer_goes_stale_when_reads_stop(tmp_path: Path) -> None:
    with FakeKubelet(tmp_path / "kubelet.sock", device_plugin_node()):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"), interval=15, timeout=5)
        assert reader.read_once()
    now = time.monotonic()
    assert reader.view(now).success and len(reader.view(now).allocations) == 4
    later = reader.view(now + reader.stale_after() + 1)
    assert not later.success and later.reason == STALE and not later.allocations


def test_a_node_with_no_pod_on_a_gpu_is_a_mapping_and_a_garbled_answer_is_an_unknown_one(tmp_path: Path) -> None:
    with FakeKubelet(tmp_path / "kubelet.sock", api_pb2.ListPodResourcesResponse()):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert reader.read_once() and reader.view().allocations == ()  # no pod holds a GPU: success, no series
    assert scrape(nvml_snapshot(), reader)["gpuhealth_pod_resources_success"] == {(): 1}
    with FakeKubelet(tmp_path / "garbled.sock", device_plugin_node(), garbage=True):
        reader = PodResourcesReader(str(tmp_path / "garbled.sock"))
        assert not reader.read_once()
    assert reader.view().reason == ERROR
    with pytest.raises(ValueError, match="must be > 0"):
        PodResourcesReader(str(tmp_path / "kubelet.sock"), interval=0)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXPORTER, "--once", "--show-conditions", "--disable", "nvml,dcgm,diag,efa", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "NODE_NAME": ""})


def test_once_without_a_kubelet_reports_the_mapping_unknown_and_every_condition_healthy(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    proc = run("--kmsg-file", str(log), "--pod-resources-socket", str(tmp_path / "kubelet.sock"))
    assert proc.returncode == 0, proc.stderr
    assert "gpuhealth_pod_resources_success 0.0" in proc.stdout and "gpuhealth_gpu_pod_info" not in proc.stdout
    conditions = [line for line in proc.stderr.splitlines() if line.startswith("condition ")]
    assert conditions and all("=True " in line for line in conditions), conditions
    assert 'probe="pod_resources"' not in proc.stdout
    assert "GPU -> pod mapping unknown (no_socket)" in proc.stderr


def test_once_with_a_kubelet_serves_the_mapping_and_the_flag_turns_it_off(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    with FakeKubelet(tmp_path / "kubelet.sock", device_plugin_node()):
        on = run("--kmsg-file", str(log), "--pod-resources-socket", str(tmp_path / "kubelet.sock"))
        off = run("--kmsg-file", str(log), "--pod-resources-socket", str(tmp_path / "kubelet.sock"),
                  "--no-pod-resources")
    assert on.returncode == 0 and off.returncode == 0, (on.stderr, off.stderr)
    assert "gpuhealth_pod_resources_success 1.0" in on.stdout
    assert on.stdout.count("gpuhealth_gpu_pod_info{") == 4  # no GPU is known: empty gpu and pci_bus_id labels
    assert "gpuhealth_pod_resources" not in off.stdout and "gpuhealth_gpu_pod_info" not in off.stdout


@pytest.mark.parametrize("make", [lambda p: p.write_text(""), lambda p: p.mkdir()], ids=["file", "directory"])
def test_something_not_a_socket_at_the_kubelets_path_leaves_the_mapping_unknown_and_the_exporter_running(
        tmp_path: Path, make: Callable[[Path], object]) -> None:
    # The path is inside the kubelet's directory: what is there is the kubelet's business, like a missing socket.
    # Refusing to start would crash-loop the exporter (GpuhealthExporterDown, a cordon) for no fault of the node.
    path = tmp_path / "kubelet.sock"
    make(path)
    log = tmp_path / "kern.log"
    log.write_text("")
    proc = run("--kmsg-file", str(log), "--pod-resources-socket", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "gpuhealth_pod_resources_success 0.0" in proc.stdout and "gpuhealth_gpu_pod_info" not in proc.stdout
    assert "GPU -> pod mapping unknown (not_a_socket)" in proc.stderr
    conditions = [line for line in proc.stderr.splitlines() if line.startswith("condition ")]
    assert conditions and all("=True " in line for line in conditions), conditions
    reader = PodResourcesReader(str(path))
    assert not reader.read_once() and reader.view().reason == NOT_A_SOCKET


@pytest.mark.parametrize("resource, ids, held", [
    ("nvidia.com/gpu-0", [f"{uuid_of(0)}::{i}" for i in range(4)], f"{uuid_of(0)}::3"),  # time-slicing rename
    ("nvidia.com/gpu-24gb", [f"{uuid_of(0)}::{i}" for i in range(4)], f"{uuid_of(0)}::1"),  # an MPS rename
    ("nvidia.com/gpu-0", [f"0::{i}" for i in range(4)], "0::2"),  # the same, --device-id-strategy=index
])
def test_a_renamed_shared_gpu_resource_maps_its_pods_to_the_gpu(tmp_path: Path, resource: str, ids: list[str],
                                                                 held: str) -> None:
    # GPU 0 shared under a name the device plugin's sharing config chose; the node's other GPUs plain nvidia.com/gpu.
    allocatable = device_plugin_allocatable()
    allocatable.devices.append(_devices(resource, ids, 0))
    node = api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(name="shared-0", namespace="ml", containers=[
            _container("c", [_devices(resource, [held], 0)])])])
    with FakeKubelet(tmp_path / "kubelet.sock", node, allocatable=allocatable):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert reader.read_once()
    m = scrape(nvml_snapshot(), reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 1}
    assert {(p[0], p[3], p[4], p[6]) for p in pods(m)} == {("0", resource, held, "shared-0")}


def test_a_nic_under_nvidia_com_is_not_taken_for_a_gpu(tmp_path: Path) -> None:
    # The network operator's resources: SR-IOV VFs by PCI address, the RDMA shared device plugin's own ids.
    nics = [_devices("nvidia.com/sriov_rdma_vf", ["0000:3b:02.0"], 0),
            _devices("nvidia.com/rdma_shared_device_a", ["rdma_shared_device_a-0"], 0)]
    allocatable = device_plugin_allocatable()
    allocatable.devices.extend(nics)
    node = api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(name="nccl", namespace="ml", containers=[_container("c", nics)])])
    with FakeKubelet(tmp_path / "kubelet.sock", node, allocatable=allocatable):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert reader.read_once()
    m = scrape(nvml_snapshot(), reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 1} and pods(m) == set()


def test_a_pod_holding_a_gpu_through_a_dra_claim_makes_the_mapping_unknown(tmp_path: Path) -> None:
    # A node running NVIDIA's DRA driver beside the device plugin: List names the claim's device by its DRA name,
    # so "no device-plugin pod on GPU 3" would be wrong while dra-pod holds it.
    claim = api_pb2.DynamicResource(claim_name="c0", claim_namespace="ml", claim_resources=[
        api_pb2.ClaimResource(driver_name="gpu.nvidia.com", pool_name="n1", device_name="gpu-3")])
    other = api_pb2.DynamicResource(claim_name="nic", claim_namespace="ml", claim_resources=[
        api_pb2.ClaimResource(driver_name="dra.net", pool_name="n1", device_name="eth1")])
    node = device_plugin_node()
    with FakeKubelet(tmp_path / "kubelet.sock", node):
        reader = PodResourcesReader(str(tmp_path / "kubelet.sock"))
        assert reader.read_once()  # a DRA claim of another driver (a NIC) changes nothing
    node.pod_resources.append(api_pb2.PodResources(name="nic-pod", namespace="ml", containers=[
        api_pb2.ContainerResources(name="c", dynamic_resources=[other])]))
    with FakeKubelet(tmp_path / "kubelet.sock", node):
        assert reader.read_once()
    node.pod_resources.append(api_pb2.PodResources(name="dra-pod", namespace="ml", containers=[
        api_pb2.ContainerResources(name="c", dynamic_resources=[claim])]))
    with FakeKubelet(tmp_path / "kubelet.sock", node):
        assert not reader.read_once()
    assert reader.view().reason == DRA_GPU_CLAIMS
    m = scrape(nvml_snapshot(), reader)
    assert m["gpuhealth_pod_resources_success"] == {(): 0} and "gpuhealth_gpu_pod_info" not in m


def test_the_config_file_turns_the_read_off_and_moves_the_socket(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("pod_resources: false\npod_resources_socket: /run/kubelet/pod-resources/kubelet.sock\n")
    settings = load_file(str(config))
    assert settings.pod_resources is False
    assert settings.pod_resources_socket == "/run/kubelet/pod-resources/kubelet.sock"
    config.write_text('pod_resources_socket: ""\n')
    with pytest.raises(ConfigError, match=r"exporter.yaml:1: pod_resources_socket: must not be empty"):
        load_file(str(config))
