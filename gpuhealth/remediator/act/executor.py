"""Executing one node's plan: re-check, write the final state once, then the side effects, then report.

Before a disruptive step the Node is read again and the plan dropped if it changed since the pass read it
(the next pass decides again); the plan's final state is written once, with the resourceVersion it was
computed from, and only then are the side effects performed (evictions, Jobs, replacement), each followed by
an Event, an audit line and a metric. A dry run reports its decisions and stops there: it never takes the
next step, so each pass shows what a live replica would do now.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from gpuhealth.remediator.act.acts import ACTS, Deed, JobRefused, Tools
from gpuhealth.remediator.act.evidence_job import EvidenceStore
from gpuhealth.remediator.act.pass_guard import PassAborted, PassGuard
from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.device_taints import DeviceTaints
from gpuhealth.remediator.clients.errors import Conflict
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.decide.decision import Decision, NodePlan
from gpuhealth.remediator.decide.event_reasons import EventReason, action_failed_reason, action_reason
from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION, history_json
from gpuhealth.remediator.decide.node_patches import (
    claim_do_not_disrupt,
    cordon_body,
    state_body,
    uncordon_body,
    with_do_not_disrupt,
    with_gpu_clients,
    with_meta,
    without_taint,
)
from gpuhealth.remediator.decide.nodestate import (
    LAST_SWEEP_ANNOTATION,
    STATE_ANNOTATION,
    NodeState,
    fmt_time,
)
from gpuhealth.remediator.decide.views import NodeView, evictable_pods
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE, NEEDS_DRAINED, Action, Scope, TaintEffect, Verdict
from gpuhealth.remediator.metrics import BURN_IN_RESULTS, DIAGNOSTIC_RESULTS, SWEEP_RESULTS, ActionResult, Metrics
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")

KARPENTER_NOTE_ACTIONS = (Action.DRAIN, Action.UNCORDON, Action.REPLACE)  # their Event says what we did to it


# Acts that are not a part of the state's write (a Node's cordon, its operand labels and do-not-disrupt annotation
# are): the write records them as pending and a second write clears them once done (NodeState.pending); a pass that
# finds one pending does it again (decide/ladder.py), so that a crash between the write and the act loses nothing.
# The others need no mark: a Job rung's Job is made again while its name is recorded and it is missing, a running
# drain evicts what is left every pass, and a return to service's leftover DeviceTaintRules are swept.
REDRIVEN = (Action.REPLACE, Action.QUARANTINE_GPU)


def with_pending(state: NodeState, executes: list[Decision]) -> NodeState:
    """The state to write before these acts: the REDRIVEN ones they start marked pending (a drain's later NoExecute
    rounds, and the acts done again, need no mark: they happen again by themselves)."""
    if not state.active:  # a return to service in the same plan: nothing of the episode is left to do again
        return state
    acts = [a for a in REDRIVEN if any(d.action == a and d.new for d in executes) and a not in state.pending]
    return replace(state, pending=(*state.pending, *acts)) if acts else state


class Executor:
    def __init__(self, kube: Kube, policy: Policy, metrics: Metrics, guard: PassGuard) -> None:
        self.kube, self.policy, self.metrics, self.guard = kube, policy, metrics, guard
        self.taints = DeviceTaints(kube)
        self._burn_in_warned: set[str] = set()  # a dry run's nodes whose burn-in taint it warned of, once each
        self.tools = Tools(kube, policy, guard, self.taints, EvidenceStore(kube, policy))
        metrics.init_karpenter_repair(policy.karpenter_repair.conditions, policy.karpenter_repair.mode)

    def execute(self, plan: NodePlan, view: NodeView, node: RawNode, now: datetime) -> None:
        """Re-check before anything disruptive, write the plan's state once (the intent), report its notes, then
        run the side effects; a step that fails stops the plan there (its rung's timeout decides)."""
        executes = plan.executes()
        for d in plan.decisions:
            if d.decision != Verdict.EXECUTE:
                self.metrics.action(d.action, d.decision)
                audit(AuditKind.DECISION, **self._fields(d))
        if self.kube.dry_run:
            self._report_dry_run(plan, executes)
            self._warn_burn_in_kept(view)
            return
        if not executes and not plan.changed:
            return
        why = self._recheck(plan, view, executes)
        if why is not None:
            return self._drop(plan, why)
        written = self._write_intent(plan, node, now, executes)
        if written is None:
            return self._drop(plan, "the node changed since this pass read it (409 Conflict): re-deciding next pass")
        node, karpenter_note = written
        self._report_notes(plan, now)
        if self._side_effects(plan, view, node, now, executes, karpenter_note):
            self._clear_pending(plan, node, {d.action for d in executes})

    def _report_dry_run(self, plan: NodePlan, executes: list[Decision]) -> None:
        for d in executes:
            self.metrics.action(d.action, ActionResult.DRY_RUN)
            audit(AuditKind.DECISION, **self._fields(d, result=ActionResult.DRY_RUN))
        for note in plan.notes:
            audit(AuditKind.PROGRESS, node=plan.node, reason=note.reason, message=note.message, dry_run=True)

    def _warn_burn_in_kept(self, view: NodeView) -> None:
        """A dry run never removes the burn-in taint (it writes nothing): a new node that registered with it takes no
        work until a person takes it off. Said once per node, as a warning and an audit line."""
        if not view.burn_in or view.name in self._burn_in_warned:
            return
        self._burn_in_warned.add(view.name)
        taint = self.policy.burn_in.taint
        log.warning("dry run: node %s carries the burn-in taint %s, which a dry run never removes: it takes no work "
                    "until a person does (kubectl taint node %s %s-). Remove %s from the NodePools' startupTaints "
                    "while gpuhealth runs in dry run (docs/remediation.md, \"Burn-in of new nodes\")",
                    view.name, taint, view.name, taint, taint)
        audit(AuditKind.BURN_IN_KEPT, node=view.name, taint=taint, dry_run=True)

    def _recheck(self, plan: NodePlan, view: NodeView, executes: list[Decision]) -> str | None:
        """Before anything disruptive: the Node still as listed, and (for Jobs and replacement) nothing left to
        evict on it. Why the plan must wait, or None."""
        if not any(d.action in DISRUPTIVE or d.effect == TaintEffect.NO_EXECUTE for d in executes):
            return None
        self.guard.check()
        fresh = self.kube.get_node(plan.node)
        if api_objects.resource_version(fresh) != plan.resource_version:
            return ("the node changed since this pass read it (a hold, a person, another replica): re-deciding "
                    "next pass")
        if any(d.action in NEEDS_DRAINED for d in executes):
            left = evictable_pods(self.kube.pods_on(plan.node))
            if plan.final_state.scope == Scope.GPU:  # only the quarantined GPU's pods must be gone
                holders = set(view.holders(plan.final_state.gpu_scope.devices))
                left = [p for p in left if f"{p.namespace}/{p.name}" in holders]
            elif plan.drain_only is not None:  # only the pods on the faulty GPU (the node agent's mapping)
                left = [p for p in left if plan.drain_only.includes(p)]
            if left:
                return (f"{len(left)} evictable pod(s) on the node right before the disruptive step: draining "
                        "again next pass")
        return None

    def _write_intent(self, plan: NodePlan, node: RawNode, now: datetime,
                      executes: list[Decision]) -> tuple[RawNode, str] | None:
        """The final state, written once, with the resourceVersion the plan was computed from: the Node as written
        and the do-not-disrupt note for the step's Event; None on a conflict (someone wrote the Node meanwhile)."""
        plan.final_state = claim_do_not_disrupt(node, plan.base_state, plan.final_state)
        plan.final_state = with_pending(plan.final_state, executes)
        actions = {d.action for d in executes}
        if Action.CORDON in actions:
            body = cordon_body(node, plan.final_state)
        elif Action.UNCORDON in actions or Action.RELEASE_GPU in actions:
            body = uncordon_body(node, plan.base_state, plan.final_state, now)
        else:
            body = state_body(plan.final_state) if plan.changed else {}
        if Action.END_BURN_IN in actions:  # a new node's burn-in ended (decide/burn_in.py)
            body = without_taint(body, node, self.policy.burn_in.taint)
        body, karpenter_note = with_do_not_disrupt(body, plan.base_state, plan.final_state)
        body, clients_note = with_gpu_clients(body, node, plan.base_state, plan.final_state)
        if plan.history is not None:  # the node's past episodes, in the same write as the state (decide/history.py)
            body = with_meta(body, annotations={HISTORY_ANNOTATION: history_json(plan.history)})
        if plan.swept is not None:  # an idle-node sweep starts: remembered on the Node (decide/sweep.py)
            body = with_meta(body, annotations={LAST_SWEEP_ANNOTATION: fmt_time(plan.swept)})
        if not body:
            return node, karpenter_note
        self.guard.check()
        try:
            node = self.kube.patch_node(plan.node, body, plan.resource_version)
        except Conflict:
            return None
        if karpenter_note:
            audit(AuditKind.ANNOTATION, node=plan.node, detail=karpenter_note, dry_run=False)
        if clients_note:
            audit(AuditKind.GPU_CLIENTS, node=plan.node, detail=clients_note, dry_run=False)
        return node, karpenter_note

    def _report_notes(self, plan: NodePlan, now: datetime) -> None:
        """What the pass saw (a Job done, a timeout, a conflict with Karpenter's repair): metrics, audit, Events."""
        for condition in plan.final_state.repair_reported:  # reported (a Note below) in this write: counted once
            if condition not in plan.base_state.repair_reported:
                self.metrics.karpenter_repair_conflict(condition, self.policy.karpenter_repair.mode)
        for note in plan.notes:
            audit(AuditKind.PROGRESS, node=plan.node, reason=note.reason, message=note.message, dry_run=False)
            if note.timed_out and note.rung is not None:
                self.metrics.rung_timed_out(note.rung)
            if note.reason == EventReason.NODE_ACTION_JOB_NOT_STARTED and note.rung is not None:
                self.metrics.action(Action(note.rung), ActionResult.NOT_STARTED)
            if note.reason == EventReason.REPEAT_OFFENDER and plan.final_state.offence.rule is not None:
                self.metrics.repeat_offender_escalation(plan.final_state.offence.rule)
            if note.reason == EventReason.GPU_RESET_NOT_NEEDED:
                self.metrics.action(Action.RESET_GPU, ActionResult.NOT_NEEDED)
            if note.reason in DIAGNOSTIC_RESULTS:
                self.metrics.diagnostics.labels(DIAGNOSTIC_RESULTS[note.reason]).inc()
            if note.reason in SWEEP_RESULTS:
                self.metrics.sweeps.labels(SWEEP_RESULTS[note.reason]).inc()
            if note.reason in BURN_IN_RESULTS:
                self.metrics.burn_ins.labels(BURN_IN_RESULTS[note.reason]).inc()
            self._event(plan.node, note.reason, note.message, now, warning=note.warning)

    def _side_effects(self, plan: NodePlan, view: NodeView, node: RawNode, now: datetime,
                      executes: list[Decision], karpenter_note: str) -> bool:
        """Each step's act, now that the intent is on the Node; False when one failed (the rest wait)."""
        for d in executes:
            fields = self._fields(d)
            try:
                self.guard.check()
                message = self._perform(d, view, node, plan, now)
            except PassAborted:
                raise
            except JobRefused as exc:  # gpuhealth's own breakage: the rung failed as not started (no climb on it)
                self.metrics.action(d.action, ActionResult.NOT_STARTED)
                audit(AuditKind.ACTION, **fields, result=ActionResult.NOT_STARTED, error=str(exc))
                self._event(d.node, EventReason.NODE_ACTION_JOB_NOT_STARTED, str(exc), now, warning=True)
                return False
            except Exception as exc:  # any failure of the step: counted, audited, an Event; the rung's timeout
                self.metrics.action(d.action, ActionResult.FAILED)
                audit(AuditKind.ACTION, **fields, result=ActionResult.FAILED, error=str(exc))
                self._event(d.node, action_failed_reason(d.action), f"{d.reason}: {exc}", now, warning=True)
                return False
            if karpenter_note and d.action in KARPENTER_NOTE_ACTIONS:
                message, karpenter_note = f"{message}; {karpenter_note}" if message else karpenter_note, ""
            self.metrics.action(d.action, ActionResult.EXECUTED)
            audit(AuditKind.ACTION, **fields, result=ActionResult.EXECUTED, detail=message)
            if d.new or message:
                self._event(d.node, action_reason(d.action), f"{d.reason}{': ' + message if message else ''}", now)
        return True

    def _clear_pending(self, plan: NodePlan, node: RawNode, done: set[Action]) -> None:
        """The acts the state's write promised are done: said in a write of their own. A crash before it, or a
        second conflict, leaves them pending: the next pass does them again (idempotently) and clears them then."""
        if not done & set(plan.final_state.pending):
            return
        for attempt in range(2):
            if attempt:  # the Node changed since our write (a status write of the act, an alert recorded): read it
                node = self.kube.get_node(plan.node)
                try:
                    state = NodeState.from_json(api_objects.annotations(node).get(STATE_ANNOTATION))
                except ValueError:
                    return
            else:
                state = plan.final_state
            left = tuple(a for a in state.pending if a not in done)
            if left == state.pending:
                return
            self.guard.check()
            try:
                self.kube.write_state(plan.node, replace(state, pending=left), api_objects.resource_version(node))
                return
            except Conflict:
                continue
        log.info("node %s: %s left pending after a conflict: done again next pass", plan.node, ", ".join(done))

    def _perform(self, d: Decision, view: NodeView, node: RawNode, plan: NodePlan, now: datetime) -> str:
        """The decision's act, through the table (act/acts.py ACTS); what it did, in words for the Event."""
        act = ACTS.get(d.action)
        if act is None:
            raise ValueError(f"unknown action {d.action}")
        return act(self.tools, Deed(d, view, node, plan, now))

    def _drop(self, plan: NodePlan, why: str) -> None:
        for d in plan.executes():
            self.metrics.action(d.action, ActionResult.SKIPPED)
            audit(AuditKind.DECISION, **self._fields(d, decision=Verdict.SKIPPED, reason=why))

    def _fields(self, d: Decision, **extra: Any) -> dict[str, Any]:
        fields = {"node": d.node, "pool": d.pool, "action": d.action, "decision": d.decision, "reason": d.reason,
                  "dry_run": self.kube.dry_run}
        if d.devices:  # GPU scope: which devices, and the pods a NoExecute evicts, named before it happens
            fields["devices"] = list(d.devices)
        if d.effect is not None:
            fields.update(effect=d.effect, pods=list(d.pods))
        if d.karpenter_repair:  # karpenter_repair.mode warn: Karpenter's node repair may replace the node under it
            fields["karpenter_repair"] = d.karpenter_repair
        return {**fields, **extra}

    def _event(self, node: str, reason: str, message: str, now: datetime, warning: bool = False) -> None:
        """Events never fail a step: the outbox keeps what the API does not take (clients/kube.py)."""
        try:
            self.kube.event(node, reason, message, now, warning=warning)
        except Exception as exc:
            log.warning("event %s on %s: %s", reason, node, exc)
