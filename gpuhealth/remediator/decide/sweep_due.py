"""Which nodes an idle-node sweep could take now (decide/sweep.py; docs/remediation.md, "Idle-node sweeps"): a pure
function of a node's view, read before its pods are looked up, so that a pass lists the pods of these nodes only."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.decide.vocabulary import Purpose
from gpuhealth.remediator.policy import Policy


class SweepFacts(Protocol):
    """What of a node's view (decide/views.py NodeView, which calls these before its pods are looked up) is read."""

    damaged: str | None
    state: NodeState
    our_taint: bool
    unschedulable: bool
    ready: bool
    excluded: bool
    hold: dict[str, Any] | None
    created: datetime | None
    last_sweep: datetime | None
    burn_in: bool


def sweep_due(view: SweepFacts, policy: Policy, now: datetime) -> bool:
    """Never swept, or its last sweep started at least sweep.interval ago."""
    return view.last_sweep is None or now - view.last_sweep >= policy.sweep.interval


def sweep_candidate(view: SweepFacts, policy: Policy, now: datetime) -> bool:
    """Sweeps on (and a diagnostic Job can be made), the node gpuhealth's to take and idle as far as the Node says
    (no episode, neither gpuhealth's taint nor the burn-in's, schedulable, Ready, not excluded, held or damaged, at
    least sweep.idle_for old), and due.
    Whether GPU work runs on it is the pods' to say (NodeView.gpu_work)."""
    sweep, diagnose = policy.sweep, policy.diagnose
    if not (sweep.enabled and diagnose.enabled and diagnose.judge_image):
        return False
    if view.damaged or view.state.active or view.our_taint or view.burn_in or view.unschedulable or not view.ready:
        return False
    if view.excluded or view.hold is not None:
        return False
    if view.created is not None and now - view.created < sweep.idle_for:
        return False
    return sweep_due(view, policy, now)


def sweeping(state: NodeState) -> bool:
    """A sweep under way: an episode of no alert whose sweep diagnostic has no result yet (decide/budget.py counts
    these against sweep.max_per_pool)."""
    return state.active and not state.alerts and state.diagnostic.purpose == Purpose.SWEEP \
        and state.diagnostic.result is None and state.sweep_rung is None
