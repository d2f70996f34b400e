"""The diagnostic Job's outcome, as the ladder reads it: pure functions of the Job (its JobRecord) and its pod as the
API lists it. The Job itself: gpuhealth/remediator/act/diagnose_job.py and templates/diagnose.yaml.j2;
docs/remediation.md, "Diagnostic Job".

The judge container writes its verdict (gpuhealth/contract/diagnosis.py) to its termination message. A Job that
ended without a readable verdict (its deadline passed and its pod was deleted, the collect step was OOM-killed or
crashed, the judge could not run) is a failed diagnosis of category tool_error: a diagnostic that hangs or breaks
fails closed. A Job that never started its containers for a reason of its own (an image that cannot be pulled, a
RuntimeClass the cluster lacks) is gpuhealth's breakage, not a diagnosis: job_start.job_start says so, as for the
other node-action Jobs, and the ladder reads that first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuhealth.contract.diagnosis import Check, DiagnosticReport
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawContainerState, RawContainerStatus, RawNode, RawPod, RawPodStatus
from gpuhealth.remediator.decide.job_start import JobRecord, node_job_name
from gpuhealth.remediator.decide.nodestate import time_text
from gpuhealth.remediator.decide.vocabulary import JobStatus, Purpose
from gpuhealth.remediator.policy import Policy

COMPONENT = "diagnose"  # app.kubernetes.io/component of the diagnostic Job and its pod
JUDGE = "judge"  # the container whose termination message is the verdict
COLLECT = "collect"  # the init container that runs the tools
PURPOSE_LABEL = "gpuhealth.io/diagnose-purpose"

GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # GPU Feature Discovery's
GPU_RESOURCE = "nvidia.com/gpu"
EFA_LABEL = "gpuhealth.io/efa-expected"  # gpuhealth/exporter/efa_expected.py LABEL
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def level_for(purpose: Purpose | str | None, policy: Policy) -> int:
    """The dcgmi diag level a diagnostic of this purpose runs at (its Job's deadline follows)."""
    if purpose == Purpose.SWEEP:
        return policy.sweep.level
    if purpose == Purpose.BURN_IN:
        return policy.burn_in.level
    return policy.diagnose.validation_level if purpose == Purpose.VALIDATE else policy.diagnose.level


@dataclass(frozen=True)
class Diagnosis:
    """A finished diagnostic Job's result. `categories`: gpuhealth.contract.diagnosis.Check values, in the order the
    judge found them; `gpus`: the GPUs its failures name; `detail`: a line for an Event or a log; `codes`: the DCGM
    failure codes its dcgmi diag failures name (absent from a judge older than them)."""

    passed: bool
    categories: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    detail: str = ""
    level: int | None = None  # the dcgmi diag level run (None: no verdict was read)
    codes: tuple[int, ...] = ()
    truncated: int = 0  # failures the judge could not fit in its verdict (unknown: never configuration only)

    @classmethod
    def of(cls, verdict: DiagnosticReport) -> Diagnosis:
        cats = tuple(dict.fromkeys(str(f.category) for f in verdict.failures))
        gpus = tuple(dict.fromkeys(g for f in verdict.failures for g in f.gpus))
        codes = tuple(dict.fromkeys(c for f in verdict.failures for c in f.codes))
        detail = "; ".join(f.detail for f in verdict.failures) or "passed" + (
            f" (skipped: {'; '.join(verdict.skipped)})" if verdict.skipped else "")
        return cls(verdict.passed, cats, gpus, detail, verdict.level, codes, verdict.truncated)

    @property
    def configuration_only(self) -> bool:
        """Failed only for the node's software or configuration (gpu_config: DCGM's CONFIG codes), so no hardware
        fault is confirmed: the node waits for a person, neither replaced nor climbing on it."""
        return not self.passed and not self.truncated and self.categories == (str(Check.GPU_CONFIG),)

    def configuration_text(self) -> str:
        """What a person reads in the Event: the DCGM codes and the judge's detail, which names them."""
        codes = ", ".join(str(c) for c in self.codes) or "none given"
        return f"the node's software or configuration, not its GPUs (DCGM failure codes {codes}: {self.detail})"

    @classmethod
    def tool_error(cls, detail: str) -> Diagnosis:
        return cls(False, (str(Check.TOOL_ERROR),), (), detail)


@dataclass(frozen=True)
class Provisioned:
    """What the node was given, as its Node says, for the judge to count against (--gpus-expected, --efa-expected,
    --instance-type). None: the Node does not say."""

    gpus: int | None
    efa: int | None
    instance_type: str


def _whole(value: object) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() else None


def provisioned(node: RawNode) -> Provisioned:
    """GPUs: the larger of GFD's nvidia.com/gpu.count label and the nvidia.com/gpu capacity (a lost GPU can lower
    either; the judge prefers the instance type's count where it knows it). EFA: the gpuhealth.io/efa-expected label,
    else the vpc.amazonaws.com/efa capacity (gpuhealth/exporter/efa_expected.py's order; none: not configured)."""
    labels = api_objects.labels(node)
    capacity = (node.get("status") or {}).get("capacity") or {}
    counts = [c for c in (_whole(labels.get(GPU_COUNT_LABEL)), _whole(capacity.get(GPU_RESOURCE))) if c is not None]
    efa = _whole(labels.get(EFA_LABEL))
    return Provisioned(max(counts) if counts else None, efa if efa is not None else _whole(capacity.get(EFA_RESOURCE)),
                       labels.get(INSTANCE_TYPE_LABEL, ""))


def diagnosis_job_name(node: str, purpose: Purpose, episode: datetime | None) -> str:
    """Deterministic per node, purpose and episode (as decide/climb.py rung_job_name): a second create finds the first
    (409). `episode`: the episode's start, or for a run not of an episode the time that makes it distinct (a sweep's
    slot). A second diagnosis of the same purpose in one episode needs a distinct time too (the first's Job may
    still be kept)."""
    return node_job_name(str(purpose), node, f"{node}/{COMPONENT}/{purpose}/{time_text(episode)}")


def _owned(pod: RawPod, job: str) -> bool:
    return any(o.get("kind") == "Job" and o.get("name") == job for o in api_objects.owners(pod))


def _terminated(status: RawContainerStatus) -> dict[str, object]:
    state = status.get("state") or {}
    return dict(state.get("terminated") or (status.get("lastState") or {}).get("terminated") or {})


def _why_no_verdict(pods: list[RawPod]) -> str:
    """What the pod says about a Job that ended without a verdict."""
    if not pods:
        return "no pod left (the Job's deadline passed, diagnose.timeout, and its pod was deleted)"
    status = api_objects.pod_status(pods[0])
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        ended = _terminated(c)
        if ended and (ended.get("exitCode") or ended.get("reason") not in (None, "Completed")):
            return f"container {c.get('name')} ended {ended.get('reason') or 'Error'} (exit {ended.get('exitCode')})"
    return f"pod {status.get('phase') or 'Unknown'}{': ' + str(status['reason']) if status.get('reason') else ''}"


def diagnosis_of(record: JobRecord, pods: list[RawPod], namespace: str, job: str) -> Diagnosis | None:
    """The result of diagnostic Job `job` in `namespace`, from the pods on its node; None while it runs or when
    there is no such Job (not made yet, or deleted after ttlSecondsAfterFinished: read it before then)."""
    if record.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        return None
    mine = [p for p in pods if api_objects.namespace(p) == namespace and _owned(p, job)]
    for pod in mine:
        for c in api_objects.pod_status(pod).get("containerStatuses") or []:
            message = str(_terminated(c).get("message") or "") if c.get("name") == JUDGE else ""
            if not message:
                continue
            try:
                verdict = DiagnosticReport.from_json(message)
            except ValueError as exc:
                return Diagnosis.tool_error(f"the judge's verdict is unreadable ({exc})")
            if verdict.passed != (record.status == JobStatus.SUCCEEDED):
                return Diagnosis.tool_error(f"the Job {record.status} but its verdict says passed={verdict.passed}")
            return Diagnosis.of(verdict)
    return Diagnosis.tool_error(f"the Job {record.status} without a verdict: {_why_no_verdict(mine)}")


def _state(value: RawContainerState | None) -> RawContainerState:
    """A container state with what diagnosis_of and job_start read: waiting and terminated reasons, messages, exit."""
    value = value or {}
    kept: RawContainerState = {}
    waiting, terminated = value.get("waiting"), value.get("terminated")
    if waiting is not None:
        kept["waiting"] = {"reason": waiting.get("reason", ""), "message": waiting.get("message", "")}
    if "running" in value:
        kept["running"] = {}
    if terminated is not None:
        kept["terminated"] = {"reason": terminated.get("reason", ""), "message": terminated.get("message", ""),
                              "exitCode": terminated.get("exitCode", 0)}
    return kept


def _kept(statuses: list[RawContainerStatus] | None) -> list[RawContainerStatus]:
    return [{"name": c.get("name") or "", "state": _state(c.get("state")), "lastState": _state(c.get("lastState"))}
            for c in statuses or []]


def verdict_fields(pod: RawPod) -> RawPodStatus:
    """What of a diagnostic pod's status a cache keeps (gpuhealth/remediator/clients/fleet_cache.py): each container's
    and init container's name and states with their reasons, exit codes and messages (the verdict, <= 4096 bytes)."""
    status = api_objects.pod_status(pod)
    return {"containerStatuses": _kept(status.get("containerStatuses")),
            "initContainerStatuses": _kept(status.get("initContainerStatuses"))}
