"""Monitoring faults: gpuhealth's own alerts firing on many nodes of a pool at once are gpuhealth's fault, not the
nodes'.

GpuhealthProbeFailing, ProbeStale, ExporterDown and ExporterTargetMissing say what gpuhealth's exporter cannot see,
not what it saw. On one node that is reason enough to cordon it (fail closed). The same alert (the same alertname,
probe and reason labels) on more than `monitoring_fault.threshold` of a pool, and on at least `min_nodes` of its
nodes, is one cause for all of them (an exporter without the runtime class the GPU Operator needs, an image the
nodes cached, a flag it does not know): cordoning a fifth of every pool for it helps nobody. The rules page a
person for it (GpuhealthMonitoringFault) and hold the per-node alerts back; this is the remediator's own count, for
when they do not (rules edited, a fleet split between several Prometheus servers). Such alerts start nothing and
climb nothing (decide/ladder.py); a node's other alerts are handled as usual.

Counted afresh on every pass from the views, as the budget is. An alert once counted stays a monitoring fault
while at least min_nodes nodes of the pool still fire it (the node's state records it, NodeState.monitoring_faults):
as a fix rolls out, the nodes that get it last are not cordoned meanwhile; fewer than min_nodes are node faults
again, each failing closed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gpuhealth.remediator.decide.nodestate import AlertRecord
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import Remediation
from gpuhealth.remediator.policy import Policy


@dataclass(frozen=True, order=True)
class FaultKey:
    """One failure, as the rules count it: an alert of gpuhealth's own, by name, probe and reason, in one pool."""

    pool: str
    alert: str
    probe: str = ""
    reason: str = ""

    @classmethod
    def of(cls, pool: str, alert: AlertRecord) -> FaultKey:
        return cls(pool, alert.name, alert.probe or "", alert.reason or "")

    def what(self) -> str:
        """The alert and its labels, e.g. `GpuhealthProbeFailing probe=nvml reason=missing_tool`."""
        labels = [f"{k}={v}" for k, v in (("probe", self.probe), ("reason", self.reason)) if v]
        return " ".join([self.alert, *labels])


@dataclass
class MonitoringFaults:
    """Which of gpuhealth's own alerts are a monitoring fault this pass, per pool."""

    policy: Policy
    pool_sizes: dict[str, int]
    firing: dict[FaultKey, set[str]] = field(default_factory=dict)  # the nodes firing each counted alert
    faults: dict[FaultKey, set[str]] = field(default_factory=dict)  # those that are a monitoring fault

    @classmethod
    def count(cls, views: Iterable[NodeView], policy: Policy, now: datetime,
              pool_sizes: dict[str, int]) -> MonitoringFaults:
        """pool_sizes: every pool's node count (Ledger.from_views)."""
        settings = policy.monitoring_fault
        firing: dict[FaultKey, set[str]] = defaultdict(set)
        held: set[FaultKey] = set()
        for v in views:
            for fp, alert in v.state.firing(now, policy.episode.quiet_timeout).items():
                if alert.remediation == Remediation.NONE or alert.name not in settings.alerts:
                    continue
                key = FaultKey.of(v.pool, alert)
                firing[key].add(v.name)
                if fp in v.state.monitoring_faults:
                    held.add(key)
        out = cls(policy, pool_sizes, dict(firing))
        for key, nodes in firing.items():
            share = 100.0 * len(nodes) / max(1, pool_sizes.get(key.pool, 0))
            if len(nodes) >= settings.min_nodes and (share > settings.threshold or key in held):
                out.faults[key] = nodes
        return out

    def of(self, view: NodeView, alerts: dict[str, AlertRecord]) -> dict[str, FaultKey]:
        """The fingerprints of these alerts of this node that are a monitoring fault, with the failure each is."""
        keys = {fp: FaultKey.of(view.pool, a) for fp, a in alerts.items()}
        return {fp: key for fp, key in keys.items() if key in self.faults}

    def why(self, key: FaultKey) -> str:
        """A monitoring fault's numbers, for Events, decisions and the audit log."""
        nodes, size = len(self.faults[key]), self.pool_sizes.get(key.pool, 0)
        settings = self.policy.monitoring_fault
        rule = f"more than {settings.threshold:g}% of a pool and at least {settings.min_nodes} nodes"
        if 100.0 * nodes / max(1, size) <= settings.threshold:
            rule = f"it was {rule}, and {settings.min_nodes} or more still fire it"
        return (f"{key.what()} fires on {nodes} of {size} nodes of pool {key.pool} at once: gpuhealth's own failure, "
                f"not the nodes' (policy monitoring_fault: {rule})")
