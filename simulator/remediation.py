"""The remediator's own decision path, driven from simulated nodes.

Each pass builds real NodeViews (remediator.decide.views.NodeView) from the simulated Nodes that carry anything
gpuhealth recorded and hands them to remediator.decide.plan.evaluate, the function `serve` and `plan` share:
the ledger (budgets, the circuit breaker, the action rate cap) and remediator.decide.ladder.decide are the real ones.
Nodes with nothing recorded are left out of the views, as decide would skip them anyway; they still count in
their pool's size (evaluate's pool_sizes), so budgets and the breaker see the whole pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from remediator.decide.budget import Ledger
from remediator.decide.decision import NodePlan
from remediator.decide.nodestate import parse_time
from remediator.decide.plan import evaluate
from remediator.decide.vocabulary import RungStatus
from remediator.policy import Policy
from simulator.fleet import SimNode

# Simulated time 0. Fixed, so that no result depends on the date a simulation runs.
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def to_datetime(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


def to_seconds(when: datetime) -> float:
    return (when - EPOCH).total_seconds()


class Remediator:
    """The leader's passes: the breaker's trips kept between passes as serve keeps them on its Lease."""

    def __init__(self, policy: Policy, pool_sizes: dict[str, int]) -> None:
        self.policy = policy
        self.pool_sizes = dict(pool_sizes)
        self.breaker_trips: dict[str, str] = {}
        self.trips = 0  # closed -> open transitions

    def decide(self, nodes: list[SimNode], now: float) -> tuple[Ledger, list[NodePlan]]:
        views = [n.view(self.policy) for n in nodes]
        ledger, plans = evaluate(views, self.policy, to_datetime(now), self.breaker_trips, None, self.pool_sizes)
        self.trips += len(ledger.newly_tripped)
        self.breaker_trips = ledger.breaker_trips
        return ledger, plans

    def next_wake(self, nodes: Iterable[SimNode], now: float, rate_capped: bool) -> float | None:
        """The earliest time a decision could change with nothing else happening: a rung's timeout, an
        escalation, the healthy delay, an episode going quiet, the breaker's cool-down, or (when the rate cap
        deferred something) the oldest action of the last hour ageing out."""
        p = self.policy
        when: list[datetime] = []
        for n in nodes:
            st = n.state
            if st.rung and st.rung_status == RungStatus.RUNNING and st.rung_started:
                timeout = p.rung(st.rung).timeout
                if timeout is not None:
                    when.append(parse_time(st.rung_started) + timeout)
            if st.rung and st.rung_status == RungStatus.DONE and st.rung_done:
                esc = p.rung(st.rung).escalate_after
                if esc is not None:
                    when.append(parse_time(st.rung_done) + esc)
            if st.active and st.healthy_since:
                when.append(parse_time(st.healthy_since) + p.return_to_service.healthy_delay)
            for a in st.alerts.values():
                if a.status == "firing":
                    when.append(parse_time(a.last_seen) + p.episode.quiet_timeout)
            if rate_capped:
                when.extend(parse_time(t) + HOUR for t in st.actions)
        for tripped in self.breaker_trips.values():
            when.append(parse_time(tripped) + p.breaker.cooldown)
        later = [to_seconds(w) for w in when]
        later = [t for t in later if t > now + 1e-6]
        return min(later) if later else None
