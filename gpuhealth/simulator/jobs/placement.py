"""Where jobs may run: the free nodes (schedulable, holding no job), which job holds a node, and the random pick
of nodes for a job. A node that comes free tells the scheduler, which places the jobs waiting for nodes."""

from __future__ import annotations

import random
from collections.abc import Callable

from gpuhealth.remediator.decide.views import PodRef
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.fleet import Fleet, SimNode
from gpuhealth.simulator.workload import FreeNodes


def pools(pool: str | None) -> set[str] | None:
    """The pools a job may use: its own, or any."""
    return {pool} if pool else None


class Placement:
    def __init__(self, queue: EventQueue, fleet: Fleet, seed: int, on_freed: Callable[[], None]) -> None:
        self._queue = queue
        self._fleet = fleet
        self._on_freed = on_freed
        # a node that is free though a fault no one has seen is on it (aggregated small jobs land on it)
        self.on_bad_free: Callable[[SimNode], None] = lambda node: None
        self.free = FreeNodes()
        self._rng = random.Random(f"{seed}/placement")

    def pick(self, need: int, allowed: set[str] | None,
             exclude: set[int] | frozenset[int] = frozenset()) -> list[int] | None:
        return self.free.pick(self._rng, need, allowed, self._fleet.pool_of, exclude)

    def free_count(self, allowed: set[str] | None, exclude: set[int] | frozenset[int] = frozenset()) -> int:
        """Free nodes in the allowed pools, but those in `exclude` (the nodes a job excluded)."""
        if allowed is None and not exclude:
            return len(self.free)
        return self.free.count_in(allowed, self._fleet.pool_of, exclude)

    def take(self, slots: list[int], owner: str) -> None:
        for s in slots:
            node = self._fleet.nodes[s]
            node.workload = owner
            node.pods = [PodRef("jobs", f"{owner}-{s}", True)]
            self.free.discard(s)

    def release(self, node: SimNode) -> None:
        node.workload = None
        node.pods = [p for p in node.pods if p.terminating]
        self.node_changed(node)

    def node_changed(self, node: SimNode) -> None:
        """After any change to a node: its time out of service, and whether a job may now be placed on it."""
        self._fleet.avail.update(node, self._queue.now)
        if node.schedulable and node.workload is None:
            if node.fault is not None and node.fault.cause.node_fault:
                self.on_bad_free(node)
            if node.slot not in self.free:
                self.free.add(node.slot)
                self._on_freed()
        else:
            self.free.discard(node.slot)
