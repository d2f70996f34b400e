"""The disruption budget, counted from the cluster (our taints and state annotations) on every pass.

Nothing here remembers anything between passes: a restart or a new leader counts the same. Within
one pass, starting an action takes from the ledger so that one pass cannot overspend either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuhealth.remediator.decide.correlated import CorrelatedFaults
from gpuhealth.remediator.decide.monitoring_fault import MonitoringFaults
from gpuhealth.remediator.decide.nodestate import fmt_time, parse_time
from gpuhealth.remediator.decide.sweep_due import sweeping
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE, Action, Deferral, Remediation, Scope
from gpuhealth.remediator.policy import Policy


@dataclass(frozen=True)
class Held:
    """A gate's answer when it holds an action back: which limit (typed, for metrics and the simulator) and why, in
    words for people (the decision's reason, the Event, the audit line)."""

    limit: Deferral
    reason: str


@dataclass
class PoolUsage:
    size: int = 0
    disrupted: set[str] = field(default_factory=set)  # nodes in drain or higher
    cordoned: set[str] = field(default_factory=set)  # nodes carrying our taint
    firing: set[str] = field(default_factory=set)  # nodes with firing actionable alerts (no monitoring fault's)
    gpus: int = 0  # GPUs the pool's DRA drivers publish
    quarantined: set[str] = field(default_factory=set)  # nodes with a GPU quarantined (GPU scope)
    sweeping: set[str] = field(default_factory=set)  # nodes an idle-node sweep holds (decide/sweep.py sweeping)


def _disrupted(view: NodeView) -> bool:
    """In drain or higher at node scope; a node whose state cannot be read counts too (fail closed). A node with
    one GPU quarantined stays in service: it counts against the GPU budget instead."""
    if view.damaged is not None:
        return True
    return view.state.active and view.state.scope == Scope.NODE and view.state.rung is not None \
        and Action(view.state.rung) in DISRUPTIVE


def _quarantined(view: NodeView) -> bool:
    return view.state.active and view.state.scope == Scope.GPU and view.state.rung is not None


@dataclass
class Ledger:
    policy: Policy
    now: datetime
    pools: dict[str, PoolUsage]
    actions_last_hour: int
    breaker_trips: dict[str, str]  # pool -> when the breaker last tripped (kept on the Lease)
    faults: MonitoringFaults  # gpuhealth's own alerts that are its own fault this pass: they start nothing
    newly_tripped: dict[str, str] = field(default_factory=dict)
    # the same alert on nodes behind one switch or rack this pass: it climbs no node (decide/correlated.py)
    correlated: CorrelatedFaults = field(default_factory=lambda: CorrelatedFaults(min_nodes=0))

    @classmethod
    def from_views(cls, views: list[NodeView], policy: Policy, now: datetime,
                   breaker_trips: dict[str, str] | None = None,
                   pool_sizes: dict[str, int] | None = None) -> Ledger:
        """pool_sizes: each pool's size when `views` holds only the nodes with anything recorded (the rest
        carry no state, no taint and no firing alert, so they count in their pool's size and nothing else:
        the fleet simulator, gpuhealth/simulator/remediation.py). None: every node is in `views`.
        A monitoring fault's alerts (decide/monitoring_fault.py) do not count as firing: they start nothing, and a
        pool's breaker stays for its hardware alerts."""
        pools: dict[str, PoolUsage] = {}
        for v in views:
            pools.setdefault(v.pool, PoolUsage()).size += 1
        for pool, size in (pool_sizes or {}).items():
            pools.setdefault(pool, PoolUsage()).size = size
        faults = MonitoringFaults.count(views, policy, now, _monitored(views, pools, pool_sizes is None))
        hour_ago = now - timedelta(hours=1)
        actions = 0
        for v in views:
            usage = pools[v.pool]
            if _disrupted(v):
                usage.disrupted.add(v.name)
            if _quarantined(v):
                usage.quarantined.add(v.name)
            if sweeping(v.state):
                usage.sweeping.add(v.name)
            usage.gpus += v.devices.gpu_count if v.devices is not None else 0
            if v.our_taint or v.state.cordoned:
                usage.cordoned.add(v.name)
            actionable = {fp: a for fp, a in v.state.firing(now, policy.episode.quiet_timeout).items()
                          if a.remediation != Remediation.NONE}
            if set(actionable) - set(faults.of(v, actionable)):
                usage.firing.add(v.name)
            actions += v.state.actions_since(hour_ago)
        ledger = cls(policy, now, pools, actions, dict(breaker_trips or {}), faults,
                     correlated=CorrelatedFaults.count(views, policy, now))
        for pool in pools:
            ledger._check_breaker(pool)
        return ledger

    # --- limits ----------------------------------------------------------------------------
    def disrupted_limit(self, pool: str) -> int:
        return self.policy.budget.max_disrupted.limit(self.pools[pool].size)

    def cordoned_limit(self, pool: str) -> int:
        return self.policy.budget.max_cordoned.limit(self.pools[pool].size)

    def quarantined_limit(self, pool: str) -> int:
        """GPUs: one per quarantined node (a fault on several GPUs of a node takes the node)."""
        return self.policy.budget.max_quarantined_gpus.limit(self.pools[pool].gpus)

    def _check_breaker(self, pool: str) -> None:
        """Trips (again) while the storm lasts, so the cool-down runs from its end; reported (newly_tripped)
        only when the breaker goes from closed to open."""
        usage = self.pools[pool]
        share = 100.0 * len(usage.firing) / max(1, usage.size)
        if share > self.policy.breaker.threshold and len(usage.firing) >= self.policy.breaker.min_nodes:
            was_open = self.breaker_open(pool)
            self.breaker_trips[pool] = fmt_time(self.now)
            if not was_open:
                self.newly_tripped[pool] = f"{len(usage.firing)}/{usage.size} nodes firing ({share:.0f}%)"

    def breaker_open(self, pool: str) -> bool:
        tripped = self.breaker_trips.get(pool)
        return tripped is not None and self.now - parse_time(tripped) < self.policy.breaker.cooldown

    # --- gates: None when allowed, else what held it back ---------------------------------
    def gate(self, view: NodeView, action: str) -> Held | None:
        usage = self.pools[view.pool]
        cap = self.policy.budget.max_actions_per_hour
        if self.actions_last_hour >= cap:
            return Held(Deferral.RATE_CAP, f"action rate cap reached ({self.actions_last_hour}/{cap} per hour)")
        if action == Action.QUARANTINE_GPU:
            if self.breaker_open(view.pool):
                return self._breaker(view.pool)
            limit = self.quarantined_limit(view.pool)
            if view.name not in usage.quarantined and len(usage.quarantined) >= limit:
                return Held(Deferral.GPU_BUDGET, f"GPU quarantine budget of pool {view.pool} in use "
                                                 f"({len(usage.quarantined)}/{limit} GPUs)")
            return None
        if action == Action.CORDON and view.name not in usage.cordoned:
            limit = self.cordoned_limit(view.pool)
            if len(usage.cordoned) >= limit:
                return Held(Deferral.CORDON_BUDGET,
                            f"cordon budget of pool {view.pool} in use ({len(usage.cordoned)}/{limit})")
        if action in DISRUPTIVE:
            if self.breaker_open(view.pool):
                return self._breaker(view.pool)
            if view.name not in usage.disrupted:
                limit = self.disrupted_limit(view.pool)
                if len(usage.disrupted) >= limit:
                    return Held(Deferral.DISRUPTION_BUDGET,
                                f"disruption budget of pool {view.pool} in use ({len(usage.disrupted)}/{limit})")
        return None

    def _breaker(self, pool: str) -> Held:
        return Held(Deferral.BREAKER, f"circuit breaker open for pool {pool} since {self.breaker_trips[pool]} "
                                      f"(too many nodes firing at once)")

    def take(self, view: NodeView, action: str) -> None:
        usage = self.pools[view.pool]
        self.actions_last_hour += 1
        if action == Action.QUARANTINE_GPU:
            usage.quarantined.add(view.name)
        if action == Action.CORDON:
            usage.cordoned.add(view.name)
        if action in DISRUPTIVE:
            usage.disrupted.add(view.name)

    def release(self, view: NodeView) -> None:
        usage = self.pools[view.pool]
        usage.cordoned.discard(view.name)
        usage.disrupted.discard(view.name)
        usage.quarantined.discard(view.name)


def _monitored(views: list[NodeView], pools: dict[str, PoolUsage], every_node: bool) -> dict[str, int]:
    """Each pool's nodes that gpuhealth's exporter runs on (its condition is on the Node): a monitoring fault's
    share is of these, as the rules' is of the exporter targets, so that the CPU nodes of a mixed pool do not dilute
    it. A pool where no Node carries the condition (the exporter's conditions turned off) counts every node; so do
    pools given by size (`every_node` False: the simulator's nodes all run the exporter)."""
    sizes = {pool: usage.size for pool, usage in pools.items()}
    if not every_node:
        return sizes
    monitored: dict[str, int] = dict.fromkeys(sizes, 0)
    for v in views:
        if v.exporter_condition is not None:
            monitored[v.pool] += 1
    return {pool: monitored[pool] or size for pool, size in sizes.items()}
