"""The ladder as a table: from the node's rung and its status to the next step (_STEPS, one handler each), then
through the gates (the ladder's limit, the drained-node rule, the budget, the silences) to the state that starts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from gpuhealth.remediator.decide import offenders
from gpuhealth.remediator.decide.decision import NOT_STARTED
from gpuhealth.remediator.decide.diagnose_step import diagnosis_before_person, diagnosis_first
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.evidence import evidence_first
from gpuhealth.remediator.decide.job_start import node_job_name
from gpuhealth.remediator.decide.nodestate import (
    ALL_GPUS,
    DO_NOT_DISRUPT_ANNOTATION,
    RUNGS,
    NodeState,
    elapsed,
    rung_index,
    time_text,
)
from gpuhealth.remediator.decide.planner import Ceiling, Draft, Pass, note, out, replace_pending, to_node_scope
from gpuhealth.remediator.decide.reset import operands_to_pause, reset_target, still_holding
from gpuhealth.remediator.decide.state_records import Reset
from gpuhealth.remediator.decide.step import Flow, Step
from gpuhealth.remediator.decide.views import PodRef
from gpuhealth.remediator.decide.vocabulary import (
    DISRUPTIVE,
    JOB_RUNGS,
    NEEDS_DRAINED,
    Action,
    JobStatus,
    Purpose,
    ResetPhase,
    Rung,
    RungStatus,
    Scope,
    Verdict,
)


def rung_job_name(node: str, rung: str, episode: datetime | None) -> str:
    """The reset or reboot Job's name, from the node, the rung and the episode: made twice (a restart, a new leader),
    it is the same Job (409). The diagnostic Job's is diagnosis.diagnosis_job_name."""
    short = {"reset_gpu": "reset", "reboot": "reboot"}.get(rung, rung)
    return node_job_name(short, node, f"{node}/{rung}/{time_text(episode)}")


def _names(pods: list[PodRef]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)


def run(d: Draft, ctx: Pass, target: int, gpu: str | None, fps: list[str], ceiling: Ceiling) -> None:
    """From the node's rung and its status to the next step (_STEPS, one handler each), then through the
    gates to its start (start): until a step is started, deferred or stopped, or the climb ends this pass.
    `ceiling`: how far the alerts let a persisting fault climb (the caller's: planner.alert_ceiling, or a failed
    sweep's, sweep.ceiling); a repeat offender's step is said with its rule, or stopped, first (offenders.restate)."""
    d.ceiling = ceiling
    for _ in range(4 * len(RUNGS) + 4):
        st = d.state
        if st.scope == Scope.GPU and st.rung_status == RungStatus.FAILED and not st.not_started:
            # a GPU step failed or timed out: the node ladder, above that step (a failed drain: from the node's
            # own drain). A fault that outgrew the GPU was handed over by scope.choose_scope, an escalation below.
            floor = RUNGS[rung_index(st.rung) + 1] if st.rung != Rung.DRAIN else None
            to_node_scope(d, f"{st.rung} failed", floor)
            target = max(target, rung_index(floor))
            continue
        step = _next_step(d, ctx, target, gpu, fps)
        if step is Flow.AGAIN:
            continue
        if step is Flow.STOP:
            return
        st = d.state
        if st.scope == Scope.GPU and rung_index(step.rung) > rung_index(Rung.RESET_GPU):
            # a reset that was not enough (the fault persisted): reboot and replace take the node, from its cordon
            to_node_scope(d, f"{st.rung} was not enough: the alerts ask for {step.rung}", floor=step.rung)
            target = max(target, rung_index(step.rung))
            continue
        if step.rung == Rung.RESET_GPU and gpu is None:
            d.state = replace(st, rung=Rung.RESET_GPU, rung_status=RungStatus.FAILED, job=None,
                              rung_started=ctx.now, rung_done=ctx.now, timed_out=False)
            note(d, Note(EventReason.GPU_RESET_SKIPPED,
                         "no alert names a GPU (index, PCI bus id, all or unknown): cannot reset",
                         rung=Rung.RESET_GPU))
            continue
        restated = offenders.restate(d, ctx, step)
        if restated is None or start(d, ctx, restated, gpu, fps) is Flow.STOP:
            return
    return


