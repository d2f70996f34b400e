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
    policy, st, now = ctx.policy, d.state, ctx.now
    settings = policy.evidence
    if not settings.enabled or rung not in EVIDENCE_RUNGS or st.evidence_run.outcome is not None:
        return False
    cap = int(settings.max_wait.total_seconds())
    where = f"{policy.jobs.namespace}/{st.evidence_run.job or evidence_name(d.view.name, st.episode)}"
    if st.evidence_run.job is None:
        name = evidence_name(d.view.name, st.episode)
        d.state = replace(st, evidence_run=EvidenceRun(job=name, started=now))
        out(d, Action.COLLECT_EVIDENCE, Verdict.EXECUTE, f"before {rung}: collecting evidence for an RMA (job "
            f"{where}; stored in ConfigMap {where})", job=name)
        out(d, Action(rung), Verdict.DEFERRED, f"waiting for evidence job {where} (at most {cap}s)")
        return True
    waited = int(elapsed(now, st.evidence_run.started).total_seconds())
    status = d.view.evidence_status
    if status in (None, JobStatus.RUNNING) and waited < cap:
        out(d, Action(rung), Verdict.DEFERRED, f"waiting for evidence job {where}: running for {waited}s of at "
            f"most {cap}s")
        return True
    outcome, why = _outcome(status, waited, cap)
    d.state = replace(st, evidence_run=replace(st.evidence_run, outcome=outcome))
    out(d, Action.STORE_EVIDENCE, Verdict.EXECUTE, f"before {rung}: {why}; its summary goes to ConfigMap {where}",
        new=False, job=st.evidence_run.job)
    return False
