"""One read of the kubelet's pod-resources API: gRPC on the kubelet's Unix socket, under one deadline.

The kubelet serves `v1.PodResourcesLister` (List, Get, GetAllocatableResources) on
/var/lib/kubelet/pod-resources/kubelet.sock, as dcgm-exporter reads it. The socket is root's (its directory is
0750): the exporter must run as uid 0, though it needs no capability for it.
"""

from __future__ import annotations

import os
import stat
import time

import grpc

from gpuhealth.exporter.kubelet import api_pb2

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_TIMEOUT = 5.0
# The kubelet's own bound on a pod-resources message (podresources.DefaultMaxMsgSize): a node with many pods fits.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_SERVICE = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
LIST_METHOD = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['List'].name}"  # /v1.PodResourcesLister/List
ALLOCATABLE_METHOD = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['GetAllocatableResources'].name}"

# Why a read gave no mapping.
NO_SOCKET = "no_socket"
NOT_A_SOCKET = "not_a_socket"
NO_DEVICE_PLUGIN_GPUS = "no_device_plugin_gpus"  # the kubelet answers, but no device plugin advertises a GPU (DRA)
DRA_GPU_CLAIMS = "dra_gpu_claims"  # a pod holds a GPU through a DRA claim, which the map cannot place
PERMISSION_DENIED = "permission_denied"
TIMEOUT = "timeout"
UNAVAILABLE = "unavailable"
ERROR = "error"


class PodResourcesError(Exception):
    """A read that gave no mapping. Not a fault of the node: the mapping is unknown, nothing more."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def socket_problem(path: str) -> PodResourcesError | None:
    """What is wrong with the socket path before any connection is tried, if anything."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return PodResourcesError(NO_SOCKET, f"{path}: no such socket (is the kubelet's pod-resources directory "
                                            "mounted, and the kubelet running?)")
    except PermissionError:
        return PodResourcesError(PERMISSION_DENIED, f"{path}: permission denied (the socket's directory is root's)")
    except OSError as exc:
        return PodResourcesError(ERROR, f"{path}: {exc.strerror or exc}")
    if not stat.S_ISSOCK(mode):
        return PodResourcesError(NOT_A_SOCKET, f"{path}: not a socket")
    if not os.access(path, os.W_OK):  # connecting to a Unix socket needs write permission on it
        return PodResourcesError(PERMISSION_DENIED, f"{path}: permission denied (connecting needs write access: "
                                                    "run as uid 0)")
    return None


def read_pod_resources(path: str, timeout: float = DEFAULT_TIMEOUT) -> tuple[
        api_pb2.ListPodResourcesResponse, api_pb2.AllocatableResourcesResponse]:
    """The kubelet's List answer (which container holds which device) and its GetAllocatableResources answer (the
    devices the device plugins advertise), both within `timeout` seconds, connecting included; or
    PodResourcesError."""
    until = time.monotonic() + timeout
    problem = socket_problem(path)
    if problem is not None:
        raise problem
    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    with grpc.insecure_channel(f"unix://{os.path.abspath(path)}", options=options) as channel:
        list_call = channel.unary_unary(LIST_METHOD,
                                        request_serializer=api_pb2.ListPodResourcesRequest.SerializeToString,
                                        response_deserializer=api_pb2.ListPodResourcesResponse.FromString)
        allocatable_call = channel.unary_unary(
            ALLOCATABLE_METHOD, request_serializer=api_pb2.AllocatableResourcesRequest.SerializeToString,
            response_deserializer=api_pb2.AllocatableResourcesResponse.FromString)
        method = "List"
        try:
            pods: api_pb2.ListPodResourcesResponse = list_call(
                api_pb2.ListPodResourcesRequest(), timeout=max(0.001, until - time.monotonic()))
            method = "GetAllocatableResources"
            allocatable: api_pb2.AllocatableResourcesResponse = allocatable_call(
                api_pb2.AllocatableResourcesRequest(), timeout=max(0.001, until - time.monotonic()))
        except grpc.RpcError as exc:
            raise _classify(exc, path, method, timeout) from None
    return pods, allocatable


def _classify(exc: grpc.RpcError, path: str, method: str, timeout: float) -> PodResourcesError:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return PodResourcesError(TIMEOUT, f"{path}: {method}: no answer within {timeout:g}s")
    if code == grpc.StatusCode.UNAVAILABLE:
        if "Permission denied" in details:
            return PodResourcesError(PERMISSION_DENIED, f"{path}: {details}")
        return PodResourcesError(UNAVAILABLE, f"{path}: {details}")
    name = code.name if code is not None else type(exc).__name__
    return PodResourcesError(ERROR, f"{path}: {method} failed: {name}: {details}")
