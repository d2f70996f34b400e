"""A pass's guard: before every write, this replica still leads and the pass is within its deadline."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from gpuhealth.remediator.act.drain import OutOfTime
from gpuhealth.remediator.clients.leader import Elector
from gpuhealth.remediator.clock import Clock
from gpuhealth.remediator.metrics import PassAbortReason


class PassAborted(Exception):
    """This replica lost the Lease, or the pass ran past its deadline: stop writing at once."""

    def __init__(self, reason: PassAbortReason, detail: str = "") -> None:
        super().__init__(f"{reason} ({detail})" if detail else str(reason))
        self.reason = reason


class PassGuard:
    def __init__(self, elector: Elector, clock: Clock, sleep: Callable[[float], None]) -> None:
        self.elector, self.clock, self.backoff_sleep = elector, clock, sleep
        self.deadline: datetime | None = None

    def begin(self, now: datetime) -> None:
        """Decisions older than the renew deadline are not acted on: a pass ends by then (or its Lease goes)."""
        self.deadline = self.elector.pass_due = now + self.elector.renew_deadline

    def end(self) -> None:
        self.deadline = self.elector.pass_due = None

    def seconds_left(self) -> float:
        """Time left to this pass on the loop's clock (calls to Alertmanager are bounded by it)."""
        if self.deadline is None:
            return self.elector.renew_deadline.total_seconds()
        return max(0.0, (self.deadline - self.clock()).total_seconds())

    def check(self) -> None:
        if not self.elector.is_leader():
            raise PassAborted(PassAbortReason.LOST_LEASE)
        # A dry run has no Lease to lose by running long, and its pass's report must not be cut off.
        if self.deadline is not None and self.elector.takes_part and self.clock() >= self.deadline:
            raise PassAborted(PassAbortReason.DEADLINE, str(self.elector.renew_deadline))

    def sleep(self, seconds: float) -> None:
        """Backoff within a pass, never past the pass's deadline."""
        if self.deadline is not None and self.clock().timestamp() + seconds >= self.deadline.timestamp():
            raise OutOfTime()
        self.backoff_sleep(seconds)
