"""Synchronous training jobs on the fleet. A fault on one of a job's nodes stops the whole job (the work since its last
checkpoint is lost); the job learns of it at once (a crash) or by its own timeout (a hang). A job without its own
fault tolerance (`resume: false`) has then failed. One that resumes waits until the failed node is out of its way:
gpuhealth takes it out of scheduling, or the job gives up waiting (`exclude_after`), or, for a fault no rule acts on,
the job localises it (`localize`); the job's exclusion is its own (other jobs may still land on the node and fail)
and lasts while the fault is there (a repaired or replaced node is the job's again). It then restarts on spare
healthy nodes, paying the restart overhead. Causes other than the infrastructure (`jobs.other_failure_rate`) end
attempts too and leave the nodes as they are."""

from __future__ import annotations

import random
from collections.abc import Callable

from gpuhealth.remediator.decide.vocabulary import Remediation
from gpuhealth.simulator.detection import Pipeline
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.jobs.outcomes import Outcomes
from gpuhealth.simulator.jobs.placement import Placement, pools
from gpuhealth.simulator.jobs.small import SmallJobs
from gpuhealth.simulator.scenario import Scenario
from gpuhealth.simulator.scenario_parts import DAY, TrainingJobSpec
from gpuhealth.simulator.workload import TrainingJob

# TrainingJob.failed: what the job knows of each node that failed under it
DETECTING = "detecting"  # not yet: it learns after a crash's moment or its timeout
WAITING = "waiting"  # for gpuhealth to take the node out of scheduling
RELEASED = "released"  # the job let the node go
KEEP = "keep"  # the node is fine (the job's own failure): the job restarts on it
LOCALIZING = "localizing"  # a fault no rule acts on: the job is finding which node it was
OTHER = "Other causes (not infrastructure)"


