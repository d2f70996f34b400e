"""The latest outcome of every probe. Probes write it; scrapes and the node-condition writer read it."""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from gpuhealth.exporter.samples import ProbeResult


@dataclass
class ProbeState:
    name: str
    interval: float
    deadline: float
    result: ProbeResult | None = None  # last successful result, kept when later runs fail
    success: bool = False
    reason: str = "not_run"
    message: str = "has not run yet"
    duration: float = 0.0
    last_success: float | None = None  # unix time
    last_finish: float | None = None  # monotonic
    failures: Counter[str] = field(default_factory=Counter)
    # Paused for a GPU reset (gpuhealth/exporter/gpu_reset.py): the probe does not run, its last outcome stands for the
    # node conditions, and its samples are not served. It stays paused after resume() until a run that started
    # after the resume has finished, so a result from before the reset is never served as fresh.
    paused: bool = False
    resumed_at: float | None = None  # monotonic time of the resume, while waiting for that run

    def stale_after(self) -> float:
        """A result older than this (seconds) is not trusted, whatever it said."""
        return 2 * self.interval + self.deadline

    def is_stale(self, now_monotonic: float) -> bool:
        return self.last_finish is None or now_monotonic - self.last_finish > self.stale_after()


class Snapshot:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, ProbeState] = {}

    def register(self, name: str, interval: float, deadline: float) -> None:
        with self._lock:
            self._states[name] = ProbeState(name, interval, deadline)

    def record_success(self, name: str, result: ProbeResult, duration: float, started: float | None = None) -> None:
        """`started`: monotonic time the run began (default: `duration` ago)."""
        with self._lock:
            st = self._states[name]
            st.result, st.success, st.reason, st.message = result, True, "", ""
            st.duration, st.last_success, st.last_finish = duration, time.time(), time.monotonic()
            self._end_pause(st, st.last_finish - duration if started is None else started)

    def record_failure(self, name: str, reason: str, message: str, duration: float,
                       started: float | None = None) -> None:
        with self._lock:
            st = self._states[name]
            st.success, st.reason, st.message = False, reason, message
            st.duration, st.last_finish = duration, time.monotonic()
            st.failures[reason] += 1
            self._end_pause(st, st.last_finish - duration if started is None else started)

    def set_paused(self, name: str, paused: bool) -> None:
        """The probe was paused for a GPU reset, or resumed (it reads as paused until its next run ends)."""
        with self._lock:
            st = self._states[name]
            if paused:
                st.paused, st.resumed_at = True, None
            elif st.paused and st.resumed_at is None:
                st.resumed_at = time.monotonic()

    @staticmethod
    def _end_pause(st: ProbeState, started: float) -> None:
        if st.paused and st.resumed_at is not None and started >= st.resumed_at:
            st.paused, st.resumed_at = False, None

    def view(self) -> dict[str, ProbeState]:
        """A consistent copy; results are shared (probes never mutate a result they returned)."""
        with self._lock:
            return {
                name: ProbeState(st.name, st.interval, st.deadline, st.result, st.success, st.reason, st.message,
                                 st.duration, st.last_success, st.last_finish, copy.copy(st.failures), st.paused,
                                 st.resumed_at)
                for name, st in self._states.items()
            }
