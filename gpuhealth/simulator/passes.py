"""When the remediator runs a pass, as serve does: right after a webhook is recorded (serve wakes on a write), and
otherwise at the first tick of `--interval` after the last pass once something is due (a Job finished, a pod
terminated, a timeout, the healthy delay). Passes with nothing due are not run: they would decide nothing."""

from __future__ import annotations

import math
from collections.abc import Callable

from gpuhealth.simulator.events import EventQueue


class PassSchedule:
    """The next pass (one at a time: an earlier request replaces a later one), and the passes run so far."""

    def __init__(self, queue: EventQueue, interval_s: float, run: Callable[[], None]) -> None:
        self._queue = queue
        self._interval_s = interval_s
        self._run = run
        self._last = -math.inf
        self._at: float | None = None
        self._token = 0
        self.passes = 0
        self.off = False  # no remediator runs (gpuhealth/simulator/peers.py): no pass is ever run

    def request(self, t: float, wake: bool = False) -> None:
        """A pass at t (a webhook wakes serve at once), or at the first tick of serve's interval from t."""
        if self.off:
            return
        interval = self._interval_s
        if not wake and self._last > -math.inf:
            t = self._last + math.ceil((t - self._last) / interval - 1e-9) * interval
        if self._at is not None and self._at <= t:
            return
        self._token += 1
        self._at = t
        self._queue.at(t, self._due, self._token)

    def _due(self, token: int) -> None:
        if token != self._token:
            return  # a pass requested earlier took its place
        self._at = None
        self._last = self._queue.now
        self.passes += 1
        self._run()
