"""What a run records for its result: the decisions of the passes, the pools' budgets as each pass's ledger saw
them, samples over time (for --html), and the time out of service added up at the end."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.vocabulary import Deferral
from gpuhealth.simulator.events import HOUR, EventQueue
from gpuhealth.simulator.fleet import Fleet, Outage
from gpuhealth.simulator.results import Sample
from gpuhealth.simulator.workload import JobTally


class DecisionTally:
    """Each decision of each pass by action and verdict, and the budget's deferrals by kind (decide/budget.py)."""

    def __init__(self) -> None:
        self.decisions: Counter[str] = Counter()
        self.deferred: Counter[str] = Counter()

    def count(self, plan: NodePlan) -> bool:
        """Counts the plan's decisions; whether the action rate cap held one back."""
        rate_capped = False
        for d in plan.decisions:
            self.decisions[f"{d.action}:{d.decision}"] += 1
            if d.deferral is not None:
                self.deferred[d.deferral.value] += 1
                rate_capped = rate_capped or d.deferral == Deferral.RATE_CAP
        return rate_capped


@dataclass(frozen=True)
class BudgetReading:
    t: float
    disrupted: dict[str, int]  # pool -> nodes disrupted
    disrupted_limit: dict[str, int]
    breaker_open: dict[str, bool]


class BudgetWatch:
    """The pools' budgets pass after pass: the most nodes disrupted at once, and how long each breaker stayed open."""

    def __init__(self, pools: Iterable[str]) -> None:
        pools = list(pools)
        self.max_disrupted: dict[str, int] = dict.fromkeys(pools, 0)
        self.breaker_open_s: dict[str, float] = dict.fromkeys(pools, 0.0)
        self.last: BudgetReading | None = None

    def account(self, ledger: Ledger, now: float) -> None:
        disrupted = {p: len(u.disrupted) for p, u in ledger.pools.items()}
        limits = {p: ledger.disrupted_limit(p) for p in ledger.pools}
        open_ = {p: ledger.breaker_open(p) for p in ledger.pools}
        if self.last is not None:
            for p, was_open in self.last.breaker_open.items():
                if was_open:
                    self.breaker_open_s[p] = self.breaker_open_s.get(p, 0.0) + now - self.last.t
        for p, n in disrupted.items():
            self.max_disrupted[p] = max(self.max_disrupted.get(p, 0), n)
        self.last = BudgetReading(now, disrupted, limits, open_)

    def close(self, end: float) -> None:
        """The run ends: a breaker still open was open until the end."""
        if self.last is not None:
            for p, is_open in self.last.breaker_open.items():
                if is_open:
                    self.breaker_open_s[p] += end - self.last.t


class Sampler:
    """Every `interval_s`: the nodes out of service by rung, the budgets, availability and job success so far."""

    def __init__(self, queue: EventQueue, fleet: Fleet, budget: BudgetWatch, tally: JobTally,
                 interval_s: float) -> None:
        self._queue, self._fleet, self._budget, self._tally = queue, fleet, budget, tally
        self._interval_s = interval_s
        self.samples: list[Sample] = []

    def start(self) -> None:
        self._queue.at(0.0, self._sample)

    def _sample(self) -> None:
        now, nodes, avail = self._queue.now, self._fleet.nodes, self._fleet.avail
        out: dict[str, int] = defaultdict(int)
        for slot in avail.out:
            n = nodes[slot]
            if not n.in_service:
                rung = n.state.rung if n.state.active and n.state.rung else (
                    "replace" if n.replacing else "detecting")
                out[rung] += 1
        budget = self._budget.last
        elapsed = now * len(nodes)
        down = avail.closed_s + sum(now - (nodes[s].out_since or now) for s in avail.out)
        t = self._tally
        self.samples.append(Sample(
            now, dict(out), dict(budget.disrupted) if budget else {}, dict(budget.disrupted_limit) if budget else {},
            dict(budget.breaker_open) if budget else {}, 1.0 - down / elapsed if elapsed else 1.0,
            t.completed_sound / t.sound_ended if t.sound_ended else None))
        self._queue.at(now + self._interval_s, self._sample)


@dataclass
class OutOfService:
    node_seconds: float
    gpu_seconds: float
    hours_by_cause: dict[str, float]
    hours_by_rung: dict[str, float]  # the highest rung reached ("none": no rung)
    gpu_seconds_kept: float = 0.0  # the node's other GPUs a DRA quarantine of one kept in service


def out_of_service(outages: list[Outage], gpus_per_node: int) -> OutOfService:
    """The outages added up; a GPU-scoped outage took only its GPU while the node still took work."""
    by_cause: dict[str, float] = defaultdict(float)
    by_rung: dict[str, float] = defaultdict(float)
    out_s = out_gpu = kept = 0.0
    for o in outages:
        d = o.end - o.start
        out_s += d
        out_gpu += d * gpus_per_node - o.partial_s * (gpus_per_node - 1)
        kept += o.quarantined_s * (gpus_per_node - 1)
        by_cause[o.cause] += d / HOUR
        by_rung[o.rung or "none"] += d / HOUR
    return OutOfService(out_s, out_gpu, dict(by_cause), dict(by_rung), kept)
