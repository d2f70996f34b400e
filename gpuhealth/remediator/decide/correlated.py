"""Correlated faults: the same alert on several nodes behind one switch or rack at once is one fault, not one per node.

A switch that drops packets makes every node under it fire NetdevTransmitTimeout; a rack's power feed makes every
node in it fire GpuhealthExporterDown. No node action fixes them, and climbing each node (drain, reboot, replace)
would take a whole rack out for what one person with one page can fix. The nodes that share a value of one of
`correlation.labels` (a switch, a sub-block, a rack) and fire the same alert (by alertname), at least
`correlation.min_nodes` of them, are one correlated fault: each node still gets its alert's own rung (new work is kept
off a node that drops packets), a Warning Event says which nodes share it, the remediator's
gpuhealth_remediator_correlated_fault_nodes gauge makes it one page (GpuhealthCorrelatedFault), and none of their
alerts climbs past its own rung (decide/climb.py's ceiling).

Counted afresh on every pass from the views, as monitoring faults are. An alert once counted stays correlated on its
node for as long as it fires (NodeState.correlated): as the switch is fixed and its nodes resolve one by one, the
last ones are not climbed for a fault that was never theirs.
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
class SharedFault:
    """One alert on the nodes that share one value of a topology label."""

    label: str
    value: str
    alert: str

    def what(self) -> str:
        return f"{self.alert} on the nodes with {self.label}={self.value}"


@dataclass
class CorrelatedFaults:
    """Which alerts are correlated this pass: the shared faults and the nodes firing each."""

    min_nodes: int
    faults: dict[SharedFault, set[str]] = field(default_factory=dict)

    @classmethod
    def count(cls, views: Iterable[NodeView], policy: Policy, now: datetime) -> CorrelatedFaults:
        settings = policy.correlation
        firing: dict[SharedFault, set[str]] = defaultdict(set)
        if settings.labels:
            for v in views:
                names = {a.name for a in v.state.firing(now, policy.episode.quiet_timeout).values()
                         if a.remediation != Remediation.NONE}
                for label in settings.labels:
                    value = v.labels.get(label)
                    if value:
                        for name in names:
                            firing[SharedFault(label, value, name)].add(v.name)
        shared = {key: nodes for key, nodes in firing.items() if len(nodes) >= settings.min_nodes}
        return cls(settings.min_nodes, shared)

    def of(self, view: NodeView, alerts: dict[str, AlertRecord]) -> dict[str, SharedFault]:
        """The fingerprints of these alerts of this node that are correlated now, with the shared fault each is part
        of (the first of policy correlation.labels that counts them)."""
        out: dict[str, SharedFault] = {}
        for key in sorted(self.faults):
            if view.name in self.faults[key]:
                for fp, alert in alerts.items():
                    if alert.name == key.alert:
                        out.setdefault(fp, key)
        return out

    def why(self, key: SharedFault) -> str:
        nodes = sorted(self.faults[key])
        shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        return (f"{key.what()} fires on {len(nodes)} nodes at once ({shown}): one fault they share, not one each "
                f"(policy correlation: at least {self.min_nodes} nodes)")
