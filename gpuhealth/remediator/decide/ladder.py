"""The ladder: what to do with each node now. Pure functions of (views, policy, time, budget).

No I/O happens here except through the injected silence check. `serve` executes these decisions;
`plan` prints them; both call `decide`.

A node's plan is its final state (written once, with the resourceVersion the view was read at) plus
the decisions; the executor writes the state first, then performs the side effects (evictions, Jobs,
replacement), so what gpuhealth intends is on the Node before it happens.

One pass has one read-only context (planner.Pass: the policy, the time, the ledger, the silence check); each node
a draft (planner.Draft: its views, the state so far, the plan). decide_node calls each concern's steps on them in
one visible order, top to bottom: the guards (decide/guards.py), the monitoring and correlated faults
(fault_steps.py), the GPU scope's upkeep and the repeat-offender rule (scope.py, offenders.py), the progress of the
rung under way (progress.py), then one of: an idle-node sweep's episode (sweep.py), a replacement resumed, a return
to service with its validation (settle.py, validation.py), or the climb (climb.py) to the alerts' target.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from gpuhealth.remediator.decide import climb, evidence, fault_steps, guards, offenders, scope, settle, sweep
from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import Decision, NodePlan, SilenceCheck
from gpuhealth.remediator.decide.nodestate import ALL_GPUS, AlertRecord, NodeState, rung_index
from gpuhealth.remediator.decide.planner import Draft, Pass, alert_ceiling, out, replace_pending, scope_view
from gpuhealth.remediator.decide.progress import observe
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import Action, Remediation, Rung, Scope, Verdict
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")


def _pick_gpu(alerts: dict[str, AlertRecord]) -> str | None:
    """The GPU to reset: the one the alerts name; all of them when they name several, or "all"."""
    gpus = {a.gpu for a in alerts.values() if a.gpu}
    if not gpus:
        return None
    return gpus.pop() if len(gpus) == 1 else ALL_GPUS


def decide(views: list[NodeView], policy: Policy, now: datetime, ledger: Ledger,
           silences: SilenceCheck | None = None) -> list[NodePlan]:
    """Decisions for every node, oldest episode first, taking from the budget as actions start."""
    def order(v: NodeView) -> tuple[int, datetime, str]:
        return (0 if v.name in ledger.pools[v.pool].disrupted else 1, v.state.episode or now, v.name)

    ctx = Pass(policy, now, ledger, silences)
    return [_plan(v, ctx) for v in sorted(views, key=order)]


def _plan(v: NodeView, ctx: Pass) -> NodePlan:
    """One node's plan. A node the ladder cannot decide (an exception: a bug, or an object no check foresaw) is that
    node's trouble alone: left alone as a node with an unreadable state is (its view says why: act/unreadable.py
    reports it), and the other nodes are decided."""
    try:
        d = Draft.of(v)
        decide_node(d, ctx)
        return _finish(d, ctx)
    except Exception as exc:
        log.error("node %s: cannot be decided (%s: %s): left alone", v.name, type(exc).__name__, exc, exc_info=exc)
        v.damaged = f"cannot be decided: {type(exc).__name__}: {exc}"[:200]
        plan = NodePlan(node=v.name, base_state=v.state, final_state=v.state, resource_version=v.resource_version)
        plan.decisions.append(Decision(v.name, Action.NONE, Verdict.SKIPPED, f"{v.damaged}: left alone", v.pool))
        return plan


def _finish(d: Draft, ctx: Pass) -> NodePlan:
    """The plan as decide_node left it: what a reset paused restored once it is over, Karpenter's repair warned of on
    every decision, the state to write and the node's history with it."""
    settle.restore_gpu_clients(d, ctx)
    if d.repair_warning:
        d.plan.decisions = [replace(dec, karpenter_repair=d.repair_warning) for dec in d.plan.decisions]
    d.plan.final_state = d.state
    d.plan.history = offenders.history_to_write(d, ctx)  # the node's past episodes, this one's up to date
    return d.plan


def _target(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord], st: NodeState) -> int:
    """The rung the climb aims for: the alerts' (scope.target_of), a repeat offender's replace (offenders)."""
    return offenders.raise_target(d, ctx, scope.target_of(d, ctx, actionable, st), st)


def decide_node(d: Draft, ctx: Pass) -> None:
    """One node's steps, in order: each concern's functions over the draft and the pass's context."""
    st, policy = d.view.state, ctx.policy
    firing = st.firing(ctx.now, policy.episode.quiet_timeout)
    actionable = {fp: a for fp, a in firing.items() if a.remediation != Remediation.NONE}
    if guards.left_alone(d, ctx, firing, actionable):  # not the ladder's this pass (burn-in and sweep starts too)
        return None
    faults = fault_steps.monitoring_faults(d, ctx, actionable)
    actionable = {fp: a for fp, a in actionable.items() if fp not in faults}
    fault_steps.correlated_faults(d, ctx, actionable)
    if st.scope == Scope.GPU and (d.full.devices is None or d.full.taint_api is None):
        # the DRA objects could not be read this pass (an API error, a driver restarting): no evidence that
        # the fault outgrew its GPU, and no way to change its device taints: wait, at GPU scope
        return out(d, Action.NONE, Verdict.DEFERRED, f"GPU scope ({', '.join(st.gpu_scope.devices)}): the DRA objects "
                   "or the DeviceTaintRule API could not be read this pass")
    scope.redrive_quarantine(d, ctx)
    scope.cover_new_instances(d, ctx)
    offenders.judge_offender(d, ctx, actionable)  # before the target: a repeat offender's is replace
    st = d.state
    scope_view(d)
    if actionable:  # the rung under way is observed on the pods it is about
        scope.gpu_pods_view(d, ctx, actionable, _target(d, ctx, actionable, st), note=False)
    d.state, notes = observe(d.view, st, ctx.now, policy)
    d.seen = d.state
    d.plan.notes.extend(notes)
    if not actionable and sweep.sweep_holds(d, ctx):  # an idle-node sweep's episode
        return None
    if not actionable and replace_pending(d):  # decided on the alerts then: handed over whatever they say now
        return climb.run(d, ctx, rung_index(Rung.REPLACE), None, [], sweep.ceiling(d, []) or alert_ceiling(d, []))
    if not actionable:
        evidence.evidence_for_person(d, ctx, [])  # a paged episode's evidence still ends and is stored
        return fault_steps.hold_for_monitoring_fault(d, ctx, faults) if faults else settle.settle(d, ctx)
    target = _target(d, ctx, actionable, d.state)
    scope.choose_scope(d, ctx, actionable, target)
    scope.gpu_pods_view(d, ctx, actionable, target)
    fps = sorted(actionable)
    climb.run(d, ctx, target, _pick_gpu(actionable), fps, sweep.ceiling(d, fps) or alert_ceiling(d, fps))
    # a person paged at a rung that destroys nothing: the evidence support asks for, not waited for
    return evidence.evidence_for_person(d, ctx, sorted({a.name for a in actionable.values() if a.page}))
