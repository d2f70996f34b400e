"""The kubelet's pod-resources endpoint: a real gRPC server (grpcio) on a Unix socket, serving
v1.PodResourcesLister through the generated stubs (gpuhealth/exporter/kubelet/api_pb2_grpc.py), as the kubelet serves it
on /var/lib/kubelet/pod-resources/kubelet.sock.

Only the kubelet is stood in for. `device_plugin_node()` is a List answer shaped like a real kubelet's on a
p5.48xlarge with NVIDIA's device plugin: every pod and every container is listed, with or without devices;
devices carry their NUMA topology; CPU-manager pods carry cpu_ids and memory-manager blocks.
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from gpuhealth.exporter.kubelet import api_pb2, api_pb2_grpc
from tests.fakes.nvml import uuid_of

# The MIG device (1g.10gb) the device plugin's mixed strategy hands out on GPU 7 of device_plugin_node().
MIG_UUID = "MIG-4b8e2c1d-9f3a-5e7b-a1c2-d3e4f5a6b7c8"


def _devices(resource: str, ids: list[str], numa: int) -> api_pb2.ContainerDevices:
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=ids,
                                    topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)]))


def _container(name: str, devices: list[api_pb2.ContainerDevices] | None = None, cpu_ids: list[int] | None = None,
               memory_bytes: int = 0) -> api_pb2.ContainerResources:
    memory = [api_pb2.ContainerMemory(memory_type="memory", size=memory_bytes,
                                      topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=0)]))] \
        if memory_bytes else []
    return api_pb2.ContainerResources(name=name, devices=devices or [], cpu_ids=cpu_ids or [], memory=memory)


def device_plugin_allocatable() -> api_pb2.AllocatableResourcesResponse:
    """What the device plugins advertise on device_plugin_node(): GPUs 0-6 whole, GPU 7 as MIG devices (the mixed
    strategy), the EFA devices; the CPUs and memory the CPU and memory managers may hand out."""
    return api_pb2.AllocatableResourcesResponse(
        devices=[_devices("nvidia.com/gpu", [uuid_of(i) for i in range(4)], 0),
                 _devices("nvidia.com/gpu", [uuid_of(i) for i in range(4, 7)], 1),
                 _devices("nvidia.com/mig-1g.10gb", [MIG_UUID], 1),
                 _devices("vpc.amazonaws.com/efa", [str(i) for i in range(32)], 0)],
        cpu_ids=list(range(2, 192)),
        memory=[api_pb2.ContainerMemory(memory_type="memory", size=1 << 40,
                                        topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=0)]))])


def dra_node() -> tuple[api_pb2.ListPodResourcesResponse, api_pb2.AllocatableResourcesResponse]:
    """A node whose GPUs NVIDIA's DRA driver publishes: a pod holds GPU 0 through a ResourceClaim (List shows it
    under dynamic_resources), and no device plugin advertises a GPU."""
    claim = api_pb2.DynamicResource(claim_name="train-0-gpu", claim_namespace="ml", claim_resources=[
        api_pb2.ClaimResource(driver_name="gpu.nvidia.com", pool_name="gpu-node-1", device_name="gpu-0",
                              cdi_devices=[api_pb2.CDIDevice(name="k8s.gpu.nvidia.com/claim=9d2c-gpu-0")])])
    pods = api_pb2.ListPodResourcesResponse(pod_resources=[api_pb2.PodResources(
        name="train-0", namespace="ml",
        containers=[api_pb2.ContainerResources(name="trainer", dynamic_resources=[claim])])])
    allocatable = api_pb2.AllocatableResourcesResponse(
        devices=[_devices("vpc.amazonaws.com/efa", [str(i) for i in range(32)], 0)], cpu_ids=list(range(2, 192)))
    return pods, allocatable


def device_plugin_node() -> api_pb2.ListPodResourcesResponse:
    """A device-plugin GPU node's pods: a training pod on GPUs 0 and 1 (its log shipper holds no device), an
    inference pod on GPU 2 (and an EFA device, which is no GPU), a notebook on a MIG device of GPU 7, a CPU-only
    batch pod with exclusive CPUs, and the DaemonSet pods that hold nothing."""
    gpu, efa = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
    pods = [
        api_pb2.PodResources(name="nvidia-device-plugin-daemonset-x7k2p", namespace="kube-system",
                             containers=[_container("nvidia-device-plugin")]),
        api_pb2.PodResources(name="gpuhealth-exporter-5mq8d", namespace="gpuhealth",
                             containers=[_container("exporter")]),
        api_pb2.PodResources(name="train-llama-0", namespace="ml", containers=[
            _container("trainer", [_devices(gpu, [uuid_of(0), uuid_of(1)], 0)]),
            _container("log-shipper"),
        ]),
        api_pb2.PodResources(name="infer-7f9c6d-hx2lq", namespace="serving", containers=[
            _container("server", [_devices(gpu, [uuid_of(2)], 0), _devices(efa, ["0"], 0)]),
        ]),
        api_pb2.PodResources(name="notebook-0", namespace="research", containers=[
            _container("notebook", [_devices("nvidia.com/mig-1g.10gb", [MIG_UUID], 1)]),
        ]),
        api_pb2.PodResources(name="cpu-batch-28xkq", namespace="default", cpu_ids=[8, 9, 10, 11], containers=[
            _container("worker", cpu_ids=[8, 9, 10, 11], memory_bytes=8 << 30),
        ]),
    ]
    return api_pb2.ListPodResourcesResponse(pod_resources=pods)


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: api_pb2.ListPodResourcesRequest, context: Any) -> api_pb2.ListPodResourcesResponse:
        self.kubelet.calls += 1
        if self.kubelet.hang:
            self.kubelet.hanging.set()
            self.kubelet.release.wait(60)  # a kubelet that never answers (until the test ends)
        return self.kubelet.response

    def GetAllocatableResources(self, request: api_pb2.AllocatableResourcesRequest,
                                context: Any) -> api_pb2.AllocatableResourcesResponse:
        return self.kubelet.allocatable

    def Get(self, request: api_pb2.GetPodResourcesRequest, context: Any) -> api_pb2.GetPodResourcesResponse:
        for pod in self.kubelet.response.pod_resources:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")
        raise AssertionError("abort returns only by raising")


class FakeKubelet:
    """`with FakeKubelet(tmp_path / "kubelet.sock", device_plugin_node()) as kubelet:` serves until the block ends.
    hang=True: List never answers (until the block ends). garbage=True: List answers bytes that are no
    ListPodResourcesResponse."""

    def __init__(self, socket_path: Path, response: api_pb2.ListPodResourcesResponse, hang: bool = False,
                 garbage: bool = False, allocatable: api_pb2.AllocatableResourcesResponse | None = None) -> None:
        self.socket_path = socket_path
        self.response = response
        self.allocatable = device_plugin_allocatable() if allocatable is None else allocatable
        self.hang = hang
        self.calls = 0
        self.hanging = threading.Event()  # set once a List call is being held
        self.release = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if garbage:  # the service's method, answered with raw bytes: a truncated varint, unparseable
            handler = grpc.unary_unary_rpc_method_handler(lambda request, context: b"\x0a\xff\xff\xff")
            self._server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler}),))
        else:
            api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        if not self._server.add_insecure_port(f"unix://{socket_path}"):
            raise RuntimeError(f"cannot listen on {socket_path}")

    def __enter__(self) -> FakeKubelet:
        self._server.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release.set()
        self._server.stop(grace=None).wait(5)
