"""The exporter's part of a GPU reset: it lets go of the GPUs while its Node carries gpuhealth's reset marker.

`nvidia-smi --gpu-reset` fails while any process holds the GPU open, and the exporter is one: its nvml probe
keeps an NVML handle, and its DCGM probes talk to nv-hostengine, which the reset stops too. The contract with
the remediator (gpuhealth/remediator/decide/reset.py), in full:

- The marker: the Node annotation `gpuhealth.io/gpu-reset-request`, its value the request id (the reset Job's
  name, an opaque string). Present: let go. Absent: normal.
- The exporter watches its own Node (gpuhealth/exporter/node_watch.py) and reads the marker as soon as the watch sees
the
  Node change, and again every `reset_marker_interval` seconds (10 by default). A read while the watch is broken
  (or before the Node was first read) fails, and a read that fails changes nothing: the probes stay paused, or
  running, as they were (no release or resume on no evidence), and it is logged and counted
  (`gpuhealth_reset_marker_read_failures_total`).
- While the marker is there, every probe the registry marks `paused_for_gpu_reset` is paused: nvml calls
  nvmlShutdown (once its run in progress, if any, has ended) and makes no NVML call; dcgm and diag run no dcgmi;
  dcgm_exporter is not read. Each reports `gpuhealth_probe_paused{probe} 1` and no success or error sample. The
  node conditions they feed keep what they last judged (gpuhealth/exporter/conditions.py). The kernel-log and EFA probes
  run throughout.
- Once every one of them has let go, the condition GpuhealthProbesHealthy takes the reason `ReleasedForGPUReset`
  and the message `released NVML and paused DCGM for GPU reset request <id>` (exactly, the id verbatim at the
  end); its status stays what the probes' health makes it. That is the acknowledgement the remediator waits for
  before it starts the reset Job. A marker whose id changes while released is acknowledged with the new id.
- When the marker is gone the probes resume at once: the next nvml run calls nvmlInit again, dcgm sets its
  health watches again, and the condition gets its usual reason back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from gpuhealth.contract.names import GPU_RESET_REQUEST_ANNOTATION, RELEASED_FOR_GPU_RESET
from gpuhealth.exporter.catalog import RESET_MARKER_READ_FAILURES
from gpuhealth.exporter.condition_types import PROBES
from gpuhealth.exporter.conditions import Condition
from gpuhealth.exporter.node_status import KubeError
from gpuhealth.exporter.probes.base import PausableProbe
from gpuhealth.exporter.probes.registry import BY_NAME
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.samples import Sample
from gpuhealth.exporter.snapshot import Snapshot

log = logging.getLogger(__name__)

ANNOTATION = GPU_RESET_REQUEST_ANNOTATION
RELEASED_REASON = RELEASED_FOR_GPU_RESET
# How long one attempt to pause a probe waits for its run in progress to end; the next read tries again.
PAUSE_WAIT_SECONDS = 2.0


def released_message(request: str) -> str:
    """The acknowledgement's message: the request id verbatim, at the end."""
    return f"released NVML and paused DCGM for GPU reset request {request}"


class GpuResetRelease:
    """Pauses and resumes this node's GPU probes as its Node's reset marker says, and acknowledges the pause."""

    def __init__(self, runners: Sequence[ProbeRunner], snapshot: Snapshot,
                 read_annotations: Callable[[], Mapping[str, str]], wait: float = PAUSE_WAIT_SECONDS) -> None:
        self._runners: list[tuple[ProbeRunner, PausableProbe]] = []
        for runner in runners:
            spec = BY_NAME.get(runner.probe.name)
            if spec is None or not spec.paused_for_gpu_reset:
                continue
            if not isinstance(runner.probe, PausableProbe):
                raise TypeError(f"probe {runner.probe.name} is paused for a GPU reset but cannot pause")
            self._runners.append((runner, runner.probe))
        self._snapshot = snapshot
        self._read = read_annotations
        self._wait = wait
        self._paused: set[str] = set()
        self._waiting_for: set[str] = set()  # probes whose run in progress kept them from pausing (logged once)
        self.requested: str | None = None  # the marker's value at the last good read; None: no marker
        self.released_for: str | None = None  # the request acknowledged: every probe has let go for it
        self.read_failures = 0

    @property
    def probes(self) -> tuple[str, ...]:
        """The probes this pauses, in the registry's order."""
        return tuple(probe.name for _, probe in self._runners)

    def poll(self) -> bool:
        """Read the marker and act on it; True when the acknowledgement changed (the conditions are due)."""
        before = self.released_for
        try:
            annotations = self._read()
        except KubeError as exc:
            self.read_failures += 1
            log.warning("cannot read the GPU reset marker (%s): probes stay %s", exc,
                        "paused" if self._paused else "running")
        else:
            requested = annotations.get(ANNOTATION)
            if requested is not None and requested != self.requested:
                log.info("node carries %s=%s: releasing the GPUs", ANNOTATION, requested)
            elif requested is None and self.requested is not None:
                log.info("%s is gone: resuming the GPU probes", ANNOTATION)
            self.requested = requested
        self._settle()
        return self.released_for != before

    def _settle(self) -> None:
        """Move the probes towards what the last good read asked for."""
        if self.requested is None:
            for runner, probe in self._runners:
                probe.resume()  # also one still waiting for its run in progress: it refuses new runs meanwhile
                if probe.name in self._paused:
                    self._snapshot.set_paused(probe.name, False)
                    runner.wake()  # run now: until it has, it reads as paused
                    self._paused.discard(probe.name)
            self._waiting_for.clear()
            self.released_for = None
            return
        for _, probe in self._runners:
            if probe.name in self._paused:
                continue
            if probe.pause(self._wait):
                self._snapshot.set_paused(probe.name, True)
                self._paused.add(probe.name)
                self._waiting_for.discard(probe.name)
                log.info("probe %s paused for GPU reset request %s", probe.name, self.requested)
            elif probe.name not in self._waiting_for:
                self._waiting_for.add(probe.name)
                log.warning("probe %s: a run is in progress, not paused yet for GPU reset request %s (trying again)",
                            probe.name, self.requested)
        everything = len(self._paused) == len(self._runners)
        self.released_for = self.requested if everything else None

    def acknowledge(self, conditions: list[Condition]) -> list[Condition]:
        """The conditions to write: GpuhealthProbesHealthy says ReleasedForGPUReset once every probe has let go."""
        if self.released_for is None:
            return conditions
        return [replace(c, reason=RELEASED_REASON, message=released_message(self.released_for))
                if c.type == PROBES else c for c in conditions]

    def samples(self) -> list[Sample]:
        return [Sample(RESET_MARKER_READ_FAILURES, {}, self.read_failures)]
