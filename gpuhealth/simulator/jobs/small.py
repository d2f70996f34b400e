"""Small jobs: streams of short jobs that keep the fleet's spare nodes busy; a stream submits its next job when one
ends. Each job is a Kubernetes Job with a retry budget (`max_retries`: its backoffLimit); an attempt ends
completed, failed by its own bug, failed by the infrastructure (a crash at once, a hang at the job's timeout), or
taken away (a drain, a replacement or a preemption: the DisruptionTarget condition, which the shipped
podFailurePolicy ignores, so it is retried without spending the budget). Every other failed attempt spends the
budget, whatever its cause: the Job controller counts a pod before any classifier has looked at it
(docs/jobs.md). The workload classifier (`workloads.enabled` in the policy) adds the restart-loop guard, which
stops a job after `restart_loop.threshold` application failures in a row (an infrastructure failure it calls the
application's, `misclassification`, counts there too). A job that failed on a node keeps off it when retried.
Training comes first: a training job that needs nodes preempts small jobs, which wait and are retried.

Aggregated (`jobs.aggregate_small`, the default): a job on healthy nodes needs no event of its own. Its attempts
and the jobs its stream runs after it on the same nodes are drawn when something happens to the nodes (a fault,
a drain, a preemption) or the run ends, from the same random draws; the per-event model gives the same figures
(tests/simulator/test_sim_small_jobs.py compares them)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.jobs.outcomes import Outcomes
from gpuhealth.simulator.jobs.placement import Placement, pools
from gpuhealth.simulator.scenario_parts import SmallJobSpec
from gpuhealth.simulator.workload import JobTally, SmallJob

OWNER_PREFIX = "small-"


class SmallJobs:
    def __init__(self, queue: EventQueue, fleet: Fleet, placement: Placement, spec: SmallJobSpec | None,
                 job_timeout_s: float, restart_loop_threshold: int, seed: int, outcomes: Outcomes | None = None,
                 classifier: bool = False, aggregate: bool = False, other_failure_rate: float = 0.0) -> None:
        self._queue, self._fleet, self._placement = queue, fleet, placement
        self._spec, self._seed = spec, seed
        self._job_timeout_s = job_timeout_s  # a hung job is found by its timeout
        self._restart_loop_threshold = restart_loop_threshold
        self._classifier = classifier
        self._aggregate = aggregate
        self.outcomes = outcomes if outcomes is not None else Outcomes()
        self.jobs: dict[int, SmallJob] = {}
        self.waiting: list[SmallJob] = []  # for free nodes
        self.tally = JobTally()
        self._size = self.outcomes.of((spec.nodes if spec else 1) * fleet.avail.gpus_per_node)
        self._streams: dict[int, random.Random] = {}
        self._ran_s, self._ran_n = 0.0, 0  # small jobs' attempts: their running time and count
        self._landing: set[int] = set()  # faults a stream is due to land on (aggregated)
        self._landing_rng = random.Random(f"{seed}/small/landing")
        # attempts begun, by the failures their job had before (aggregated: who the next start on a free node is)
        self._begun_after = [0] * ((spec.max_retries if spec else 0) + 1)
        self._other_rate = other_failure_rate / 1000.0 / 86400.0 * (spec.nodes if spec else 1)  # per second
        self._ids = 0
        # a job failed on a node: people find faults no rule sees through it
        self.on_failed: Callable[[SimNode, Fault], None] = lambda node, fault: None

    # --- jobs and attempts ------------------------------------------------------------------
    def _rng(self, stream: int) -> random.Random:
        """A stream's jobs draw from the stream's own random stream, in the order they run (the same order
        whether aggregated or not)."""
        rng = self._streams.get(stream)
        if rng is None:
            rng = self._streams[stream] = random.Random(f"{self._seed}/small/{stream}")
        return rng

    def _new(self, stream: int) -> SmallJob:
        spec = self._spec
        assert spec is not None
        self._ids += 1
        rng = self._rng(stream)
        job = SmallJob(spec, self._ids, stream, rng, rng.expovariate(1.0 / spec.duration_s),
                       rng.random() < spec.app_bug_fraction)
        self.jobs[job.jid] = job
        self.tally.submitted += 1
        return job

    def _renew(self, job: SmallJob) -> None:
        """Aggregated: the stream's next job on the same nodes, in the ended job's place (its id and nodes)."""
        spec, rng = job.spec, job.rng
        job.duration = rng.expovariate(1.0 / spec.duration_s)
        job.buggy = rng.random() < spec.app_bug_fraction
        job.attempts = job.app_failures = job.failures = job.loop_count = 0
        if job.excluded:
            job.excluded = set()
        self.tally.submitted += 1

    def submit(self, stream: int) -> None:
        self.start(self._new(stream))

    def _begin(self, job: SmallJob, at: float) -> tuple[str, float]:
        """An attempt starts at `at`: how it ends (done, app: its own bug, other: a cause that is not the
        infrastructure's, at `jobs.other_failure_rate`) and when, from the job's own draws."""
        job.attempts += 1
        job.since = at
        job.hung = False
        self._begun_after[self._failures_bin(job)] += 1
        self.tally.attempts += 1
        self._size.attempts += 1
        rng = job.rng
        fails = rng.expovariate(1.0 / job.spec.app_failure_mean_s) if job.buggy else math.inf
        other = rng.expovariate(self._other_rate) if self._other_rate > 0 else math.inf
        if other < fails and other < job.duration:
            return "other", at + other
        return ("app", at + fails) if fails < job.duration else ("done", at + job.duration)

    def start(self, job: SmallJob) -> None:
        if self._queue.now >= self._queue.end or job.jid not in self.jobs:
            return
        picked = self._placement.pick(job.spec.nodes, pools(job.spec.pool), job.excluded)
        if picked is None:
            self.waiting.append(job)
            return
        self._placement.take(picked, f"{OWNER_PREFIX}{job.jid}")
        job.nodes = picked
        job.token += 1
        how, at = self._begin(job, self._queue.now)
        job.pending = (how, at)
        if not self._aggregate:
            if how == "done":
                self._queue.at(at, self._done, job, job.token)
            else:
                self._queue.at(at, self._app_fails, job, job.token, how)
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
        self._count_end(job, outcome)
        del self.jobs[job.jid]

    def _count_end(self, job: SmallJob, outcome: str) -> None:
        t, size = self.tally, self._size
        t.ended += 1
        size.jobs_ended += 1
        if not job.buggy:
            t.sound_ended += 1
        if outcome == "completed":
            t.completed += 1
            size.jobs_completed += 1
            t.completed_sound += not job.buggy
        elif outcome == "app":
            t.failed_app += 1
            size.jobs_failed_other += 1
        else:
            t.failed_platform += 1
            size.jobs_failed_platform += 1

    # --- how an attempt ends ----------------------------------------------------------------
    def _ran(self, job: SmallJob, until: float) -> None:
        self._size.run_s += until - job.since
        self._ran_s += until - job.since
        self._ran_n += 1

    def _app_outcome(self, job: SmallJob, how: str = "app", keep: bool = False) -> bool:
        """An application failure (`how`: app, the job's own bug; other: not the infrastructure's either, which
        the classifier calls unknown): True if the job is retried (else it has failed; `keep`: counted, left in
        place for its stream's next job)."""
        end = self._count_end if keep else self._end
        job.failures += 1
        if how == "other":
            self._size.attempts_failed_other += 1
        else:
            self._size.attempts_failed_app += 1
            job.app_failures += 1
        if self._classifier and how == "app":
            job.loop_count += 1
            if job.loop_count >= self._restart_loop_threshold:
                end(job, "app")  # the restart-loop guard stops it
                return False
        if job.failures > job.spec.max_retries:
            end(job, "app")
            return False
        return True

    def _done(self, job: SmallJob, token: int) -> None:
        if token != job.token or job.hung:  # a hung attempt ends at the job's timeout, not when its work would have
            return
        self._ran(job, self._queue.now)
        self._leave(job)
        self._end(job, "completed")
        self.submit(job.stream)

    def _app_fails(self, job: SmallJob, token: int, how: str = "app") -> None:
        if token != job.token or job.hung:
            return
        self._ran(job, self._queue.now)
        self._leave(job)
        if self._app_outcome(job, how):
            self._queue.at(self._queue.now + job.spec.restart_overhead_s, self.start, job)
        else:
            self.submit(job.stream)

    # --- aggregated: a job's outcomes on healthy nodes, drawn when they are needed -------------------
    def _roll(self, job: SmallJob, now: float) -> SmallJob:
        """The stream's jobs on these nodes up to `now`: the attempts that ended by then are counted, and the job
        on the nodes at `now` is returned (its attempt may begin after `now`, after a restart overhead)."""
        if not self._aggregate or job.hung:
            return job
        end = self._queue.end
        while True:
            how, at = job.pending
            if at > now or at > end:
                return job
            self._ran(job, at)
            if how == "done":
                self._count_end(job, "completed")
            elif self._app_outcome(job, how, keep=True):
                start = at + job.spec.restart_overhead_s
                if start >= end:
                    return job
                job.pending = self._begin(job, start)
                continue
            if at >= end:
                del self.jobs[job.jid]  # ended with the run: its stream has nothing after it
                job.nodes = []
                return job
            self._renew(job)
            job.pending = self._begin(job, at)

    def bad_node_free(self, node: SimNode) -> None:
        """Aggregated: a free node with a fault no one has seen yet. Without aggregation, every job start picks a
        free node at random, and some land on it and fail; here a stream moves onto it after the time the next
        such pick takes (job starts per second / free nodes)."""
        fault = node.fault
        if not self._aggregate or self._spec is None or self._spec.nodes != 1 or fault is None:
            return
        if fault.fid in self._landing:
            return
        self._landing.add(fault.fid)
        now = self._queue.now
        mean_attempt = self._ran_s / self._ran_n if self._ran_n > 100 else self._spec.duration_s
        starts = (len(self.jobs) - len(self.waiting)) / mean_attempt
        rate = starts / max(1, len(self._placement.free))
        if rate > 0:
            self._queue.at(now + self._landing_rng.expovariate(rate), self._lands, node.slot, node.generation, fault)

    def _lands(self, slot: int, generation: int, fault: Fault) -> None:
        self._landing.discard(fault.fid)
        node = self._fleet.live(slot, generation)
        spec = self._spec
        if (node is None or node.fault is not fault or not node.schedulable or node.workload is not None
                or spec is None or (spec.pool is not None and node.pool != spec.pool) or not self.jobs):
            return
        now = self._queue.now
        job = self._landing_job(slot, now)
        if job is None:
            self.bad_node_free(node)
            return
        self._ran(job, now)  # its attempt so far; it starts again on the new node
        job.attempts -= 1
        self.tally.attempts -= 1
        self._size.attempts -= 1
        self._leave(job)
        self._placement.take([slot], f"{OWNER_PREFIX}{job.jid}")
        job.nodes = [slot]
        job.token += 1
        job.pending = self._begin(job, now)
        self.hit(node, fault)

    def _landing_job(self, slot: int, now: float) -> SmallJob | None:
        """The job whose next attempt lands on the free node, None if the landing does not happen now (a job picked
        at random is between attempts, hung, or keeps off the node: as often as per event a start is not one that
        could land). Per event the node is taken by the next start of any job, and a retry starts as often as
        retries do: a job that failed before (its own bug, another cause), its retry budget partly spent, meets the
        bad node as often as it would per event, and may fail by the platform there. So the failures the landing
        job had before are drawn as attempts begin, and one of the running jobs with that many is taken at random
        (all of them are looked at: a job with its budget nearly spent is rare among running jobs, a few in a
        thousand, where it starts as often as a first attempt does; the first pick if there is none)."""
        rng, jobs = self._landing_rng, list(self.jobs.values())
        first = self._roll(rng.choice(jobs), now)
        if not self._movable(first, slot, now):
            return None
        bins = self._begun_after
        want = rng.choices(range(len(bins)), weights=bins)[0] if any(bins) else 0
        if self._failures_bin(first) == want:
            return first
        fits = [job for job in (self._roll(j, now) for j in jobs)
                if self._failures_bin(job) == want and self._movable(job, slot, now)]
        return rng.choice(fits) if fits else first

    def _failures_bin(self, job: SmallJob) -> int:
        """The job's failures so far, as `_begun_after` counts them (the last bin: that many or more)."""
        return min(job.failures, len(self._begun_after) - 1)

    @staticmethod
    def _movable(job: SmallJob, slot: int, now: float) -> bool:
        return bool(job.nodes) and not job.hung and job.since <= now and slot not in job.excluded

    def settle(self, now: float) -> None:
        """Count what the aggregated jobs did up to `now` (the run's end)."""
        for job in list(self.jobs.values()):
            if job.nodes:
                self._roll(job, now)

    # --- what the platform does -------------------------------------------------------------
    def hit(self, node: SimNode, fault: Fault) -> None:
        """A fault on a node of a small job: a crash ends the attempt now, a hang when the job's timeout fires."""
        job = self._of(node)
        if job is None or job.hung:
            return
        if fault.cause.kind == "application":
            return  # small jobs' own bugs are drawn per job (app_bug_fraction)
        job = self._roll(job, self._queue.now)
        if job.since > self._queue.now:  # between attempts (a restart overhead): it starts elsewhere
            self._leave(job)
            self._queue.at(job.since, self.start, job)
            job.attempts -= 1
            self.tally.attempts -= 1
            self._size.attempts -= 1
            return
        if fault.cause.node_fault:
            self.on_failed(node, fault)
            job.excluded.add(node.slot)  # one node: the job's retry keeps off it
        if fault.cause.job == "hang":
            job.hung = True
            self._queue.at(self._queue.now + self._job_timeout_s, self._infra_fails, job, job.token)
        else:
            self._infra_fails(job, job.token)

    def evicted(self, node: SimNode) -> None:
        job = self._of(node)
        if job is not None:
            job = self._roll(job, self._queue.now)
            self._infra_fails(job, job.token, evicted=True)

    def _infra_fails(self, job: SmallJob, token: int, evicted: bool = False) -> None:
        if token != job.token or job.jid not in self.jobs:
            return
        now = self._queue.now
        if job.since > now:  # an eviction between attempts: nothing ran
            self._leave(job)
            self._queue.at(job.since, self.start, job)
            return
        self._ran(job, now)
        self._leave(job)
        self.tally.attempts_by_platform += 1
        size = self._size
        if evicted:  # DisruptionTarget: retried without spending the budget
            size.attempts_evicted += 1
        else:
            size.attempts_failed_infra += 1
            job.failures += 1
            misread = self._classifier and job.rng.random() < job.spec.misclassification
            job.loop_count += misread
            if (misread and job.loop_count >= self._restart_loop_threshold) or job.failures > job.spec.max_retries:
                self._end(job, "platform")
                self.submit(job.stream)
                return
        self._queue.at(now + job.spec.restart_overhead_s, self.start, job)

    def held(self, allowed: set[str] | None, exclude: set[int] | frozenset[int] = frozenset()) -> int:
        """Nodes small jobs hold that a training job could have (in its pools, schedulable, not one it excluded)."""
        nodes, pool_of = self._fleet.nodes, self._fleet.pool_of
        return sum(1 for j in self.jobs.values() for s in j.nodes
                   if (allowed is None or pool_of[s] in allowed) and nodes[s].schedulable and s not in exclude)

    def preempt(self, count: int, allowed: set[str] | None, exclude: set[int] | frozenset[int] = frozenset()) -> None:
        """Training comes first: `count` small jobs in its pools, on none of the nodes it excluded (`exclude`), give
        their nodes back and wait to be retried."""
        if count <= 0:
            return
        nodes, pool_of, now = self._fleet.nodes, self._fleet.pool_of, self._queue.now
        victims = [j for j in self.jobs.values() if j.nodes and (
            allowed is None or all(pool_of[s] in allowed for s in j.nodes)) and not any(s in exclude for s in j.nodes)]
        for job in victims[:count]:
            if job.jid not in self.jobs or not all(nodes[s].schedulable for s in job.nodes):
                continue
            job = self._roll(job, now)
            self.tally.preempted += 1
            if job.since <= now:
                self.tally.attempts_by_platform += 1
                self._ran(job, now)
                self._size.attempts_evicted += 1
            else:
                job.attempts -= 1
                self.tally.attempts -= 1
                self._size.attempts -= 1
            self._leave(job)
            self.waiting.append(job)
