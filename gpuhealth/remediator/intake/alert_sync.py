"""Level-triggered: what the Nodes should record, given the alerts Alertmanager lists as active now.

Webhooks are edges, and an edge can be lost: a crash between the 202 and the write, or a resolution
answered while the API server was down (Alertmanager sends a resolution once). Alertmanager's API v2
holds the level: every alert active now, silenced and inhibited ones included, resolved ones never.
`read_alertmanager` reads it from every member of an HA Alertmanager; `sync_batch` (pure: no I/O)
compares it with the Nodes and returns the records that make them agree:

- an alert some member lists that a Node lacks (or that fired again since the Node last saw it) is
  recorded, unless it is silenced, inhibited or not yet routed (Alertmanager would not have sent it);
- a firing alert a Node records that no member lists is resolved (`resolved_by: sync`), if every
  member answered, each has been up long enough to have heard from every Prometheus, and the Node
  recorded it before the lists were asked for (a webhook that raced the list is not undone);
- an alert both hold is seen again: its `last_seen` moves (so an episode never goes quiet while
  Alertmanager still lists it), written only when older than `refresh_after`, and at most
  MAX_REFRESHES records a sync (the rest wait for the next), so a fleet-wide event is not rewritten at once.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from gpuhealth.remediator.clients.alertmanager import AlertmanagerClient, AlertmanagerUnavailable
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, AlertRecord, NodeState
from gpuhealth.remediator.decide.vocabulary import AlertStatus, Remediation
from gpuhealth.remediator.intake.webhook import Batch, NodeAlert, parse_listed
from gpuhealth.remediator.policy import Policy


@dataclass(frozen=True)
class ActiveAlert:
    """One alert Alertmanager lists now, as the webhook would have carried it."""

    node: str
    fingerprint: str
    record: AlertRecord
    suppressed: bool  # silenced or inhibited: never sent to the receiver
    processed: bool  # Alertmanager has routed it (state active or suppressed, not unprocessed)


MAX_REFRESHES = 500  # last_seen rewrites a sync may make (recordings and resolutions are never capped)


@dataclass
class Reading:
    """What Alertmanager says now. `untrusted`: why no resolution may be inferred from it (None: they may)."""

    active: list[ActiveAlert]
    ignored: list[tuple[str, str]]
    members: list[str]
    untrusted: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (fingerprint, why): listed but not well-formed


@dataclass
class SyncPlan:
    batch: Batch = field(default_factory=Batch)
    recorded: int = 0
    resolved: int = 0
    refreshed: int = 0
    unknown_nodes: int = 0

    def changes(self) -> dict[str, int]:
        return {"recorded": self.recorded, "resolved": self.resolved, "refreshed": self.refreshed}


def active_alerts(items: list[dict[str, Any]], policy: Policy) -> tuple[list[ActiveAlert], list[tuple[str, str]],
                                                                        list[tuple[str, str]]]:
    """/api/v2/alerts answers (one or several members'), read with the webhook's own validation (an alert the
    webhook would ignore is ignored here, with the same reason; one it would refuse, such as a startsAt before
    1970, is skipped, with why, and never fails the others). An alert several members list is one alert:
    suppressed if any member suppresses it (a person's silence anywhere), routed if any routed it."""
    suppressed: dict[str, bool] = {}
    processed: dict[str, bool] = {}
    unique: dict[str, dict[str, Any]] = {}
    refused: list[tuple[str, str]] = []
    for a in items:
        fp = str(a.get("fingerprint"))
        st = a.get("status") or {}
        if not isinstance(st, dict):  # this alert alone: listed but not well-formed
            named = isinstance(a.get("fingerprint"), str) and a.get("fingerprint")
            refused.append((fp if named else "", f"status is {type(st).__name__}, not an object"))
            continue
        quiet = bool(st.get("silencedBy") or st.get("inhibitedBy")) or st.get("state") == "suppressed"
        suppressed[fp] = suppressed.get(fp, False) or quiet
        processed[fp] = processed.get(fp, False) or st.get("state") != "unprocessed"
        unique.setdefault(fp, a)
    shaped = [{"status": "firing", "labels": a.get("labels"), "annotations": a.get("annotations") or {},
               "startsAt": a.get("startsAt"), "endsAt": "0001-01-01T00:00:00Z", "fingerprint": a.get("fingerprint"),
               "generatorURL": a.get("generatorURL", "")} for a in unique.values()]
    batch, skipped = parse_listed(shaped, policy)
    active = [ActiveAlert(a.node, a.fingerprint, a.record, suppressed[a.fingerprint], processed[a.fingerprint])
              for a in batch.alerts]
    return active, batch.ignored, refused + skipped


def read_alertmanager(client: AlertmanagerClient, policy: Policy) -> Reading:
    """Every member's active alerts for the route's receiver. AlertmanagerUnavailable when no member answered,
    or the receiver regex names none of Alertmanager's receivers (every list would be empty, and everything
    would look resolved)."""
    answers, errors = client.alerts_everywhere(policy.alertmanager_matchers, policy.alertmanager.receiver)
    if not answers:
        raise AlertmanagerUnavailable("; ".join(errors))
    regex = policy.alertmanager.receiver
    if regex:
        names = client.receivers(answers[0].member)
        if not any(re.fullmatch(regex, n) for n in names):
            raise AlertmanagerUnavailable(f"{answers[0].member}: alertmanager.receiver {regex!r} matches none of its "
                                          f"receivers ({', '.join(names) or 'none'}): the route is not the one "
                                          "that sends gpuhealth its alerts")
    active, ignored, skipped = active_alerts([a for answer in answers for a in answer.data], policy)
    reading = Reading(active, ignored, [a.member for a in answers], skipped=skipped)
    if any(not fp for fp, _ in skipped):  # an unreadable alert without a fingerprint may be any recorded one
        reading.untrusted = f"{len(skipped)} listed alert(s) could not be read, one without a fingerprint"
        return reading
    if errors:
        reading.untrusted = f"not every member answered ({'; '.join(errors)})"
        return reading
    if policy.alertmanager.min_uptime:
        for answer in answers:
            try:
                age = client.age(answer.member)
            except AlertmanagerUnavailable as exc:
                reading.untrusted = f"cannot tell how long it has been up ({exc})"
                return reading
            if age < policy.alertmanager.min_uptime:
                reading.untrusted = (f"{answer.member} has been up {int(age.total_seconds())}s, less than "
                                     f"alertmanager.min_uptime: it may not have heard from every Prometheus yet")
                return reading
    return reading


def recorded_states(nodes: list[RawNode],
                    overlay: Mapping[str, NodeState] | None = None) -> dict[str, NodeState]:
    """Each Node's recorded state, by name (`overlay`: a dry run's own records win). A Node whose state
    annotation cannot be read is left out: the sync leaves it alone, as webhooks do."""
    states: dict[str, NodeState] = {}
    for node in nodes:
        name = api_objects.name(node)
        if overlay and name in overlay:
            states[name] = overlay[name]
            continue
        try:
            states[name] = NodeState.from_json(api_objects.annotations(node).get(STATE_ANNOTATION))
        except ValueError:
            continue
    return states


def refresh_after(policy: Policy) -> timedelta:
    """How old a firing alert's last_seen may get before a sync writes it again: well inside the quiet
    timeout, and rare enough that a fleet with thousands of alerting nodes is not rewritten every pass."""
    return min(policy.episode.quiet_timeout / 4, timedelta(minutes=30))


def sync_batch(states: Mapping[str, NodeState], active: list[ActiveAlert], asked_at: datetime, now: datetime,
               policy: Policy, *, resolve: bool = True, unreadable: Collection[str] = ()) -> SyncPlan:
    """The records that make each Node in `states` agree with `active` (asked for at `asked_at`). `unreadable`:
    fingerprints Alertmanager lists but that could not be read (Reading.skipped), never resolved."""
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
            if current is None or a.record.order_key() > current.order_key() or (
                    current.status == AlertStatus.RESOLVED and a.record.order_key() >= current.order_key()):
                # new, fired again, or a resolution the sync inferred that Alertmanager now contradicts
                if a.suppressed or not a.processed:
                    continue
                plan.batch.alerts.append(NodeAlert(node, fp, a.record))
                plan.recorded += 1
            elif (current.status == AlertStatus.FIRING and current.remediation != Remediation.NONE
                  and plan.refreshed < MAX_REFRESHES
                  and (state.quiet or now - current.last_seen >= stale_after)):
                plan.batch.alerts.append(NodeAlert(node, fp, replace(a.record, starts_at=current.starts_at)))
                plan.refreshed += 1
        if not resolve:
            continue
        for fp, current in state.alerts.items():
            if (current.status != AlertStatus.FIRING or fp in listed or fp in unreadable
                    or current.last_seen >= asked_at):
                continue
            ended = replace(current, status=AlertStatus.RESOLVED, ends_at=asked_at, resolved_by="sync")
            plan.batch.alerts.append(NodeAlert(node, fp, ended))
            plan.resolved += 1
    return plan
