"""A read-only view of the cluster as the ladder needs it, built from plain API JSON.

The same JSON comes from the live API (serve) and from `kubectl get nodes -o json` (plan), so
both paths build the same views and take the same decisions.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuhealth.contract.names import EXPORTER_CONDITION
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawCondition, RawNode, RawPod
from gpuhealth.remediator.decide.devices import ClaimIndex, NodeDevices
from gpuhealth.remediator.decide.diagnosis import Diagnosis, diagnosis_of, provisioned
from gpuhealth.remediator.decide.do_not_disrupt import POD_ANNOTATION, protects
from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION, Episode, read_history
from gpuhealth.remediator.decide.job_start import JobRecord, JobStart, is_node_action_pod, job_start
from gpuhealth.remediator.decide.nodestate import (
    LAST_SWEEP_ANNOTATION,
    REPLACE_CONDITION_REASON,
    STATE_ANNOTATION,
    TAINT_KEY,
    NodeState,
    hold_of,
    parse_time,
)
from gpuhealth.remediator.decide.sweep_due import sweep_candidate
from gpuhealth.remediator.decide.vocabulary import JobStatus, ResetPhase, RungStatus, Scope
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")

# What a pod may ask NVIDIA's GPU device plugin for: nvidia.com/gpu, a MIG profile, and a shared GPU under any name
# its sharing config gives it (nvidia.com/gpu.shared, nvidia.com/gpu-24gb, nvidia.com/shared-a100). The name alone
# cannot tell such a rename from the network operator's NICs (also nvidia.com/), so every nvidia.com/ resource
# counts: taking a NIC pod for a GPU pod evicts one pod too many, the safe side.
GPU_RESOURCES = re.compile(r"^nvidia\.com/")


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uses_gpu: bool
    terminating: bool = False  # deletion requested (evicted): still on the node until it is gone
    created: datetime | None = None  # metadata.creationTimestamp; None where it is not known
    do_not_disrupt: str | None = None  # its karpenter.sh/do-not-disrupt annotation, as written (None: none)
    started: datetime | None = None  # status.startTime (a do-not-disrupt duration counts from it); None: not started

    def protected(self, now: datetime) -> bool:
        """Karpenter would not evict it now (an active karpenter.sh/do-not-disrupt, decide/do_not_disrupt.py)."""
        return protects(self.do_not_disrupt, self.started, now)


@dataclass(frozen=True)
class GpuPods:
    """The pods a drain for a fault on one GPU evicts (node scope, the device plugin): those the alerts' gpu_pods
    annotation names, and every GPU pod created since shortly before the alert began. The annotation is a snapshot:
    Alertmanager sends an alert again when the set of firing alerts changes, not when only an annotation does, so a
    pod that started on the GPU after the exporter's map was read is not in it. Taking it too costs at most the GPU
    pods that started on the node in those minutes; missing it would leave a pod on the faulty GPU (and a reset that
    fails while it holds the GPU)."""

    names: tuple[str, ...]
    since: datetime  # the earliest alert's startsAt, less GPU_PODS_MAP_AGE

    def includes(self, pod: PodRef) -> bool:
        if f"{pod.namespace}/{pod.name}" in self.names:
            return True
        return pod.uses_gpu and (pod.created is None or pod.created >= self.since)


@dataclass(frozen=True)
class DraFleet:
    """What DRA publishes for the fleet, for one pass: each node's devices, the claims, the served taint API."""

    devices: dict[str, NodeDevices]
    claims: ClaimIndex | None  # None: not known (plan without --resourceclaims): GPU-scoped pods unknown
    taint_api: str | None


@dataclass(frozen=True)
class RepairCondition:
    """A Karpenter-watched Node condition (karpenter_repair.conditions) that another agent set False."""

    type: str
    reason: str
    message: str
    since: str  # lastTransitionTime, as written ("" when none)

    def describe(self) -> str:
        why = f"reason {self.reason}" if self.reason else "no reason"
        return f"{self.type}=False ({why}{', since ' + self.since if self.since else ''})"


