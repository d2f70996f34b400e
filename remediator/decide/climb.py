"""The ladder as a table: from the node's rung and its status to the next step (_STEPS, one handler each), then
through the gates (the ladder's limit, the drained-node rule, the budget, the silences) to the state that starts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum

from remediator.decide.decision import NOT_STARTED
from remediator.decide.diagnose_step import diagnosis_before_person, diagnosis_first
from remediator.decide.diagnosis import Purpose
from remediator.decide.event_reasons import EventReason, Note
from remediator.decide.evidence import evidence_first
from remediator.decide.job_start import node_job_name
from remediator.decide.nodestate import (
    ALL_GPUS,
    DO_NOT_DISRUPT_ANNOTATION,
    RUNGS,
    NodeState,
    elapsed,
    rung_index,
    time_text,
)
from remediator.decide.planner import PlannerBase
from remediator.decide.reset import operands_to_pause, reset_target, still_holding
from remediator.decide.views import PodRef
from remediator.decide.vocabulary import (
    DISRUPTIVE,
    JOB_RUNGS,
    NEEDS_DRAINED,
    Action,
    JobStatus,
    ResetPhase,
    Rung,
    RungStatus,
    Scope,
    Verdict,
)


def job_name(node: str, rung: str, episode: datetime | None) -> str:
    short = {"reset_gpu": "reset", "reboot": "reboot"}.get(rung, rung)
    return node_job_name(short, node, f"{node}/{rung}/{time_text(episode)}")


def _names(pods: list[PodRef]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)


class _Flow(Enum):
    AGAIN = "again"  # the state moved on within this pass: decide the next step
    STOP = "stop"  # decided (or nothing more to do) for this node this pass


@dataclass(frozen=True)
class _Step:
    """The rung the climb would start next, why, and whether it is one already recorded and resumed (no budget)."""

    rung: str
    why: str
    resume: bool = False


class ClimbSteps(PlannerBase):
    def _climb(self, target: int, gpu: str | None, fps: list[str]) -> None:
        """From the node's rung and its status to the next step (_STEPS, one handler each), then through the
        gates to its start (_start): until a step is started, deferred or stopped, or the climb ends this pass."""
        self.ceiling = self.alert_ceiling(fps)
        for _ in range(4 * len(RUNGS) + 4):
            st = self.state
            if st.scope == Scope.GPU and st.rung_status == RungStatus.FAILED and not st.not_started:
                # a GPU step failed or timed out: the node ladder, above that step (a failed drain: from the node's
                # own drain). A fault that outgrew the GPU was handed over by _choose_scope, an escalation below.
                floor = RUNGS[rung_index(st.rung) + 1] if st.rung != Rung.DRAIN else None
                self._to_node_scope(f"{st.rung} failed", floor)
                target = max(target, rung_index(floor))
                continue
            step = self._next_step(target, gpu, fps)
            if step is _Flow.AGAIN:
                continue
            if step is _Flow.STOP:
                return
            st = self.state
            if st.scope == Scope.GPU and rung_index(step.rung) > rung_index(Rung.RESET_GPU):
                # a reset that was not enough (the fault persisted): reboot and replace take the node, from its cordon
                self._to_node_scope(f"{st.rung} was not enough: the alerts ask for {step.rung}", floor=step.rung)
                target = max(target, rung_index(step.rung))
                continue
            if step.rung == Rung.RESET_GPU and gpu is None:
                self.state = replace(st, rung=Rung.RESET_GPU, rung_status=RungStatus.FAILED, job=None,
                                     rung_started=self.now, rung_done=self.now, timed_out=False)
                self.note(Note(EventReason.GPU_RESET_SKIPPED,
                               "no alert names a GPU (index, PCI bus id, all or unknown): cannot reset",
                               rung=Rung.RESET_GPU))
                continue
            if self._start(step, gpu, fps) is _Flow.STOP:
                return
        return

    def _next_step(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        if self.state.rung is None:
            return self._first_step(target, gpu, fps)
        return _STEPS[self.state.rung_status or RungStatus.DONE](self, target, gpu, fps)

    def _ceiling(self, target: int) -> int:
        """The highest rung the climb may reach: the alerts' ceiling (_alert_ceiling) under ladder.max_rung; after a
        failed drain, no higher than the alerts ask."""
        top = min(rung_index(self.policy.ladder.max_rung), max(target, self.ceiling.index))
        return min(top, target) if self.state.drain_failed else top

    def _first_step(self, target: int, gpu: str | None, fps: list[str]) -> _Step:
        why = f"alert asks for {RUNGS[target]}{self.scope_note}"
        if self.state.scope == Scope.GPU:
            why += f"; GPU scope: quarantining {', '.join(self.state.devices)}, the node stays in service"
        return _Step(Rung.CORDON, why)

    def _while_running(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        v, st, policy = self.v, self.state, self.policy
        rung = st.rung
        assert rung is not None  # _next_step: a rung is under way
        if rung == Rung.DRAIN:
            return _Flow.AGAIN if self._draining(fps) else _Flow.STOP
        if rung == Rung.REPLACE and not self._replace_pending():
            self.out(Action.REPLACE, Verdict.SKIPPED, "replacement under way")
            return _Flow.STOP
        if rung == Rung.RESET_GPU and st.reset_phase is not None and v.job_status == JobStatus.MISSING and gpu and \
                reset_target(v, policy, gpu) != st.gpu:  # no Job yet: it resets what the alerts name now
            self.state = st = replace(st, gpu=reset_target(v, policy, gpu))
        if rung == Rung.RESET_GPU and st.reset_phase == ResetPhase.STOPPING:
            left = still_holding(v, st, policy)
            self.out(Action.RESET_GPU, Verdict.DEFERRED, f"stopping the GPU's clients before the reset "
                     f"(since {time_text(st.rung_started)}); still holding it: {', '.join(left)}")
            return _Flow.STOP
        if v.job_status == JobStatus.MISSING and rung in JOB_RUNGS:  # intent recorded, Job never created
            just_stopped = self.plan.base_state.reset_phase == ResetPhase.STOPPING
            why = (f"the GPU's clients stopped: starting reset job {st.job}" if just_stopped
                   else f"{rung} recorded but its job {st.job} is missing: creating it")
            return _Step(rung, why, resume=True)
        if rung == Rung.REPLACE:
            return _Step(rung, "replace recorded but its hand-over not seen done (the remediator stopped in "
                               f"between): handing over again (replace.method {policy.replace.method})", resume=True)
        self.out(Action(rung), Verdict.DEFERRED, f"{rung} under way since {time_text(st.rung_started)}")
        return _Flow.STOP

    def _after_failure(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        st = self.state
        rung, idx, ceiling = st.rung, rung_index(st.rung), self._ceiling(target)
        if st.not_started:  # gpuhealth's own breakage says nothing about the node: no climb on it
            self._stop(Action.NONE, Verdict.SKIPPED, f"{rung}: {NOT_STARTED} ({st.not_started}); "
                       "the ladder does not climb for gpuhealth's own breakage: needs a person")
            return _Flow.STOP
        if rung == Rung.DRAIN and target <= idx:
            self._stop(Action.NONE, Verdict.SKIPPED, "drain failed (timed out) and the alerts ask for no more "
                       "than drain: needs a person")
            return _Flow.STOP
        if idx >= ceiling:
            why = f" ({self.ceiling.why})" if self.ceiling.why and ceiling == self.ceiling.index else ""
            self._stop(Action.NONE, Verdict.SKIPPED, f"{rung} failed and the ladder stops at {RUNGS[ceiling]}{why}: "
                       "needs a person")
            return _Flow.STOP
        return _Step(RUNGS[target] if rung == Rung.DRAIN else RUNGS[idx + 1], f"{rung} failed")

    def _after_done(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        st = self.state
        rung, idx = st.rung, rung_index(st.rung)
        assert rung is not None  # _next_step: a rung is done
        if idx < target:  # cordon and drain come first; then straight to the rung the alert asks for
            nxt = RUNGS[idx + 1] if idx < rung_index(Rung.DRAIN) else RUNGS[target]
            why = f"passing through to {RUNGS[target]}" if nxt != RUNGS[target] else f"alert asks for {nxt}"
            return _Step(nxt, why)
        esc = self.policy.rung(rung).escalate_after
        if esc is None or idx >= self._ceiling(target):
            at_top = idx >= rung_index(self.policy.ladder.max_rung)
            if esc is not None and at_top and elapsed(self.now, st.rung_done) >= esc \
                    and diagnosis_before_person(self, fps):  # the drained node diagnosed for the person
                return _Flow.STOP
            why = self.ceiling.why if esc is not None and idx >= self.ceiling.index and self.ceiling.why else ""
            said = self.state.diagnosis_result if self.state.diagnosis_purpose == Purpose.DIAGNOSE else None
            self._stop(Action.NONE, Verdict.SKIPPED, f"at {rung}, as far as the alerts ask; fault persisting does "
                       "not climb from here" + (f" ({why}): needs a person" if why else "")
                       + (f"; diagnostic: {said}" if said else ""))
            return _Flow.STOP
        persisted = elapsed(self.now, st.rung_done)
        if persisted < esc:
            self._stop(Action(RUNGS[idx + 1]), Verdict.DEFERRED, f"fault persists {int(persisted.total_seconds())}s "
                       f"after {rung}; climbs after {int(esc.total_seconds())}s")
            return _Flow.STOP
        return _Step(RUNGS[idx + 1], f"fault persisted {int(persisted.total_seconds())}s after {rung}")

    def _start(self, step: _Step, gpu: str | None, fps: list[str]) -> _Flow:
        """The step through the ladder's limit, the drained-node rule, the budget and the silences; then its
        decision and the state that starts it. AGAIN when the rung it started is already done (cordon, an empty
        drain) and the climb goes on."""
        policy, st, nxt = self.policy, self.state, step.rung
        if rung_index(nxt) > rung_index(policy.ladder.max_rung):
            self.out(Action.NONE, Verdict.SKIPPED, f"ladder stops at {policy.ladder.max_rung}")
            return _Flow.STOP
        if rung_index(nxt) > rung_index(Rung.RESET_GPU) and self.plan.drain_only is not None:
            # past the one GPU's reset (a reboot, a replacement): the whole node must be empty first
            self.v = self.full
            self.plan.drain_only = None
        v = self.v
        if nxt in NEEDS_DRAINED:
            if not v.pods_known:
                self.out(Action(nxt), Verdict.DEFERRED, "pods unknown — pass --pods")
                return _Flow.STOP
            if v.evictable:  # pods came back after the drain (or never left): drain first
                self._drain_more(f" before {nxt}", fps, why="node not drained: ")
                return _Flow.STOP
        if nxt == Rung.DRAIN and not v.pods_known:
            self.out(Action.DRAIN, Verdict.DEFERRED, "pods unknown — pass --pods")
            return _Flow.STOP
        budgeted = Action.QUARANTINE_GPU if st.scope == Scope.GPU else nxt  # the node stays in service
        if not step.resume:
            held = self.ledger.gate(v, budgeted)
            if held is not None:
                self.out(Action(nxt), Verdict.DEFERRED, held.reason, deferral=held.limit)
                return _Flow.STOP
        if nxt in DISRUPTIVE and self._silenced(nxt, fps):
            return _Flow.STOP
        if step.resume:
            self.out(Action(nxt), Verdict.EXECUTE, step.why, new=False, gpu=st.gpu, job=st.job)
            return _Flow.STOP
        if diagnosis_first(self, nxt, fps):  # a replace for a GPU fault, only if it fails (decide/diagnose_step.py)
            return _Flow.STOP
        if evidence_first(self, nxt):  # before the episode's first reset, reboot or replace (decide/evidence.py)
            return _Flow.STOP
        self.ledger.take(v, budgeted)
        started, why = self._started(nxt, step.why, gpu)
        action = Action.STOP_GPU_CLIENTS if started.reset_phase == ResetPhase.STOPPING else Action(nxt)
        self.out(action, Verdict.EXECUTE, why, gpu=started.gpu if nxt == Rung.RESET_GPU else None,
                 job=started.job if nxt in JOB_RUNGS else None)
        self.state = started
        return _Flow.AGAIN if started.rung_status == RungStatus.DONE else _Flow.STOP

    def _started(self, nxt: str, why: str, gpu: str | None) -> tuple[NodeState, str]:
        """The state that starts rung `nxt`, with what each rung needs written in the same step, and the
        decision's reason with what it will do."""
        policy, st, v, now = self.policy, self.state, self.v, self.now
        # a later rung ends the hold of a failed validation (decide/validation.py)
        started = st.with_action(now, rung=nxt, rung_status=RungStatus.RUNNING, rung_started=now,
                                 rung_done=None, timed_out=False, reset_phase=None, paused=(), pause_value=None,
                                 not_started=None, validation_failed=None)
        if nxt == Rung.CORDON:
            started = replace(started, rung_status=RungStatus.DONE, rung_done=now,
                              cordoned=st.cordoned or (st.scope == Scope.NODE and not v.unschedulable))
        elif nxt == Rung.DRAIN and st.scope == Scope.GPU:  # kube-controller-manager evicts the GPU's pods
            if not v.evictable:
                started = replace(started, rung_status=RungStatus.DONE, rung_done=now)
                why += "; no pod holds the GPU"
            else:
                why += f"; {len(v.pending_pods)} pod(s) hold the GPU"
        elif nxt == Rung.DRAIN:
            # Karpenter must not consolidate a node mid-ladder: annotated in the write that starts the drain
            started = replace(started, do_not_disrupt=st.do_not_disrupt or policy.drain.karpenter_do_not_disrupt)
            spared = self._spared(v.pending_pods)
            if not v.evictable:
                started = replace(started, rung_status=RungStatus.DONE, rung_done=now)
                why += "; nothing to evict"
            else:
                why += f"; evicting {len(v.pending_pods) - len(spared)} pod(s)"
            if spared:
                why += (f"; not evicting {_names(spared)} ({DO_NOT_DISRUPT_ANNOTATION}): the drain waits for "
                        "them, and drain.on_timeout decides at its timeout")
        elif nxt == Rung.REPLACE:  # handed to Karpenter (or a hook): our annotation must not block it
            started = replace(started, do_not_disrupt=False)
        elif nxt in JOB_RUNGS:
            started = replace(started, job=job_name(v.name, nxt, st.episode),
                              gpu=reset_target(v, policy, gpu) if nxt == Rung.RESET_GPU and gpu else None,
                              boot_id=v.boot_id if nxt == Rung.REBOOT else st.boot_id)
            if nxt == Rung.RESET_GPU:
                why += f"; GPU {started.gpu}" if started.gpu != ALL_GPUS else "; all GPUs of the node"
                if started.gpu != gpu:
                    why += f" (a reset of {v.labels.get('nvidia.com/gpu.product', 'these GPUs')} takes them all)"
                started, why = self._stop_clients(started, why)
        return started, why

    def _stop_clients(self, started: NodeState, why: str) -> tuple[NodeState, str]:
        """The reset's first step: pause the operands that hold the GPU, ask gpuhealth's exporter to let go; the Job
        starts once they have (progress.observe). With nothing to wait for, the Job starts now."""
        base = self.plan.base_state  # a stop already under way (a GPU scope handed to the node's): its labels stay ours
        paused = tuple(dict.fromkeys((*base.paused, *operands_to_pause(self.v, self.policy))))
        stopping = replace(started, reset_phase=ResetPhase.STOPPING, paused=paused,
                           pause_value=base.pause_value if base.paused else self.policy.reset.pause_value)
        left = still_holding(replace(self.v, gpu_clients=()), stopping, self.policy)
        if not paused and not left:
            return started, why
        what = [f"pausing {', '.join(paused)}"] if paused else []
        what += ["asking gpuhealth's exporter to release NVML"] if left else []
        return stopping, f"{why}; first stopping the GPU's clients: {' and '.join(what)}"

    def _draining(self, fps: list[str]) -> bool:
        """The drain rung is running: keep evicting, and past its timeout do what drain.on_timeout says.
        True when the drain failed (on_timeout=escalate) and the climb goes on."""
        policy, st, v = self.policy, self.state, self.v
        if not v.pods_known:
            self.out(Action.DRAIN, Verdict.DEFERRED, "pods unknown — pass --pods")
            return False
        timeout = policy.rung("drain").timeout
        timed_out = timeout is not None and elapsed(self.now, st.rung_started) >= timeout
        if timed_out and not st.timed_out:
            self.state = st = replace(st, timed_out=True)
            spared = self._spared(v.pending_pods)
            kept = f" ({_names(spared)} kept by {DO_NOT_DISRUPT_ANNOTATION})" if spared else ""
            self.note(Note.timeout(Rung.DRAIN, f"drain passed its {timeout} timeout with {len(v.evictable)} pod(s) "
                                   f"left{kept}; policy drain.on_timeout={policy.drain.on_timeout}"))
        if timed_out and policy.drain.on_timeout == "escalate":
            self.state = replace(st, rung_status=RungStatus.FAILED, rung_done=self.now, drain_failed=True)
            return True
        if timed_out and policy.drain.on_timeout == "force":
            self._drain_more("", fps, force=True, why=f"drain passed its {timeout} timeout "
                             "(policy drain.on_timeout=force): ")
            return False
        self._drain_more("", fps, why="drain timed out (policy drain.on_timeout=wait): " if timed_out else "")
        return False

    def _drain_more(self, before: str, fps: list[str], force: bool = False, why: str = "") -> None:
        """Evict (or delete) what is still on the node; wait for what is terminating, and for the pods
        karpenter.sh/do-not-disrupt keeps (deleted only when forced: drain.on_timeout force)."""
        v = self.v
        spared = [] if force else self._spared(v.pending_pods)
        pending = [p for p in v.pending_pods if p not in spared]
        kept = f"; not evicting {_names(spared)} ({DO_NOT_DISRUPT_ANNOTATION})" if spared else ""
        if not pending:
            terminating = len(v.evictable) - len(spared)
            waits = [f"{terminating} pod(s) to terminate"] if terminating or not spared else []
            waits += [f"{_names(spared)}, which {DO_NOT_DISRUPT_ANNOTATION} keeps from eviction "
                      "(drain.honor_pod_do_not_disrupt)"] if spared else []
            return self.out(Action.DRAIN, Verdict.DEFERRED, f"waiting for {' and '.join(waits)}{before}")
        if self._silenced("drain", fps):
            return None
        verb = "deleting" if force else "evicting"
        return self.out(Action.DRAIN, Verdict.EXECUTE,
                        f"{why}{verb} {len(pending)} pod(s){before}{kept}", new=False, force=force)

    def _spared(self, pods: list[PodRef]) -> list[PodRef]:
        """The pods the drain leaves where they are for now: an active karpenter.sh/do-not-disrupt, as Karpenter's own
        drain leaves them (drain.honor_pod_do_not_disrupt). Node scope only: at GPU scope kube-controller-manager evicts
        for the NoExecute device taint, and it does not read Karpenter's annotation."""
        if not self.policy.drain.honor_pod_do_not_disrupt or self.state.scope == Scope.GPU:
            return []
        return [p for p in pods if p.protected(self.now)]

    def _silenced(self, action: str, fingerprints: list[str]) -> bool:
        """Before every disruptive step (starts, drain retries, forced deletion): True if it must not happen."""
        if self.silences is None:
            return False
        answer = self.silences(self.v.name, fingerprints)
        if answer.error and self.policy.alertmanager.on_error == "defer":
            self.out(Action(action), Verdict.DEFERRED, f"cannot check Alertmanager silences: {answer.error}")
            return True
        if answer.silenced_by:
            self.out(Action(action), Verdict.SKIPPED,
                     f"silenced or inhibited in Alertmanager ({', '.join(answer.silenced_by)}): "
                     "a person took over")
            return True
        return False

    def _stop(self, action: Action, decision: Verdict, reason: str) -> None:
        """The end of the climb for this pass: a decision only if nothing else was decided."""
        if not self.plan.decisions:
            self.out(action, decision, reason)


# The ladder's table: the handler that finds the next step, by the status of the node's rung (no rung yet:
# _first_step). Each returns the step, or says the climb goes on (AGAIN) or ends this pass (STOP).
_STEPS: dict[RungStatus, Callable[[ClimbSteps, int, str | None, list[str]], _Step | _Flow]] = {
    RungStatus.RUNNING: ClimbSteps._while_running,
    RungStatus.FAILED: ClimbSteps._after_failure,
    RungStatus.DONE: ClimbSteps._after_done,
}
