"""Per-step timing for a training loop: compute steps only, after warm-up, over a window of recent steps.

Checkpoint and eval steps are counted but not timed into the window (they are slow by design, and would make
the rank that writes checkpoints look slow). The first `warmup_steps` compute steps are skipped too (compilation,
allocator and NCCL warm-up). Until warm-up is over there is no median, so a job in warm-up exports no step time.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, ParamSpec, Protocol, TypeVar

StepKind = Literal["compute", "checkpoint", "eval"]
KINDS: tuple[StepKind, ...] = ("compute", "checkpoint", "eval")

P = ParamSpec("P")
R = TypeVar("R")


class StepObserver(Protocol):
    def observe(self, kind: StepKind, seconds: float, timed: bool, median: float | None) -> None:
        """Called after every completed step; `timed` is False for warm-up, checkpoint and eval steps."""


class StepTimer:
    def __init__(self, warmup_steps: int = 20, window: int = 100, clock: Callable[[], float] = time.perf_counter,
                 sync: Callable[[], None] | None = None, observers: list[StepObserver] | None = None) -> None:
        """sync runs before each clock read (e.g. torch.cuda.synchronize: GPU work is asynchronous, so without it
        a step measures the kernel launches, not the work)."""
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.warmup_steps = warmup_steps
        self._times: deque[float] = deque(maxlen=window)
        self._clock = clock
        self._sync = sync
        self.observers: list[StepObserver] = list(observers or [])
        self.counts: dict[StepKind, int] = dict.fromkeys(KINDS, 0)

    @property
    def in_warmup(self) -> bool:
        return self.counts["compute"] < self.warmup_steps

    @property
    def window(self) -> list[float]:
        """The recent timed compute steps, oldest first."""
        return list(self._times)

    def median(self) -> float | None:
        """Median of the recent timed compute steps; None during warm-up (nothing timed yet)."""
        return statistics.median(self._times) if self._times else None

    def record(self, seconds: float, kind: StepKind = "compute") -> None:
        """Account one step measured elsewhere."""
        if kind not in KINDS:
            raise ValueError(f"unknown step kind {kind!r}: one of {', '.join(KINDS)}")
        if not seconds >= 0:  # also rejects NaN
            raise ValueError(f"step time must be a non-negative number, got {seconds!r}")
        timed = kind == "compute" and not self.in_warmup
        self.counts[kind] += 1
        if timed:
            self._times.append(seconds)
        median = self.median()
        for observer in self.observers:
            observer.observe(kind, seconds, timed, median)

    @contextmanager
    def step(self, kind: StepKind = "compute") -> Iterator[None]:
        """Time the body as one step of this kind. A step that raises is not recorded."""
        if kind not in KINDS:
            raise ValueError(f"unknown step kind {kind!r}: one of {', '.join(KINDS)}")
        self._sync_now()
        start = self._clock()
        yield
        self._sync_now()
        self.record(self._clock() - start, kind)

    def timed(self, kind: StepKind = "compute") -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorator: every call of the function is one step of this kind."""
        def wrap(fn: Callable[P, R]) -> Callable[P, R]:
            @functools.wraps(fn)
            def inner(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.step(kind):
                    return fn(*args, **kwargs)
            return inner
        return wrap

    def _sync_now(self) -> None:
        if self._sync is not None:
            self._sync()
