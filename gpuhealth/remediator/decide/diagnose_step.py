"""A diagnosis that decides: before a node is replaced for a GPU fault whose alerts did not ask for a replacement (the
fault persisted through the reset and the reboot), the drained node runs the diagnostic Job (decide/diagnosis.py, at
policy diagnose.level). Its result decides:

- failed (a failed check, or tool_error: a Job that hung or broke fails closed): the fault is confirmed, the
  replacement goes on (DiagnosticFailed, naming what failed);
- passed while the alerts still fire: the signal, not the GPU, is suspect. The node is not replaced; it stays out of
  service, drained, for a person, and the GpuhealthDiagnosticContradictsAlert alert pages
  (DiagnosticContradictsAlert, gpuhealth_remediator_diagnostics_total{result="contradicts"});
- never started (gpuhealth's own breakage): no evidence either way; the replacement goes on as the persisting alerts
  asked before this step existed (DiagnosticNotStarted);
- failed only for the node's software or configuration (gpu_config: DCGM's CONFIG codes, a denylisted driver): no
  hardware fault is confirmed, so the node is not replaced; it stays out of service for a person, and the Event names
  the codes (DiagnosticFoundConfiguration). A failure of the GPU beside it (a replace code among them) confirms.

Only where the diagnostic can speak: every firing alert of a GPU component (DIAGNOSED_COMPONENTS: the GPU, its memory,
NVLink, PCIe, thermal). A host's machine check, a hung disk, a dead host (its exporter down) or a NIC are not what
dcgmi diag tests: a pass would say nothing about them, so they are replaced without it. Nor for a repeat offender (its
history is the evidence) or alerts that ask for replace themselves (their cause is clear).

read_diagnosis is the one reading of a diagnostic Job's outcome, shared with validation (decide/validation.py) and the
idle-node sweeps (decide/sweep.py).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from gpuhealth.remediator.decide.diagnosis import Diagnosis, diagnosis_job_name, level_for
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import AlertRecord, elapsed, rung_index, time_text
from gpuhealth.remediator.decide.offenders import span
from gpuhealth.remediator.decide.planner import Draft, Pass, note, out
from gpuhealth.remediator.decide.state_records import DiagnosticRun
from gpuhealth.remediator.decide.vocabulary import (
    Action,
    AlertStatus,
    Purpose,
    Rung,
    RungStatus,
    Scope,
    Severity,
    Verdict,
)

DIAGNOSED_COMPONENTS = frozenset({"gpu", "memory", "nvlink", "pcie", "thermal"})  # the alerts' component label
PASSED = "passed"
CONTRADICTS = "passed while the alerts fire"
CONFIGURATION = "failed for the node's configuration only"
HELD = (CONTRADICTS, CONFIGURATION)  # the results that keep a node from its replacement (a pass: on probation)
PROBATION_FAILED = "passed, then the alerts recurred on probation"


def read_diagnosis(d: Draft, ctx: Pass, level: int) -> Diagnosis | str | None:
    """The outcome of the diagnostic Job the state names: its Diagnosis; why it did not start (a str: gpuhealth's own
    breakage, which the caller says: not_started_note, or a sweep's own Event); None while it runs. A Job that gives
    no result within its deadline and jobs.start_timeout fails closed (tool_error)."""
    st, v, policy = d.state, d.view, ctx.policy
    started = st.diagnostic.started or ctx.now
    limit = policy.diagnose.deadline(level) + policy.jobs.start_timeout
    why = v.diagnosis_start.not_started(ctx.now, policy.jobs.start_timeout, False) if v.diagnosis_start else ""
    if not why and v.diagnosis_missing and elapsed(ctx.now, started) >= policy.jobs.start_timeout:
        why = f"its Job was not made within {policy.jobs.start_timeout} (the remediator's Events say why)"
    if why:
        return why
    if v.diagnosis is None and not v.diagnosis_missing and elapsed(ctx.now, started) > limit:
        return Diagnosis.tool_error(f"no result {limit} after it was asked for")
    return v.diagnosis


def other_diagnosis_running(d: Draft, ctx: Pass, name: str) -> str | None:
    """The diagnostic Job the state names, when it is not `name` and still runs without a result: its name, for the
    caller to wait on (two dcgmi diag runs on the same GPUs at once fail each other). None: none, or it ended."""
    st = d.state
    if not st.diagnostic.job or st.diagnostic.job == name or st.diagnostic.result is not None:
        return None
    return st.diagnostic.job if read_diagnosis(d, ctx, level_for(st.diagnostic.purpose, ctx.policy)) is None else None


def not_started_note(d: Draft, ctx: Pass, why: str) -> None:
    """The DiagnosticNotStarted Event of a diagnostic Job that did not start (read_diagnosis's str)."""
    note(d, Note(EventReason.DIAGNOSTIC_NOT_STARTED, f"diagnostic job {d.state.diagnostic.job} did not start: {why}. "
                 "gpuhealth's own breakage, not the node's", Severity.WARNING))


def start_diagnosis(d: Draft, ctx: Pass, purpose: Purpose, name: str, why: str) -> None:
    """The state that names the diagnostic Job, and the decision that makes it (act/executor.py)."""
    d.state = replace(d.state, diagnostic=DiagnosticRun(name, purpose, ctx.now))
    out(d, Action.DIAGNOSE, Verdict.EXECUTE, why, job=name)


def _diagnosable(d: Draft, ctx: Pass, fps: list[str]) -> list[AlertRecord]:
    """The firing alerts of `fps` when the drained node's diagnostic can speak about them (node scope, every one a GPU
    component's, none a correlated fault's); [] when it cannot, or no diagnostic Job can be made."""
    policy, st = ctx.policy, d.state
    firing = [st.alerts[fp] for fp in fps if fp in st.alerts]
    if not (policy.diagnose.enabled and policy.diagnose.judge_image) or st.scope != Scope.NODE \
            or any(a.component not in DIAGNOSED_COMPONENTS for a in firing) or set(fps) & set(st.correlated):
        return []
    return firing


def _rung_diagnosis(d: Draft, ctx: Pass) -> str:
    """The name of the diagnostic Job for the rung the state is at (one per rung: a restart finds the same Job)."""
    return diagnosis_job_name(d.view.name, Purpose.DIAGNOSE, d.state.rung_done or d.state.episode)


def _asked(d: Draft, ctx: Pass, name: str, waiting: Action, what: str, why: str) -> bool:
    """Job `name` asked for now, unless the state names it already (False) or another diagnostic still runs on the
    GPUs (then `waiting` deferred until it ends). True: the pass is said."""
    if d.state.diagnostic.job == name:
        return False
    if running := other_diagnosis_running(d, ctx, name):
        out(d, waiting, Verdict.DEFERRED, f"diagnostic job {running} still runs: {what} waits for it")
        return True
    start_diagnosis(d, ctx, Purpose.DIAGNOSE, name, why)
    return True


def diagnosis_before_person(d: Draft, ctx: Pass, fps: list[str]) -> bool:
    """The ladder stops at its top (ladder.max_rung, below replace) with a GPU fault persisting on the drained node:
    before the node is left for a person, the diagnostic runs once (diagnose.level), so that the person finds the
    fault confirmed or the signal contradicted. True while it is asked for or under way (the pass is said); False once
    it has a result (recorded in the state, said in an Event; the caller's stop follows) or when none is made."""
    st = d.state
    firing = _diagnosable(d, ctx, fps)
    if not firing or rung_index(st.rung) < rung_index(Rung.DRAIN) or st.rung_status != RungStatus.DONE:
        return False  # a failed rung (a drain that left pods, a reboot that never came back) is no drained node
    if not d.full.pods_known or d.full.evictable:
        return False  # not the whole node drained (a fault on one GPU drains that GPU's pods): others use the GPUs
    name, level = _rung_diagnosis(d, ctx), ctx.policy.diagnose.level
    if _asked(d, ctx, name, Action.NONE, "the diagnosis for the person", f"the fault persists at {st.rung}, the top of "
              f"the ladder (ladder.max_rung): diagnosing the drained node before it is left for a person (diagnostic "
              f"job {name}, dcgmi diag -r {level}, GPU and EFA counts)"):
        return True
    if st.diagnostic.result is not None:
        return False
    found, what = read_diagnosis(d, ctx, level), ", ".join(a.name for a in firing)
    if found is None:
        out(d, Action.NONE, Verdict.DEFERRED, f"waiting for diagnostic job {name} (since "
            f"{time_text(st.diagnostic.started)}) before the node is left for a person")
        return True
    _record(d, ctx, found, what, "the node stays out of service, drained, for a person", f"; the ladder stops at "
            f"{st.rung} (ladder.max_rung): the node stays out of service for a person")
    return False


def _record(d: Draft, ctx: Pass, found: Diagnosis | str, alerts: str, kept: str, confirmed: str) -> None:
    """A diagnosis's outcome in the state and its Event: never started, passed while `alerts` still fire (then
    `kept`: what becomes of the node), or failed (then `confirmed`)."""
    st = d.state
    if isinstance(found, str):
        not_started_note(d, ctx, found)
        d.state = replace(st, diagnostic=replace(st.diagnostic, result=f"not started: {found}"))
    elif found.passed:
        d.state = replace(st, diagnostic=replace(st.diagnostic, result=CONTRADICTS))
        note(d, Note(EventReason.DIAGNOSTIC_CONTRADICTS_ALERT, f"diagnostic job {st.diagnostic.job} passed ("
                     f"{found.detail}) while {alerts} still fire: the signal, not the hardware, is suspect; {kept}",
                     Severity.WARNING))
    elif found.configuration_only:
        d.state = replace(st, diagnostic=replace(st.diagnostic, result=CONFIGURATION))
        note(d, Note(EventReason.DIAGNOSTIC_FOUND_CONFIGURATION, f"diagnostic job {st.diagnostic.job} failed only "
                     f"for {found.configuration_text()}: no hardware fault is confirmed while {alerts} still fire; "
                     f"{kept}", Severity.WARNING))
    else:
        cats = ", ".join(found.categories) or "failed"
        d.state = replace(st, diagnostic=replace(st.diagnostic, result=f"failed: {cats}"))
        note(d, Note(EventReason.DIAGNOSTIC_FAILED, f"diagnostic job {st.diagnostic.job} confirms the fault ({cats}: "
                     f"{found.detail}){confirmed}", Severity.WARNING))


def diagnosis_first(d: Draft, ctx: Pass, rung: str, fps: list[str]) -> bool:
    """Before `rung` starts (every gate passed): True while the diagnosis holds a replacement back (asked for, under
    way, or passed: the node waits for a person), False when the replacement goes on (no diagnosis for it, or it
    failed or could not start)."""
    policy, st = ctx.policy, d.state
    firing = _diagnosable(d, ctx, fps)
    if rung != Rung.REPLACE or st.offence.rule is not None or not firing \
            or max(rung_index(a.remediation) for a in firing) >= rung_index(Rung.REPLACE):
        return False
    if st.probation is not None:  # a pass before: no second diagnosis
        return _on_probation(d, ctx, firing, st.probation)
    name, level = _rung_diagnosis(d, ctx), policy.diagnose.level
    if _asked(d, ctx, name, Action.REPLACE, "the diagnosis before the replacement", f"before replace: diagnosing the "
              f"drained node (diagnostic job {name}, dcgmi diag -r {level}, GPU and EFA counts): it is replaced only "
              "if that fails"):
        if d.state.diagnostic.job == name:  # asked for now (not waiting for another): the replacement waits for it
            out(d, Action.REPLACE, Verdict.DEFERRED, f"waiting for diagnostic job {name}")
        return True
    if st.diagnostic.result is None:
        return _decided(d, ctx, read_diagnosis(d, ctx, level), [a.name for a in firing])
    if st.diagnostic.result in HELD:
        out(d, Action.NONE, Verdict.SKIPPED, f"the diagnostic {_held_text(st.diagnostic.result)} while "
            f"{', '.join(a.name for a in firing)} still fire: not replaced; the node stays out of service for a person")
        return True
    return False


def _held_text(result: str) -> str:
    return "passed" if result == CONTRADICTS else "found only the node's configuration, no hardware fault,"


def _decided(d: Draft, ctx: Pass, found: Diagnosis | str | None, alerts: list[str]) -> bool:
    st = d.state
    if found is None:
        out(d, Action.REPLACE, Verdict.DEFERRED, f"waiting for diagnostic job {st.diagnostic.job} (since "
            f"{time_text(st.diagnostic.started)})")
        return True
    what = ", ".join(alerts)
    _record(d, ctx, found, what, f"the node is not replaced: on probation for {span(ctx.policy.diagnose.probation)} "
            "(diagnose.probation): it returns to service once they resolve (its repair validated first), and is "
            "replaced without a second diagnosis if they still fire then", ": replacing the node")
    if isinstance(found, str) or not (found.passed or found.configuration_only):
        return False  # failed: replaced; not started: no evidence either way, replaced as the persisting alerts asked
    if found.passed:  # the later, deeper diagnostic passed: a failed validation before it no longer holds the node
        d.state = replace(d.state, probation=ctx.now, validation_failed=None)
        return _on_probation(d, ctx, [], ctx.now)
    held = _held_text(CONFIGURATION)
    out(d, Action.NONE, Verdict.SKIPPED, f"the diagnostic {held} while {what} still fire: not replaced; needs a person")
    return True


def _on_probation(d: Draft, ctx: Pass, firing: list[AlertRecord], since: datetime) -> bool:
    """A diagnostic passed at `since` while the GPU alerts fired: True (not replaced, said) until they still fire
    diagnose.probation after it, or the repair's validation failed since (a diagnostic result other than the pass):
    then False, the recurrence said once (DiagnosticProbationFailed), and the replacement goes on without a second
    diagnosis."""
    st, window = d.state, ctx.policy.diagnose.probation
    if st.diagnostic.result == PROBATION_FAILED:
        return False
    fire = [a.name for a in firing if a.status == AlertStatus.FIRING]
    if st.diagnostic.result == CONTRADICTS and (not fire or elapsed(ctx.now, since) < window):
        out(d, Action.NONE, Verdict.SKIPPED, f"on probation since {time_text(since)}: the diagnostic passed while "
            f"the GPU alerts fired: not replaced; the node returns to service once they resolve, and is replaced if "
            f"they still fire at {time_text(since + window)} (diagnose.probation {span(window)})")
        return True
    why = (f"{', '.join(fire)} still fire {span(window)} after it (diagnose.probation)"
           if st.diagnostic.result == CONTRADICTS else f"{', '.join(fire)} fired again while the repair was validated"
           if st.diagnostic.result is None else f"the repair's validation since did not pass ({st.diagnostic.result})")
    d.state = replace(st, diagnostic=replace(st.diagnostic, result=PROBATION_FAILED))
    note(d, Note(EventReason.DIAGNOSTIC_PROBATION_FAILED, f"on probation since a diagnostic passed at "
                 f"{time_text(since)}: {why}: the fault recurred, the alert outweighs the pass; replacing the node "
                 "without a second diagnosis", Severity.WARNING))
    return False
