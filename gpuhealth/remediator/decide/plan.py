"""The single decision path: `evaluate` (views → budget → ladder). `serve` (the reconciler's pass), `plan`
(`plan_from_json`, from files) and the fleet simulator all call it, so what `plan` prints is what `serve`
would do."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode, RawPod
from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import Decision, NodePlan, SilenceCheck
from gpuhealth.remediator.decide.ladder import decide
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, AlertRecord, NodeState, record_alerts
from gpuhealth.remediator.decide.views import DraFleet, NodeView, build_views
from gpuhealth.remediator.decide.vocabulary import Action, Verdict
from gpuhealth.remediator.policy import Policy


class AlertsByNode(Protocol):
    """A webhook body as parsed (intake/webhook.Batch): each node's alerts, (fingerprint, record)."""

    def by_node(self) -> Mapping[str, list[tuple[str, AlertRecord]]]: ...


def evaluate(views: list[NodeView], policy: Policy, now: datetime, breaker_trips: dict[str, str] | None = None,
             silences: SilenceCheck | None = None,
             pool_sizes: dict[str, int] | None = None) -> tuple[Ledger, list[NodePlan]]:
    """pool_sizes: see Ledger.from_views (None for serve and plan, which pass every node)."""
    ledger = Ledger.from_views(views, policy, now, breaker_trips, pool_sizes)
    return ledger, decide(views, policy, now, ledger, silences)


def plan_from_json(nodes: list[RawNode], pods: list[RawPod] | None, batches: Iterable[AlertsByNode],
                   policy: Policy, now: datetime, silences: SilenceCheck | None = None,
                   breaker_trips: dict[str, str] | None = None, dra: DraFleet | None = None) -> list[Decision]:
    """What serve would decide now, from `kubectl get nodes/pods -o json`, the Lease's breaker state and
    webhook bodies; no cluster. pods None: unknown (drains and Jobs are deferred, not assumed empty). dra: the
    ResourceSlices and ResourceClaims (GPU scope), None for none."""
    by_name = {api_objects.name(n): n for n in nodes}
    states: dict[str, NodeState] = {}
    missing: list[str] = []
    damaged: set[str] = set()
    for batch in batches:
        for node, alerts in batch.by_node().items():
            if node not in by_name:
                missing.append(node)
                continue
            if node in damaged:
                continue
            if node not in states:
                raw = api_objects.annotations(by_name[node]).get(STATE_ANNOTATION)
                try:
                    states[node] = NodeState.from_json(raw)
                except ValueError:
                    damaged.add(node)  # the view reports it (fail closed)
                    continue
            states[node] = record_alerts(states[node], alerts, now)

    pods_on = None
    if pods is not None:
        known = pods

        def pods_on(name: str) -> list[RawPod]:
            return [p for p in known if api_objects.node_name(p) == name]

    views = build_views(nodes, policy, pods_on, None, states, dra, now)
    _, plans = evaluate(views, policy, now, breaker_trips, silences)
    out = [d for p in plans for d in p.decisions]
    decided = {d.node for d in out}
    out += [Decision(n, Action.NONE, Verdict.SKIPPED, "no action needed") for n in states if n not in decided]
    out += [Decision(n, Action.NONE, Verdict.SKIPPED, "node not found in the nodes file")
            for n in dict.fromkeys(missing)]
    return out
