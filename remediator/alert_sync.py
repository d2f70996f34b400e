"""Level-triggered: what the Nodes should record, given the alerts Alertmanager lists as active now.

Webhooks are edges, and an edge can be lost: a crash between the 202 and the write, or a resolution
answered while the API server was down (Alertmanager sends a resolution once). Alertmanager's API v2
holds the level: every alert active now, silenced and inhibited ones included, resolved ones never.
`sync_batch` compares the two and returns the records that make the Nodes agree (pure: no I/O):

- an alert Alertmanager lists that a Node lacks (or that fired again since the Node last saw it) is
  recorded, unless it is silenced, inhibited or not yet routed (Alertmanager would not have sent it);
- a firing alert a Node records that Alertmanager no longer lists is resolved, if the Node recorded
  it before the list was asked for (a webhook that raced the list is not undone) and the list can be
  trusted to be complete (an Alertmanager that has just started may not have heard of every alert);
- a firing alert both hold is seen again: its `last_seen` moves (so the episode never goes quiet
  while Alertmanager still lists it), written only when it is older than `refresh_after`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from remediator.nodestate import AlertRecord, NodeState, fmt_time, parse_time
from remediator.policy import Policy
from remediator.webhook import Batch, NodeAlert, WebhookError, parse_webhook


@dataclass(frozen=True)
class ActiveAlert:
    """One alert Alertmanager lists now, as the webhook would have carried it."""

    node: str
    fingerprint: str
    record: AlertRecord
    suppressed: bool  # silenced or inhibited: never sent to the receiver
    processed: bool  # Alertmanager has routed it (state active or suppressed, not unprocessed)


@dataclass
class SyncPlan:
    batch: Batch = field(default_factory=Batch)
    recorded: int = 0
    resolved: int = 0
    refreshed: int = 0
    unknown_nodes: int = 0

    def changes(self) -> dict[str, int]:
        return {"recorded": self.recorded, "resolved": self.resolved, "refreshed": self.refreshed}


def active_alerts(items: list[dict[str, Any]], policy: Policy) -> tuple[list[ActiveAlert], list[tuple[str, str]]]:
    """Alertmanager's /api/v2/alerts answer, read with the webhook's own validation (an alert the webhook
    would ignore is ignored here, with the same reason)."""
    shaped = [{"status": "firing", "labels": a.get("labels"), "annotations": a.get("annotations") or {},
               "startsAt": a.get("startsAt"), "endsAt": "0001-01-01T00:00:00Z", "fingerprint": a.get("fingerprint"),
               "generatorURL": a.get("generatorURL", "")} for a in items]
    try:
        batch = parse_webhook(json.dumps({"version": "4", "status": "firing", "alerts": shaped}), policy)
    except WebhookError as exc:
        raise ValueError(f"unexpected answer from /api/v2/alerts: {exc}") from exc
    status = {str(a.get("fingerprint")): a.get("status") or {} for a in items}
    out = []
    for a in batch.alerts:
        st = status.get(a.fingerprint, {})
        suppressed = bool(st.get("silencedBy") or st.get("inhibitedBy")) or st.get("state") == "suppressed"
        out.append(ActiveAlert(a.node, a.fingerprint, a.record, suppressed, st.get("state") != "unprocessed"))
    return out, batch.ignored


def refresh_after(policy: Policy) -> timedelta:
    """How old a firing alert's last_seen may get before a sync writes it again: well inside the quiet
    timeout, and rare enough that a fleet with thousands of alerting nodes is not rewritten every pass."""
    return min(policy.quiet_timeout / 4, timedelta(minutes=30))


def sync_batch(states: Mapping[str, NodeState], active: list[ActiveAlert], asked_at: datetime, now: datetime,
               policy: Policy, *, resolve: bool = True) -> SyncPlan:
    """The records that make each Node in `states` agree with `active` (asked for at `asked_at`)."""
    plan = SyncPlan()
    by_node: dict[str, dict[str, ActiveAlert]] = {}
    for a in active:
        if a.node not in states:
            plan.unknown_nodes += 1
            continue
        by_node.setdefault(a.node, {})[a.fingerprint] = a
    stale_after = refresh_after(policy)
    for node, state in states.items():
        listed = by_node.get(node, {})
        for fp, a in listed.items():
            current = state.alerts.get(fp)
            if current is None or a.record.order_key() > current.order_key():
                if a.suppressed or not a.processed:
                    continue
                plan.batch.alerts.append(NodeAlert(node, fp, a.record))
                plan.recorded += 1
            elif current.status == "firing" and (state.quiet or now - parse_time(current.last_seen) >= stale_after):
                plan.batch.alerts.append(NodeAlert(node, fp, replace(a.record, starts_at=current.starts_at)))
                plan.refreshed += 1
        if not resolve:
            continue
        for fp, current in state.alerts.items():
            if current.status != "firing" or fp in listed or parse_time(current.last_seen) >= asked_at:
                continue
            ended = replace(current, status="resolved", ends_at=fmt_time(now))
            plan.batch.alerts.append(NodeAlert(node, fp, ended))
            plan.resolved += 1
    return plan
