"""gpuhealth_training.StepTimer: compute steps only, after warm-up, median over a window of recent steps."""

from __future__ import annotations

import pytest
from gpuhealth_training import StepTimer
from gpuhealth_training.steps import StepKind


class FakeClock:
    """Time advances only when a step says so: step times are exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[StepKind, float, bool, float | None]] = []

    def observe(self, kind: StepKind, seconds: float, timed: bool, median: float | None) -> None:
        self.calls.append((kind, seconds, timed, median))


def _run(timer: StepTimer, clock: FakeClock, seconds: float, kind: StepKind = "compute") -> None:
    with timer.step(kind):
        clock.now += seconds


def test_warmup_steps_are_not_timed_and_leave_no_median() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=3, window=10, clock=clock)
    for seconds in (9.0, 8.0, 7.0):  # compilation, allocator, NCCL warm-up: slow
        _run(timer, clock, seconds)
    assert timer.in_warmup is False and timer.median() is None and timer.window == []
    _run(timer, clock, 1.0)
    assert timer.window == [1.0] and timer.median() == 1.0


def test_checkpoint_and_eval_steps_are_counted_but_never_timed() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=1, window=10, clock=clock)
    _run(timer, clock, 5.0)  # warm-up
    _run(timer, clock, 1.0)
    _run(timer, clock, 30.0, "checkpoint")
    _run(timer, clock, 20.0, "eval")
    _run(timer, clock, 3.0)
    assert timer.window == [1.0, 3.0] and timer.median() == 2.0
    assert timer.counts == {"compute": 3, "checkpoint": 1, "eval": 1}


def test_checkpoint_steps_do_not_shorten_warmup() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=2, window=10, clock=clock)
    _run(timer, clock, 1.0, "checkpoint")
    _run(timer, clock, 1.0, "eval")
    _run(timer, clock, 4.0)
    assert timer.in_warmup and timer.median() is None


def test_median_covers_only_the_recent_window() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=0, window=3, clock=clock)
    for seconds in (10.0, 10.0, 10.0, 1.0, 2.0, 3.0):
        _run(timer, clock, seconds)
    assert timer.window == [1.0, 2.0, 3.0] and timer.median() == 2.0


def test_median_ignores_a_single_outlier_in_the_window() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=0, window=5, clock=clock)
    for seconds in (1.0, 1.0, 60.0, 1.0, 1.0):  # a GC pause or a straggling data loader
        _run(timer, clock, seconds)
    assert timer.median() == 1.0


def test_a_step_that_raises_is_not_recorded() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=0, clock=clock)
    with pytest.raises(RuntimeError), timer.step():
        clock.now += 5.0
        raise RuntimeError("loss exploded")
    assert timer.window == [] and timer.counts["compute"] == 0


def test_decorator_times_every_call_as_a_step_of_its_kind() -> None:
    clock = FakeClock()
    timer = StepTimer(warmup_steps=0, clock=clock)

    @timer.timed()
    def train(seconds: float) -> str:
        clock.now += seconds
        return "ok"

    @timer.timed("eval")
    def evaluate() -> None:
        clock.now += 100.0

    assert train(2.0) == "ok" and train(4.0) == "ok"
    evaluate()
    assert timer.window == [2.0, 4.0] and timer.counts["eval"] == 1


def test_sync_runs_before_each_clock_read() -> None:
    events: list[str] = []
    clock = FakeClock()

    def read() -> float:
        events.append("clock")
        return clock()

    timer = StepTimer(warmup_steps=0, clock=read, sync=lambda: events.append("sync"))
    with timer.step():
        events.append("work")
    assert events == ["sync", "clock", "work", "sync", "clock"]


def test_observers_see_every_step_and_whether_it_was_timed() -> None:
    clock = FakeClock()
    recorder = Recorder()
    timer = StepTimer(warmup_steps=1, window=10, clock=clock, observers=[recorder])
    _run(timer, clock, 5.0)
    _run(timer, clock, 1.0)
    _run(timer, clock, 9.0, "checkpoint")
    assert recorder.calls == [("compute", 5.0, False, None), ("compute", 1.0, True, 1.0),
                              ("checkpoint", 9.0, False, 1.0)]


@pytest.mark.parametrize(("kwargs", "message"), [({"warmup_steps": -1}, "warmup_steps"), ({"window": 0}, "window")])
def test_bad_settings_are_rejected_naming_the_setting(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StepTimer(**kwargs)


def test_bad_step_kind_or_time_is_rejected() -> None:
    timer = StepTimer(warmup_steps=0)
    with pytest.raises(ValueError, match="unknown step kind 'train'"):
        timer.record(1.0, "train")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        timer.record(float("nan"))
    assert timer.counts["compute"] == 0
