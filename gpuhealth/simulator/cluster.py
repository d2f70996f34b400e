"""The cluster's side of a pass, as the executor does it on a real one: a NodePlan's state is written on the Node
once, then each decision it executes has its effect (cordon, drain, the reset and reboot Jobs, replacement,
uncordon). Each rung takes its time and succeeds with its scenario's odds, drawn from the fault's own stream so
that every policy meets the same outcomes; when a rung ends, a pass is due."""

from __future__ import annotations

import random
from collections.abc import Callable

from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.diagnosis import Diagnosis
from gpuhealth.remediator.decide.nodestate import time_text
from gpuhealth.remediator.decide.views import PodRef
from gpuhealth.remediator.decide.vocabulary import Action, JobStatus, Rung, TaintEffect
from gpuhealth.simulator.burn_in import BurnIns
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.faults import FaultSource
from gpuhealth.simulator.fleet import Fleet, SimNode
from gpuhealth.simulator.jobs.scheduler import JobScheduler
from gpuhealth.simulator.passes import PassSchedule
from gpuhealth.simulator.scenario import Scenario
from gpuhealth.simulator.spares import SparePool

# A diagnostic Job's run by dcgmi diag level, its pod's start included: -r 1 takes seconds, -r 2 about two minutes,
# -r 3 up to half an hour (DESIGN.md's field facts; NVIDIA's DCGM diagnostics guide), plus about a minute to start.
DIAGNOSE_SECONDS = {1: 90.0, 2: 180.0, 3: 1800.0}
# The share of faults still on a node that its diagnostic finds (judgement: dcgmi diag's plugins cover the GPU's
# memory, compute, PCIe and NVLink, not the host's CPU, memory or storage).
DIAGNOSE_COVERAGE = 0.8
# The evidence Job's run, its pod's start included: nvidia-smi -q -x and dcgmi diag -r 1 take seconds (judgement).
EVIDENCE_SECONDS = 60.0


