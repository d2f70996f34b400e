"""Why did a workload pod fail: infra, app or unknown, with the evidence. Pure: no I/O, no clock.

The evidence is weighed in this order, and the first that decides wins (every piece seen is listed):

1. The pod's DisruptionTarget condition (preemption, the Eviction API, a NoExecute taint, the pod
   garbage collector after its node went away, the kubelet): the platform took the pod away -> infra.
2. A gpuhealth node signal on the pod's node between `look_behind` before and `look_ahead` after the
   failure: an alert asking for a remediation (remediation != none: fatal Xids, GPU lost, NVLink/EFA
   faults, failed probes), or a disruptive remediation gpuhealth performed (drain and above) -> infra.
   A contained memory error (Xid 94) on the node is hardware that killed the process -> infra.
   Alerts of component `job` are left out: they are made from workload failures, so counting them
   would let one bad job make the next failure on the node look like the node's.
3. OOMKilled, or the pod's own activeDeadlineSeconds passed (status reason DeadlineExceeded) -> app.
4. An NCCL timeout (the collective watchdog) with nothing above -> unknown: a hang in the job, the
   network or a peer's GPU all look the same from here (one retry). Checked before the exit code:
   the timeout is what ends the process, with whatever code it ends with.
5. The exit code of the container that failed first, against the configured app codes -> app.
6. An application Xid (13, 31, 43, ...) on the pod's own GPU, with no hardware evidence -> app.
7. Nothing decides -> unknown.

An infra verdict is final at once. An app or unknown verdict is final only once `look_ahead` has
passed since the failure: a node alert may still arrive and turn it into infra.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuhealth.contract.pci import short_bus_id
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawCondition, RawPod, RawPodStatus
from gpuhealth.remediator.decide.nodestate import parse_time
from gpuhealth.remediator.decide.views import asks_for
from gpuhealth.remediator.decide.vocabulary import Remediation

INFRA, APP, UNKNOWN = "infra", "app", "unknown"
CLASSES = (INFRA, APP, UNKNOWN)

# reason label values (a closed set: the failures metric is labelled with them)
DISRUPTION_REASONS = {
    "PreemptionByScheduler": "preemption",
    "PreemptionByKubeScheduler": "preemption",
    "EvictionByEvictionAPI": "eviction",
    "DeletionByTaintManager": "node_taint",
    "DeletionByPodGC": "node_gone",
    "TerminationByKubelet": "kubelet",
}
# status.reason of pods a node took away without a DisruptionTarget condition (older kubelets)
STATUS_REASONS = {"Evicted": "kubelet", "NodeLost": "node_gone", "Shutdown": "node_shutdown",
                  "NodeShutdown": "node_shutdown", "Terminated": "node_shutdown", "Preempting": "preemption"}
REASONS: dict[str, tuple[str, ...]] = {
    INFRA: ("preemption", "eviction", "node_taint", "node_gone", "kubelet", "node_shutdown", "disruption",
            "node_fault", "node_remediation", "gpu_memory_error"),
    APP: ("oom_killed", "app_exit_code", "app_xid", "deadline_exceeded"),
    UNKNOWN: ("nccl_timeout", "unexplained"),
}
# Which reasons make the node a suspect (the platform moving a pod, or a node that is gone, does not).
NODE_SUSPECT_REASONS = frozenset({"node_fault", "node_remediation", "gpu_memory_error", "nccl_timeout", "unexplained"})

APP_XID_ALERTS = frozenset({"GPUXidApplication"})
CONTAINED_MEMORY_ALERTS = frozenset({"GPUContainedMemoryError"})
NOT_HARDWARE_COMPONENTS = frozenset({"job"})

NCCL_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|NCCL[^\n]{0,120}?(?:time(?:d)?[ -]?out|Timeout)"
    r"|ProcessGroupNCCL[^\n]{0,120}?[Tt]imeout|collective operation timeout", re.IGNORECASE)


@dataclass(frozen=True)
class Settings:
    app_exit_codes: tuple[int, ...] = (2, 126, 127)
    look_behind: timedelta = timedelta(minutes=10)
    look_ahead: timedelta = timedelta(minutes=5)


@dataclass(frozen=True)
class NodeSignal:
    """An alert on the node (from a webhook body or the node's gpuhealth state), or a remediation gpuhealth
    performed there (from its Events or the node's last-episode summary)."""

    kind: str  # alert | remediation
    name: str  # alertname, or the Event reason
    node: str
    start: datetime
    end: datetime | None = None  # None: still firing / a point in time (remediation)
    remediation: str = "none"
    component: str = ""
    gpu: str | None = None
    mig_uuid: str | None = None  # the MIG device an alert on one MIG GPU instance names (its GPU: gpu)

    def describe(self) -> str:
        what = f"alert {self.name}" if self.kind == "alert" else f"gpuhealth {self.name}"
        bits = [f"remediation {self.remediation}"]
        if self.component:
            bits.append(f"component {self.component}")
        if self.gpu:
            bits.append(f"gpu {self.gpu}")
        if self.mig_uuid:
            bits.append(f"MIG device {self.mig_uuid}")
        return f"{what} ({', '.join(bits)}) on node {self.node}"


@dataclass(frozen=True)
class PodClassification:
    cls: str
    reason: str
    evidence: tuple[str, ...]
    failed_at: datetime | None = None
    final: bool = True
    cause: str = ""  # what "the same cause" means for the restart-loop guard, e.g. app_exit_code:3
    exit_code: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"class": self.cls, "reason": self.reason, "evidence": list(self.evidence)}


@dataclass
class _Termination:
    container: str
    exit_code: int
    reason: str
    message: str
    finished: datetime | None
    started: datetime | None


@dataclass
class PodFacts:
    node: str
    started: datetime | None
    failed_at: datetime | None
    terminations: list[_Termination] = field(default_factory=list)
    disruption: RawCondition | None = None
    status_reason: str = ""
    status_message: str = ""


def _time(value: str | None) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _terminations(status: RawPodStatus) -> list[_Termination]:
    """Each container's current termination, or its last one when it has none now (init containers first)."""
    terms: list[_Termination] = []
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        for state in (cs.get("state"), cs.get("lastState")):
            t = (state or {}).get("terminated") or None
            if t is None:
                continue
            terms.append(_Termination(
                container=str(cs.get("name", "")), exit_code=int(t.get("exitCode") or 0),
                reason=str(t.get("reason") or ""), message=str(t.get("message") or ""),
                finished=_time(t.get("finishedAt")), started=_time(t.get("startedAt"))))
            break
    return terms


def pod_facts(pod: RawPod) -> PodFacts:
    status = api_objects.pod_status(pod)
    terms = _terminations(status)
    conditions = status.get("conditions") or []
    disruption = next((c for c in conditions if c.get("type") == "DisruptionTarget" and c.get("status") == "True"),
                      None)
    finishes = [t.finished for t in terms if t.finished is not None]
    failed_at = max(finishes) if finishes else None
    if failed_at is None:
        for c in conditions:
            if c.get("type") in ("Ready", "DisruptionTarget") and c.get("status") in ("False", "True"):
                at = _time(c.get("lastTransitionTime"))
                if at is not None and (failed_at is None or at > failed_at):
                    failed_at = at
    starts = [t.started for t in terms if t.started is not None]
    started = _time(status.get("startTime")) or (min(starts) if starts else None)
    return PodFacts(node=api_objects.node_name(pod), started=started, failed_at=failed_at,
                    terminations=terms, disruption=disruption, status_reason=str(status.get("reason") or ""),
                    status_message=str(status.get("message") or ""))


def _ago(delta: timedelta) -> str:
    seconds = int(abs(delta.total_seconds()))
    text = f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
    return f"{text} before the failure" if delta.total_seconds() >= 0 else f"{text} after the failure"


def _gpu_key(name: str) -> str:
    """A GPU's name in one form: a PCI bus id as domain:bus:device whatever its writer's width, else lower-case."""
    return short_bus_id(name) or name.strip().lower()


def _gpu_matches(sig: NodeSignal, pod_gpus: frozenset[str] | None) -> bool:
    """Was the signal on the pod's GPU? pod_gpus None: the pod had every GPU of its node. An alert on one MIG
    instance (mig_uuid) is the pod's only if the pod held that MIG device, where the pod's MIG devices are known
    (MIG UUIDs among pod_gpus); a pod on another instance of the same GPU did not share its fault."""
    if pod_gpus is None:
        return True
    names = {_gpu_key(g) for g in pod_gpus}
    migs = {n for n in names if n.startswith("mig-")}
    if sig.mig_uuid and migs:
        return sig.mig_uuid.strip().lower() in migs
    return sig.gpu is not None and _gpu_key(sig.gpu) in names


@dataclass(frozen=True)
class _Finding:
    """What decided the verdict (its class and reason), before the evidence and the look-ahead are added."""

    cls: str
    reason: str
    cause: str = ""  # "" for the reason itself
    exit_code: int | None = None


@dataclass
class _AroundTheFailure:
    """The node signals on the pod's node around its failure that count, by what they say."""

    hardware: list[NodeSignal] = field(default_factory=list)
    contained: list[NodeSignal] = field(default_factory=list)  # contained memory errors on the pod's GPU
    app_xids: list[NodeSignal] = field(default_factory=list)  # application Xids on the pod's GPU


def classify(pod: RawPod, signals: list[NodeSignal], settings: Settings | None = None,
             now: datetime | None = None, pod_gpus: frozenset[str] | None = None) -> PodClassification:
    """The verdict on one Failed pod. `signals` may hold any node's: only the pod's node counts.
    `now` None: the look-ahead is taken as passed (the CLI asks after the fact). `pod_gpus`: the GPUs the
    pod had (indices or PCI bus ids, as the alerts' gpu label, and the UUIDs of the MIG devices it had), None
    when it had all of its node's."""
    s = settings or Settings()
    f = pod_facts(pod)
    evidence = _what_is_known(f)
    finding = _taken_away(f, evidence)
    if finding is None:
        around = _signals_around(f, signals, s, pod_gpus, evidence)
        finding = _node_fault(around) or _pod_story(f, s, around, evidence)
    final = now is None or f.failed_at is None or now >= f.failed_at + s.look_ahead
    return PodClassification(finding.cls, finding.reason, tuple(evidence), f.failed_at,
                             final=finding.cls == INFRA or final, cause=finding.cause or finding.reason,
                             exit_code=finding.exit_code)


def _what_is_known(f: PodFacts) -> list[str]:
    """The evidence every verdict starts with: when the pod failed, and how each container ended."""
    if f.failed_at is None:
        evidence = ["no container termination time on the pod: failure time unknown, node signals not used"]
    else:
        evidence = [f"failed at {f.failed_at.strftime('%Y-%m-%dT%H:%M:%SZ')} on node {f.node or '?'}"]
    for t in f.terminations:
        if t.exit_code != 0 or t.reason not in ("", "Completed"):
            evidence.append(f"container {t.container}: exit code {t.exit_code}"
                            + (f", reason {t.reason}" if t.reason else ""))
    return evidence


def _taken_away(f: PodFacts, evidence: list[str]) -> _Finding | None:
    """1. The platform took the pod away (a DisruptionTarget condition, or an older kubelet's status reason)."""
    if f.disruption is not None:
        why = str(f.disruption.get("reason") or "")
        evidence.append(f"condition DisruptionTarget=True ({why or 'no reason'}): "
                        f"{f.disruption.get('message') or 'no message'}")
        return _Finding(INFRA, DISRUPTION_REASONS.get(why, "disruption"))
    if f.status_reason in STATUS_REASONS:
        evidence.append(f"pod status reason {f.status_reason}: {f.status_message or 'no message'}")
        return _Finding(INFRA, STATUS_REASONS[f.status_reason])
    return None


def _signals_around(f: PodFacts, signals: list[NodeSignal], s: Settings, pod_gpus: frozenset[str] | None,
                    evidence: list[str]) -> _AroundTheFailure:
    """2. The gpuhealth signals on the pod's node from `look_behind` before to `look_ahead` after the failure."""
    around = _AroundTheFailure()
    if f.failed_at is None or not f.node:
        return around
    failed_at = f.failed_at
    lo, hi = failed_at - s.look_behind, failed_at + s.look_ahead
    for sig in sorted(signals, key=lambda x: x.start):
        end = sig.end or (failed_at if sig.kind == "alert" else sig.start)  # an alert without an end still fires
        if sig.node != f.node or sig.start > hi or end < lo:
            continue
        when = _ago(failed_at - sig.start)
        if sig.kind == "alert" and sig.name in CONTAINED_MEMORY_ALERTS and _gpu_matches(sig, pod_gpus):
            around.contained.append(sig)
            evidence.append(f"{sig.describe()} started {when}: a contained memory error ends the process")
        elif sig.kind == "alert" and sig.name in APP_XID_ALERTS:
            if _gpu_matches(sig, pod_gpus):
                around.app_xids.append(sig)
                evidence.append(f"{sig.describe()} started {when}: an application Xid on the pod's GPU")
            else:
                evidence.append(f"{sig.describe()} started {when}: not on the pod's GPU(s), not used")
        elif sig.remediation != Remediation.NONE and sig.component not in NOT_HARDWARE_COMPONENTS:
            around.hardware.append(sig)
            evidence.append(f"{sig.describe()} {'started' if sig.kind == 'alert' else 'at'} {when}")
    return around


def _node_fault(around: _AroundTheFailure) -> _Finding | None:
    """2. A hardware signal, or a contained memory error on the pod's GPU: the node's fault."""
    if around.hardware:
        return _Finding(INFRA, "node_fault" if around.hardware[0].kind == "alert" else "node_remediation")
    if around.contained:
        return _Finding(INFRA, "gpu_memory_error")
    return None


def _pod_story(f: PodFacts, s: Settings, around: _AroundTheFailure, evidence: list[str]) -> _Finding:
    """3-7. The pod's own story: OOM, its deadline, an NCCL timeout, its exit code, an application Xid."""
    failing = sorted((t for t in f.terminations if t.exit_code != 0 or t.reason == "OOMKilled"),
                     key=lambda t: (t.finished is None, t.finished.timestamp() if t.finished else 0.0))
    if any(t.reason == "OOMKilled" for t in failing):
        return _Finding(APP, "oom_killed")
    if f.status_reason == "DeadlineExceeded":
        evidence.append(f"pod status reason DeadlineExceeded: {f.status_message or 'activeDeadlineSeconds passed'}")
        return _Finding(APP, "deadline_exceeded")
    nccl = [t for t in f.terminations if NCCL_TIMEOUT.search(t.message) or NCCL_TIMEOUT.search(t.reason)]
    if nccl:
        match = NCCL_TIMEOUT.search(nccl[0].message) or NCCL_TIMEOUT.search(nccl[0].reason)
        evidence.append(f"container {nccl[0].container}: termination message mentions an NCCL timeout "
                        f"({match.group(0) if match else 'NCCL timeout'!r}): a hang in the job, the network or a "
                        "peer's GPU")
        return _Finding(UNKNOWN, "nccl_timeout")
    first_code = failing[0].exit_code if failing else None
    if first_code is not None and first_code in s.app_exit_codes:
        evidence.append(f"exit code {first_code} is one of the configured application exit codes "
                        f"{list(s.app_exit_codes)}")
        return _Finding(APP, "app_exit_code", f"app_exit_code:{first_code}", first_code)
    if around.app_xids:
        return _Finding(APP, "app_xid", "app_xid", first_code)
    if first_code is not None:
        evidence.append(f"exit code {first_code} is not a configured application exit code "
                        f"{list(s.app_exit_codes)} and nothing on the node explains it")
    else:
        evidence.append("no failed container and no node signal explains the failure")
    return _Finding(UNKNOWN, "unexplained", exit_code=first_code)


GPUS_ANNOTATION = "gpuhealth.io/gpus"
GPU_RESOURCE = "nvidia.com/gpu"
# A GPU, a MIG device (nvidia.com/mig-<profile>, the mixed strategy) or a shared GPU (nvidia.com/gpu.shared and the
# like): what makes a pod a GPU workload. requested_gpus counts whole GPUs only.
_GPU_WORKLOAD_RESOURCE = re.compile(r"^nvidia\.com/(?:gpu|mig-)")


def asks_for_gpu(pod: RawPod) -> bool:
    """Any container asks a GPU device plugin for something (a whole GPU, a MIG device, a share of one)."""
    return asks_for(pod, _GPU_WORKLOAD_RESOURCE)


def requested_gpus(pod: RawPod) -> int:
    total = 0
    for c in api_objects.containers(pod):
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0
        try:
            total += int(value)
        except (TypeError, ValueError):
            continue
    return total


def pod_gpus(pod: RawPod, node_gpus: int | None) -> frozenset[str] | None:
    """The GPUs the pod had, as alerts name them; None: all of its node's. The `gpuhealth.io/gpus` annotation
    (indices or PCI bus ids, comma-separated, e.g. written by the job from NVIDIA_VISIBLE_DEVICES) says so
    exactly. Without it a pod that requested as many GPUs as the node has (or a node of unknown size) had them
    all; one that requested fewer had some of them, which ones is unknown: an empty set (no Xid is its)."""
    value = api_objects.annotations(pod).get(GPUS_ANNOTATION)
    if isinstance(value, str) and value.strip():
        if value.strip().lower() == "all":
            return None
        return frozenset(v.strip() for v in value.split(",") if v.strip())
    if node_gpus is None or requested_gpus(pod) >= node_gpus:
        return None
    return frozenset()