def _next_step(d: Draft, ctx: Pass, target: int, gpu: str | None, fps: list[str]) -> Step | Flow:
    if d.state.rung is None:
        return _first_step(d, ctx, target, gpu, fps)
    return _STEPS[d.state.rung_status or RungStatus.DONE](d, ctx, target, gpu, fps)


def _highest(d: Draft, ctx: Pass, target: int) -> int:
    """The highest rung the climb may reach: the alerts' ceiling (d.ceiling) under ladder.max_rung; after a
    failed drain, no higher than the alerts ask."""
    top = min(rung_index(ctx.policy.ladder.max_rung), max(target, d.ceiling.index))
    return min(top, target) if d.state.drain_failed else top


def _first_step(d: Draft, ctx: Pass, target: int, gpu: str | None, fps: list[str]) -> Step:
    why = f"alert asks for {RUNGS[target]}{d.scope_note}"
    if d.state.scope == Scope.GPU:
        why += f"; GPU scope: quarantining {', '.join(d.state.gpu_scope.devices)}, the node stays in service"
    return Step(Rung.CORDON, why)


def _while_running(d: Draft, ctx: Pass, target: int, gpu: str | None, fps: list[str]) -> Step | Flow:
    v, st, policy = d.view, d.state, ctx.policy
    rung = st.rung
    assert rung is not None  # _next_step: a rung is under way
    if rung == Rung.DRAIN:
        return Flow.AGAIN if _draining(d, ctx, fps) else Flow.STOP
    if rung == Rung.REPLACE and not replace_pending(d):
        out(d, Action.REPLACE, Verdict.SKIPPED, "replacement under way")
        return Flow.STOP
    if rung == Rung.RESET_GPU and st.reset.phase is not None and v.job_status == JobStatus.MISSING and gpu and \
            reset_target(v, policy, gpu) != st.gpu:  # no Job yet: it resets what the alerts name now
        d.state = st = replace(st, gpu=reset_target(v, policy, gpu))
    if rung == Rung.RESET_GPU and st.reset.phase == ResetPhase.STOPPING:
        left = still_holding(v, st, policy)
        out(d, Action.RESET_GPU, Verdict.DEFERRED, f"stopping the GPU's clients before the reset "
            f"(since {time_text(st.rung_started)}); still holding it: {', '.join(left)}")
        return Flow.STOP
    if v.job_status == JobStatus.MISSING and rung in JOB_RUNGS:  # intent recorded, Job never created
        just_stopped = d.plan.base_state.reset.phase == ResetPhase.STOPPING
        why = (f"the GPU's clients stopped: starting reset job {st.job}" if just_stopped
               else f"{rung} recorded but its job {st.job} is missing: creating it")
        return Step(rung, why, resume=True)
    if rung == Rung.REPLACE:
        return Step(rung, "replace recorded but its hand-over not seen done (the remediator stopped in "
                           f"between): handing over again (replace.method {policy.replace.method})", resume=True)
    out(d, Action(rung), Verdict.DEFERRED, f"{rung} under way since {time_text(st.rung_started)}")
    return Flow.STOP


def _after_failure(d: Draft, ctx: Pass, target: int, gpu: str | None, fps: list[str]) -> Step | Flow:
    st = d.state
    rung, idx, ceiling = st.rung, rung_index(st.rung), _highest(d, ctx, target)
    if st.not_started:  # gpuhealth's own breakage says nothing about the node: no climb on it
        _stop(d, ctx, Action.NONE, Verdict.SKIPPED, f"{rung}: {NOT_STARTED} ({st.not_started}); "
              "the ladder does not climb for gpuhealth's own breakage: needs a person")
        return Flow.STOP
    if rung == Rung.DRAIN and target <= idx:
        _stop(d, ctx, Action.NONE, Verdict.SKIPPED, "drain failed (timed out) and the alerts ask for no more "
              "than drain: needs a person")
        return Flow.STOP
    if idx >= ceiling:
        why = f" ({d.ceiling.why})" if d.ceiling.why and ceiling == d.ceiling.index else ""
        _stop(d, ctx, Action.NONE, Verdict.SKIPPED, f"{rung} failed and the ladder stops at {RUNGS[ceiling]}{why}: "
              "needs a person")
        return Flow.STOP
    return Step(RUNGS[target] if rung == Rung.DRAIN else RUNGS[idx + 1], f"{rung} failed")


