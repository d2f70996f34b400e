"""The simulated cluster: nodes as the Kubernetes API would show them, their faults, and time out of service.

A node here holds exactly what the remediator reads from a Node (the state annotation, gpuhealth's taint,
spec.unschedulable, Ready, the boot id, the pods a drain must move, the reset/reboot Job's status), so the
views handed to gpuhealth.remediator.decide.ladder.decide are real NodeViews built from this state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpuhealth.remediator.decide.devices import ClaimIndex, Device, NodeDevices
from gpuhealth.remediator.decide.diagnosis import Diagnosis
from gpuhealth.remediator.decide.history import Episode
from gpuhealth.remediator.decide.nodestate import RUNGS, NodeState, rung_index
from gpuhealth.remediator.decide.sweep_due import sweep_candidate, sweep_due
from gpuhealth.remediator.decide.views import NodeView, PodRef
from gpuhealth.remediator.decide.vocabulary import JobStatus, RungStatus
from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.failure_data import Cause

EMPTY = NodeState()


@dataclass
class Fault:
    fid: int
    cause: Cause
    started: float
    fix: str  # the least rung that fixes it: reset_gpu | reboot | replace | external ("" for job-only causes)
    gpu: int
    seed: int  # the fault's own random stream (rung outcomes), independent of the policy
    alert: str | None
    switch: int | None = None  # a correlated event: the switch whose failure this is
    cleared: float | None = None
    epoch: int = 0  # changes of its signal so far (it stops when the fault ends; a flapping one comes and goes)


@dataclass
class SimNode:
    slot: int
    pool: str
    switch: str = ""  # the switch the slot hangs off (the scenario's switches.nodes_per_switch): its topology label
    generation: int = 0
    lemon: bool = False
    rate: float = 0.0  # faults per second in service
    state: NodeState = EMPTY
    unschedulable: bool = False
    our_taint: bool = False
    ready: bool = True
    boot: int = 0
    version: int = 1
    pods: list[PodRef] = field(default_factory=list)
    job_status: JobStatus | None = None  # the reset/reboot Job, while it runs and once it has ended
    diagnosis: Diagnosis | None = None  # the diagnostic Job's result once it has ended (None: running or none)
    evidence_status: JobStatus | None = None  # the evidence Job (decide/evidence.py): running, then succeeded
    fault: Fault | None = None
    noise: Fault | None = None  # a false reading on the node (noise.py): its alert fires though nothing is broken
    noise_cause: str = ""  # the last false positive's name, for the outage it may cause
    replacing: bool = False
    awaiting_spare: bool = False  # its replacement is under way: waiting for a spare of its pool, or swapping
    excluded_by_job: bool = False  # a job found it broken (no rule saw it): not scheduled on until repaired
    workload: str | None = None  # the job holding the node
    # accounting
    out_since: float | None = None
    out_cause: str = ""
    out_rung: int = -1
    out_scope: str = "node"
    left_schedulable: float | None = None  # when, in this outage, the node stopped taking work
    fired: dict[str, datetime] = field(default_factory=dict)  # fingerprint -> startsAt of the alerts Alertmanager fires
    history: tuple[Episode, ...] = ()  # gpuhealth.io/history: its past hardware episodes (repeat offenders)
    last_sweep: datetime | None = None  # gpuhealth.io/last-sweep: when its last idle-node sweep started
    gpus: int = 8
    dra: bool = False  # its GPUs are published by a DRA driver and DeviceTaintRule is served (scenario fleet.dra)
    quarantined: tuple[str, ...] = ()  # its DRA devices under gpuhealth's device taints (GPU scope)
    quarantine_started: float | None = None  # when, in this outage, a GPU quarantine first held its GPU alone
    burn_in: bool = False  # a new node with the burn-in startup taint: out of work until gpuhealth takes it off

    @property
    def name(self) -> str:
        return f"{self.pool}-{self.slot:05d}" + (f"-r{self.generation}" if self.generation else "")

    @property
    def kubelet_ready(self) -> bool:
        """The Node's Ready condition: not while it reboots, nor while a fault has the host down (a reboot does not
        bring a dead host back)."""
        return self.ready and not (self.fault is not None and self.fault.cause.host_down)

    @property
    def takes_work(self) -> bool:
        """Nothing keeps the whole node out (a fault no one has seen yet does not): its GPUs, but any quarantined
        one, are in service."""
        return self._free_to_work and not self.burn_in

    @property
    def _free_to_work(self) -> bool:
        return (not self.unschedulable and not self.our_taint and self.ready and not self.replacing
                and not self.excluded_by_job)

    @property
    def schedulable(self) -> bool:
        """What the scheduler sees for the simulation's jobs, which take whole nodes: the node takes work and all
        its GPUs are free of device taints."""
        return self.takes_work and not self.quarantined

    @property
    def in_service(self) -> bool:
        """Counted available: schedulable, and not broken."""
        return self.schedulable and (self.fault is None or not self.fault.cause.node_fault)

    @property
    def sound_in_burn_in(self) -> bool:
        """A sound new node that only its burn-in keeps out of work: it never was in service, so that time is not
        out of service (gpuhealth/simulator/burn_in.py counts it apart). A faulty one is out, as it would be without
        burn-in."""
        return (self.burn_in and self._free_to_work and not self.quarantined
                and (self.fault is None or not self.fault.cause.node_fault))

    def next_generation(self) -> None:
        """The slot's node is swapped for a new one: a new name, nothing recorded, nothing running, no fault."""
        self.generation += 1
        self.state = EMPTY
        self.unschedulable = self.our_taint = self.replacing = self.awaiting_spare = self.excluded_by_job = False
        self.burn_in = False
        self.ready = True
        self.pods = []
        self.job_status = None
        self.diagnosis = None
        self.evidence_status = None
        self.fault = None
        self.quarantined = ()
        self.quarantine_started = None
        self.noise = None
        self.noise_cause = ""
        self.fired = {}
        self.history = ()
        self.last_sweep = None
        self.version += 1

    def view(self, policy: Policy, now: datetime | None = None) -> NodeView:
        """The node as a pass reads it; `now`: its GPU pods too where an idle-node sweep could take it (as
        decide/views.py build_views looks them up)."""
        st = self.state
        view = NodeView(
            name=self.name, pool=self.pool, unschedulable=self.unschedulable,
            labels={policy.pools.label: self.pool, **{label: self.switch for label in policy.correlation.labels[:1]}},
            our_taint=self.our_taint, state=st, hold=None, excluded=False, ready=self.kubelet_ready,
            boot_id=f"boot-{self.slot}-{self.generation}-{self.boot}", resource_version=str(self.version),
            evictable=list(self.pods), pods_known=True,
            job_status=self.job_status if st.job and st.rung_status == RungStatus.RUNNING else None,
            diagnosis=self.diagnosis if st.diagnostic.job and st.diagnostic.result is None else None,
            evidence_status=self.evidence_status if st.evidence_run.job and st.evidence_run.outcome is None else None,
            history=self.history, last_sweep=self.last_sweep, burn_in=self.burn_in, gpus_advertised=self.ready)
        if self.dra:
            self._publish_gpus(view, policy)
        if now is not None and sweep_candidate(view, policy, now):
            view.gpu_work = [p for p in self.pods if p.uses_gpu]
        return view

    def _publish_gpus(self, view: NodeView, policy: Policy) -> None:
        """Its GPUs as NVIDIA's DRA driver publishes them (a pool named after the node, a device gpu-<index> per
        GPU), the claims of its GPU pods (a job holds every GPU of the node), and DeviceTaintRule served (v1)."""
        driver = policy.dra.driver
        names = [f"gpu-{i}" for i in range(self.gpus)]
        view.devices = NodeDevices(driver, self.name, tuple(
            Device(n, f"GPU-{self.slot}-{self.generation}-{i}", "gpu", index=i) for i, n in enumerate(names)))
        holders = tuple(f"{p.namespace}/{p.name}" for p in self.pods if p.uses_gpu)
        view.claims = ClaimIndex({(driver, self.name, n): holders for n in names} if holders else {})
        view.taint_api = "v1"

    def idle(self) -> bool:
        """Nothing recorded and no job on it: what an idle-node sweep may look at."""
        return self.schedulable and self.workload is None and not self.pods and not self.state.active


