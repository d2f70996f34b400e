"""Synchronous training jobs on the fleet. A fault on one of a job's nodes stops the whole job (the work since its
last checkpoint is lost); the job learns of it at once (a crash) or by its own timeout (a hang), then waits
until the failed node is out of its way: gpuhealth takes it out of scheduling, or the job gives up waiting and
excludes it itself. It then restarts on spare healthy nodes, paying the restart overhead."""

from __future__ import annotations

from simulator.detection import Pipeline
from simulator.events import EventQueue
from simulator.fleet import Fault, Fleet, SimNode
from simulator.jobs.placement import Placement, pools
from simulator.jobs.small import SmallJobs
from simulator.scenario import Scenario
from simulator.workload import TrainingJob

# TrainingJob.failed: what the job knows of each node that failed under it
DETECTING = "detecting"  # not yet: it learns after a crash's moment or its timeout
WAITING = "waiting"  # for gpuhealth to take the node out of scheduling
RELEASED = "released"  # the job let the node go
KEEP = "keep"  # the node is fine (the job's own failure): the job restarts on it


class TrainingJobs:
    def __init__(self, queue: EventQueue, fleet: Fleet, placement: Placement, small: SmallJobs, scenario: Scenario,
                 pipeline: Pipeline) -> None:
        self._queue, self._fleet, self._placement, self._small = queue, fleet, placement, small
        self._sc, self._pipe = scenario, pipeline
        self.jobs: list[TrainingJob] = []

    def start(self) -> None:
        for i, spec in enumerate(self._sc.training):
            job = TrainingJob(spec=spec, jid=f"{spec.name}-{i}", started=0.0)
            self.jobs.append(job)
            self._try_place(job, first=True)

    def place_waiting(self) -> None:
        """Nodes came free: jobs waiting for nodes (and not for a failed node) try again."""
        for job in self.jobs:
            if job.state == "waiting" and not job.failed:
                self._try_place(job)

    def _owning(self, node: SimNode) -> TrainingJob | None:
        return next((j for j in self.jobs if j.jid == node.workload), None)

    # --- placement and runs -----------------------------------------------------------------
    def _try_place(self, job: TrainingJob, first: bool = False) -> None:
        placement = self._placement
        need = job.spec.nodes - len(job.nodes)
        allowed = pools(job.spec.pool)
        picked = placement.pick(need, allowed) if need > 0 else []
        if picked is None and need <= placement.free_count(allowed) + self._small.held(allowed):
            # training comes first: small jobs give their nodes back (they are retried)
            self._small.preempt(need - placement.free_count(allowed), allowed)
            picked = placement.pick(need, allowed)
        if picked is None:
            job.state = "waiting"
            return
        placement.take(picked, job.jid)
        job.nodes.update(picked)
        job.token += 1
        now = self._queue.now
        if first:
            job.state, job.run_since = "running", now
            self._schedule_finish(job)
        else:
            job.state = "restarting"
            self._queue.at(now + job.spec.restart_overhead_s, self._runs, job, job.token)
        nodes = self._fleet.nodes
        for s in picked:  # landed on a node whose fault no one has seen yet
            fault = nodes[s].fault
            if fault is not None and fault.cause.node_fault:
                self.hit(nodes[s], fault)

    def _runs(self, job: TrainingJob, token: int) -> None:
        if token != job.token:
            return
        job.state, job.run_since = "running", self._queue.now
        self._schedule_finish(job)

    def _schedule_finish(self, job: TrainingJob) -> None:
        left = job.time_to_finish()
        if left is not None:
            self._queue.at(self._queue.now + left, self._done, job, job.token)

    def _done(self, job: TrainingJob, token: int) -> None:
        if token != job.token or job.state != "running":
            return
        now = self._queue.now
        job.commit(now)
        job.state, job.ended = "done", now
        for s in list(job.nodes):
            self._placement.release(self._fleet.nodes[s])
        job.nodes.clear()

    # --- failures ---------------------------------------------------------------------------
    def hit(self, node: SimNode, fault: Fault) -> None:
        """A fault on a node that runs a job (a small job's, if no training job holds the node)."""
        job = self._owning(node)
        if job is None:
            self._small.hit(node, fault)
            return
        if node.slot in job.failed:
            return
        now = self._queue.now
        job.commit(now)
        job.state = "recovering"
        job.token += 1
        job.interruptions[fault.cause.name] += 1
        job.failed[node.slot] = DETECTING
        override = self._pipe.detection_delay_s
        knows = override if override is not None else (0.0 if fault.cause.job == "crash" else self._sc.job_timeout_s)
        self._queue.at(now + knows, self._knows, job, node.slot, node.generation, fault)

    def _knows(self, job: TrainingJob, slot: int, generation: int, fault: Fault) -> None:
        if job.failed.get(slot) != DETECTING:
            return
        node = self._fleet.nodes[slot]
        rule = self._pipe.alerts.get(fault.alert) if fault.alert else None
        if node.generation != generation or node.workload != job.jid:
            job.failed[slot] = RELEASED
        elif not fault.cause.node_fault:
            job.failed[slot] = KEEP
        elif not node.schedulable:
            self._drop_node(job, node)
        elif rule is not None and rule.remediation != "none" and self._pipe.detection_delay_s is None:
            job.failed[slot] = WAITING  # the job gives up waiting after a while
            self._queue.at(self._queue.now + self._sc.exclude_after_s, self._gives_up_waiting, job, slot, generation)
            return
        else:
            node.excluded_by_job = node.fault is fault
            self._drop_node(job, node)
        self._maybe_restart(job)

    def _gives_up_waiting(self, job: TrainingJob, slot: int, generation: int) -> None:
        node = self._fleet.nodes[slot]
        if job.failed.get(slot) == WAITING and node.generation == generation:
            node.excluded_by_job = node.fault is not None
            self._drop_node(job, node)
            self._maybe_restart(job)

    def _drop_node(self, job: TrainingJob, node: SimNode) -> None:
        job.failed[node.slot] = RELEASED
        job.nodes.discard(node.slot)
        if node.workload == job.jid:
            self._placement.release(node)

    def excluded(self, node: SimNode) -> None:
        """gpuhealth took the node out of scheduling: a job waiting for that can go on without it."""
        job = self._owning(node)
        if job is not None and job.failed.get(node.slot) == WAITING:
            self._drop_node(job, node)
            self._maybe_restart(job)
        else:
            self._placement.node_changed(node)

    def evicted(self, node: SimNode) -> None:
        """A drain (or a replacement) ends the job's pod on the node."""
        job = self._owning(node)
        if job is None:
            self._small.evicted(node)
            return
        state = job.failed.get(node.slot)
        if state is None and node.fault is not None:
            self.hit(node, node.fault)
        elif state is None:
            job.commit(self._queue.now)
            job.state = "recovering"
            job.token += 1
            job.interruptions["drain"] += 1
        self._drop_node(job, node)
        self._maybe_restart(job)

    def _maybe_restart(self, job: TrainingJob) -> None:
        if job.state == "done" or any(v in (DETECTING, WAITING) for v in job.failed.values()):
            return
        job.failed.clear()
        self._try_place(job)
