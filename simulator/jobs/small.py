"""Small jobs: streams of short jobs that keep the fleet's spare nodes busy. Each ends completed, failed by its own
bug (the restart-loop guard stops it), or failed by the platform (a fault or an eviction misread as the
application's, or out of retries); a stream submits its next job when one ends. Training comes first: a
training job that needs nodes preempts small jobs, which wait and are retried."""

from __future__ import annotations

import math
import random

from simulator.events import EventQueue
from simulator.fleet import Fault, Fleet, SimNode
from simulator.jobs.placement import Placement, pools
from simulator.scenario import SmallJobSpec
from simulator.workload import JobTally, SmallJob

OWNER_PREFIX = "small-"


class SmallJobs:
    def __init__(self, queue: EventQueue, fleet: Fleet, placement: Placement, spec: SmallJobSpec | None,
                 job_timeout_s: float, restart_loop_threshold: int, seed: int) -> None:
        self._queue, self._fleet, self._placement = queue, fleet, placement
        self._spec, self._seed = spec, seed
        self._job_timeout_s = job_timeout_s  # a hung job is found by its timeout
        self._restart_loop_threshold = restart_loop_threshold
        self.jobs: dict[int, SmallJob] = {}
        self.waiting: list[SmallJob] = []  # for free nodes
        self.tally = JobTally()
        self._ids = 0

    def submit(self, stream: int) -> None:
        spec = self._spec
        assert spec is not None
        self._ids += 1
        rng = random.Random(f"{self._seed}/small/{stream}/{self._ids}")
        job = SmallJob(spec, self._ids, stream, rng, rng.expovariate(1.0 / spec.duration_s),
                       rng.random() < spec.app_bug_fraction)
        self.jobs[job.jid] = job
        self.tally.submitted += 1
        self.start(job)

    def start(self, job: SmallJob) -> None:
        if self._queue.now >= self._queue.end:
            return
        picked = self._placement.pick(job.spec.nodes, pools(job.spec.pool))
        if picked is None:
            self.waiting.append(job)
            return
        self._placement.take(picked, f"{OWNER_PREFIX}{job.jid}")
        job.nodes = picked
        job.attempts += 1
        job.token += 1
        job.hung = False
        self.tally.attempts += 1
        now = self._queue.now
        fails = job.rng.expovariate(1.0 / job.spec.app_failure_mean_s) if job.buggy else math.inf
        if fails < job.duration:
            self._queue.at(now + fails, self._app_fails, job, job.token)
        else:
            self._queue.at(now + job.duration, self._done, job, job.token)
        for s in picked:  # landed on a node whose fault no one has seen yet
            fault = self._fleet.nodes[s].fault
            if fault is not None and fault.cause.node_fault:
                self.hit(self._fleet.nodes[s], fault)
                break

    def start_waiting(self) -> None:
        """Nodes came free: the jobs waiting for nodes try again."""
        if self.waiting and self._placement.free:
            waiting, self.waiting = self.waiting, []
            for j in waiting:
                self.start(j)

    def _of(self, node: SimNode) -> SmallJob | None:
        owner = node.workload
        if owner is None or not owner.startswith(OWNER_PREFIX):
            return None
        return self.jobs.get(int(owner[len(OWNER_PREFIX):]))

    def _leave(self, job: SmallJob) -> None:
        # the job holds no node from here on: a node it gives back can start a training job that preempts small jobs,
        # and one still listing its nodes would be preempted too, queued to start again while it ends
        job.token += 1
        nodes, job.nodes = job.nodes, []
        for s in nodes:
            node = self._fleet.nodes[s]
            if node.workload == f"{OWNER_PREFIX}{job.jid}":
                self._placement.release(node)

    def _end(self, job: SmallJob, outcome: str) -> None:
        t = self.tally
        t.ended += 1
        if not job.buggy:
            t.sound_ended += 1
        if outcome == "completed":
            t.completed += 1
            t.completed_sound += not job.buggy
        elif outcome == "app":
            t.failed_app += 1
        else:
            t.failed_platform += 1
        del self.jobs[job.jid]
        self.submit(job.stream)

    def _done(self, job: SmallJob, token: int) -> None:
        if token != job.token:
            return
        self._leave(job)
        self._end(job, "completed")

    def _app_fails(self, job: SmallJob, token: int) -> None:
        if token != job.token:
            return
        self._leave(job)
        job.app_failures += 1
        if job.app_failures >= self._restart_loop_threshold:
            self._end(job, "app")  # the restart-loop guard stops it
        else:
            self._queue.at(self._queue.now + job.spec.restart_overhead_s, self.start, job)

    def hit(self, node: SimNode, fault: Fault) -> None:
        """A fault on a node of a small job: a crash ends the attempt now, a hang when the job's timeout fires."""
        job = self._of(node)
        if job is None or job.hung:
            return
        if fault.cause.kind == "application":
            return  # small jobs' own bugs are drawn per job (app_bug_fraction)
        if fault.cause.job == "hang":
            job.hung = True
            self._queue.at(self._queue.now + self._job_timeout_s, self._infra_fails, job, job.token)
        else:
            self._infra_fails(job, job.token)

    def evicted(self, node: SimNode) -> None:
        job = self._of(node)
        if job is not None:
            self._infra_fails(job, job.token, evicted=True)

    def _infra_fails(self, job: SmallJob, token: int, evicted: bool = False) -> None:
        if token != job.token or job.jid not in self.jobs:
            return
        self._leave(job)
        self.tally.attempts_by_platform += 1
        # an eviction carries the DisruptionTarget condition: never misread as the application's
        if not evicted and job.rng.random() < job.spec.misclassification:
            self._end(job, "platform")
            return
        job.infra_retries += 1
        if job.infra_retries > job.spec.max_retries:
            self._end(job, "platform")
            return
        self._queue.at(self._queue.now + job.spec.restart_overhead_s, self.start, job)

    def held(self, allowed: set[str] | None) -> int:
        """Nodes small jobs hold that a training job could have (in its pools, schedulable)."""
        nodes, pool_of = self._fleet.nodes, self._fleet.pool_of
        return sum(1 for j in self.jobs.values() for s in j.nodes
                   if (allowed is None or pool_of[s] in allowed) and nodes[s].schedulable)

    def preempt(self, count: int, allowed: set[str] | None) -> None:
        """Training comes first: `count` small jobs in its pools give their nodes back and wait to be retried."""
        if count <= 0:
            return
        nodes, pool_of = self._fleet.nodes, self._fleet.pool_of
        victims = [j for j in self.jobs.values() if j.nodes and (
            allowed is None or all(pool_of[s] in allowed for s in j.nodes))]
        for job in victims[:count]:
            if all(nodes[s].schedulable for s in job.nodes):
                self.tally.preempted += 1
                self.tally.attempts_by_platform += 1
                self._leave(job)
                self.waiting.append(job)