@dataclass
class Outage:
    slot: int
    pool: str
    start: float
    end: float
    cause: str
    rung: str  # the highest rung reached ("" none: detected by no rule, or fixed before any action)
    partial_s: float = 0.0  # of it, the time a GPU-scoped fault had taken only its GPU (the node still took work)
    quarantined_s: float = 0.0  # of that, the time a DRA quarantine held the GPU alone (GPU scope kept the rest)


class Availability:
    """Node- and GPU-seconds out of service, by cause and rung."""

    def __init__(self, gpus_per_node: int) -> None:
        self.gpus_per_node = gpus_per_node
        self.outages: list[Outage] = []
        self.out: set[int] = set()  # slots out of service now
        self.closed_s = 0.0  # node-seconds of the outages that ended

    def update(self, node: SimNode, now: float) -> None:
        """Open or close the node's outage after a change."""
        if node.state.rung:
            node.out_rung = max(node.out_rung, rung_index(node.state.rung))
        up = node.in_service or node.sound_in_burn_in
        if not up and node.out_since is None:
            node.out_since = now
            node.out_cause = node.fault.cause.name if node.fault else (node.noise_cause or "remediation")
            node.out_scope = node.fault.cause.scope if node.fault else ("gpu" if node.quarantined else "node")
            node.out_rung = rung_index(node.state.rung) if node.state.active else -1
            node.left_schedulable = None
            self.out.add(node.slot)
        elif up and node.out_since is not None:
            self.close(node, now)
        if node.out_since is not None and node.left_schedulable is None and not node.takes_work:
            node.left_schedulable = now
        if node.out_since is not None and node.quarantined and node.quarantine_started is None \
                and node.left_schedulable is None:
            node.quarantine_started = now

    def close(self, node: SimNode, now: float) -> None:
        if node.out_since is None:
            return
        rung = RUNGS[node.out_rung] if node.out_rung >= 0 else ""
        partial = quarantined = 0.0
        if node.out_scope == "gpu":
            took = node.left_schedulable if node.left_schedulable is not None else now
            partial = took - node.out_since
            if node.quarantine_started is not None:
                quarantined = max(0.0, took - node.quarantine_started)
        self.outages.append(Outage(node.slot, node.pool, node.out_since, now, node.out_cause, rung, partial,
                                   quarantined))
        node.quarantine_started = None
        self.closed_s += now - node.out_since
        self.out.discard(node.slot)
        node.out_since = None
        node.out_rung = -1
        node.noise_cause = ""


