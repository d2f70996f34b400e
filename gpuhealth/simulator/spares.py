"""Each pool's spare nodes (scenario `fleet.spares`): a replacement takes one, or waits, first come first served,
until a removed node comes back from its repair (`fleet.spare_return`) as a spare. A pool the scenario gives no
count has as many as it needs (the model before spares were counted)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.scenario_parts import ReplacementModel


class SparePool:
    def __init__(self, queue: EventQueue, model: ReplacementModel) -> None:
        self._queue = queue
        self._return_s = model.spare_return_s
        self.left: dict[str, int] = dict(model.spares)  # pool -> spares on the shelf now (counted pools only)
        self._waiting: dict[str, deque[tuple[float, Callable[[], None]]]] = {p: deque() for p in self.left}
        self.waits = 0  # replacements that found no spare and waited
        self.wait_s = 0.0  # the time they waited, all together
        self.used = 0  # spares taken

    def take(self, pool: str, then: Callable[[], None]) -> None:
        """A spare of the pool for a replacement: `then` runs once one is there (now, if one is left)."""
        self.used += 1
        if pool not in self.left:
            then()
            return
        if self.left[pool] > 0:
            self.left[pool] -= 1
            then()
            return
        self.waits += 1
        self._waiting[pool].append((self._queue.now, then))

    def removed(self, pool: str) -> None:
        """A node left the pool for repair: it comes back as a spare after spare_return."""
        if pool in self.left:
            self._queue.at(self._queue.now + self._return_s, self._returned, pool)

    def _returned(self, pool: str) -> None:
        waiting = self._waiting[pool]
        if waiting:
            since, then = waiting.popleft()
            self.wait_s += self._queue.now - since
            then()
        else:
            self.left[pool] += 1

    def close(self, end: float) -> None:
        """The run ends: the replacements still waiting waited until the end."""
        for waiting in self._waiting.values():
            self.wait_s += sum(end - since for since, _ in waiting)
