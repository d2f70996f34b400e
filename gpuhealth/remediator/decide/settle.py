"""Return to service, and the end of a reset: a node whose actionable alerts resolved returns after the healthy delay
(its repair validated first: decide/validation.py), or stays as it is (an episode gone quiet, a replacement, a Job
rung still under way); a reset that never began is cancelled, and whatever a reset paused is restored once it is over.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhealth.remediator.decide import validation
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import NodeState, elapsed
from gpuhealth.remediator.decide.planner import Draft, Pass, note, out
from gpuhealth.remediator.decide.state_records import Reset
from gpuhealth.remediator.decide.vocabulary import (
    JOB_RUNGS,
    Action,
    JobStatus,
    ResetPhase,
    Rung,
    RungStatus,
    Scope,
    Verdict,
)


def restore_gpu_clients(d: Draft, ctx: Pass) -> None:
    """Whatever ended a reset rung that stopped the GPU's clients (its Job's outcome, its timeout, the episode
    closing, the node ladder taking over): what it paused is restored, in this plan's write."""
    base, st = d.plan.base_state, d.state
    if not (base.reset.phase or base.reset.paused) or (
            st.rung == Rung.RESET_GPU and st.rung_status == RungStatus.RUNNING):
        return
    d.state = replace(st, reset=Reset())
    what = ", ".join(base.reset.paused) or "no operand label"
    out(d, Action.RESTORE_GPU_CLIENTS, Verdict.EXECUTE, f"the reset is over: {what} back to \"true\", "
        "gpuhealth's exporter takes NVML back")


def cancel_unstarted_reset(d: Draft, ctx: Pass, why: str) -> bool:
    """A reset whose Job has not begun (the GPU's clients still stopping, or its Job never made) ends as not
    needed, never as a failure: the ladder goes back to the drain it had reached (done: a reset starts only on a
    drained node or GPU), so that alerts firing again start the reset afresh under the usual rules instead of
    climbing to a reboot (at GPU scope: to the node ladder). Its paused clients are restored in the same write
    (restore_gpu_clients). True when it did."""
    v, st = d.view, d.state
    unstarted = st.reset.phase == ResetPhase.STOPPING or (
        st.reset.phase == ResetPhase.RESETTING and v.job_status == JobStatus.MISSING)
    if not (st.rung == Rung.RESET_GPU and st.rung_status == RungStatus.RUNNING and unstarted):
        return False
    d.state = replace(st, rung=Rung.DRAIN, rung_status=RungStatus.DONE, rung_done=ctx.now, job=None,
                      gpu=None)
    what = f"GPU {', '.join(st.gpu_scope.devices)}" if st.scope == Scope.GPU else "the node"
    note(d, Note(EventReason.GPU_RESET_NOT_NEEDED, f"{why}: the reset is no longer needed and did not start "
                 f"(job {st.job} never created); {what} stays drained (the ladder back at its drain) until it "
                 "returns to service, and alerts firing again start the reset afresh", rung=Rung.RESET_GPU))
    return True


def settle(d: Draft, ctx: Pass) -> None:
    """No actionable alert fires: return to service after the healthy delay, or stay quiet."""
    v, policy, now, st = d.view, ctx.policy, ctx.now, d.state
    stale = st.stale(now, policy.episode.quiet_timeout)
    if stale:
        if not st.quiet:
            d.state = replace(st, quiet=True)
            note(d, Note(EventReason.EPISODE_QUIET, f"no word on {len(stale)} firing alert(s) for "
                         f"{policy.episode.quiet_timeout}; escalation stopped, node left as is"))
        return out(d, Action.NONE, Verdict.SKIPPED,
                   "episode went quiet (alerts neither repeated nor resolved, e.g. "
                   "silenced): escalation stopped; `gpuhealth-remediator release` returns the node")
    if st.rung == Rung.REPLACE:
        return out(d, Action.NONE, Verdict.SKIPPED, "replacement under way: not returned to service")
    if st.rung is None and not v.our_taint:  # resolved before anything was done: close the episode
        d.state = NodeState(actions=st.actions)
        return out(d, Action.NONE, Verdict.SKIPPED, "alerts resolved before any action")
    if st.healthy_since is None:
        d.state = st = replace(st, healthy_since=now)
    if cancel_unstarted_reset(d, ctx, "the alerts resolved while the GPU's clients were stopping"):
        return out(d, Action.UNCORDON, Verdict.DEFERRED, "reset cancelled before it started; healthy for 0s of "
                   f"{int(policy.return_to_service.healthy_delay.total_seconds())}s")
    if st.rung_status == RungStatus.RUNNING and st.rung in JOB_RUNGS:
        return out(d, Action.UNCORDON, Verdict.DEFERRED,
                   f"{st.rung} still under way (job {st.job}): the node returns "
                   "once it is done or has failed")
    if validation.validation_holds(d, ctx):  # a reset or a reboot is validated before the node returns
        return None
    healthy_for = elapsed(now, st.healthy_since)
    if healthy_for < policy.return_to_service.healthy_delay:
        return out(d, Action.UNCORDON, Verdict.DEFERRED, f"healthy for {int(healthy_for.total_seconds())}s of "
                   f"{int(policy.return_to_service.healthy_delay.total_seconds())}s")
    ctx.ledger.release(v)
    d.state = NodeState(actions=st.actions)
    return out(d, Action.UNCORDON, Verdict.EXECUTE,
               f"all alerts resolved for {int(healthy_for.total_seconds())}s: "
               "undoing what gpuhealth did")