class Fleet:
    """The nodes by slot (a slot keeps its place when its node is replaced), their names and pools, which of them
    carry something gpuhealth recorded (the nodes a pass reads), and their time out of service."""

    def __init__(self, pools: tuple[tuple[str, int], ...], gpus_per_node: int, nodes_per_switch: int = 16,
                 dra: bool = False) -> None:
        self.nodes: list[SimNode] = []
        self.pool_sizes: dict[str, int] = {}
        for pool, count in pools:
            for _ in range(count):
                slot = len(self.nodes)
                self.nodes.append(SimNode(slot=slot, pool=pool, switch=f"switch-{slot // nodes_per_switch}",
                                          gpus=gpus_per_node, dra=dra))
            self.pool_sizes[pool] = self.pool_sizes.get(pool, 0) + count
        self.pool_of = [n.pool for n in self.nodes]
        self.by_name = {n.name: n.slot for n in self.nodes}
        self.avail = Availability(gpus_per_node)
        self.tracked: set[int] = set()

    def live(self, slot: int, generation: int) -> SimNode | None:
        """The slot's node if it is still the one an event was scheduled for (not replaced since)."""
        node = self.nodes[slot]
        return node if node.generation == generation else None

    def renew(self, node: SimNode) -> None:
        """The node is replaced: the new one answers to its own name and carries nothing yet."""
        self.by_name.pop(node.name, None)
        node.next_generation()
        self.by_name[node.name] = node.slot
        self.tracked.discard(node.slot)

    def tracked_nodes(self) -> list[SimNode]:
        return [self.nodes[s] for s in sorted(self.tracked)]

    def sweep_candidates(self, policy: Policy, now: datetime) -> list[SimNode]:
        """The untracked idle nodes due for an idle-node sweep (policy sweep), for a pass to decide on too."""
        if not policy.sweep.enabled:
            return []
        return [n for n in self.nodes if n.slot not in self.tracked and n.idle()
                and sweep_due(n.view(policy), policy, now)]

    def untrack_settled(self, hour_ago: datetime) -> None:
        """Nodes with nothing under way, nothing recorded and no action in the last hour leave the passes."""
        for slot in list(self.tracked):
            n = self.nodes[slot]
            st = n.state
            if not (st.active or st.alerts or n.our_taint or n.unschedulable or n.quarantined or n.burn_in
                    or st.actions_since(hour_ago)):
                self.tracked.discard(slot)
