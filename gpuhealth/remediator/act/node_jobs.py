"""reset_gpu and reboot as privileged Jobs pinned to the node, rendered from templates/*.yaml.j2.

Job names are deterministic per node, rung and episode, so creating one twice (a resent webhook, a
restart, a new leader) finds the existing Job (409) instead of starting a second (Kube.create_job).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawJob
from gpuhealth.remediator.decide.job_start import JobRecord, job_record
from gpuhealth.remediator.decide.vocabulary import JobStatus, Rung
from gpuhealth.remediator.policy import Policy

TEMPLATES = Path(__file__).parent / "templates"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)


def render_job(rung: str, name: str, node: str, policy: Policy, gpu: str | None = None) -> dict[str, Any]:
    source = (TEMPLATES / f"{rung}.yaml.j2").read_text()
    timeout = policy.rung(rung).timeout
    text = _ENV.from_string(source).render(
        name=name, namespace=policy.jobs.namespace, node=node, gpu=gpu, image=policy.jobs.image,
        service_account=policy.jobs.service_account, ttl_seconds=policy.jobs.ttl_seconds_after_finished,
        deadline_seconds=int(timeout.total_seconds()) if timeout else 3600,
        runtime_class_name=policy.jobs.runtime_class_name, priority_class_name=policy.jobs.priority_class_name,
        image_pull_secrets=[{"name": n} for n in policy.jobs.image_pull_secrets], resources=policy.jobs.resources,
        script=(TEMPLATES / "reset_gpu.sh").read_text() if rung == Rung.RESET_GPU else "")
    manifest: dict[str, Any] = yaml.safe_load(text)
    return manifest


JOB_SELECTOR = "app.kubernetes.io/name=gpuhealth-remediator"  # the label the templates put on every Job
NODE_LABEL = "gpuhealth.io/node"  # the node a Job acts on, as the templates label it


def job_statuses(kube: Kube, namespace: str) -> dict[str, JobStatus]:
    """Every gpuhealth Job in the namespace by name: succeeded | failed | running. One LIST per pass,
    not one GET per node at a Job rung; a Job not listed is missing (creating it again is idempotent)."""
    return {name: record.status for name, record in job_records(kube, namespace).items()}


def job_records(kube: Kube, namespace: str) -> dict[str, JobRecord]:
    """As job_statuses, with when each Job was made and whether it has made a pod (decide/job_start.py)."""
    return {api_objects.name(job): job_record(job, job_status(job))
            for job in kube.list_jobs(namespace, JOB_SELECTOR)}


def job_status(job: RawJob) -> JobStatus:
    """Succeeded, failed or running, from the Job's status as the Job controller keeps it."""
    status = job.get("status") or {}
    conditions = status.get("conditions") or []
    if status.get("succeeded"):
        return JobStatus.SUCCEEDED
    if status.get("failed") or any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions):
        return JobStatus.FAILED
    return JobStatus.RUNNING
