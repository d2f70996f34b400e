"""Node signals for the classifier, from what gpuhealth already keeps: Alertmanager webhook bodies, the
Node's state and last-episode annotations, and gpuhealth's Events on the Node. Pure functions.

Remediation Events and episode summaries count only for rungs that stop running work (drain and
above): a cordon kills nothing, and the alert behind it is evidence on its own.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from gpuhealth.remediator.clients.kube import COMPONENT
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawEvent, RawNode
from gpuhealth.remediator.decide.event_reasons import rung_of_reason
from gpuhealth.remediator.decide.nodestate import (
    LAST_EPISODE_ANNOTATION,
    STATE_ANNOTATION,
    AlertRecord,
    NodeState,
    parse_time,
)
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE, AlertStatus
from gpuhealth.remediator.intake.webhook import parse_webhook
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import NodeSignal


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value or value.startswith("0001-"):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _from_record(node: str, r: AlertRecord) -> NodeSignal | None:
    if r.starts_at.year == 1:  # Go's zero time: no start known
        return None
    start = r.starts_at
    end = r.ends_at if r.status == AlertStatus.RESOLVED and r.ends_at is not None and r.ends_at.year > 1 else None
    return NodeSignal("alert", r.name, node, start, end, r.remediation, r.component, r.gpu, r.mig_uuid)


def signals_from_webhook(raw: bytes | str, policy: Policy) -> list[NodeSignal]:
    """Alerts in an Alertmanager v4 body (WebhookError when it is not one)."""
    batch = parse_webhook(raw, policy)
    out = [_from_record(a.node, a.record) for a in batch.alerts]
    return [s for s in out if s is not None]


def signals_from_node(node: RawNode) -> list[NodeSignal]:
    """The alerts of the Node's current episode, and its last finished episode if it went past cordon.
    A damaged state annotation gives none (the ladder reports it)."""
    name = api_objects.name(node)
    annotations = api_objects.annotations(node)
    out: list[NodeSignal] = []
    try:
        state = NodeState.from_json(annotations.get(STATE_ANNOTATION))
    except ValueError:
        state = NodeState()
    for record in state.alerts.values():
        sig = _from_record(name, record)
        if sig is not None:
            out.append(sig)
    try:
        last = json.loads(annotations.get(LAST_EPISODE_ANNOTATION) or "null")
    except ValueError:
        last = None
    if isinstance(last, dict) and last.get("rung") in DISRUPTIVE:
        start, end = _time(last.get("episode")), _time(last.get("ended"))
        if start is not None:
            alerts = ", ".join(str(a) for a in last.get("alerts") or []) or "no alert names"
            out.append(NodeSignal("remediation", f"episode up to {last['rung']} ({alerts})", name, start, end,
                                  str(last["rung"])))
    return out


def signals_from_events(events: list[RawEvent]) -> list[NodeSignal]:
    """gpuhealth's Events on Nodes that record a drain, reset, reboot or replacement."""
    out = []
    for e in events:
        involved = e.get("involvedObject") or {}
        source = (e.get("source") or {}).get("component") or e.get("reportingComponent")
        if involved.get("kind") != "Node" or source != COMPONENT:
            continue
        rung = rung_of_reason(str(e.get("reason") or ""))
        at = _time(e.get("lastTimestamp")) or _time(e.get("eventTime")) or _time(e.get("firstTimestamp"))
        if rung is None or at is None:
            continue
        out.append(NodeSignal("remediation", str(e["reason"]), str(involved.get("name") or ""), at, None, rung))
    return out
