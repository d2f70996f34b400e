"""The simulation's clock and its one heap of events. Time is seconds from gpuhealth.simulator.remediation.EPOCH."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, TypeVarTuple

HOUR = 3600.0
Ts = TypeVarTuple("Ts")


class EventQueue:
    """Events in time order, ties in the order they were scheduled; `now` is the time of the event running."""

    def __init__(self, end: float) -> None:
        self.now = 0.0
        self.end = end
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, t: float, fn: Callable[[*Ts], None], *args: *Ts) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    def run(self) -> None:
        """Every event up to the end; the clock then reads the end."""
        heap = self._heap
        while heap:
            t, _, fn, args = heapq.heappop(heap)
            if t > self.end:
                break
            self.now = t
            fn(*args)
        self.now = self.end