class SimCluster:
    def __init__(self, queue: EventQueue, scenario: Scenario, fleet: Fleet, faults: FaultSource, jobs: JobScheduler,
                 passes: PassSchedule, validation_level: int = 1, diagnose_level: int = 2,
                 sweep_level: int = 3, burn_in_level: int = 1) -> None:
        self._queue, self._sc, self._fleet = queue, scenario, fleet
        self._faults, self._jobs, self._passes = faults, jobs, passes
        self.spares = SparePool(queue, scenario.replacement)
        faults.replacer = self.replace_node
        faults.provisioner = self.provision
        self._leader_levels = {"validate": validation_level, "diagnose": diagnose_level, "sweep": sweep_level,
                               "burn-in": burn_in_level}
        self.burn_ins = BurnIns()

    def apply(self, plan: NodePlan) -> None:
        """The plan's state on its Node, then the effect of each decision it executes (EFFECTS)."""
        slot = self._fleet.by_name.get(plan.node)
        if slot is None:
            return
        node = self._fleet.nodes[slot]
        executes = plan.executes()
        if not executes and not plan.changed:
            return
        node.state = plan.final_state
        if plan.history is not None:  # written with the state, as the executor does (decide/history.py)
            node.history = plan.history
        if plan.swept is not None:  # an idle-node sweep starts: gpuhealth.io/last-sweep, and the node is passes'
            node.last_sweep = plan.swept
            self._fleet.tracked.add(node.slot)
        node.version += 1
        for d in executes:
            EFFECTS[d.action](self, node, plan)
        self._jobs.node_changed(node)

    def _rung_rng(self, node: SimNode, rung: Rung) -> random.Random:
        seed = node.fault.seed if node.fault is not None else node.slot
        return random.Random(f"{seed}/{rung}/{time_text(node.state.episode)}/{len(node.state.actions)}")

    # --- the effects ------------------------------------------------------------------------
    def _cordon(self, node: SimNode, plan: NodePlan) -> None:
        node.our_taint = True
        if plan.final_state.cordoned:
            node.unschedulable = True
        self._jobs.excluded(node)

    def _uncordon(self, node: SimNode, plan: NodePlan) -> None:
        node.our_taint = False
        if plan.base_state.cordoned:
            node.unschedulable = False
        node.quarantined = ()  # a node handed over from GPU scope: its device taints go at return to service
        if node.burn_in:  # an episode during its burn-in closed: the burn-in starts afresh on serve's next pass
            self._passes.request(self._queue.now)

    def _quarantine_gpu(self, node: SimNode, plan: NodePlan) -> None:
        """GPU scope: device taints on the GPU (its DeviceTaintRule). NoSchedule keeps claims off it, so the
        simulation's whole-node jobs too, while the node's other GPUs stay in service; NoExecute has
        kube-controller-manager evict the pods that hold it (here the node's job, which holds every GPU)."""
        for d in plan.executes():
            if d.action != Action.QUARANTINE_GPU:
                continue
            node.quarantined = tuple(dict.fromkeys((*node.quarantined, *d.devices)))
            if d.effect == TaintEffect.NO_EXECUTE and any(p.uses_gpu and not p.terminating for p in node.pods):
                self._drain(node, plan)
        self._jobs.excluded(node)  # no whole-node job can use it now: out of a training job's way

    def _end_burn_in(self, node: SimNode, plan: NodePlan) -> None:
        """The burn-in taint comes off: passed (or skipped), the node enters service; failed, gpuhealth's cordon
        (executed in the same plan) keeps it out and the ladder climbs on later passes."""
        failed = any(d.action == Action.CORDON for d in plan.executes())
        self.burn_ins.end(node, self._queue.now, failed)
        self._passes.request(self._queue.now)

    def _release_gpu(self, node: SimNode, plan: NodePlan) -> None:
        node.quarantined = ()

    def _no_effect(self, node: SimNode, plan: NodePlan) -> None:
        """The operands' labels and the evidence's summary: nothing the simulation models beyond the state."""

    def _drain(self, node: SimNode, plan: NodePlan) -> None:
        if node.workload is not None:
            self._jobs.evicted(node)
        node.pods = [PodRef(p.namespace, p.name, p.uses_gpu, terminating=True) for p in node.pods]
        self._queue.at(self._queue.now + self._sc.rungs[Rung.DRAIN].duration_s, self._pods_gone, node.slot,
                       node.generation)

    def _reset_gpu(self, node: SimNode, plan: NodePlan) -> None:
        model = self._sc.rungs[Rung.RESET_GPU]
        ok = self._rung_rng(node, Rung.RESET_GPU).random() < model.success
        node.job_status = JobStatus.RUNNING
        self._queue.at(self._queue.now + model.duration_s, self._reset_done, node.slot, node.generation,
                       plan.final_state.job, ok)

    def _reboot(self, node: SimNode, plan: NodePlan) -> None:
        model = self._sc.rungs[Rung.REBOOT]
        ok = self._rung_rng(node, Rung.REBOOT).random() < model.success
        node.job_status = JobStatus.RUNNING
        node.ready = False
        self._jobs.excluded(node)
        self._queue.at(self._queue.now + model.duration_s, self._reboot_done, node.slot, node.generation, ok)

    def _replace(self, node: SimNode, plan: NodePlan) -> None:
        self.provision(node, self._rung_rng(node, Rung.REPLACE))

    def provision(self, node: SimNode, rng: random.Random) -> None:
        """A replacement of the node, whoever asks for it (gpuhealth's replace rung, Karpenter's node repair: the
        same act costs both the same). The node leaves work now (its job's pod ends); the new one is provisioned in
        `remediation.replace.duration` with `remediation.replace.success`, drawn from `rng`; a failed provisioning
        times out and a person swaps the node `remediation.manual_repair` later. Either way the swap then takes a
        spare of the pool (replace_node)."""
        model = self._sc.rungs[Rung.REPLACE]
        node.replacing = True
        if node.workload is not None:
            self._jobs.evicted(node)
        self._jobs.node_changed(node)
        ok = rng.random() < model.success
        wait = model.duration_s if ok else self._sc.manual_repair_s
        self._queue.at(self._queue.now + wait, self._replaced, node.slot, node.generation)

    def _diagnose(self, node: SimNode, plan: NodePlan) -> None:
        """The diagnostic Job: it takes its level's time (DIAGNOSE_SECONDS) and passes on a node whose fault is gone;
        one still there (a repair that did not repair) fails it with the scenario's coverage."""
        st = plan.final_state
        level = self._leader_levels.get(st.diagnostic.purpose or "", 1)
        still = node.fault is not None and node.fault.cause.node_fault
        passed = not (still and random.Random(f"{node.slot}/{st.diagnostic.job}").random() < DIAGNOSE_COVERAGE)
        node.diagnosis = None
        self._queue.at(self._queue.now + DIAGNOSE_SECONDS[level], self._diagnosed, node.slot, node.generation,
                       st.diagnostic.job, passed)

    def _collect_evidence(self, node: SimNode, plan: NodePlan) -> None:
        """The evidence Job (nvidia-smi -q -x, dcgmi diag -r 1, the kernel log) ends after EVIDENCE_SECONDS."""
        node.evidence_status = JobStatus.RUNNING
        self._queue.at(self._queue.now + EVIDENCE_SECONDS, self._evidence_done, node.slot, node.generation,
                       plan.final_state.evidence_run.job)

    # --- and their ends ---------------------------------------------------------------------
    def _evidence_done(self, slot: int, generation: int, job: str | None) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.state.evidence_run.job != job:
            return
        node.evidence_status = JobStatus.SUCCEEDED
        self._passes.request(self._queue.now)

    def _diagnosed(self, slot: int, generation: int, job: str | None, passed: bool) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.state.diagnostic.job != job:
            return
        node.diagnosis = Diagnosis(passed) if passed else Diagnosis(False, ("gpu_diag",), (), "simulated failure")
        self._passes.request(self._queue.now)

    def _pods_gone(self, slot: int, generation: int) -> None:
        node = self._fleet.live(slot, generation)
        if node is None:
            return
        node.pods = [p for p in node.pods if not p.terminating]
        self._passes.request(self._queue.now)

    def _reset_done(self, slot: int, generation: int, job: str | None, ok: bool) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.state.job != job:
            return
        node.job_status = JobStatus.SUCCEEDED if ok else JobStatus.FAILED
        if ok and node.fault is not None and node.fault.fix == Rung.RESET_GPU:
            self._faults.clear(node, node.fault)
        self._passes.request(self._queue.now)

    def _reboot_done(self, slot: int, generation: int, ok: bool) -> None:
        node = self._fleet.live(slot, generation)
        if node is None:
            return
        if ok:
            node.boot += 1
            node.ready = True
            node.job_status = None
            if node.fault is not None and node.fault.fix in (Rung.RESET_GPU, Rung.REBOOT):
                self._faults.clear(node, node.fault)
            self._jobs.node_changed(node)
        self._passes.request(self._queue.now)

    def _replaced(self, slot: int, generation: int) -> None:
        node = self._fleet.live(slot, generation)
        if node is not None and node.replacing:
            self.replace_node(node)

    # --- a node swapped for a new one -------------------------------------------------------
    def replace_node(self, node: SimNode) -> None:
        """The node goes (its job's pod ends) and a spare of its pool takes the slot: at once when one is left,
        else once a removed node is back from repair. The node is out of service all the while (`replacing`)."""
        if node.awaiting_spare:
            return
        if node.workload is not None:
            self._jobs.evicted(node)
        node.replacing = node.awaiting_spare = True
        self._jobs.node_changed(node)
        self.spares.take(node.pool, lambda: self._swap(node.slot, node.generation))

    def _swap(self, slot: int, generation: int) -> None:
        node = self._fleet.live(slot, generation)
        if node is None:
            return
        # a swap fixes what is in the node; a cable, a switch or the host's maintenance stays with the slot
        outside = node.fault if node.fault is not None and node.fault.fix == "external" else None
        self.burn_ins.gone(node, self._queue.now)
        self.spares.removed(node.pool)
        self._faults.renew(node, outside)
        self.node_arrives(node)

    def replacement_figures(self, end: float) -> dict[str, float]:
        self.spares.close(end)
        return {"spares_used": float(self.spares.used), "spare_waits": float(self.spares.waits),
                "spare_wait_hours": self.spares.wait_s / 3600.0, "new_nodes_faulty": float(self._faults.arrived_faulty),
                **self.burn_ins.figures(end)}

    def node_arrives(self, node: SimNode) -> None:
        """A new node arrives in the slot (a spare, after a replacement): it is bad with the scenario's
        fleet.new_node_faulty (its own draw, whatever the policy: a hardware fault there from its first minute).
        Without burn-in it enters service at once; with it (fleet.burn_in: the NodePool's startup taint) it waits,
        Ready and out of work, for the remediator's burn-in to end (gpuhealth/simulator/burn_in.py)."""
        if self._sc.replacement.burn_in:
            self.burn_ins.begin(node, self._queue.now)
            self._fleet.tracked.add(node.slot)
        rng = self._faults.arrival_stream(node)
        if rng.random() < self._sc.replacement.new_node_faulty and node.fault is None:
            self._faults.arrives_faulty(node, rng)
        self.burn_ins.arrived(node)
        self._jobs.node_changed(node)
        self._passes.request(self._queue.now)


# The effect on a simulated Node of each action a plan executes, as the executor's acts are one table
# (gpuhealth/remediator/act/acts.py ACTS); a test holds both to every Action a plan can carry.
EFFECTS: dict[Action, Callable[[SimCluster, SimNode, NodePlan], None]] = {
    Action.CORDON: SimCluster._cordon, Action.DRAIN: SimCluster._drain, Action.RESET_GPU: SimCluster._reset_gpu,
    Action.REBOOT: SimCluster._reboot, Action.REPLACE: SimCluster._replace, Action.UNCORDON: SimCluster._uncordon,
    Action.DIAGNOSE: SimCluster._diagnose, Action.COLLECT_EVIDENCE: SimCluster._collect_evidence,
    Action.QUARANTINE_GPU: SimCluster._quarantine_gpu, Action.RELEASE_GPU: SimCluster._release_gpu,
    Action.END_BURN_IN: SimCluster._end_burn_in, Action.STOP_GPU_CLIENTS: SimCluster._no_effect,
    Action.RESTORE_GPU_CLIENTS: SimCluster._no_effect, Action.STORE_EVIDENCE: SimCluster._no_effect}