def _after_done(d: Draft, ctx: Pass, target: int, gpu: str | None, fps: list[str]) -> Step | Flow:
    st = d.state
    rung, idx = st.rung, rung_index(st.rung)
    assert rung is not None  # _next_step: a rung is done
    if idx < target:  # cordon and drain come first; then straight to the rung the alert asks for
        nxt = RUNGS[idx + 1] if idx < rung_index(Rung.DRAIN) else RUNGS[target]
        why = f"passing through to {RUNGS[target]}" if nxt != RUNGS[target] else f"alert asks for {nxt}"
        return Step(nxt, why)
    esc = ctx.policy.rung(rung).escalate_after
    if esc is None or idx >= _highest(d, ctx, target):
        at_top = idx >= rung_index(ctx.policy.ladder.max_rung)
        if esc is not None and at_top and elapsed(ctx.now, st.rung_done) >= esc \
                and diagnosis_before_person(d, ctx, fps):  # the drained node diagnosed for the person
            return Flow.STOP
        why = d.ceiling.why if esc is not None and idx >= d.ceiling.index and d.ceiling.why else ""
        said = d.state.diagnostic.result if d.state.diagnostic.purpose == Purpose.DIAGNOSE else None
        _stop(d, ctx, Action.NONE, Verdict.SKIPPED, f"at {rung}, as far as the alerts ask; fault persisting does "
              "not climb from here" + (f" ({why}): needs a person" if why else "")
              + (f"; diagnostic: {said}" if said else ""))
        return Flow.STOP
    persisted = elapsed(ctx.now, st.rung_done)
    if persisted < esc:
        _stop(d, ctx, Action(RUNGS[idx + 1]), Verdict.DEFERRED, f"fault persists {int(persisted.total_seconds())}s "
              f"after {rung}; climbs after {int(esc.total_seconds())}s")
        return Flow.STOP
    return Step(RUNGS[idx + 1], f"fault persisted {int(persisted.total_seconds())}s after {rung}")


def start(d: Draft, ctx: Pass, step: Step, gpu: str | None, fps: list[str]) -> Flow:
    """The step through the ladder's limit, the drained-node rule, the budget and the silences; then its
    decision and the state that starts it. AGAIN when the rung it started is already done (cordon, an empty
    drain) and the climb goes on."""
    policy, st, nxt = ctx.policy, d.state, step.rung
    if rung_index(nxt) > rung_index(policy.ladder.max_rung):
        out(d, Action.NONE, Verdict.SKIPPED, f"ladder stops at {policy.ladder.max_rung}")
        return Flow.STOP
    if rung_index(nxt) > rung_index(Rung.RESET_GPU) and d.plan.drain_only is not None:
        # past the one GPU's reset (a reboot, a replacement): the whole node must be empty first
        d.view = d.full
        d.plan.drain_only = None
    v = d.view
    if nxt in NEEDS_DRAINED:
        if not v.pods_known:
            out(d, Action(nxt), Verdict.DEFERRED, "pods unknown — pass --pods")
            return Flow.STOP
        if v.evictable:  # pods came back after the drain (or never left): drain first
            _drain_more(d, ctx, f" before {nxt}", fps, why="node not drained: ")
            return Flow.STOP
    if nxt == Rung.DRAIN and not v.pods_known:
        out(d, Action.DRAIN, Verdict.DEFERRED, "pods unknown — pass --pods")
        return Flow.STOP
    budgeted = Action.QUARANTINE_GPU if st.scope == Scope.GPU else nxt  # the node stays in service
    if not step.resume:
        held = ctx.ledger.gate(v, budgeted)
        if held is not None:
            out(d, Action(nxt), Verdict.DEFERRED, held.reason, deferral=held.limit)
            return Flow.STOP
    if nxt in DISRUPTIVE and _silenced(d, ctx, nxt, fps):
        return Flow.STOP
    if step.resume:
        out(d, Action(nxt), Verdict.EXECUTE, step.why, new=False, gpu=st.gpu, job=st.job)
        return Flow.STOP
    if diagnosis_first(d, ctx, nxt, fps):  # a replace for a GPU fault, only if it fails (decide/diagnose_step.py)
        return Flow.STOP
    if evidence_first(d, ctx, nxt):  # before the episode's first reset, reboot or replace (decide/evidence.py)
        return Flow.STOP
    ctx.ledger.take(v, budgeted)
    started, why = _started(d, ctx, nxt, step.why, gpu)
    action = Action.STOP_GPU_CLIENTS if started.reset.phase == ResetPhase.STOPPING else Action(nxt)
    out(d, action, Verdict.EXECUTE, why, gpu=started.gpu if nxt == Rung.RESET_GPU else None,
        job=started.job if nxt in JOB_RUNGS else None)
    d.state = started
    return Flow.AGAIN if started.rung_status == RungStatus.DONE else Flow.STOP


