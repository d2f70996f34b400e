"""Validation before return to service: a reset or a reboot is checked by the diagnostic Job (decide/diagnosis.py,
at policy diagnose.validation_level) before gpuhealth takes its taint off, so that a repair that did not repair is
caught by gpuhealth rather than by the next job. Passed: the node returns. Failed: the repair failed, and the ladder
climbs from it as from any failed rung (a reset to a reboot, a reboot to a replacement), within the alerts' ceiling
and ladder.max_rung. A diagnostic that hangs or breaks fails closed (tool_error: a failure); one that never started
for a reason of its own (its image, its admission) is gpuhealth's breakage: the node stays out for a person and the
ladder does not climb for it.

A failed validation holds the node out of service whatever its alerts do (state validation_failed): each pass goes on
climbing from the failed rung (a reboot the rate cap deferred, the diagnosis before a replacement), and only a later
rung or a person (`gpuhealth-remediator release`) ends the hold; a later reset or reboot is validated in its turn.

One validation per repair rung: the Job's name is made from the node and the time the rung was done, so a restart or
a new leader finds the same Job, and a later rung (the reboot after a failed reset's validation) gets its own.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from gpuhealth.remediator.decide import climb, sweep
from gpuhealth.remediator.decide.diagnose_step import (
    CONFIGURATION,
    PASSED,
    not_started_note,
    other_diagnosis_running,
    read_diagnosis,
    start_diagnosis,
)
from gpuhealth.remediator.decide.diagnosis import Diagnosis, diagnosis_job_name
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import NodeState, rung_index, time_text
from gpuhealth.remediator.decide.planner import Draft, Pass, alert_ceiling, note, out
from gpuhealth.remediator.decide.vocabulary import Action, Purpose, Rung, RungStatus, Scope, Severity, Verdict

VALIDATED_RUNGS = (Rung.RESET_GPU, Rung.REBOOT)  # the repairs a node returns from (a replaced node never returns)


def validation_holds(d: Draft, ctx: Pass) -> bool:
    """Before return to service: True while the repair's validation holds the node out (started, under way,
    failed and climbing, or not started for gpuhealth's own reason); False once it passed or none is needed."""
    st, policy = d.state, ctx.policy
    if st.validation_failed is not None:
        return _climb_from_failed_validation(d, ctx)
    if not (policy.diagnose.enabled and policy.diagnose.judge_image) or st.scope != Scope.NODE \
            or st.rung not in VALIDATED_RUNGS or st.rung_status != RungStatus.DONE or st.rung_done is None:
        return False  # no judge image (the chart sets it): no diagnostic Job can be made, none is asked for
    name = diagnosis_job_name(d.view.name, Purpose.VALIDATE, st.rung_done)
    if st.diagnostic.job != name and (running := other_diagnosis_running(d, ctx, name)):
        out(d, Action.UNCORDON, Verdict.DEFERRED, f"diagnostic job {running} still runs: the validation of the "
            f"{st.rung} waits for it (two dcgmi diag runs on the same GPUs at once fail each other)")
        return True
    if st.diagnostic.job != name:
        return _start_validation(d, ctx, name)
    if st.diagnostic.result == PASSED:
        return False
    if st.diagnostic.result is not None:  # failed (climbed already) or not started: a person has it
        out(d, Action.NONE, Verdict.SKIPPED, f"the validation of the {st.rung} did not pass "
            f"({st.diagnostic.result}): the node stays out of service; `gpuhealth-remediator release` "
            "returns it")
        return True
    return _read_validation(d, ctx)


def held_for_a_person(st: NodeState) -> bool:
    """A state that holds the node out whatever its alerts do, until a person's `gpuhealth-remediator release`: a
    repair whose validation failed (and the climb from it stopped), or an episode gone quiet."""
    return st.validation_failed is not None or st.quiet


def released(st: NodeState, now: datetime, quiet_after: timedelta) -> NodeState:
    """The state `gpuhealth-remediator release` writes (the person is done): alerts that went quiet (never resolved)
    dropped, and a failed validation's hold ended; the ladder then goes on from what still fires, or returns the node
    once nothing does."""
    stale = st.stale(now, quiet_after)
    if stale:
        alerts = {fp: a for fp, a in st.alerts.items() if fp not in stale}
        firing = any(a.asks_action for a in alerts.values())
        st = replace(st, alerts=alerts, quiet=False, healthy_since=None if firing else (st.healthy_since or now))
    return replace(st, validation_failed=None) if st.validation_failed else st


