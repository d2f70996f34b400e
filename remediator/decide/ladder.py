"""The ladder: what to do with each node now. Pure functions of (views, policy, time, budget).

No I/O happens here except through the injected silence check. `serve` executes these decisions;
`plan` prints them; both call `decide`.

A node's plan is its final state (written once, with the resourceVersion the view was read at) plus
the decisions; the executor writes the state first, then performs the side effects (evictions, Jobs,
replacement), so what gpuhealth intends is on the Node before it happens.

This file holds the node as a whole (guards, monitoring faults, Karpenter's repair, return to service); the scope
steps are in decide/scope.py, the climb (the ladder's table) in decide/climb.py, the state they share in
decide/planner.py.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from remediator.decide.budget import Ledger
from remediator.decide.burn_in import BurnInSteps
from remediator.decide.decision import Decision, NodePlan, SilenceCheck
from remediator.decide.diagnosis import Purpose
from remediator.decide.event_reasons import EventReason, Note
from remediator.decide.monitoring_fault import FaultKey
from remediator.decide.nodestate import ALL_GPUS, AlertRecord, NodeState, elapsed, rung_index, time_text
from remediator.decide.offenders import OffenderSteps
from remediator.decide.progress import observe
from remediator.decide.scope import ScopeSteps
from remediator.decide.sweep import SweepSteps
from remediator.decide.validation import ValidationSteps
from remediator.decide.views import NodeView
from remediator.decide.vocabulary import (
    JOB_RUNGS,
    Action,
    JobStatus,
    ResetPhase,
    Rung,
    RungStatus,
    Scope,
    Severity,
    Verdict,
)
from remediator.policy import Policy

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

    return [_plan(v, policy, now, ledger, silences) for v in sorted(views, key=order)]


def _plan(v: NodeView, policy: Policy, now: datetime, ledger: Ledger, silences: SilenceCheck | None) -> NodePlan:
    """One node's plan. A node the ladder cannot decide (an exception: a bug, or an object no check foresaw) is that
    node's trouble alone: left alone as a node with an unreadable state is (its view says why: act/unreadable.py
    reports it), and the other nodes are decided."""
    try:
        return _Planner(v, policy, now, ledger, silences).run()
    except Exception as exc:
        log.error("node %s: cannot be decided (%s: %s): left alone", v.name, type(exc).__name__, exc, exc_info=exc)
        v.damaged = f"cannot be decided: {type(exc).__name__}: {exc}"[:200]
        plan = NodePlan(node=v.name, base_state=v.state, final_state=v.state, resource_version=v.resource_version)
        plan.decisions.append(Decision(v.name, Action.NONE, Verdict.SKIPPED, f"{v.damaged}: left alone", v.pool))
        return plan


class _Planner(BurnInSteps, SweepSteps, OffenderSteps, ScopeSteps, ValidationSteps):
    """One node's plan: the node as a whole here; the scope and the climb in their own files."""

    def run(self) -> NodePlan:
        self._decide()
        self._restore_gpu_clients()
        if self.repair_warning:
            self.plan.decisions = [replace(d, karpenter_repair=self.repair_warning) for d in self.plan.decisions]
        self.plan.final_state = self.state
        self.plan.history = self._history()  # the node's past episodes, this one's part up to date (with the state)
        return self.plan

    def _restore_gpu_clients(self) -> None:
        """Whatever ended a reset rung that stopped the GPU's clients (its Job's outcome, its timeout, the episode
        closing, the node ladder taking over): what it paused is restored, in this plan's write."""
        base, st = self.plan.base_state, self.state
        if not (base.reset_phase or base.paused) or (
                st.rung == Rung.RESET_GPU and st.rung_status == RungStatus.RUNNING):
            return
        self.state = replace(st, reset_phase=None, paused=(), pause_value=None)
        what = ", ".join(base.paused) or "no operand label"
        self.out(Action.RESTORE_GPU_CLIENTS, Verdict.EXECUTE, f"the reset is over: {what} back to \"true\", "
                 "gpuhealth's exporter takes NVML back")

    def _decide(self) -> None:
        st, policy = self.v.state, self.policy
        firing = st.firing(self.now, policy.episode.quiet_timeout)
        actionable = {fp: a for fp, a in firing.items() if a.remediation != "none"}
        if self._left_alone(firing, actionable):
            return None
        faults = self._monitoring_faults(actionable)
        actionable = {fp: a for fp, a in actionable.items() if fp not in faults}
        self._correlated_faults(actionable)
        if st.scope == Scope.GPU and (self.full.devices is None or self.full.taint_api is None):
            # the DRA objects could not be read this pass (an API error, a driver restarting): no evidence that
            # the fault outgrew its GPU, and no way to change its device taints: wait, at GPU scope
            return self.out(Action.NONE, Verdict.DEFERRED, f"GPU scope ({', '.join(st.devices)}): the DRA objects "
                            "or the DeviceTaintRule API could not be read this pass")
        self._redrive_quarantine()
        self._cover_new_instances()
        self._judge_offender(actionable)  # before the target: a repeat offender's is replace (decide/offenders.py)
        st = self.state
        self._scope_view()
        if actionable:  # the rung under way is observed on the pods it is about
            self._gpu_pods_view(actionable, self._target(actionable, st), note=False)
        self.state, notes = observe(self.v, st, self.now, policy)
        self.seen = self.state
        self.plan.notes.extend(notes)
        if not actionable and self._sweep_holds():  # an idle-node sweep's episode (decide/sweep.py)
            return None
        if not actionable and self._replace_pending():  # decided on the alerts then: handed over whatever they say now
            return self._climb(rung_index(Rung.REPLACE), None, [])
        if not actionable:
            return self._hold_for_monitoring_fault(faults) if faults else self._settle()
        target = self._target(actionable, self.state)
        self._choose_scope(actionable, target)
        self._gpu_pods_view(actionable, target)
        return self._climb(target, _pick_gpu(actionable), sorted(actionable))

    def _left_alone(self, firing: dict[str, AlertRecord], actionable: dict[str, AlertRecord]) -> bool:
        """The node is not the ladder's this pass (nothing to do, excluded, held, a person's, handed over to
        Karpenter's repair), said in a decision: True. Karpenter's repair in warn mode goes on (False)."""
        v, st = self.v, self.v.state
        if v.damaged:
            self.out(Action.NONE, Verdict.SKIPPED, f"state annotation unreadable ({v.damaged}): counted as disrupted "
                     "and left alone; fix or remove the gpuhealth.io/state annotation")
        elif not st.active and not v.our_taint:
            if v.burn_in or st.diagnosis_purpose == Purpose.BURN_IN:
                self._burn_in_node()  # a new node's burn-in (decide/burn_in.py)
            elif firing and not actionable:
                self.out(Action.NONE, Verdict.SKIPPED, "firing alerts ask for no action (remediation=none)")
            elif not firing:
                self._start_sweep()  # an idle node due for its sweep (decide/sweep.py)
        elif v.excluded:
            self.out(Action.NONE, Verdict.SKIPPED, "node excluded by the policy's exclude selectors")
        elif v.hold:
            who = f" by {v.hold['by']}" if v.hold.get("by") else ""
            self.out(Action.NONE, Verdict.SKIPPED, f"held{who}: {v.hold.get('reason', '')}".rstrip(": "))
        elif v.human_cordoned:
            self.out(Action.NONE, Verdict.SKIPPED, "cordoned by a person, not by gpuhealth: left alone")
        elif v.taken_over and st.scope == Scope.NODE:
            self._taken_over(bool(actionable))
        elif v.repair_conditions and st.active:
            found = self._karpenter_repair()
            if self.policy.karpenter_repair.mode != "handover":
                self.repair_warning = found
                return False
            self.out(Action.NONE, Verdict.SKIPPED, f"handed over to Karpenter's node repair: {found}, set by another "
                     "agent (karpenter_repair.mode handover): no further rung is started and nothing is undone while "
                     "it stays False")
        else:
            return False
        return True

    def _taken_over(self, actionable: bool) -> None:
        """A person removed gpuhealth's taint: nothing is started or undone; the episode closes once it resolves."""
        st = self.state
        if actionable and st.reset_phase is not None:  # the GPU's clients come back: the person has the node
            self.state = replace(st, rung_status=RungStatus.FAILED, rung_done=self.now)
            self.note(Note(EventReason.GPU_RESET_SKIPPED, "gpuhealth's taint was removed while the reset was "
                           "under way: a person took over; the GPU's clients are restored", rung=Rung.RESET_GPU))
        if actionable:
            return self.out(Action.NONE, Verdict.SKIPPED,
                            "gpuhealth's taint was removed from the node: a person took over; "
                            "nothing is started or undone (hold or release to hand it back)")
        self.state = NodeState(actions=st.actions)
        return self.out(Action.NONE, Verdict.SKIPPED,
                        "alerts resolved after a person took over (removed gpuhealth's "
                        "taint): episode closed, node left as the person set it")

    def _monitoring_faults(self, actionable: dict[str, AlertRecord]) -> dict[str, FaultKey]:
        """This node's alerts that are a monitoring fault this pass (decide/monitoring_fault.py), by fingerprint: kept
        in the state (an Event when one becomes one), and left out of what the ladder acts on."""
        faults = self.ledger.faults.of(self.v, actionable)
        st = self.state
        others = sorted({a.name for fp, a in actionable.items() if fp not in faults})
        rest = f"; its other alerts ({', '.join(others)}) are handled as usual" if others else ""
        for key in sorted({key for fp, key in faults.items() if fp not in st.monitoring_faults}):
            self.note(Note(EventReason.MONITORING_FAULT, f"{self.ledger.faults.why(key)}: it starts no node action "
                           f"here (no cordon, no new rung){rest}", Severity.WARNING))
        if tuple(sorted(faults)) != st.monitoring_faults:
            self.state = replace(st, monitoring_faults=tuple(sorted(faults)))
        return faults

    def _correlated_faults(self, actionable: dict[str, AlertRecord]) -> None:
        """This node's alerts that are a correlated fault (decide/correlated.py): recorded in the state for as long as
        they fire (an Event when one joins), so that the climb keeps them at their own rung."""
        st, shared = self.state, self.ledger.correlated.of(self.v, actionable)
        for key in sorted({key for fp, key in shared.items() if fp not in st.correlated}):
            self.note(Note(EventReason.CORRELATED_FAULT, f"{self.ledger.correlated.why(key)}: this node gets the "
                           "alert's own rung and climbs no higher for it; one page for all of them "
                           "(GpuhealthCorrelatedFault)", Severity.WARNING))
        kept = tuple(sorted(fp for fp in {*st.correlated, *shared} if fp in actionable))
        if kept != st.correlated:
            self.state = replace(st, correlated=kept)

    def _hold_for_monitoring_fault(self, faults: dict[str, FaultKey]) -> None:
        """Only a monitoring fault's alerts fire: nothing starts or climbs, and nothing is undone either. A node
        gpuhealth took out before (for these alerts, before they counted as one; for others, since resolved) stays as
        it is until they resolve, so that it is not returned and taken out again as a share crosses its threshold
        back and forth."""
        what = "; ".join(self.ledger.faults.why(key) for key in sorted(set(faults.values())))
        # a reset not begun yet would hold the GPU's clients stopped (the device plugin off) for as long as the
        # monitoring fault lasts: it is no longer needed, as when the alerts resolve
        self._cancel_unstarted_reset("only a monitoring fault's alerts were left while the GPU's clients were stopping")
        st = self.state
        if st.rung is None:
            return self.out(Action.NONE, Verdict.SKIPPED, f"monitoring fault, not this node's: {what}: no node action")
        return self.out(Action.NONE, Verdict.SKIPPED, f"monitoring fault, not this node's: {what}: the node stays at "
                        f"{st.rung} (since {time_text(st.rung_started)}), with no new rung, and returns to service "
                        "once its alerts resolve")

    def _cancel_unstarted_reset(self, why: str) -> bool:
        """A reset whose Job has not begun (the GPU's clients still stopping, or its Job never made) ends as not
        needed, never as a failure: the ladder goes back to the drain it had reached (done: a reset starts only on a
        drained node or GPU), so that alerts firing again start the reset afresh under the usual rules instead of
        climbing to a reboot (at GPU scope: to the node ladder). Its paused clients are restored in the same write
        (_restore_gpu_clients). True when it did."""
        v, st = self.v, self.state
        unstarted = st.reset_phase == ResetPhase.STOPPING or (
            st.reset_phase == ResetPhase.RESETTING and v.job_status == JobStatus.MISSING)
        if not (st.rung == Rung.RESET_GPU and st.rung_status == RungStatus.RUNNING and unstarted):
            return False
        self.state = replace(st, rung=Rung.DRAIN, rung_status=RungStatus.DONE, rung_done=self.now, job=None,
                             gpu=None)
        what = f"GPU {', '.join(st.devices)}" if st.scope == Scope.GPU else "the node"
        self.note(Note(EventReason.GPU_RESET_NOT_NEEDED, f"{why}: the reset is no longer needed and did not start "
                       f"(job {st.job} never created); {what} stays drained (the ladder back at its drain) until it "
                       "returns to service, and alerts firing again start the reset afresh", rung=Rung.RESET_GPU))
        return True

    def _karpenter_repair(self) -> str:
        """Karpenter-watched conditions another agent (the EKS node monitoring agent) set False on a node gpuhealth is
        working on: each said once per episode (an Event and an audit line; the executor counts it), as the state
        records. Returns them, described."""
        st, found = self.state, self.v.repair_conditions
        described = ", ".join(c.describe() for c in found)
        new = [c for c in found if c.type not in st.repair_reported]
        if new:
            self.state = replace(st, repair_reported=(*st.repair_reported, *(c.type for c in new)))
            then = ("gpuhealth starts no further rung on the node and undoes nothing (karpenter_repair.mode handover)"
                    if self.policy.karpenter_repair.mode == "handover" else
                    "gpuhealth's ladder goes on (karpenter_repair.mode warn): a replacement can cut a rung short")
            said = "; ".join(f"{c.type}: {c.message[:200]}" for c in new if c.message)
            self.note(Note(EventReason.KARPENTER_REPAIR_CONFLICT,
                           f"{', '.join(c.describe() for c in new)}, not set by gpuhealth"
                           f"{' (' + said + ')' if said else ''}: with its NodeRepair feature gate on, Karpenter "
                           "force-replaces a node whose condition stays False past its toleration "
                           "(AcceleratedHardwareReady 10m, the others 30m), whatever gpuhealth's holds, budgets and "
                           f"do-not-disrupt say; {then}", Severity.WARNING))
        return described

    def _settle(self) -> None:
        """No actionable alert fires: return to service after the healthy delay, or stay quiet."""
        v, policy, now, st = self.v, self.policy, self.now, self.state
        stale = st.stale(now, policy.episode.quiet_timeout)
        if stale:
            if not st.quiet:
                self.state = replace(st, quiet=True)
                self.note(Note(EventReason.EPISODE_QUIET, f"no word on {len(stale)} firing alert(s) for "
                               f"{policy.episode.quiet_timeout}; escalation stopped, node left as is"))
            return self.out(Action.NONE, Verdict.SKIPPED,
                            "episode went quiet (alerts neither repeated nor resolved, e.g. "
                            "silenced): escalation stopped; `gpuhealth-remediator release` returns the node")
        if st.rung == Rung.REPLACE:
            return self.out(Action.NONE, Verdict.SKIPPED, "replacement under way: not returned to service")
        if st.rung is None and not v.our_taint:  # resolved before anything was done: close the episode
            self.state = NodeState(actions=st.actions)
            return self.out(Action.NONE, Verdict.SKIPPED, "alerts resolved before any action")
        if st.healthy_since is None:
            self.state = st = replace(st, healthy_since=now)
        if self._cancel_unstarted_reset("the alerts resolved while the GPU's clients were stopping"):
            return self.out(Action.UNCORDON, Verdict.DEFERRED, "reset cancelled before it started; healthy for 0s of "
                            f"{int(policy.return_to_service.healthy_delay.total_seconds())}s")
        if st.rung_status == RungStatus.RUNNING and st.rung in JOB_RUNGS:
            return self.out(Action.UNCORDON, Verdict.DEFERRED,
                            f"{st.rung} still under way (job {st.job}): the node returns "
                            "once it is done or has failed")
        if self._validation_holds():  # a reset or a reboot is validated before the node returns
            return None
        healthy_for = elapsed(now, st.healthy_since)
        if healthy_for < policy.return_to_service.healthy_delay:
            return self.out(Action.UNCORDON, Verdict.DEFERRED, f"healthy for {int(healthy_for.total_seconds())}s of "
                            f"{int(policy.return_to_service.healthy_delay.total_seconds())}s")
        self.ledger.release(v)
        self.state = NodeState(actions=st.actions)
        return self.out(Action.UNCORDON, Verdict.EXECUTE,
                        f"all alerts resolved for {int(healthy_for.total_seconds())}s: "
                        "undoing what gpuhealth did")
