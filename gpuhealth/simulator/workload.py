"""Jobs on the simulated fleet: synchronous training jobs (checkpoints, restarts) and small jobs, and the
set of free nodes they are placed on."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field

from gpuhealth.simulator.scenario_parts import SmallJobSpec, TrainingJobSpec


class FreeNodes:
    """Slots a job may be placed on (schedulable, holding no job), with O(1) add, remove and random pick."""

    def __init__(self) -> None:
        self._items: list[int] = []
        self._index: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, slot: int) -> bool:
        return slot in self._index

    def add(self, slot: int) -> None:
        if slot not in self._index:
            self._index[slot] = len(self._items)
            self._items.append(slot)

    def discard(self, slot: int) -> None:
        i = self._index.pop(slot, None)
        if i is None:
            return
        last = self._items.pop()
        if last != slot:
            self._items[i] = last
            self._index[last] = i

    def count_in(self, allowed: set[str] | None, pool_of: list[str],
                 exclude: set[int] | frozenset[int] = frozenset()) -> int:
        return sum(1 for s in self._items if (allowed is None or pool_of[s] in allowed) and s not in exclude)

    def pick(self, rng: random.Random, k: int, allowed: set[str] | None, pool_of: list[str],
             exclude: set[int] | frozenset[int] = frozenset()) -> list[int] | None:
        """k distinct free slots (in the allowed pools, none of `exclude`: the nodes the job itself excluded), or
        None if there are not enough."""
        if exclude:
            cands = [s for s in self._items if s not in exclude and (allowed is None or pool_of[s] in allowed)]
            return rng.sample(cands, k) if len(cands) >= k else None
        if allowed is None:
            if len(self._items) < k:
                return None
            return rng.sample(self._items, k)
        cands = [s for s in self._items if pool_of[s] in allowed]
        return rng.sample(cands, k) if len(cands) >= k else None


@dataclass
class TrainingJob:
    """One synchronous job on `spec.nodes` nodes: compute in checkpoint intervals, each followed by a blocking
    checkpoint; a failure of any of its nodes loses the work since the last checkpoint, then it waits until
    the failed nodes are out of its way (detected and cordoned, or found by its own timeout) and restarts on
    spare healthy nodes, paying the restart overhead."""

    spec: TrainingJobSpec
    jid: str
    nodes: set[int] = field(default_factory=set)
    state: str = "waiting"  # waiting (for nodes) | recovering | restarting | running | done
    started: float = 0.0
    run_since: float = 0.0
    committed: float = 0.0  # compute saved in checkpoints
    failed: dict[int, str] = field(default_factory=dict)  # slot -> detecting | waiting | released | keep
    token: int = 0
    ended: float | None = None
    interruptions: Counter[str] = field(default_factory=Counter)
    excluded: set[int] = field(default_factory=set)  # nodes this job found broken and keeps off (its own view)
    attempt_since: float = 0.0  # when the current attempt was placed
    outcome: str | None = None  # completed | platform | other, once ended

    @property
    def cycle(self) -> float:
        return self.spec.checkpoint_interval_s + self.spec.checkpoint_cost_s

    def commit(self, now: float) -> None:
        """Bank the checkpoints completed since the run started (a run's partial interval is lost)."""
        if self.state == "running":
            cycles = math.floor((now - self.run_since) / self.cycle + 1e-9)
            self.committed += cycles * self.spec.checkpoint_interval_s

    def time_to_finish(self) -> float | None:
        if self.spec.work_s is None:
            return None
        left = max(0.0, self.spec.work_s - self.committed)
        cycles = math.ceil(left / self.spec.checkpoint_interval_s - 1e-9)
        return cycles * self.cycle

    def ettr(self, end: float) -> float:
        wall = (self.ended if self.ended is not None else end) - self.started
        return self.committed / wall if wall > 0 else 1.0


@dataclass
class SmallJob:
    spec: SmallJobSpec
    jid: int
    stream: int
    rng: random.Random
    duration: float
    buggy: bool
    nodes: list[int] = field(default_factory=list)
    attempts: int = 0
    app_failures: int = 0
    token: int = 0
    hung: bool = False
    failures: int = 0  # failed attempts the Job counted (its backoffLimit): not evictions
    loop_count: int = 0  # app verdicts in a row (the restart-loop guard, with the classifier on)
    excluded: set[int] = field(default_factory=set)  # nodes the job found broken
    since: float = 0.0  # the current attempt's start
    pending: tuple[str, float] = ("done", 0.0)  # how and when the current attempt ends (done | app), if nothing else


@dataclass
class JobTally:
    """Small jobs' outcomes, and the attempts the platform ended."""

    submitted: int = 0
    completed: int = 0
    completed_sound: int = 0  # of them, jobs without a bug
    failed_app: int = 0  # out of retries (or stopped by the restart-loop guard) on its own bug or another cause
    failed_platform: int = 0  # out of retries, or stopped by the guard, on an infrastructure failure
    sound_ended: int = 0  # jobs without a bug that ended (completed or failed)
    ended: int = 0
    attempts: int = 0
    attempts_by_platform: int = 0  # attempts an infrastructure failure, a drain or a preemption ended
    preempted: int = 0
