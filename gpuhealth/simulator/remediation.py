"""The remediator's own decision path, driven from simulated nodes.

Each pass builds real NodeViews (gpuhealth.remediator.decide.views.NodeView) from the simulated Nodes that carry
anything gpuhealth recorded and hands them to gpuhealth.remediator.decide.plan.evaluate, the function `serve` and `plan`
share: the ledger (budgets, the circuit breaker, the action rate cap) and gpuhealth.remediator.decide.ladder.decide are
the real ones. Nodes with nothing recorded are left out of the views, as decide would skip them anyway; they still count
in their pool's size (evaluate's pool_sizes), so budgets and the breaker see the whole pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.ladder import decide
from gpuhealth.remediator.decide.plan import evaluate
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.wake import next_decision
from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.fleet import SimNode

# Simulated time 0. Fixed, so that no result depends on the date a simulation runs.
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)


def to_datetime(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


def to_seconds(when: datetime) -> float:
    return (when - EPOCH).total_seconds()


def as_deployed(policy: Policy) -> Policy:
    """The policy as the chart deploys it: the chart sets diagnose.judge_image to its own image, without which no
    diagnostic Job (a repair's validation) is asked for."""
    if policy.diagnose.judge_image is not None:
        return policy
    return replace(policy, diagnose=replace(policy.diagnose, judge_image="gpuhealth (simulated)"))


class SimLeader:
    """The leader's passes: the breaker's trips kept between passes as serve keeps them on its Lease."""

    def __init__(self, policy: Policy, pool_sizes: dict[str, int], gpus_per_node: int = 0) -> None:
        self.policy = policy
        self.pool_sizes = dict(pool_sizes)
        # the GPUs each pool's DRA driver publishes (0: no DRA): the GPU quarantine budget's base
        self.pool_gpus = {p: n * gpus_per_node for p, n in pool_sizes.items()}
        self.breaker_trips: dict[str, str] = {}
        self.trips = 0  # closed -> open transitions

    def decide(self, nodes: list[SimNode], now: float) -> tuple[Ledger, list[NodePlan]]:
        views = [n.view(self.policy, to_datetime(now)) for n in nodes]
        ledger, plans = self._evaluate(views, to_datetime(now))
        self.trips += len(ledger.newly_tripped)
        self.breaker_trips = ledger.breaker_trips
        return ledger, plans

    def _evaluate(self, views: list[NodeView], now: datetime) -> tuple[Ledger, list[NodePlan]]:
        """gpuhealth.remediator.decide.plan.evaluate: the ledger, then decide. Its two steps are called here so that
        each pool counts all its published GPUs (as pool_sizes counts all its nodes): the views hold only the tracked
        nodes, and the GPU quarantine budget (budget.max_quarantined_gpus) is a share of the pool's GPUs."""
        if not any(self.pool_gpus.values()):
            return evaluate(views, self.policy, now, self.breaker_trips, None, self.pool_sizes)
        ledger = Ledger.from_views(views, self.policy, now, self.breaker_trips, self.pool_sizes)
        for pool, usage in ledger.pools.items():
            usage.gpus = self.pool_gpus.get(pool, usage.gpus)
        return ledger, decide(views, self.policy, now, ledger, None)

    def next_wake(self, nodes: Iterable[SimNode], now: float, rate_capped: bool) -> float | None:
        """The ladder's own next decision time (gpuhealth.remediator.decide.wake), in simulated seconds."""
        when = next_decision((n.state for n in nodes), self.policy, self.breaker_trips, to_datetime(now), rate_capped)
        return to_seconds(when) if when is not None else None
