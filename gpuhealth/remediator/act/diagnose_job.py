"""The diagnostic Job, rendered from templates/diagnose.yaml.j2 (docs/remediation.md, "Diagnostic Job"), and its
result read into a node's view. Its name is deterministic (decide/diagnosis.py diagnosis_job_name), so creating it twice
finds the first (Kube.create_job: 409); decide/diagnosis.py reads its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpuhealth.remediator.decide.api_objects import RawPod
from gpuhealth.remediator.decide.diagnosis import Provisioned, diagnosis_of, level_for
from gpuhealth.remediator.decide.job_start import JobRecord, job_start
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import JobStatus, Purpose
from gpuhealth.remediator.policy import Policy

TEMPLATES = Path(__file__).parent / "templates"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
JUDGE_MARGIN_S = 60  # of the deadline, left to the judge after the collect step's tools
NCCL_SECONDS = 300  # at most, for the all-reduce (1 GiB to 8 GiB takes well under a minute on a healthy board)


def judge_command(level: int, given: Provisioned, policy: Policy) -> list[str]:
    command = ["gpuhealth-diagnose", "--dir", "/diag", "--level", str(level), "--sysfs-root", "/host",
               "--instance-type", given.instance_type,
               "--gpus-expected", "" if given.gpus is None else str(given.gpus),
               "--efa-expected", "" if given.efa is None else str(given.efa)]
    if policy.diagnose.nccl_floor_gbps is not None:
        command += ["--nccl-floor", str(policy.diagnose.nccl_floor_gbps)]
    return command


def render_diagnose_job(name: str, node: str, purpose: Purpose, given: Provisioned, policy: Policy) -> dict[str, Any]:
    """The Job's manifest. ValueError when policy diagnose.judge_image is not set (the chart sets it)."""
    settings = policy.diagnose
    if not settings.judge_image:
        raise ValueError("policy diagnose.judge_image is not set: no diagnostic Job can be made (the chart sets it "
                         "to its own image)")
    level = level_for(purpose, policy)
    deadline = int(settings.deadline(level).total_seconds())
    tools = max(deadline - JUDGE_MARGIN_S, 60)
    nccl = min(NCCL_SECONDS, tools // 3)
    text = _ENV.from_string((TEMPLATES / "diagnose.yaml.j2").read_text()).render(
        name=name, namespace=policy.jobs.namespace, node=node, purpose=str(purpose), image=settings.image,
        judge_image=settings.judge_image, service_account=policy.jobs.service_account,
        ttl_seconds=policy.jobs.ttl_seconds_after_finished, deadline_seconds=deadline,
        runtime_class_name=policy.jobs.runtime_class_name, priority_class_name=policy.jobs.priority_class_name,
        image_pull_secrets=[{"name": n} for n in policy.jobs.image_pull_secrets], resources=policy.jobs.resources,
        script=(TEMPLATES / "diagnose_collect.sh").read_text(), level=level, dcgm_seconds=tools - nccl,
        nccl_seconds=nccl, judge_command=judge_command(level, given, policy))
    manifest: dict[str, Any] = yaml.safe_load(text)
    return manifest


def attach_diagnosis(view: NodeView, job: str, record: JobRecord, pods: list[RawPod], policy: Policy) -> None:
    """Diagnostic Job `job`'s outcome onto the node's view: view.diagnosis (None while it runs or when it is missing)
    and view.diagnosis_start (whether its containers started; its not_started() says it is gpuhealth's breakage, not
    the node's; None when the Job is missing). `record`: its JobRecord from act/node_jobs.py job_records
    (job_start.MISSING when not listed); `pods`: the pods on the node (the watch cache keeps the verdict)."""
    namespace = policy.jobs.namespace
    view.diagnosis_start = job_start(record, pods, namespace, job) if record.status != JobStatus.MISSING else None
    view.diagnosis = diagnosis_of(record, pods, namespace, job)
