"""The progress of the rung under way, as the cluster shows it: a drain that emptied the node, a GPU whose clients
let go, a Job that succeeded, failed or never started, a node back with a new boot id, a rung past its timeout.
The ladder (ladder.py) reads it at the start of each node's pass, before it decides the next step."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from gpuhealth.remediator.decide.decision import NOT_STARTED
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import NodeState, elapsed
from gpuhealth.remediator.decide.reset import still_holding
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import JobStatus, ResetPhase, Rung, RungStatus, Severity
from gpuhealth.remediator.policy import Policy


def observe(view: NodeView, state: NodeState, now: datetime,
             policy: Policy) -> tuple[NodeState, list[Note]]:
    """Progress of the rung under way, as the cluster shows it; a rung past its timeout fails (drain's
    timeout is the policy's drain.on_timeout, handled by the climb)."""
    if state.rung_status != RungStatus.RUNNING or state.rung is None:
        return state, []
    done = replace(state, rung_status=RungStatus.DONE, rung_done=now)
    failed = replace(state, rung_status=RungStatus.FAILED, rung_done=now)
    rung = state.rung
    if rung == Rung.DRAIN and view.pods_known and not view.evictable:
        return done, [Note(EventReason.DRAIN_FINISHED, "no evictable pods left on the node", rung=Rung.DRAIN)]
    if rung == Rung.RESET_GPU and state.reset.phase == ResetPhase.STOPPING and not still_holding(view, state, policy):
        resetting = replace(state, reset=replace(state.reset, phase=ResetPhase.RESETTING))
        return resetting, [Note(EventReason.GPU_CLIENTS_STOPPED, "nothing holds the GPU any more (paused: "
                                f"{', '.join(state.reset.paused) or 'no operand'}): starting reset job {state.job}",
                                rung=Rung.RESET_GPU)]
    timeout = policy.rung(rung).timeout
    timed_out = rung != Rung.DRAIN and timeout is not None and elapsed(now, state.rung_started) >= timeout
    if rung == Rung.RESET_GPU and state.reset.phase != ResetPhase.STOPPING:
        if view.job_status == JobStatus.SUCCEEDED:
            return done, [Note(EventReason.GPU_RESET_SUCCEEDED, f"reset job {state.job} succeeded",
                                   rung=Rung.RESET_GPU)]
        not_started = _not_started(view, state, now, policy, timed_out)
        if not_started is not None:
            return replace(failed, not_started=not_started[0]), [not_started[1]]
        if view.job_status == JobStatus.FAILED:
            return failed, [Note(EventReason.GPU_RESET_FAILED, f"reset job {state.job} failed", Severity.WARNING,
                                     Rung.RESET_GPU)]
    # reboot: the Job's result is ignored (a reboot kills its pod); the boot id tells
    if rung == Rung.REBOOT and state.boot_id and view.boot_id and view.boot_id != state.boot_id and view.ready:
        return done, [Note(EventReason.REBOOT_SUCCEEDED, f"node is back with boot id {view.boot_id}",
                                   rung=Rung.REBOOT)]
    if rung == Rung.REBOOT:
        not_started = _not_started(view, state, now, policy, timed_out)
        if not_started is not None:
            return replace(failed, not_started=not_started[0]), [not_started[1]]
    if timed_out:
        what = {"replace": "the node was not replaced; it stays out of service for a person"}.get(rung, "failed")
        return failed, [Note.timeout(Rung(rung), f"{rung} passed its {timeout} timeout: {what}")]
    return state, []


def _not_started(view: NodeView, state: NodeState, now: datetime, policy: Policy,
                 timed_out: bool) -> tuple[str, Note] | None:
    """The rung's Job never ran its container, for a reason of its own (decide/job_start.py): gpuhealth's breakage,
    reported as that, never as the GPU's or the node's failure: (why, its Note), or None. Counted once
    jobs.start_timeout has passed (the kubelet retries image pulls meanwhile), at once when the kubelet refused the
    pod, and at the rung's end (its timeout, or the Job failing) whatever time has passed. A Job still missing at the
    rung's timeout was never created (each pass creates a missing one again; a finished one outlives the rung by
    jobs.ttl_seconds_after_finished): every create failed, which says nothing about the GPU either."""
    if state.rung is None:
        return None
    if view.job_status == JobStatus.MISSING and timed_out:
        why = ("the Job was never created: the API server refused or did not answer each try until the rung's timeout "
               "(the node's earlier Events of this rung say why)")
    elif view.job_start is not None:
        failed = timed_out or view.job_status == JobStatus.FAILED
        why = view.job_start.not_started(now, policy.jobs.start_timeout, failed)
    else:
        return None
    if not why:
        return None
    return why, Note(EventReason.NODE_ACTION_JOB_NOT_STARTED, f"{NOT_STARTED}: job {policy.jobs.namespace}/"
                     f"{state.job}: {why}. It touched no GPU: this is gpuhealth's own breakage, not the node's, so the "
                     f"ladder does not climb for it; what the ladder did so far stays, for a person "
                     "(docs/remediation.md, \"When a node-action Job does not start\")", Severity.WARNING,
                     Rung(state.rung))