class TrainingJobs:
    def __init__(self, queue: EventQueue, fleet: Fleet, placement: Placement, small: SmallJobs, scenario: Scenario,
                 pipeline: Pipeline, outcomes: Outcomes, seed: int = 0) -> None:
        self._queue, self._fleet, self._placement, self._small = queue, fleet, placement, small
        self._sc, self._pipe, self._seed = scenario, pipeline, seed
        self.outcomes = outcomes
        self.jobs: list[TrainingJob] = []  # every job (those ended too)
        self._active: dict[str, TrainingJob] = {}
        self._rngs: dict[str, random.Random] = {}
        self._excluded_for: dict[str, dict[int, Fault]] = {}  # job -> node it excluded -> the fault it excluded it for
        self._other_rate = scenario.other_failure_rate / 1000.0 / DAY  # per node-second of a running job
        self.on_failed: Callable[[SimNode, Fault], None] = lambda node, fault: None  # a job failed on a node

    def start(self) -> None:
        for i, spec in enumerate(self._sc.training):
            self._submit(spec, f"{spec.name}-{i}", first=True)

    def _submit(self, spec: TrainingJobSpec, jid: str, first: bool = False) -> None:
        job = TrainingJob(spec=spec, jid=jid, started=self._queue.now)
        self.jobs.append(job)
        self._active[jid] = job
        self._rngs[jid] = random.Random(f"{self._seed}/training/{jid}")
        self._try_place(job, first=first)

    def place_waiting(self) -> None:
        """Nodes came free: jobs waiting for nodes (and not for a failed node) try again."""
        for job in list(self._active.values()):
            if job.state == "waiting" and not job.failed:
                self._try_place(job)

    def _owning(self, node: SimNode) -> TrainingJob | None:
        return self._active.get(node.workload) if node.workload is not None else None

    def _gpus(self, job: TrainingJob) -> int:
        return job.spec.nodes * self._sc.gpus_per_node

    def _attempt_ends(self, job: TrainingJob, how: str) -> None:
        """The running attempt ended: `infra`, `other`, `evicted` or `done` (its running time counts)."""
        t = self.outcomes.of(self._gpus(job))
        t.run_s += self._queue.now - job.attempt_since
        if how == "infra":
            t.attempts_failed_infra += 1
        elif how == "other":
            t.attempts_failed_other += 1
        elif how == "evicted":
            t.attempts_evicted += 1

    def _end(self, job: TrainingJob, outcome: str) -> None:
        """The job ends: completed, failed by the platform, or failed by another cause; its nodes are let go."""
        now = self._queue.now
        job.state, job.ended, job.outcome = "done", now, outcome
        job.token += 1
        t = self.outcomes.of(self._gpus(job))
        t.jobs_ended += 1
        t.jobs_completed += outcome == "completed"
        t.jobs_failed_platform += outcome == "platform"
        t.jobs_failed_other += outcome == "other"
        job.failed.clear()
        for s in list(job.nodes):
            node = self._fleet.nodes[s]
            if node.workload == job.jid:
                self._placement.release(node)
        job.nodes.clear()
        del self._active[job.jid]
        self._excluded_for.pop(job.jid, None)
        if job.spec.repeat and now < self._queue.end:
            self._submit(job.spec, f"{job.jid.split('.')[0]}.{len(self.jobs)}")

    def close(self, end: float) -> None:
        """The run ends: the running attempts' time counts (censored: no failure)."""
        for job in self._active.values():
            if job.state in ("running", "restarting"):
                self.outcomes.of(self._gpus(job)).run_s += end - job.attempt_since

    # --- placement and runs -----------------------------------------------------------------
    def _lapse_exclusions(self, job: TrainingJob) -> None:
        """A job keeps a node off while the fault it excluded the node for is there: repaired (or its slot's node
        replaced), the node is one the job may use again, as people return a repaired node to the job's pool."""
        why, nodes = self._excluded_for.get(job.jid, {}), self._fleet.nodes
        for slot in [s for s in job.excluded if nodes[s].fault is not why.get(s)]:
            job.excluded.discard(slot)
            why.pop(slot, None)

    def _try_place(self, job: TrainingJob, first: bool = False) -> None:
        self._lapse_exclusions(job)
        placement = self._placement
        need = job.spec.nodes - len(job.nodes)
        allowed = pools(job.spec.pool)
        picked = placement.pick(need, allowed, job.excluded) if need > 0 else []
        if picked is None and need <= placement.free_count(allowed, job.excluded) + self._small.held(allowed,
                                                                                                  job.excluded):
            # training comes first: small jobs give their nodes back (they are retried); while they do, the nodes
            # they free do not place this job again (it would take nodes twice). Only nodes the job may use count,
            # and only their small jobs are preempted: else they would be preempted for nothing, restart on the
            # nodes they freed, and preempted again at the same instant, without end (a livelock)
            state, job.state = job.state, "placing"
            self._small.preempt(need - placement.free_count(allowed, job.excluded), allowed, job.excluded)
            job.state = state
            picked = placement.pick(need, allowed, job.excluded)
        if picked is None:
            job.state = "waiting"
            return
        placement.take(picked, job.jid)
        job.nodes.update(picked)
        job.token += 1
        now = self._queue.now
        job.attempt_since = now
        self.outcomes.of(self._gpus(job)).attempts += 1
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
        if self._other_rate > 0:
            gap = self._rngs[job.jid].expovariate(self._other_rate * job.spec.nodes)
            self._queue.at(self._queue.now + gap, self._other_fails, job, job.token)

    def _done(self, job: TrainingJob, token: int) -> None:
        if token != job.token or job.state != "running":
            return
        job.commit(self._queue.now)
        self._attempt_ends(job, "done")
        self._end(job, "completed")

    def _other_fails(self, job: TrainingJob, token: int) -> None:
        """A failure that is not the infrastructure's (the job's code, data, an NCCL timeout of its own): the
        attempt ends, the nodes are fine."""
        if token != job.token or job.state != "running":
            return
        job.commit(self._queue.now)
        job.interruptions[OTHER] += 1
        self._attempt_ends(job, "other")
        if not job.spec.resume:
            self._end(job, "other")
            return
        job.state = "recovering"
        job.token += 1
        self._try_place(job)

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
        if job.state == "running":
            job.commit(now)
        if job.state in ("running", "restarting"):
            self._attempt_ends(job, "infra" if fault.cause.node_fault else "other")
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
        live = node.generation == generation and node.workload == job.jid
        if live and fault.cause.node_fault:
            self.on_failed(node, fault)
        if not job.spec.resume:  # no fault tolerance of its own: the job has failed
            self._end(job, "platform" if fault.cause.node_fault else "other")
            return
        rule = self._pipe.alerts.get(fault.alert) if fault.alert else None
        if not live:
            job.failed[slot] = RELEASED
        elif not fault.cause.node_fault:
            job.failed[slot] = KEEP
        elif not node.schedulable:
            self._drop_node(job, node)
        elif self._pipe.detection_delay_s is not None:  # model checks: the fixed delay finds and excludes it
            node.excluded_by_job = node.fault is fault
            self._drop_node(job, node)
        else:
            acts = rule is not None and rule.remediation != Remediation.NONE
            # an actionable alert: the job waits for the cordon, and gives up waiting after a while; else it
            # localises the node itself
            job.failed[slot] = WAITING if acts else LOCALIZING
            wait = self._sc.exclude_after_s if acts else job.spec.localize_s
            self._queue.at(self._queue.now + wait, self._excludes, job, slot, generation)
            return
        self._maybe_restart(job)

    def _excludes(self, job: TrainingJob, slot: int, generation: int) -> None:
        """The job gave up waiting for the cordon, or has localised the fault: it keeps the node off for itself."""
        node = self._fleet.nodes[slot]
        if job.failed.get(slot) in (WAITING, LOCALIZING) and node.generation == generation:
            if node.fault is not None:
                job.excluded.add(slot)
                self._excluded_for.setdefault(job.jid, {})[slot] = node.fault
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
            if job.state == "done":
                return
        elif state is None:
            if job.state == "running":
                job.commit(self._queue.now)
            if job.state in ("running", "restarting"):
                self._attempt_ends(job, "evicted")  # DisruptionTarget: retried, whatever the job's own tolerance
            job.state = "recovering"
            job.token += 1
            job.interruptions["drain"] += 1
        self._drop_node(job, node)
        self._maybe_restart(job)

    def _maybe_restart(self, job: TrainingJob) -> None:
        if job.state == "done" or any(v in (DETECTING, WAITING, LOCALIZING) for v in job.failed.values()):
            return
        job.failed.clear()
        self._try_place(job)
