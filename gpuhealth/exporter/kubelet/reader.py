"""Reads the kubelet's pod-resources API on an interval, in its own thread, and keeps the latest answer.

The mapping is known only where a device plugin advertises the node's GPUs (GetAllocatableResources): on a node
whose GPUs a DRA driver publishes, no device-plugin pod holds one, yet pods do, so "no pod" would be wrong there;
and only while no pod holds a GPU through a DRA claim (a node running the DRA driver beside the device plugin).

Scrapes read what it kept and never wait on the kubelet. It is not a probe: a socket that is missing, refuses,
hangs or answers garbage is no fault of the node, so it feeds no node condition and no probe metric. It makes the
mapping unknown (gpuhealth_pod_resources_success 0, no gpuhealth_gpu_pod_info), and the alerts then say
gpu_pods="unknown": the remediator falls back to the whole node.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from gpuhealth.exporter.kubelet.allocations import Allocation, advertised_gpus, dra_gpu_holders, gpu_allocations
from gpuhealth.exporter.kubelet.client import (
    DEFAULT_TIMEOUT,
    DRA_GPU_CLAIMS,
    ERROR,
    NO_DEVICE_PLUGIN_GPUS,
    PodResourcesError,
    read_pod_resources,
)

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15.0  # one read per scrape interval: pods come and go in minutes
STALE = "stale"
NOT_RUN = "not_run"


@dataclass(frozen=True)
class PodResourcesView:
    success: bool  # the last read answered in time, found device-plugin GPUs, and is fresh
    duration: float  # seconds the last read took
    allocations: tuple[Allocation, ...] = ()  # only when success
    reason: str = ""  # why not, when not: a client.py reason, "stale" or "not_run"


class PodResourcesReader:
    def __init__(self, socket_path: str, interval: float = DEFAULT_INTERVAL, timeout: float = DEFAULT_TIMEOUT) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError(f"interval and timeout must be > 0, got {interval:g} and {timeout:g}")
        self.socket_path = socket_path
        self.interval = interval
        self.timeout = timeout
        self._lock = threading.Lock()
        self._allocations: tuple[Allocation, ...] | None = None  # None: the last read failed
        self._duration = 0.0
        self._finished: float | None = None  # monotonic
        self._reason = NOT_RUN

    def read_once(self) -> bool:
        """One read (List, GetAllocatableResources); True if it gave a mapping. The outcome replaces the last one."""
        started = time.monotonic()
        allocations: tuple[Allocation, ...] | None = None
        try:
            pods, allocatable = read_pod_resources(self.socket_path, self.timeout)
            if not advertised_gpus(allocatable):
                raise PodResourcesError(NO_DEVICE_PLUGIN_GPUS, f"{self.socket_path}: no device plugin advertises a "
                                        "GPU (nvidia.com/gpu, nvidia.com/mig-*): DRA, or the plugin not registered")
            holders = dra_gpu_holders(pods)
            if holders:
                raise PodResourcesError(DRA_GPU_CLAIMS, f"{self.socket_path}: {len(holders)} pod(s) hold a GPU through "
                                        f"a DRA claim ({', '.join(holders[:3])}{', ...' if len(holders) > 3 else ''})"
                                        ": which GPU is the remediator's to find from ResourceClaims")
            allocations = gpu_allocations(pods)
            reason, message = "", ""
        except PodResourcesError as err:
            reason, message = err.reason, err.message
        except Exception as exc:  # a bug or a garbled answer: the mapping is unknown, the exporter goes on
            reason, message = ERROR, f"{type(exc).__name__}: {exc}"
        finished = time.monotonic()
        with self._lock:
            before, self._reason = self._reason, reason
            self._allocations, self._duration, self._finished = allocations, finished - started, finished
        if reason and reason != before:
            log.warning("pod-resources: GPU -> pod mapping unknown (%s): %s", reason, message)
        elif not reason and before:
            log.info("pod-resources: reading %s (%d GPU devices held by pods)", self.socket_path,
                     len(allocations or ()))
        return allocations is not None

    def stale_after(self) -> float:
        """An answer older than this (seconds) is not believed: the reader has stopped answering."""
        return 2 * self.interval + self.timeout

    def view(self, now_monotonic: float | None = None) -> PodResourcesView:
        now = time.monotonic() if now_monotonic is None else now_monotonic
        with self._lock:
            if self._allocations is None:
                return PodResourcesView(False, self._duration, reason=self._reason)
            if self._finished is None or now - self._finished > self.stale_after():
                return PodResourcesView(False, self._duration, reason=STALE)
            return PodResourcesView(True, self._duration, self._allocations)

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.read_once()
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.loop, args=(stop,), name="pod-resources", daemon=True)
        thread.start()
        return thread