@dataclass
class NodeView:
    name: str
    pool: str
    labels: dict[str, str]
    unschedulable: bool
    our_taint: bool
    state: NodeState
    hold: dict[str, Any] | None
    excluded: bool
    ready: bool
    boot_id: str | None
    resource_version: str | None
    evictable: list[PodRef] = field(default_factory=list)  # including pods already terminating
    pods_known: bool = True  # False in `plan` without --pods: nothing can be said about draining
    job_status: JobStatus | None = None  # None: not looked up
    job_start: JobStart | None = None  # whether that Job's container started (None: not looked up, or no Job)
    evidence_status: JobStatus | None = None  # the episode's evidence Job (decide/evidence.py); None: not looked up
    damaged: str | None = None  # the state annotation could not be read (fail closed: hands off)
    devices: NodeDevices | None = None  # the node's GPUs as its DRA driver publishes them (None: no DRA)
    claims: ClaimIndex | None = None  # which pods hold which device (ResourceClaims)
    taint_api: str | None = None  # the resource.k8s.io version serving DeviceTaintRule (None: none does)
    exporter_condition: RawCondition | None = None  # gpuhealth's exporter's condition (None: no exporter runs)
    gpu_clients: tuple[str, ...] = ()  # a reset stopping the GPU's clients: their pods still on the node
    # Karpenter-watched conditions False on the node, set by someone other than gpuhealth's replace step
    repair_conditions: tuple[RepairCondition, ...] = ()
    # the diagnostic Job's result (decide/diagnosis.py; act/diagnose_job.py attach_diagnosis): None while it runs,
    # when there is none, or when not looked up; and whether its containers started (None: not looked up, no Job)
    diagnosis: Diagnosis | None = None
    diagnosis_start: JobStart | None = None
    diagnosis_missing: bool = False  # the state names a diagnostic Job the listing does not have (not made yet)
    history: tuple[Episode, ...] = ()  # its past hardware episodes, newest first (decide/history.py)
    # idle-node sweeps (decide/sweep.py): when its last sweep started (gpuhealth.io/last-sweep; None: never, or
    # unreadable), when the Node was made (None: not known), and its GPU pods as a sweep reads them: every pod on it
    # that asks for a GPU, finished ones still listed included (None: not looked up, the node is no sweep candidate)
    last_sweep: datetime | None = None
    created: datetime | None = None
    gpu_work: list[PodRef] | None = None
    # a new node's burn-in (decide/burn_in.py): it carries the burn-in taint (policy burn_in.taint), and whether its
    # GPUs are advertised yet (the nvidia.com/gpu capacity or GFD's count label: the driver and device plugin are up)
    burn_in: bool = False
    gpus_advertised: bool = False

    def holders(self, devices: Iterable[str]) -> tuple[str, ...]:
        """namespace/name of the pods whose claims use these devices of this node."""
        if self.devices is None or self.claims is None:
            return ()
        return self.claims.using(self.devices.driver, self.devices.pool, devices)

    @property
    def human_cordoned(self) -> bool:
        """Unschedulable, and not by us: a person took this node; we leave it alone."""
        return self.unschedulable and not self.state.cordoned and not self.our_taint

    @property
    def taken_over(self) -> bool:
        """We cordoned this node in this episode, and our taint is gone: only a person removes it."""
        return self.state.active and self.state.rung is not None and not self.our_taint

    @property
    def pending_pods(self) -> list[PodRef]:
        """Pods a drain still has to evict (not yet terminating)."""
        return [p for p in self.evictable if not p.terminating]

    @property
    def gpu_pods(self) -> int:
        return sum(1 for p in self.evictable if p.uses_gpu)


