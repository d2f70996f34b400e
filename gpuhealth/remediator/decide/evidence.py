"""Evidence before destruction: before the episode's first rung past drain (reset_gpu, reboot or replace), a bounded
Job on the node collects what a vendor's RMA asks for, and the rung waits for it at most evidence.max_wait.

Pure, as the rest of decide/: `evidence_first` is asked by the climb (decide/climb.py `start`) once a step has passed
every gate, right before its decision. It says whether the rung waits this pass, and records in the state what it
decided: the Job's name and when it was made (evidence_job, evidence_started), then how it ended (evidence). Once
per episode: a second rung (a reboot after a reset) finds the outcome recorded and goes on. The executor makes the
Job and stores its summary (gpuhealth/remediator/act/evidence_job.py); the Event names the ConfigMap.

Never a block: a Job that could not be made (missing when looked for), failed, or still runs at max_wait ends as
incomplete and the rung goes on in the same pass; a Job list that could not be read counts as running, so it too
ends at max_wait.

A person paged: a firing alert with the page label (alert records' `page`: GPUXidContactSupport, GPUXidUnknown, ...)
at a rung that destroys nothing (cordon, drain) makes the same Job, once per episode, and waits for nothing
(`evidence_for_person`, asked by the ladder after the climb): support will ask for the bug report. Later passes store
its summary once it ended or max_wait passed; a destroying rung later in the episode waits for it as above.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from gpuhealth.remediator.decide.job_start import node_job_name
from gpuhealth.remediator.decide.nodestate import elapsed, time_text
from gpuhealth.remediator.decide.planner import Draft, Pass, out
from gpuhealth.remediator.decide.state_records import EvidenceRun
from gpuhealth.remediator.decide.vocabulary import Action, EvidenceOutcome, JobStatus, Rung, Verdict

# the rungs that destroy what the node could tell: a reset clears the GPU's state, a reboot the kernel's ring buffer,
# a replacement the node itself
EVIDENCE_RUNGS: frozenset[str] = frozenset({Rung.RESET_GPU, Rung.REBOOT, Rung.REPLACE})
# the rungs that destroy nothing, at which a paged alert's evidence runs without anything waiting for it
PERSON_RUNGS: frozenset[str] = frozenset({Rung.CORDON, Rung.DRAIN})


def evidence_name(node: str, episode: datetime | None) -> str:
    """The evidence Job's name and its ConfigMap's, from the node and the episode (at most 63 characters): made
    twice (a restart, a new leader), it is the same object (409)."""
    return node_job_name("evidence", node, f"{node}/evidence/{time_text(episode)}")


def _outcome(status: JobStatus | None, waited: int, cap: int) -> tuple[EvidenceOutcome, str]:
    """How the evidence ended, and why, once the rung no longer waits for it."""
    if status == JobStatus.SUCCEEDED:
        return EvidenceOutcome.COLLECTED, "evidence job succeeded"
    if status == JobStatus.FAILED:
        return EvidenceOutcome.INCOMPLETE, "evidence job failed (what it wrote is kept)"
    if status == JobStatus.MISSING:
        return EvidenceOutcome.INCOMPLETE, ("evidence job was never made (the API server refused it, or the "
                                            "remediator stopped before making it): not waited for")
    return EvidenceOutcome.INCOMPLETE, (f"evidence job still running after {waited}s (evidence.max_wait {cap}s): "
                                        "abandoned, what it wrote so far is kept")


def evidence_first(d: Draft, ctx: Pass, rung: str) -> bool:
    """Before `rung` starts (every gate passed): True when it waits for the evidence this pass (decided and said),
    False when it goes on now (evidence off, not a destroying rung, already settled this episode, or settled now)."""
    st = d.state
    if not ctx.policy.evidence.enabled or rung not in EVIDENCE_RUNGS or st.evidence_run.outcome is not None:
        return False
    cap, where = _cap(ctx), _where(d, ctx)
    if st.evidence_run.job is None:
        _start(d, ctx, f"before {rung}: collecting evidence for an RMA (job {where}; stored in ConfigMap {where})")
        out(d, Action(rung), Verdict.DEFERRED, f"waiting for evidence job {where} (at most {cap}s)")
        return True
    if _running(d, ctx):
        waited = int(elapsed(ctx.now, st.evidence_run.started).total_seconds())
        out(d, Action(rung), Verdict.DEFERRED, f"waiting for evidence job {where}: running for {waited}s of at "
            f"most {cap}s")
        return True
    _store(d, ctx, f"before {rung}")
    return False


def evidence_for_person(d: Draft, ctx: Pass, paged: list[str]) -> None:
    """After the climb, at a rung that destroys nothing (cordon, drain): with a firing alert that pages a person
    (`paged`, their names) the evidence Job, once per episode and not waited for; on a later pass, once the Job ended
    or evidence.max_wait passed, its summary (whether or not an alert still pages)."""
    st = d.state
    if not ctx.policy.evidence.enabled or st.rung not in PERSON_RUNGS or st.evidence_run.outcome is not None:
        return
    where = _where(d, ctx)
    if st.evidence_run.job is None:
        if paged:
            _start(d, ctx, f"at {st.rung}: collecting evidence for a person ({', '.join(paged)} pages one; job "
                   f"{where}; stored in ConfigMap {where}), not waited for")
    elif not _running(d, ctx):
        _store(d, ctx, f"at {st.rung}")


def _cap(ctx: Pass) -> int:
    return int(ctx.policy.evidence.max_wait.total_seconds())


def _where(d: Draft, ctx: Pass) -> str:
    st = d.state
    return f"{ctx.policy.jobs.namespace}/{st.evidence_run.job or evidence_name(d.view.name, st.episode)}"


def _start(d: Draft, ctx: Pass, reason: str) -> None:
    """The episode's evidence Job, decided and said (the executor makes it)."""
    name = evidence_name(d.view.name, d.state.episode)
    d.state = replace(d.state, evidence_run=EvidenceRun(job=name, started=ctx.now))
    out(d, Action.COLLECT_EVIDENCE, Verdict.EXECUTE, reason, job=name)


def _running(d: Draft, ctx: Pass) -> bool:
    """The evidence Job made and not yet ended (or not seen: a list that could not be read), within max_wait."""
    waited = int(elapsed(ctx.now, d.state.evidence_run.started).total_seconds())
    return d.view.evidence_status in (None, JobStatus.RUNNING) and waited < _cap(ctx)


def _store(d: Draft, ctx: Pass, when: str) -> None:
    """How the evidence ended, recorded, and its summary to store (the executor writes the ConfigMap)."""
    st, cap = d.state, _cap(ctx)
    waited = int(elapsed(ctx.now, st.evidence_run.started).total_seconds())
    outcome, why = _outcome(d.view.evidence_status, waited, cap)
    where = _where(d, ctx)
    d.state = replace(st, evidence_run=replace(st.evidence_run, outcome=outcome))
    out(d, Action.STORE_EVIDENCE, Verdict.EXECUTE, f"{when}: {why}; its summary goes to ConfigMap {where}",
        new=False, job=st.evidence_run.job)
