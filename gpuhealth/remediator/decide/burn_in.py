"""Burn-in of new nodes (docs/remediation.md, "Burn-in of new nodes"): a node that registers with the burn-in taint
(policy burn_in.taint, put there by a Karpenter NodePool's startupTaints or the kubelet's --register-with-taints) runs
the diagnostic Job (decide/diagnosis.py, at burn_in.level) before its first pod, and gpuhealth removes the taint once
it passed. This is the validation of a replacement: the node that replaced a faulty one is diagnosed before it takes
work, as a reset or a reboot is (decide/validation.py).

- Passed: the taint comes off (BurnInPassed).
- Failed: the new node is a hardware episode with no alert behind it, as a failed idle-node sweep is (decide/sweep.py):
  gpuhealth's taint and cordon replace the burn-in taint in one write, and the ladder climbs to the rung the failure
  asks for (a GPU's reset, a reboot for a GPU or EFA device missing; a replacement if those do not mend it). A
  tool_error (a Job that hung or broke) fails closed: the node stays cordoned for a person.
- Never started, or no diagnostic can be made (no judge image): gpuhealth's own breakage or configuration, not the
  node's. The taint comes off untested, with a Warning (BurnInNotStarted, BurnInSkipped): gpuhealth never keeps new
  capacity out for its own fault.

A burn-in takes no budget: the node was never in service, so holding it back takes no capacity from the pool, and a
scale-up of many nodes is burnt in at once. It waits for the node to be Ready with its GPUs advertised, up to
burn_in.ready_within after the Node was made, then starts anyway (the diagnostic fails on what is missing). An alert
that fires on the node meanwhile is the ladder's as on any node; the burn-in starts afresh once that episode closes.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhealth.remediator.decide.diagnose_step import read_diagnosis
from gpuhealth.remediator.decide.diagnosis import Diagnosis, diagnosis_job_name
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import ALL_GPUS, NodeState, elapsed, time_text
from gpuhealth.remediator.decide.planner import Draft, Pass, note, out
from gpuhealth.remediator.decide.state_records import DiagnosticRun
from gpuhealth.remediator.decide.sweep import sweep_rung
from gpuhealth.remediator.decide.vocabulary import Action, Purpose, Rung, RungStatus, Severity, Verdict

# At most this many diagnostic Jobs per burn-in: one whose Job is gone before its result was read is started again,
# but a Job the API never makes (gpuhealth's own breakage: its admission, its RBAC) must not keep the node out forever
MAX_BURN_IN_JOBS = 3


def burn_in_node(d: Draft, ctx: Pass) -> None:
    """A node with no episode that carries the burn-in taint, or whose state names a burn-in."""
    v = d.view
    if not v.burn_in:  # someone else took the taint off: the burn-in is theirs to have ended
        job, d.state = d.state.diagnostic.job, NodeState(actions=d.state.actions)
        return out(d, Action.NONE, Verdict.SKIPPED, f"the burn-in taint {ctx.policy.burn_in.taint} was removed "
                   f"by someone else while diagnostic job {job} ran: burn-in dropped")
    if v.excluded or v.hold is not None or v.human_cordoned:
        why = ("excluded by the policy's exclude selectors: a person removes" if v.excluded else
               "held: releasing the node resumes its burn-in, or a person removes" if v.hold is not None else
               "cordoned by a person: uncordoning it resumes its burn-in, or a person removes")
        return out(d, Action.NONE, Verdict.SKIPPED, f"{why} its burn-in taint {ctx.policy.burn_in.taint}")
    return _burn_in(d, ctx)


def _burn_in(d: Draft, ctx: Pass) -> None:
    """A node that carries the burn-in taint, with no episode: its burn-in started, read, or ended."""
    st, policy = d.state, ctx.policy
    if not (policy.diagnose.enabled and policy.diagnose.judge_image):
        return _end_burn_in(d, ctx, EventReason.BURN_IN_SKIPPED, "no diagnostic Job can be made (diagnose.enabled "
                            "is false or diagnose.judge_image is unset): the burn-in taint comes off "
                            "untested", Severity.WARNING)
    if st.diagnostic.purpose != Purpose.BURN_IN or st.diagnostic.job is None:
        return _start_burn_in(d, ctx)
    if d.view.diagnosis_missing and elapsed(ctx.now, st.diagnostic.started) >= policy.jobs.start_timeout \
            and st.burn_in_restarts + 1 < MAX_BURN_IN_JOBS:  # gone unread (its TTL, a long hold): start again
        return _start_burn_in(d, ctx, again=f"its diagnostic job {st.diagnostic.job} is gone before its result was "
                              "read (deleted after jobs.ttl_seconds_after_finished, or never made)")
    found = read_diagnosis(d, ctx, policy.burn_in.level)
    if isinstance(found, str):
        return _end_burn_in(d, ctx, EventReason.BURN_IN_NOT_STARTED, f"diagnostic job {st.diagnostic.job} did not "
                            f"start: {found}. gpuhealth's own breakage, not the node's: the burn-in taint "
                            "comes off untested", Severity.WARNING)
    if found is None:
        return out(d, Action.END_BURN_IN, Verdict.DEFERRED, f"burn-in: diagnostic job {st.diagnostic.job} under "
                   f"way since {time_text(st.diagnostic.started)}")
    if found.passed:
        return _end_burn_in(d, ctx, EventReason.BURN_IN_PASSED, f"burn-in passed: diagnostic job "
                            f"{st.diagnostic.job} ({found.detail}); the burn-in taint comes off")
    return _burn_in_failed(d, ctx, found)


def _start_burn_in(d: Draft, ctx: Pass, again: str = "") -> None:
    """The diagnostic Job asked for once the node is Ready with its GPUs advertised, or burn_in.ready_within after
    it was made whatever it says (a node whose driver never comes up is what a burn-in is for). `again`: why a
    Job is started again (counted: a Job the API never makes ends as not started after MAX_BURN_IN_JOBS)."""
    v, policy, now = d.view, ctx.policy, ctx.now
    age = elapsed(now, v.created)
    waiting = " and ".join(what for what, ok in (("the node Ready", v.ready),
                                                 ("its GPUs advertised", v.gpus_advertised)) if not ok)
    limit = int(policy.burn_in.ready_within.total_seconds())
    if waiting and v.created is not None and age < policy.burn_in.ready_within:
        return out(d, Action.DIAGNOSE, Verdict.DEFERRED, f"burn-in: waiting for {waiting} "
                   f"({int(age.total_seconds())}s of {limit}s)")
    name = diagnosis_job_name(v.name, Purpose.BURN_IN, now)
    restarts = d.state.burn_in_restarts + 1 if again else 0
    d.state = replace(NodeState(actions=d.state.actions), diagnostic=DiagnosticRun(name, Purpose.BURN_IN, now),
                      burn_in_restarts=restarts)
    level = policy.burn_in.level
    still = f" (started without {waiting}, {limit}s after the node was made)" if waiting else ""
    still += f" (again: {again})" if again else ""
    note(d, Note(EventReason.BURN_IN_STARTED, f"new node: diagnostic job {name} runs dcgmi diag -r {level} and "
                 f"the GPU and EFA counts before the burn-in taint comes off{still}"))
    out(d, Action.DIAGNOSE, Verdict.EXECUTE, f"burn-in of a new node: diagnostic job {name} "
        f"(dcgmi diag -r {level})", job=name)


def _end_burn_in(d: Draft, ctx: Pass, reason: EventReason, why: str, severity: Severity = Severity.NORMAL) -> None:
    note(d, Note(reason, why, severity))
    d.state = NodeState(actions=d.state.actions)
    out(d, Action.END_BURN_IN, Verdict.EXECUTE, why)


def _burn_in_failed(d: Draft, ctx: Pass, found: Diagnosis) -> None:
    """A hardware episode as a failed sweep's (decide/sweep.py): gpuhealth's taint and cordon for the burn-in's,
    and the ladder climbs from the cordon on later passes. Not held by the cordon budget: the node was never in
    service, and releasing it instead would put a failed node in service; it counts from now on."""
    st, now = d.state, ctx.now
    rung = sweep_rung(found.categories)
    what = ", ".join(found.categories) or "failed"
    ctx.ledger.take(d.view, Action.CORDON)
    d.state = replace(NodeState(actions=st.actions).with_action(
        now, episode=now, rung=Rung.CORDON, rung_status=RungStatus.DONE, rung_started=now, rung_done=now,
        cordoned=not d.view.unschedulable), diagnostic=replace(st.diagnostic, result=f"failed: {what}"),
        sweep_rung=rung,
        gpu=found.gpus[0] if len(found.gpus) == 1 else ALL_GPUS)
    then = ("no evidence either way: the node stays cordoned for a person" if rung == Rung.CORDON else
            f"a hardware episode: the ladder climbs from its cordon to {rung}")
    note(d, Note(EventReason.BURN_IN_FAILED, f"burn-in failed: diagnostic job {st.diagnostic.job} ({what}: "
                 f"{found.detail}); {then}", Severity.WARNING))
    out(d, Action.CORDON, Verdict.EXECUTE, f"burn-in failed ({what}): gpuhealth's taint for the burn-in's")
    out(d, Action.END_BURN_IN, Verdict.EXECUTE, "burn-in failed: its taint replaced by gpuhealth's")