def _matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def node_view(node: RawNode, policy: Policy, state: NodeState | None = None) -> NodeView:
    """The one reader of a Node as the API sends it: after this, the decision reads the view."""
    labels = api_objects.labels(node)
    annotations = api_objects.annotations(node)
    name = api_objects.name(node)
    damaged = None
    if state is None:
        try:
            state = NodeState.from_json(annotations.get(STATE_ANNOTATION))
        except ValueError as exc:
            log.error("node %s: unreadable %s annotation (%s): counted as disrupted, left alone",
                      name, STATE_ANNOTATION, exc)
            state, damaged = NodeState(), str(exc)
    conditions = [c for c in api_objects.node_conditions(node) if isinstance(c, dict)]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    repair = tuple(RepairCondition(str(c["type"]), str(c.get("reason") or ""), str(c.get("message") or ""),
                                   str(c.get("lastTransitionTime") or ""))
                   for c in conditions if c.get("type") in policy.karpenter_repair.conditions
                   and c.get("status") == "False" and c.get("reason") != REPLACE_CONDITION_REASON)
    return NodeView(
        name=name, pool=labels.get(policy.pools.label, policy.pools.default), labels=labels,
        unschedulable=api_objects.unschedulable(node),
        our_taint=any(t.get("key") == TAINT_KEY for t in api_objects.taints(node)),
        state=state, hold=hold_of(annotations), excluded=any(_matches(labels, s) for s in policy.exclude),
        ready=ready, boot_id=((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"),
        resource_version=api_objects.resource_version(node), damaged=damaged,
        exporter_condition=next((c for c in conditions if c.get("type") == EXPORTER_CONDITION), None),
        repair_conditions=repair, history=read_history(annotations.get(HISTORY_ANNOTATION), name),
        last_sweep=_annotation_time(name, annotations.get(LAST_SWEEP_ANNOTATION)),
        created=_annotation_time(name, api_objects.meta(node).get("creationTimestamp")),
        burn_in=any(t.get("key") == policy.burn_in.taint for t in api_objects.taints(node)),
        gpus_advertised=bool(provisioned(node).gpus))


def _annotation_time(node: str, value: str | None) -> datetime | None:
    """A Node's timestamp (an annotation gpuhealth wrote, its creationTimestamp); None where missing or unreadable
    (said in the log: a sweep then counts the node as never swept, the safe side is only the interval)."""
    if not value:
        return None
    try:
        return parse_time(str(value))
    except ValueError:
        log.warning("node %s: unreadable timestamp %r", node, value)
        return None


def gpu_clients(pods: Iterable[RawPod], state: NodeState, policy: Policy) -> tuple[str, ...]:
    """namespace/name of the pods of the operands this reset paused that are still on the node (running or
    terminating: a terminating pod may still hold the GPU)."""
    selectors = [dict(op.pods) for op in policy.reset.operands if op.label in state.reset.paused and op.pods]
    out = []
    for pod in pods:
        if api_objects.phase(pod) in ("Succeeded", "Failed"):
            continue
        if any(_matches(api_objects.labels(pod), s) for s in selectors):
            out.append(f"{api_objects.namespace(pod) or 'default'}/{api_objects.name(pod)}")
    return tuple(sorted(out))


def is_evictable(pod: RawPod) -> bool:
    """What a drain must move: not DaemonSet pods, not mirror (static) pods, not finished pods, not gpuhealth's own
    evidence or diagnostic pod (decide/evidence.py, decide/validation.py: they run on the drained node, and the ladder
    waits for them)."""
    if api_objects.phase(pod) in ("Succeeded", "Failed"):
        return False
    if is_node_action_pod(pod) and api_objects.labels(pod).get("app.kubernetes.io/component") in ("evidence",
                                                                                                "diagnose"):
        return False
    if "kubernetes.io/config.mirror" in api_objects.annotations(pod):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in api_objects.owners(pod))


def asks_for(pod: RawPod, resources: re.Pattern[str]) -> bool:
    """Any container's limits or requests ask for a non-zero amount of a resource whose name `resources` matches."""
    for c in api_objects.containers(pod):
        res = c.get("resources") or {}
        for section in (res.get("limits"), res.get("requests")):
            if any(resources.match(name) and str(value) not in ("0", "")
                   for name, value in (section or {}).items()):
                return True
    return False


def pod_ref(pod: RawPod) -> PodRef:
    uses_gpu = asks_for(pod, GPU_RESOURCES)
    created = _time(pod, "creationTimestamp", api_objects.meta(pod).get("creationTimestamp"))
    started = _time(pod, "startTime", api_objects.pod_status(pod).get("startTime"))
    do_not_disrupt = api_objects.annotations(pod).get(POD_ANNOTATION)
    return PodRef(namespace=api_objects.namespace(pod) or "default", name=api_objects.name(pod), uses_gpu=uses_gpu,
                  terminating=api_objects.terminating(pod), created=created,
                  do_not_disrupt=None if do_not_disrupt is None else str(do_not_disrupt), started=started)


def _time(pod: RawPod, key: str, value: str | None) -> datetime | None:
    """A pod's timestamp, or None where it is missing or unreadable (said in the log)."""
    if not value:
        return None
    try:
        return parse_time(str(value))
    except ValueError:
        meta = api_objects.meta(pod)
        log.warning("pod %s/%s: unreadable %s %r", meta.get("namespace"), meta.get("name"), key, value)
        return None


def gpu_work(pods: Iterable[RawPod], idle_for: timedelta, now: datetime) -> list[PodRef]:
    """The GPU pods that keep a node from an idle-node sweep: every pod asking for a GPU that has not finished, and a
    finished one still listed that was created or started within `idle_for` (its end is not kept: its start is the
    latest time known). gpuhealth's own diagnostic and evidence pods ask for none."""
    out = []
    for pod in pods:
        if not asks_for(pod, GPU_RESOURCES):
            continue
        ref = pod_ref(pod)
        latest = max((t for t in (ref.created, ref.started) if t is not None), default=None)
        if api_objects.phase(pod) not in ("Succeeded", "Failed") or latest is None or now - latest < idle_for:
            out.append(ref)
    return out


def evictable_pods(pods: Iterable[RawPod]) -> list[PodRef]:
    return [pod_ref(p) for p in pods if is_evictable(p)]


def build_views(nodes: Iterable[RawNode], policy: Policy,
                pods_on: Callable[[str], list[RawPod]] | None,
                job_status: Callable[[str], JobRecord] | None = None,
                states: dict[str, NodeState] | None = None, dra: DraFleet | None = None,
                now: datetime | None = None) -> list[NodeView]:
    """Views of all nodes; pods and Job status are looked up only for nodes in an episode, and for the nodes an
    idle-node sweep could take now (`now` given and policy sweep.enabled: decide/sweep.py sweep_candidate).
    pods_on None: the pods are unknown (plan without --pods). dra None: no DRA (node scope only).
    job_status: a node-action Job by name (JobRecord; job_start.MISSING when there is none).
    One node whose objects (the Node, its pods, its Jobs) cannot be read is that node's trouble alone: its view is
    an unreadable one (fail closed: counted as disrupted, left alone), and the other nodes' views are built."""
    views = []
    for node in nodes:
        try:
            views.append(_view(node, policy, pods_on, job_status, states, now))
        except Exception as exc:  # an object no check foresaw: this node only
            views.append(unreadable_view(node, policy, exc))
    if dra is not None:
        attach_dra(views, dra)
    return views


def unreadable_view(node: RawNode, policy: Policy, exc: Exception) -> NodeView:
    """A node whose objects could not be read (`exc`, logged with its traceback): fail closed, as a damaged state is
    (counted as disrupted, left alone, reported: act/unreadable.py)."""
    name = api_objects.name(node)
    log.error("node %s: its objects cannot be read (%s: %s): counted as disrupted, left alone", name,
              type(exc).__name__, exc, exc_info=exc)
    labels = api_objects.labels(node)
    pool = labels.get(policy.pools.label) if isinstance(labels, dict) else None
    return NodeView(name=name, pool=pool if isinstance(pool, str) else policy.pools.default, labels={},
                    unschedulable=False, our_taint=False, state=NodeState(), hold=None, excluded=False, ready=False,
                    boot_id=None, resource_version=None, damaged=f"{type(exc).__name__}: {exc}"[:200])


def _view(node: RawNode, policy: Policy, pods_on: Callable[[str], list[RawPod]] | None,
          job_status: Callable[[str], JobRecord] | None, states: dict[str, NodeState] | None,
          now: datetime | None) -> NodeView:
    """One node's view, with its pods and Jobs where its episode needs them (build_views)."""
    view = node_view(node, policy, (states or {}).get(api_objects.name(node)))
    if pods_on is None:
        view.pods_known = False
    elif now is not None and sweep_candidate(view, policy, now):
        view.gpu_work = gpu_work(pods_on(view.name), policy.sweep.idle_for, now)
    elif view.state.active or view.our_taint or view.burn_in:
        _episode_reads(view, pods_on(view.name), policy, job_status)
    return view


def _episode_reads(view: NodeView, pods: list[RawPod], policy: Policy,
                   job_status: Callable[[str], JobRecord] | None) -> None:
    """What a node in an episode is decided on: its evictable pods, the GPU's clients, its Jobs' status."""
    view.evictable = evictable_pods(pods)
    if view.state.reset.phase == ResetPhase.STOPPING:
        view.gpu_clients = gpu_clients(pods, view.state, policy)
    if job_status is not None and view.state.job and view.state.rung_status == RungStatus.RUNNING:
        record = job_status(view.state.job)
        view.job_status = record.status
        if record.status != JobStatus.MISSING:
            view.job_start = job_start(record, pods, policy.jobs.namespace, view.state.job)
    diagnostic = view.state.diagnostic.job
    if job_status is not None and diagnostic and view.state.diagnostic.result is None:
        record = job_status(diagnostic)
        view.diagnosis_missing = record.status == JobStatus.MISSING
        if not view.diagnosis_missing:
            view.diagnosis_start = job_start(record, pods, policy.jobs.namespace, diagnostic)
        view.diagnosis = diagnosis_of(record, pods, policy.jobs.namespace, diagnostic)
    if job_status is not None and view.state.evidence_run.job and view.state.evidence_run.outcome is None:
        view.evidence_status = job_status(view.state.evidence_run.job).status


def needs_dra(views: Iterable[NodeView]) -> bool:
    """Whether any node's decisions this pass can read DRA (GPU scope): a GPU quarantined, or a node handed over from
    one (its DeviceTaintRules are released at return to service), or an actionable alert whose episode has not chosen
    its scope yet. A node at node scope with a rung under way, a remediation=none alert and a fleet at rest are decided
    without DRA, so those passes read none of its objects."""
    def needs(st: NodeState) -> bool:
        if not st.active:
            return False
        if st.scope == Scope.GPU or st.gpu_scope.devices:
            return True
        return st.rung is None and any(a.asks_action for a in st.alerts.values())
    return any(needs(v.state) for v in views)


def attach_dra(views: Iterable[NodeView], dra: DraFleet) -> None:
    """What DRA publishes, onto each node's view: its devices, the fleet's claims, the served taint API."""
    for view in views:
        if view.name in dra.devices:
            view.devices, view.claims, view.taint_api = dra.devices[view.name], dra.claims, dra.taint_api
