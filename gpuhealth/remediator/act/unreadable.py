"""The nodes a pass left alone because it could not read them: a damaged state annotation (decide/nodestate.py,
decide/state_schema.py), or an object the pass could not read or decide (decide/views.py unreadable_view,
decide/ladder.py). Each fails closed alone: counted as disrupted, left alone, while every other node goes on.

Reported so that a person fixes it: the gauge gpuhealth_remediator_unreadable_nodes holds how many there are now, and
a node that becomes one gets a Warning Event (UnreadableState) on it, an audit line and a log line once, not every
pass; one that is read again gets an audit line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.metrics import Metrics

log = logging.getLogger("gpuhealth.remediator")


class UnreadableNodes:
    def __init__(self, kube: Kube, metrics: Metrics) -> None:
        self.kube, self.metrics = kube, metrics
        self._reported: set[str] = set()  # the nodes the last pass reported unreadable

    def report(self, views: Iterable[NodeView], now: datetime) -> None:
        why = {v.name: v.damaged for v in views if v.damaged is not None}
        self.metrics.unreadable_nodes.set(len(why))
        for node in sorted(set(why) - self._reported):
            message = (f"gpuhealth cannot read this node ({why[node]}): it counts as disrupted and is left alone "
                       f"until it can be read again (a damaged {STATE_ANNOTATION} annotation: fix or remove it)")
            log.warning("node %s: %s", node, message)
            audit(AuditKind.NODE_UNREADABLE, node=node, reason=why[node], dry_run=self.kube.dry_run)
            self.kube.event(node, EventReason.UNREADABLE_STATE, message, now, warning=True)
        for node in sorted(self._reported - set(why)):
            audit(AuditKind.NODE_READABLE_AGAIN, node=node, dry_run=self.kube.dry_run)
        self._reported = set(why)
