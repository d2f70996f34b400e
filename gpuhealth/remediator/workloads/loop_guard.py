"""The restart-loop guard at work (the count itself is restart_loop.py): each classified failure counted on the
owning Job's annotation (in memory for pods without a Job, and in a dry run), the Job suspended when the policy
says so, and the loop reported (an audit line; Events on the Job)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.kube import MERGE_PATCH, Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawJob, RawPod
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import PodClassification, pod_facts
from gpuhealth.remediator.workloads.ended_pods import Workload
from gpuhealth.remediator.workloads.restart_loop import LOOP_ANNOTATION, LoopState, count_failure, in_loop, job_of

# (name, namespace, kind, api_version, reason, message, now, warning): an Event on that object (none in a dry run)
SendEvent = Callable[[str, str, str, str, str, str, datetime, bool], None]


class RestartLoopGuard:
    def __init__(self, kube: Kube, policy: Policy, *, dry_run: bool, event: SendEvent) -> None:
        self.kube, self.policy, self.dry_run, self.event = kube, policy, dry_run, event
        self.loops: dict[Workload, LoopState] = {}  # workloads without a Job to keep the count on; dry run

    def count(self, pod: RawPod, workload: Workload, verdict: PodClassification, now: datetime) -> LoopState:
        """Count the failure on the owning Job's annotation (in memory for pods without a Job, and in a dry run)."""
        w = self.policy.workloads
        job_name = job_of(pod)
        job = self.kube.get_job(workload.namespace, job_name) if job_name else None
        found: RawJob = job or {}
        suspended = bool((found.get("spec") or {}).get("suspend"))
        stored = LoopState.from_json(api_objects.annotations(found).get(LOOP_ANNOTATION))
        in_memory = job is None or self.dry_run
        before = self.loops.get(workload, stored) if in_memory else stored
        after = count_failure(before, api_objects.name(pod), verdict.cls, verdict.cause,
                              int((found.get("status") or {}).get("succeeded") or 0), suspended,
                              started=pod_facts(pod).started, failed_at=verdict.failed_at)
        suspend = job is not None and in_loop(after, w.restart_loop_threshold) and w.restart_loop_suspend \
            and not suspended
        if suspend and not self.dry_run:  # (a dry run suspends nothing, so nothing is resumed either)
            after = replace(after, suspended=True)
        if in_memory:
            self.loops[workload] = after
        elif after != before:
            self._write(workload.namespace, str(job_name), found, after, suspend)
        self._report(workload, before, after, suspend, job_name if job is not None else None, now)
        return after

    def _write(self, namespace: str, name: str, job: RawJob, after: LoopState, suspend: bool) -> None:
        """The count on the Job, with the resourceVersion it was read at; and spec.suspend, when it is time."""
        body: dict[str, Any] = {"metadata": {"annotations": {LOOP_ANNOTATION: after.to_json()},
                                             "resourceVersion": api_objects.resource_version(job)}}
        if suspend:
            body["spec"] = {"suspend": True}
        # a 409 (the Job changed) raises: the pod is not annotated, and the next pass counts it again
        self.kube.batch.patch_namespaced_job(name, namespace, body, _content_type=MERGE_PATCH,
                                             _preload_content=False, _request_timeout=self.kube.timeout)

    def _report(self, workload: Workload, before: LoopState, after: LoopState, suspend: bool,
                job_name: str | None, now: datetime) -> None:
        threshold = self.policy.workloads.restart_loop_threshold
        if not in_loop(after, threshold) or after == before:
            return
        action = ("would suspend" if self.dry_run else "suspend") if suspend else "none"
        audit(AuditKind.RESTART_LOOP, namespace=workload.namespace, workload=f"{workload.kind}/{workload.name}",
              cause=after.cause, count=after.count, pods=list(after.pods), action=action, dry_run=self.dry_run)
        if job_name is None:
            return
        message = (f"{after.count} failures in a row with the same application cause ({after.cause}) and no progress "
                   f"(pods {', '.join(after.pods)})")
        self.event(job_name, workload.namespace, "Job", "batch/v1", EventReason.RESTART_LOOP, message, now, True)
        if suspend:
            self.event(job_name, workload.namespace, "Job", "batch/v1", EventReason.RESTART_LOOP_SUSPENDED,
                       f"gpuhealth suspended the Job (spec.suspend: true): {message}. Fix the cause, then resume "
                       "it: kubectl patch job ... -p '{\"spec\":{\"suspend\":false}}'", now, True)
