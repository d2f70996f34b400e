"""The probe contract and the failure reasons every probe reports in the same words (the tool supervisor that runs
a probe's command is gpuhealth/exporter/probes/tools.py)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from gpuhealth.exporter.samples import ProbeResult

# Failure reasons, the `reason` label of gpuhealth_probe_error / gpuhealth_probe_failures_total.
TIMEOUT = "timeout"
MISSING_TOOL = "missing_tool"
PERMISSION_DENIED = "permission_denied"
NOT_FOUND = "not_found"
BAD_OUTPUT = "bad_output"
STALE = "stale"
ERROR = "error"
OUTPUT_TOO_LARGE = "output_too_large"
REASONS = (TIMEOUT, MISSING_TOOL, PERMISSION_DENIED, NOT_FOUND, BAD_OUTPUT, STALE, ERROR, OUTPUT_TOO_LARGE)


class ProbeError(Exception):
    """A probe run that produced no trustworthy data. The exporter reports it; it never passes silently."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Probe(Protocol):
    name: str

    def collect(self, deadline: float) -> ProbeResult:
        """Read the source once, finishing within `deadline` seconds, or raise ProbeError."""
        ...


class ProbePaused(Exception):
    """collect() on a probe paused for a GPU reset: it did not run, and it did not fail."""


@runtime_checkable
class PausableProbe(Probe, Protocol):
    """A probe that lets go of the GPUs (NVML, DCGM) while the node's GPUs are reset
    (gpuhealth/exporter/gpu_reset.py)."""

    def pause(self, wait: float) -> bool:
        """Let go, waiting at most `wait` seconds for a run in progress to end; True once let go."""
        ...

    def resume(self) -> None:
        """Allow runs again; what was let go is taken again on the next run."""
        ...


class Pause:
    """A probe's pause for a GPU reset, kept apart from its runs.

    `pause` refuses new runs at once, waits up to `wait` seconds for the runs in progress to end, and only then
    lets go (`release`, e.g. nvmlShutdown): nothing a run is using is ever shut down under it. If a run is still in
    progress it returns False, new runs stay refused, and the caller tries again. While paused (or pausing),
    `running` raises ProbePaused without touching anything. Runs do not wait for each other: a run stuck inside a
    library call does not hold up the next one.
    """

    def __init__(self, name: str, release: Callable[[], None] = lambda: None) -> None:
        self._name = name
        self._release = release  # what to let go of, called once no run is in progress
        self._changed = threading.Condition()
        self._active = 0  # runs in progress
        self._refusing = False  # a pause was asked for: no new run starts
        self._paused = False  # ... and has been done: what the probe holds was let go

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._changed:
            if self._refusing:
                raise ProbePaused(f"{self._name}: paused for a GPU reset")
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                self._changed.notify_all()

    def pause(self, wait: float) -> bool:
        with self._changed:
            self._refusing = True
            if not self._paused:
                if not self._changed.wait_for(lambda: self._active == 0, timeout=max(0.0, wait)):
                    return False  # a run is in progress (or hung): not let go yet
                self._release()
                self._paused = True
            return True

    def resume(self) -> None:
        with self._changed:
            self._refusing = self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused


class PausingProbe:
    """What every PausableProbe shares: `pause`, `resume` and `collect` go through its Pause. A probe gives its run
    (`_run`) and, where it holds something across runs (NVML, DCGM's health watches), what to let go (`_let_go`);
    it calls this __init__ last, once what `_let_go` touches exists."""

    name: str

    def __init__(self) -> None:
        self._pause = Pause(self.name, self._let_go)

    def _let_go(self) -> None:
        """Nothing is held between runs by default."""

    def pause(self, wait: float) -> bool:
        return self._pause.pause(wait)

    def resume(self) -> None:
        self._pause.resume()

    def collect(self, deadline: float) -> ProbeResult:
        with self._pause.running():
            return self._run(deadline)

    def _run(self, deadline: float) -> ProbeResult:
        raise NotImplementedError


def classify(exc: BaseException) -> ProbeError:
    """Map any exception a probe let escape to a ProbeError with a stable reason."""
    if isinstance(exc, ProbeError):
        return exc
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
        if isinstance(exc, PermissionError):
            return ProbeError(PERMISSION_DENIED, message)
        if isinstance(exc, FileNotFoundError):
            return ProbeError(NOT_FOUND, message)
        if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
            return ProbeError(BAD_OUTPUT, message)
        return ProbeError(ERROR, message)
    if isinstance(exc, (ValueError, KeyError, TypeError, IndexError, json.JSONDecodeError)):
        return ProbeError(BAD_OUTPUT, f"{type(exc).__name__}: {exc}")
    return ProbeError(ERROR, f"{type(exc).__name__}: {exc}")