def _started(d: Draft, ctx: Pass, nxt: str, why: str, gpu: str | None) -> tuple[NodeState, str]:
    """The state that starts rung `nxt`, with what each rung needs written in the same step, and the
    decision's reason with what it will do."""
    policy, st, v, now = ctx.policy, d.state, d.view, ctx.now
    # a later rung ends the hold of a failed validation (decide/validation.py)
    started = st.with_action(now, rung=nxt, rung_status=RungStatus.RUNNING, rung_started=now,
                             rung_done=None, timed_out=False, reset=Reset(),
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
        spared = _spared(d, ctx, v.pending_pods)
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
        started = replace(started, job=rung_job_name(v.name, nxt, st.episode),
                          gpu=reset_target(v, policy, gpu) if nxt == Rung.RESET_GPU and gpu else None,
                          boot_id=v.boot_id if nxt == Rung.REBOOT else st.boot_id)
        if nxt == Rung.RESET_GPU:
            why += f"; GPU {started.gpu}" if started.gpu != ALL_GPUS else "; all GPUs of the node"
            if started.gpu != gpu:
                why += f" (a reset of {v.labels.get('nvidia.com/gpu.product', 'these GPUs')} takes them all)"
            started, why = _stop_clients(d, ctx, started, why)
    return started, why


def _stop_clients(d: Draft, ctx: Pass, started: NodeState, why: str) -> tuple[NodeState, str]:
    """The reset's first step: pause the operands that hold the GPU, ask gpuhealth's exporter to let go; the Job
    starts once they have (progress.observe). With nothing to wait for, the Job starts now."""
    base = d.plan.base_state  # a stop already under way (a GPU scope handed to the node's): its labels stay ours
    paused = tuple(dict.fromkeys((*base.reset.paused, *operands_to_pause(d.view, ctx.policy))))
    stopping = replace(started, reset=Reset(ResetPhase.STOPPING, paused, base.reset.pause_value if base.reset.paused
                                            else ctx.policy.reset.pause_value))
    left = still_holding(replace(d.view, gpu_clients=()), stopping, ctx.policy)
    if not paused and not left:
        return started, why
    what = [f"pausing {', '.join(paused)}"] if paused else []
    what += ["asking gpuhealth's exporter to release NVML"] if left else []
    return stopping, f"{why}; first stopping the GPU's clients: {' and '.join(what)}"


def _draining(d: Draft, ctx: Pass, fps: list[str]) -> bool:
    """The drain rung is running: keep evicting, and past its timeout do what drain.on_timeout says.
    True when the drain failed (on_timeout=escalate) and the climb goes on."""
    policy, st, v = ctx.policy, d.state, d.view
    if not v.pods_known:
        out(d, Action.DRAIN, Verdict.DEFERRED, "pods unknown — pass --pods")
        return False
    timeout = policy.rung("drain").timeout
    timed_out = timeout is not None and elapsed(ctx.now, st.rung_started) >= timeout
    if timed_out and not st.timed_out:
        d.state = st = replace(st, timed_out=True)
        spared = _spared(d, ctx, v.pending_pods)
        kept = f" ({_names(spared)} kept by {DO_NOT_DISRUPT_ANNOTATION})" if spared else ""
        note(d, Note.timeout(Rung.DRAIN, f"drain passed its {timeout} timeout with {len(v.evictable)} pod(s) "
                             f"left{kept}; policy drain.on_timeout={policy.drain.on_timeout}"))
    if timed_out and policy.drain.on_timeout == "escalate":
        d.state = replace(st, rung_status=RungStatus.FAILED, rung_done=ctx.now, drain_failed=True)
        return True
    if timed_out and policy.drain.on_timeout == "force":
        _drain_more(d, ctx, "", fps, force=True, why=f"drain passed its {timeout} timeout "
                    "(policy drain.on_timeout=force): ")
        return False
    _drain_more(d, ctx, "", fps, why="drain timed out (policy drain.on_timeout=wait): " if timed_out else "")
    return False


def _drain_more(d: Draft, ctx: Pass, before: str, fps: list[str], force: bool = False, why: str = "") -> None:
    """Evict (or delete) what is still on the node; wait for what is terminating, and for the pods
    karpenter.sh/do-not-disrupt keeps (deleted only when forced: drain.on_timeout force)."""
    v = d.view
    spared = [] if force else _spared(d, ctx, v.pending_pods)
    pending = [p for p in v.pending_pods if p not in spared]
    kept = f"; not evicting {_names(spared)} ({DO_NOT_DISRUPT_ANNOTATION})" if spared else ""
    if not pending:
        terminating = len(v.evictable) - len(spared)
        waits = [f"{terminating} pod(s) to terminate"] if terminating or not spared else []
        waits += [f"{_names(spared)}, which {DO_NOT_DISRUPT_ANNOTATION} keeps from eviction "
                  "(drain.honor_pod_do_not_disrupt)"] if spared else []
        return out(d, Action.DRAIN, Verdict.DEFERRED, f"waiting for {' and '.join(waits)}{before}")
    if _silenced(d, ctx, "drain", fps):
        return None
    verb = "deleting" if force else "evicting"
    return out(d, Action.DRAIN, Verdict.EXECUTE,
               f"{why}{verb} {len(pending)} pod(s){before}{kept}", new=False, force=force)


def _spared(d: Draft, ctx: Pass, pods: list[PodRef]) -> list[PodRef]:
    """The pods the drain leaves where they are for now: an active karpenter.sh/do-not-disrupt, as Karpenter's own
    drain leaves them (drain.honor_pod_do_not_disrupt). Node scope only: at GPU scope kube-controller-manager evicts
    for the NoExecute device taint, and it does not read Karpenter's annotation."""
    if not ctx.policy.drain.honor_pod_do_not_disrupt or d.state.scope == Scope.GPU:
        return []
    return [p for p in pods if p.protected(ctx.now)]


def _silenced(d: Draft, ctx: Pass, action: str, fingerprints: list[str]) -> bool:
    """Before every disruptive step (starts, drain retries, forced deletion): True if it must not happen."""
    if ctx.silences is None:
        return False
    answer = ctx.silences(d.view.name, fingerprints)
    if answer.error and ctx.policy.alertmanager.on_error == "defer":
        out(d, Action(action), Verdict.DEFERRED, f"cannot check Alertmanager silences: {answer.error}")
        return True
    if answer.silenced_by:
        out(d, Action(action), Verdict.SKIPPED,
            f"silenced or inhibited in Alertmanager ({', '.join(answer.silenced_by)}): "
            "a person took over")
        return True
    return False


def _stop(d: Draft, ctx: Pass, action: Action, decision: Verdict, reason: str) -> None:
    """The end of the climb for this pass: a decision only if nothing else was decided."""
    if not d.plan.decisions:
        out(d, action, decision, reason)


# The ladder's table: the handler that finds the next step, by the status of the node's rung (no rung yet:
# _first_step). Each returns the step, or says the climb goes on (AGAIN) or ends this pass (STOP).
_STEPS: dict[RungStatus, Callable[[Draft, Pass, int, str | None, list[str]], Step | Flow]] = {
    RungStatus.RUNNING: _while_running,
    RungStatus.FAILED: _after_failure,
    RungStatus.DONE: _after_done,
}
