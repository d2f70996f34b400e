"""The ladder says when it next needs to decide (gpuhealth/remediator/decide/wake.py), and its decision changes exactly
then: not a second before. The fleet simulator sleeps until that time, so a time the ladder turns on that the wake does
not know would be a decision the simulator never makes. Pure decisions, no cluster."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.nodestate import TAINT_EFFECT, TAINT_KEY, NodeState, record_alerts
from gpuhealth.remediator.decide.plan import evaluate
from gpuhealth.remediator.decide.views import node_view
from gpuhealth.remediator.decide.wake import next_decision
from gpuhealth.remediator.intake.webhook import parse_webhook
from gpuhealth.remediator.policy import parse_policy
from tests.support.remediator_harness import T0, webhook

POLICY = parse_policy("""
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
ladder:
  cordon: {escalate_after: 20m}
episode: {quiet_timeout: 6h}
return_to_service: {healthy_delay: 15m}
""")
NODE: dict[str, Any] = {"metadata": {"name": "gpu-0", "labels": {"karpenter.sh/nodepool": "gpu"}}, "spec": {},
                        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
SECOND = timedelta(seconds=1)


def _pass(state: NodeState, now: Any) -> NodePlan:
    """One pass on the node as the remediator's own writes left it (its taint and cordon once it cordoned)."""
    node = NODE
    if state.rung is not None:
        node = {**NODE, "spec": {"unschedulable": True, "taints": [{"key": TAINT_KEY, "effect": TAINT_EFFECT}]}}
    view = node_view(node, POLICY, state)
    view.pods_known, view.evictable = True, []  # an empty node: nothing but time holds the ladder back
    _, plans = evaluate([view], POLICY, now)
    return plans[0]


def _executed(plan: NodePlan) -> list[str]:
    return [str(d.action) for d in plan.executes()]


def _alerts(status: str = "firing") -> list[Any]:
    body = webhook("gpu-0", "cordon", status=status)
    return list(parse_webhook(json.dumps(body).encode(), POLICY).by_node()["gpu-0"])


def test_a_fault_that_persists_climbs_exactly_when_the_wake_says() -> None:
    cordoned = _pass(record_alerts(NodeState(), _alerts(), T0), T0)
    assert _executed(cordoned) == ["cordon"]
    wake = next_decision([cordoned.final_state], POLICY, {}, T0)
    assert wake == T0 + timedelta(minutes=20)
    assert _executed(_pass(cordoned.final_state, wake - SECOND)) == []
    assert _executed(_pass(cordoned.final_state, wake)) == ["drain"]


def test_a_healthy_node_returns_exactly_when_the_wake_says() -> None:
    cordoned = _pass(record_alerts(NodeState(), _alerts(), T0), T0).final_state
    resolved_at = T0 + timedelta(minutes=5)
    healthy = _pass(record_alerts(cordoned, _alerts("resolved"), resolved_at), resolved_at).final_state
    wake = next_decision([healthy], POLICY, {}, resolved_at)
    assert wake is not None and wake > resolved_at
    assert _executed(_pass(healthy, wake - SECOND)) == []
    assert _executed(_pass(healthy, wake)) == ["uncordon"]


def test_nothing_recorded_needs_no_wake() -> None:
    assert next_decision([NodeState()], POLICY, {}, T0) is None
