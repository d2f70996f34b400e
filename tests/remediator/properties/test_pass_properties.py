"""Properties of the leader's pass over any objects it may read (issue 35): whatever Nodes, pods, state annotations
and Job statuses the random fleet holds, the pass decides every node, never raises, and a node it cannot read costs
that node alone (held as it was, said why), never the control node's decision beside it.

The pass here is the reconciler's own path without the API server: build_views, evaluate, next_decision (the
executor's side is per node already: act/reconciler.py _execute; tests/remediator/scenarios/test_one_bad_object.py
shows the same through the API). Deterministic (derandomize, no example database) and bounded: CI runs the same
examples every time, within the suite's time budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhealth.remediator.decide.job_start import MISSING, JobRecord
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, AlertRecord, NodeState, record_alerts
from gpuhealth.remediator.decide.plan import evaluate
from gpuhealth.remediator.decide.views import build_views
from gpuhealth.remediator.decide.vocabulary import Action, JobStatus, Verdict
from gpuhealth.remediator.decide.wake import next_decision
from gpuhealth.remediator.policy import parse_policy
from tests.remediator.properties.objects import NOW, nodes, pods

# Budgets wide open and the control node in a pool of its own: whatever the random nodes hold, only their reading
# could keep the control node from its cordon
POLICY = parse_policy("""
budget: {max_disrupted: "100%", max_cordoned: "100%", max_actions_per_hour: 100000}
breaker: {min_nodes: 100000}
monitoring_fault: {min_nodes: 100000}
evidence: {enabled: false}
""")
FLEET = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONTROL = "control"


def _control_node() -> dict[str, Any]:
    """A healthy node whose one alert asks for a cordon: the pass cordons it, whatever the others hold."""
    alert = AlertRecord("ControlFault", "cordon", "firing", NOW.replace(minute=0), NOW.replace(minute=0), gpu="0")
    state = record_alerts(NodeState(), [("fp-control", alert)], NOW)
    return {"metadata": {"name": CONTROL, "labels": {"karpenter.sh/nodepool": "control"},
                         "annotations": {STATE_ANNOTATION: state.to_json()}, "resourceVersion": "1"},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    names = [f"gpu-{i}" for i in range(draw(st.integers(1, 6)))]
    fleet = [draw(nodes(name)) for name in names]
    on = {name: [draw(pods(name, f"{name}-p{j}")) for j in range(draw(st.integers(0, 2)))] for name in names}
    return fleet, on


def _jobs(statuses: list[JobStatus]) -> Callable[[str], JobRecord]:
    """Job status by name: the drawn statuses in turn (MISSING: none)."""
    turn = iter(statuses * 50)
    return lambda name: (lambda s: MISSING if s == JobStatus.MISSING else JobRecord(s))(next(turn, JobStatus.MISSING))


@FLEET
@given(fleets(), st.lists(st.sampled_from(list(JobStatus)), min_size=1, max_size=4))
def test_no_object_a_node_holds_stops_the_pass_or_another_nodes_decision(
        fleet: tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]], statuses: list[JobStatus]) -> None:
    nodes_, on = fleet
    views = build_views([_control_node(), *nodes_], POLICY, lambda name: on.get(name, []), _jobs(statuses),
                        now=NOW)
    ledger, plans = evaluate(views, POLICY, NOW)
    next_decision((p.final_state for p in plans), POLICY, ledger.breaker_trips, NOW)
    assert sorted(p.node for p in plans) == sorted([CONTROL, *(n["metadata"]["name"] for n in nodes_)])
    (control,) = [p for p in plans if p.node == CONTROL]
    assert [(d.action, d.decision) for d in control.decisions] == [(Action.CORDON, Verdict.EXECUTE)]
    damaged = {v.name: v.damaged for v in views if v.damaged is not None}
    for plan in plans:
        if plan.node in damaged:  # held as it was: nothing decided, nothing written, and why is said
            assert [(d.action, d.decision) for d in plan.decisions] == [(Action.NONE, Verdict.SKIPPED)]
            assert plan.final_state == plan.base_state and not plan.changed
            assert damaged[plan.node][:20] in plan.decisions[0].reason
