"""Each limit of the budget holds a rung back with its own typed deferral (decide/budget.py, `Held`), so that
metrics and the simulator count it by kind, never by the words of its message. Pure decisions on node JSON and
webhook bodies (`plan_from_json`): no cluster, milliseconds each."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from gpuhealth.remediator.decide.plan import plan_from_json
from gpuhealth.remediator.decide.vocabulary import Deferral, Verdict
from gpuhealth.remediator.intake.webhook import parse_webhook
from gpuhealth.remediator.policy import parse_policy
from tests.support.remediator_harness import T0, webhook

NOW = T0 + timedelta(seconds=30)


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "gpu"}, "annotations": {}},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def _deferrals(policy: str, nodes: int, firing: dict[str, str]) -> list[tuple[str, str, Deferral | None]]:
    p = parse_policy("alertmanager: {url: none}\n" + policy)
    batches = [parse_webhook(json.dumps(webhook(n, rung)).encode(), p) for n, rung in firing.items()]
    decisions = plan_from_json([_node(f"gpu-{i}") for i in range(nodes)], [], batches, p, NOW)
    return [(d.node, d.action, d.deferral) for d in decisions if d.decision == Verdict.DEFERRED]


CASES = {
    "the cordon budget": (
        "budget: {max_cordoned: 1}\nbreaker: {threshold: '100%'}\n", 10, {"gpu-0": "cordon", "gpu-1": "cordon"},
        [("gpu-1", "cordon", Deferral.CORDON_BUDGET)]),
    "the disruption budget": (
        "budget: {max_disrupted: 1}\nbreaker: {threshold: '100%'}\n", 10, {"gpu-0": "drain", "gpu-1": "drain"},
        [("gpu-1", "drain", Deferral.DISRUPTION_BUDGET)]),
    "the breaker": (
        "breaker: {threshold: '10%', min_nodes: 2}\n", 10, {"gpu-0": "drain", "gpu-1": "drain"},
        [("gpu-0", "drain", Deferral.BREAKER), ("gpu-1", "drain", Deferral.BREAKER)]),
    "the action rate cap": (
        "budget: {max_actions_per_hour: 1}\nbreaker: {threshold: '100%'}\n", 10, {"gpu-0": "cordon", "gpu-1": "cordon"},
        [("gpu-1", "cordon", Deferral.RATE_CAP)]),
    "nothing over any limit": (
        "", 10, {"gpu-0": "cordon"}, []),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_budget_limit_defers_with_its_own_kind(case: str) -> None:
    policy, nodes, firing, expected = CASES[case]
    assert _deferrals(policy, nodes, firing) == expected


def test_a_deferral_that_is_not_the_budgets_carries_no_kind() -> None:
    p = parse_policy("alertmanager: {url: none}\n")
    batch = parse_webhook(json.dumps(webhook("gpu-0", "drain")).encode(), p)
    decisions = plan_from_json([_node("gpu-0")], None, [batch], p, NOW)  # pods unknown: the drain waits
    deferred = [d for d in decisions if d.decision == Verdict.DEFERRED]
    assert deferred and all(d.deferral is None for d in deferred), deferred