def _start_validation(d: Draft, ctx: Pass, name: str) -> bool:
    st, level = d.state, ctx.policy.diagnose.validation_level
    start_diagnosis(d, ctx, Purpose.VALIDATE, name, f"the alerts resolved after the {st.rung}: validating it before "
                    f"return to service (diagnostic job {name}, dcgmi diag -r {level}, GPU and EFA counts)")
    return True


def _read_validation(d: Draft, ctx: Pass) -> bool:
    st = d.state
    found = read_diagnosis(d, ctx, ctx.policy.diagnose.validation_level)
    if isinstance(found, str):
        not_started_note(d, ctx, found)
        d.state = replace(st, diagnostic=replace(st.diagnostic, result=f"not started: {found}"))
        out(d, Action.NONE, Verdict.SKIPPED, f"the validation did not start ({found}): the node stays out of "
            "service unvalidated for a person, and the ladder does not climb for it")
        return True
    if found is None:
        out(d, Action.UNCORDON, Verdict.DEFERRED, f"validating the {st.rung}: diagnostic job "
            f"{st.diagnostic.job} under way since {time_text(st.diagnostic.started)}")
        return True
    if found.passed:
        d.state = replace(st, diagnostic=replace(st.diagnostic, result=PASSED))
        note(d, Note(EventReason.DIAGNOSTIC_PASSED, f"the {st.rung} is validated: diagnostic job "
                     f"{st.diagnostic.job} passed ({found.detail})", rung=st.rung))
        return False
    if found.configuration_only:
        return _validation_found_configuration(d, found)
    return _validation_failed(d, ctx, found)


def _validation_found_configuration(d: Draft, found: Diagnosis) -> bool:
    """The validation failed only for the node's software or configuration: the repair is not in question and the
    ladder does not climb for it; the node stays out of service for a person."""
    st = d.state
    d.state = replace(st, diagnostic=replace(st.diagnostic, result=CONFIGURATION))
    note(d, Note(EventReason.DIAGNOSTIC_FOUND_CONFIGURATION, f"the validation of the {st.rung}: diagnostic job "
                 f"{st.diagnostic.job} failed only for {found.configuration_text()}: no GPU repair fixes it, and the "
                 "ladder does not climb for it; the node stays out of service until a person fixes it and returns "
                 "it (`gpuhealth-remediator release`)", Severity.WARNING, st.rung))
    out(d, Action.NONE, Verdict.SKIPPED, f"the validation of the {st.rung} found only the node's configuration "
        "(no hardware fault): the node stays out of service for a person")
    return True


def _validation_failed(d: Draft, ctx: Pass, found: Diagnosis) -> bool:
    """The repair did not repair: the rung fails, and the climb goes on from it."""
    st = d.state
    what = ", ".join(found.categories) or "failed"
    d.state = replace(st, diagnostic=replace(st.diagnostic, result=f"failed: {what}"), rung_status=RungStatus.FAILED,
                      rung_done=ctx.now, healthy_since=None, validation_failed=f"{st.rung}: {what}")
    note(d, Note(EventReason.DIAGNOSTIC_FAILED, f"the {st.rung} did not repair the node: diagnostic job "
                 f"{st.diagnostic.job} failed ({what}: {found.detail}); the ladder climbs from the {st.rung}, "
                 "and the node stays out of service until a later rung or a person returns it",
                 Severity.WARNING, st.rung))
    return _climb_from_failed_validation(d, ctx)


def _climb_from_failed_validation(d: Draft, ctx: Pass) -> bool:
    """The repair's validation failed: the ladder climbs from the failed rung (this pass, and every pass after
    while the alerts are resolved), and the node stays out of service until a later rung starts or a person
    releases it. True: the node is held."""
    st = d.state
    # resolved as they are, the episode's alerts still say how far it may climb (their max_rung)
    fps = sorted(st.alerts)
    gpus = {a.gpu for a in st.alerts.values() if a.gpu}
    gpu = gpus.pop() if len(gpus) == 1 else None
    climb.run(d, ctx, rung_index(st.rung), gpu, fps, sweep.ceiling(d, fps) or alert_ceiling(d, fps))
    if not d.plan.decisions:
        out(d, Action.NONE, Verdict.SKIPPED, f"the validation of the {st.validation_failed} failed: the node "
            "stays out of service until a later rung or a person (`gpuhealth-remediator release`) returns it")
    return True
