"""The exporter DaemonSet rolls out small (issue 34, section 2): a bad image stalls the rollout with
`maxUnavailable` nodes' exporters not Ready, and each of those nodes is cordoned for GpuhealthExporterDown (never more
while it is Ready: tests/remediator/scenarios/test_own_breakage_stays_at_cordon.py). Counted here, with the chart's
defaults, as Kubernetes' DaemonSet controller counts it, against the default policy's budgets."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpuhealth.remediator.policy import Policy
from tests.support.chart_render import render

FLEETS = (1, 3, 10, 49, 50, 51, 200, 2000, 10000)  # nodes the exporter runs on


def exporter() -> dict[str, Any]:
    ds: dict[str, Any] = next(d for d in render() if d["kind"] == "DaemonSet")
    return ds


def stalled_pods(max_unavailable: int | str, nodes: int) -> int:
    """How many pods a rollout replaces before it waits for them to be Ready: the DaemonSet controller's
    intstr.GetScaledValueFromIntOrPercent(maxUnavailable, desiredNumberScheduled, roundUp=true)."""
    if isinstance(max_unavailable, int):
        return max_unavailable
    return math.ceil(float(max_unavailable.rstrip("%")) * nodes / 100)


@pytest.mark.parametrize("nodes", FLEETS)
def test_a_stalled_exporter_rollout_cordons_at_most_a_tenth_of_the_default_cordon_budget(nodes: int) -> None:
    strategy = exporter()["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    stalled = stalled_pods(strategy["rollingUpdate"]["maxUnavailable"], nodes)
    budget = Policy().budget.max_cordoned  # 20% of a pool, never below 1
    assert 1 <= stalled <= max(1, math.ceil(budget.limit(nodes) / 10)), (
        f"a bad exporter image stalls with {stalled} of {nodes} nodes cordoned; the cordon budget is "
        f"{budget.limit(nodes)}")


def test_a_pod_that_starts_then_crash_loops_does_not_count_as_rolled_out() -> None:
    ds = exporter()
    probe = ds["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    # Ready for two readiness probes in a row before the next node's pod is replaced
    assert ds["spec"]["minReadySeconds"] >= 2 * probe["periodSeconds"]
