"""Whether a node-action Job (reset_gpu, reboot, the diagnostic) got as far as running its container (or its init
container): pure functions of the Job and the node's pods as the API lists them.

A Job whose container never ran touched no GPU. When it cannot start for a reason of its own (an image that cannot be
pulled, a RuntimeClass, PriorityClass or Pod Security level the cluster refuses it, a pod the kubelet would not admit),
that is gpuhealth's breakage, not evidence about the hardware: the ladder reports it as such and does not climb on it
(gpuhealth/remediator/decide/ladder.py). Reasons that a broken node gives too are not among them: a container stuck in
ContainerCreating, CreateContainerError or RunContainerError (the NVIDIA runtime's hook fails that way on a GPU that
fell off the bus) is left to the rung's timeout, which climbs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import (
    RawContainerState,
    RawContainerStatus,
    RawJob,
    RawOwnerReference,
    RawPod,
    RawPodStatus,
    RawWaiting,
)
from gpuhealth.remediator.decide.nodestate import parse_time
from gpuhealth.remediator.decide.vocabulary import JobStatus

# Waiting reasons of a container that only the Job's own settings cause (the kubelet's images and config errors):
# jobs.image, jobs.image_pull_secrets, the pod's securityContext.
CONFIG_WAITING_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                                    "RegistryUnavailable", "SignatureValidationFailed", "CreateContainerConfigError"})
# A pod the kubelet refused at admission (phase Failed, no container run): OutOfcpu, OutOfmemory, OutOfpods,
# OutOf<extended resource>. A nodeName pod skips the scheduler, so this is where a Job that does not fit ends up;
# jobs.resources and jobs.priority_class_name (a critical class makes the kubelet free room instead) are the fix.
KUBELET_REFUSED = re.compile(r"^OutOf")


# The labels templates/*.yaml.j2 put on the node-action Jobs' pods: the pods whose start is read here, and so the pods
# the remediator's watch cache keeps what it reads of (gpuhealth/remediator/clients/fleet_cache.py).
POD_NAME_LABEL = ("app.kubernetes.io/name", "gpuhealth-remediator")
POD_COMPONENTS = ("reset-gpu", "reboot", "diagnose", "evidence")  # app.kubernetes.io/component (evidence: not drained)


def node_job_name(kind: str, node: str, identity: str) -> str:
    """A node-action Job's name (a reset, reboot, diagnostic or evidence Job): gpuhealth-<kind>-<node>, cut to leave
    room, and 8 hex digits of the SHA-1 of `identity` (the node, the rung or purpose, the episode: what makes it this
    Job), so that making it twice (a restart, a new leader) finds the first (409)."""
    digest = hashlib.sha1(identity.encode()).hexdigest()[:8]
    return f"gpuhealth-{kind}-{node}"[:53].rstrip("-.") + f"-{digest}"


def is_node_action_pod(pod: RawPod) -> bool:
    labels = api_objects.labels(pod)
    return labels.get(POD_NAME_LABEL[0]) == POD_NAME_LABEL[1] and labels.get("app.kubernetes.io/component") in \
        POD_COMPONENTS


def start_fields(pod: RawPod) -> tuple[list[RawOwnerReference], RawPodStatus]:
    """What job_start reads of a pod: its owners (kind, name) and its status (phase, reason, message, each
    container's state as a waiting reason and message or the name of the state), for a cache that keeps little."""
    status = api_objects.pod_status(pod)
    owners: list[RawOwnerReference] = [{"kind": o.get("kind") or "", "name": o.get("name") or ""}
                                       for o in api_objects.owners(pod)]
    kept: RawPodStatus = {}
    if "phase" in status:
        kept["phase"] = status["phase"]
    if "reason" in status:
        kept["reason"] = status["reason"]
    if "message" in status:
        kept["message"] = status["message"]
    kept["containerStatuses"] = [{"state": _kept_state(c.get("state")), "lastState": _kept_state(c.get("lastState"))}
                                 for c in status.get("containerStatuses") or []]
    return owners, kept


def _kept_state(value: RawContainerState | None) -> RawContainerState:
    """A container state as job_start reads it: a waiting reason and message, or which state it is in."""
    value = value or {}
    waiting = value.get("waiting")
    if waiting is not None:
        kept: RawWaiting = {}
        if "reason" in waiting:
            kept["reason"] = waiting["reason"]
        if "message" in waiting:
            kept["message"] = waiting["message"]
        return {"waiting": kept}
    state: RawContainerState = {}
    if "running" in value:
        state["running"] = {}
    if "terminated" in value:
        state["terminated"] = {}
    return state


@dataclass(frozen=True)
class JobRecord:
    """A node-action Job as listed: its outcome, when it was made, and whether it has made a pod at all."""

    status: JobStatus
    created: datetime | None = None  # metadata.creationTimestamp
    made_pod: bool = True  # its status counts a pod (active, ready, succeeded, failed, terminating); False: none yet


MISSING = JobRecord(JobStatus.MISSING)


def job_record(job: RawJob, status: JobStatus) -> JobRecord:
    """The record of a listed Job whose outcome is `status` (gpuhealth/remediator/act/node_jobs.py job_status)."""
    counts = job.get("status") or {}
    made = any(counts.get(k) for k in ("active", "ready", "succeeded", "failed", "terminating"))
    created = api_objects.meta(job).get("creationTimestamp")
    try:
        when = parse_time(str(created)) if created else None
    except ValueError:
        when = None
    return JobRecord(status, when, made)


@dataclass(frozen=True)
class JobStart:
    """What the Job's pods say about its start. `refused`: the pod can never start (the kubelet refused it): counts
    at once. `waiting`: its container waits for one of CONFIG_WAITING_REASONS, or the Job has made no pod: counts once
    jobs.start_timeout has passed since the Job was made (the kubelet retries pulls meanwhile). Both empty: the
    container ran, or nothing says it cannot."""

    refused: str = ""
    waiting: str = ""
    created: datetime | None = None

    def not_started(self, now: datetime, start_timeout: timedelta, rung_over: bool) -> str:
        """Why the Job did not start, once that is known ("" while it is not): `rung_over` (the rung's timeout
        passed, or the Job failed) takes the waiting evidence as final too."""
        if self.refused:
            return self.refused
        if self.waiting and (rung_over or (self.created is not None and now - self.created >= start_timeout)):
            return self.waiting
        return ""


def _owned_by(pod: RawPod, job: str) -> bool:
    return any(o.get("kind") == "Job" and o.get("name") == job for o in api_objects.owners(pod))


def _statuses(pod: RawPod) -> list[RawContainerStatus]:
    """Its init containers' statuses (the diagnostic Job's collect step) and its containers'."""
    status = api_objects.pod_status(pod)
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def _ran(pod: RawPod) -> bool:
    """A container of the pod has run (running now, or ended: not a start that failed)."""
    for status in _statuses(pod):
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" in state or "terminated" in state or "terminated" in last:
            return True
    return False


def job_start(record: JobRecord, pods: list[RawPod], namespace: str, job: str) -> JobStart:
    """The start evidence of Job `job` (in `namespace`) from the pods on its node."""
    mine = [p for p in pods if api_objects.meta(p).get("namespace") == namespace and _owned_by(p, job)]
    if not mine:
        if record.made_pod:
            return JobStart(created=record.created)
        return JobStart(waiting="the Job made no pod (its FailedCreate Events say why: a RuntimeClass the cluster "
                        "lacks, jobs.runtime_class_name; the namespace's Pod Security level; a ResourceQuota; an "
                        f"admission policy. kubectl -n {namespace} describe job {job})", created=record.created)
    if any(_ran(p) for p in mine):
        return JobStart(created=record.created)
    for pod in mine:
        status = api_objects.pod_status(pod)
        reason = str(status.get("reason") or "")
        if status.get("phase") == "Failed" and KUBELET_REFUSED.match(reason):
            message = str(status.get("message") or "").strip()
            return JobStart(refused=f"the kubelet refused its pod ({reason}{': ' + message if message else ''}; "
                            "jobs.resources, jobs.priority_class_name)", created=record.created)
    for pod in mine:
        for container in _statuses(pod):
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason") or "")
            if reason in CONFIG_WAITING_REASONS:
                message = str(waiting.get("message") or "").strip()
                return JobStart(waiting=f"{reason}{': ' + message if message else ''}", created=record.created)
    return JobStart(created=record.created)
