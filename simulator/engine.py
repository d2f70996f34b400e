"""The discrete-event simulation: faults -> signals -> alerts -> the remediator's passes -> the cluster.

Time is seconds from simulator.remediation.EPOCH. Events sit in one heap. Every random draw that shapes the
fault trace comes from a per-node stream seeded by (seed, slot, generation), drawn in the same order whatever
the policy does, so two policies see the same trace (`gpuhealth-sim diff`). Faults that arrive while a node is
out of service are dropped: by memorylessness, the faults a node meets in service stay a Poisson process of
its rate, and availability is an alternating renewal process (1 / (1 + r_f MTTR) for a fixed repair time).

The remediator runs as serve does: a pass right after a webhook is recorded (serve wakes on a write), and
otherwise `--interval` after the last pass when something is due (a Job finished, a pod terminated, a
timeout, the healthy delay). Passes with nothing due are skipped: they would decide nothing.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from remediator.decide.decision import NodePlan
from remediator.decide.nodestate import AlertRecord, record_alerts, time_text
from remediator.decide.views import PodRef
from remediator.decide.vocabulary import Deferral
from remediator.policy import Policy
from simulator.detection import Pipeline
from simulator.failure_data import Cause
from simulator.fleet import EMPTY, Availability, Fault, SimNode
from simulator.remediation import Remediator, to_datetime
from simulator.scenario import Scenario
from simulator.workload import FreeNodes, JobTally, SmallJob, TrainingJob

HOUR = 3600.0
SWITCH_CAUSE = "Network switch (correlated)"


@dataclass
class Sample:
    t: float
    out_by_rung: dict[str, int]
    disrupted: dict[str, int]
    disrupted_limit: dict[str, int]
    breaker_open: dict[str, bool]
    availability: float  # node availability so far
    job_success: float | None  # small jobs so far


@dataclass
class RunResult:
    seed: int
    scenario: str
    days: float
    nodes: int
    node_seconds: float
    out_node_seconds: float
    out_gpu_seconds: float
    gpus_per_node: int
    ettr: dict[str, float]
    interruptions: dict[str, dict[str, int]]  # training job -> cause -> count
    faults: dict[str, int]  # cause -> faults that hit a node in service
    out_hours_by_cause: dict[str, float]
    out_hours_by_rung: dict[str, float]
    outages: int
    mean_outage_h: float
    jobs: JobTally
    deferred: dict[str, int]  # kind -> deferrals (per node and pass)
    breaker_trips: int
    breaker_open_hours: dict[str, float]
    max_disrupted: dict[str, int]
    passes: int
    decisions: dict[str, int]  # action/decision -> count
    samples: list[Sample] = field(default_factory=list)

    @property
    def node_availability(self) -> float:
        return 1.0 - self.out_node_seconds / self.node_seconds

    @property
    def gpu_availability(self) -> float:
        return 1.0 - self.out_gpu_seconds / (self.node_seconds * self.gpus_per_node)


def _choose(rng: random.Random, weights: tuple[tuple[str, float], ...]) -> str:
    total = sum(w for _, w in weights)
    x = rng.random() * total
    for name, w in weights:
        x -= w
        if x < 0:
            return name
    return weights[-1][0] if weights else ""


class Simulation:
    def __init__(self, scenario: Scenario, policy: Policy, pipeline: Pipeline, seed: int,
                 samples: bool = False) -> None:
        self.sc, self.policy, self.pipe, self.seed = scenario, policy, pipeline, seed
        self.keep_samples = samples
        self.now = 0.0
        self.end = scenario.duration_s
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.nodes: list[SimNode] = []
        pool_sizes: dict[str, int] = {}
        for pool, count in scenario.pools:
            for _ in range(count):
                self.nodes.append(SimNode(slot=len(self.nodes), pool=pool))
            pool_sizes[pool] = pool_sizes.get(pool, 0) + count
        self.pool_of = [n.pool for n in self.nodes]
        self.by_name = {n.name: n.slot for n in self.nodes}
        self.remediator = Remediator(policy, pool_sizes)
        self.avail = Availability(scenario.gpus_per_node)
        self.tracked: set[int] = set()
        self.free = FreeNodes()
        self.last_pass = -math.inf
        self.pass_at: float | None = None
        self.pass_token = 0
        self.passes = 0
        self.fault_ids = 0
        self.rate = scenario.rate_per_node_second
        self.mix = tuple((c, w) for c, w in scenario.mix if w > 0)
        self.faults: Counter[str] = Counter()
        self.deferred: Counter[str] = Counter()
        self.decisions: Counter[str] = Counter()
        self.max_disrupted: dict[str, int] = dict.fromkeys(pool_sizes, 0)
        self.breaker_open_s: dict[str, float] = dict.fromkeys(pool_sizes, 0.0)
        self.samples: list[Sample] = []
        self._streams: dict[tuple[int, int], random.Random] = {}
        self.place_rng = random.Random(f"{seed}/placement")
        self.training: list[TrainingJob] = []
        self.small_jobs: dict[int, SmallJob] = {}
        self.small_waiting: list[SmallJob] = []
        self.tally = JobTally()
        self._small_ids = 0
        self._freeing = self._free_again = False
        self._last_budget: tuple[float, dict[str, int], dict[str, int], dict[str, bool]] | None = None
        self.switch_cause = Cause(SWITCH_CAUSE, scenario.switches.alert, "node", "hang", "external",
                                  (("external", 1.0),), scenario.switches.repair_s)

    # --- the event queue ---------------------------------------------------------------------
    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, fn, args))

    def run(self) -> RunResult:
        for node in self.nodes:
            self._new_generation(node, first=True)
        self._schedule_switches()
        self._start_jobs()
        if self.keep_samples:
            self.at(0.0, self._sample)
        q = self._queue
        while q:
            t, _, fn, args = heapq.heappop(q)
            if t > self.end:
                break
            self.now = t
            fn(*args)
        self.now = self.end
        return self._result()

    # --- node generations and the fault trace ------------------------------------------------
    def _stream(self, node: SimNode) -> random.Random:
        key = (node.slot, node.generation)
        rng = self._streams.get(key)
        if rng is None:
            rng = self._streams[key] = random.Random(f"{self.seed}/node/{node.slot}/{node.generation}")
        return rng

    def _new_generation(self, node: SimNode, first: bool = False) -> None:
        if not first:
            self._streams.pop((node.slot, node.generation), None)
            self.by_name.pop(node.name, None)
            node.generation += 1
            self.by_name[node.name] = node.slot
            node.state = EMPTY
            node.unschedulable = node.our_taint = node.replacing = node.excluded_by_job = False
            node.ready = True
            node.pods = []
            node.job_status = None
            node.fault = None
            node.fired = {}
            node.version += 1
            self.tracked.discard(node.slot)
        rng = self._stream(node)
        lemon = self.sc.lemon
        node.lemon = rng.random() < lemon.fraction
        mult = rng.uniform(*lemon.multiplier) if node.lemon else 1.0
        # lemons are drawn on top of the fleet's rate: the fleet's mean rate stays the scenario's
        base = self.rate / (1.0 + lemon.fraction * (sum(lemon.multiplier) / 2 - 1.0))
        node.rate = base * mult
        self._next_fault(node)
        self._node_changed(node)

    def _next_fault(self, node: SimNode) -> None:
        if node.rate <= 0 or not self.mix:
            return
        rng = self._stream(node)
        gap = rng.expovariate(node.rate)
        cause = self.sc.causes[_choose(rng, self.mix)]
        fix = _choose(rng, cause.fixed_by) if cause.fixed_by else ""
        gpu = rng.randrange(self.sc.gpus_per_node)
        seed = rng.getrandbits(48)
        self.fault_ids += 1
        fault = Fault(self.fault_ids, cause, self.now + gap, fix, gpu, seed, cause.alert)
        self.at(self.now + gap, self._fault, node.slot, node.generation, fault)

    def _schedule_switches(self) -> None:
        sw = self.sc.switches
        if sw.rate_per_1000_days <= 0:
            return
        count = math.ceil(len(self.nodes) / sw.nodes_per_switch)
        rate = sw.rate_per_1000_days / 1000.0 / 86400.0
        for i in range(count):
            rng = random.Random(f"{self.seed}/switch/{i}")
            t = rng.expovariate(rate)
            while t < self.end:
                self.at(t, self._switch_fails, i, rng.getrandbits(48))
                t += sw.repair_s + rng.expovariate(rate)

    def _switch_fails(self, switch: int, seed: int) -> None:
        k = self.sc.switches.nodes_per_switch
        for slot in range(switch * k, min(len(self.nodes), (switch + 1) * k)):
            node = self.nodes[slot]
            if not node.in_service:
                continue
            self.fault_ids += 1
            fault = Fault(self.fault_ids, self.switch_cause, self.now, "external", 0, seed + slot,
                          self.switch_cause.alert, switch=switch)
            self._strike(node, fault)

    # --- faults ------------------------------------------------------------------------------
    def _fault(self, slot: int, generation: int, fault: Fault) -> None:
        node = self.nodes[slot]
        if node.generation != generation:
            return
        self._next_fault(node)
        if not node.in_service:
            return  # a node out of service runs nothing: the fault does not happen (memoryless: same process)
        self._strike(node, fault)

    def _strike(self, node: SimNode, fault: Fault) -> None:
        cause = fault.cause
        self.faults[cause.name] += 1
        rng = random.Random(fault.seed)
        if cause.node_fault:
            node.fault = fault
            self._node_changed(node)
            override = self.pipe.detection_delay_s
            if fault.alert is not None:
                rule = self.pipe.alerts[fault.alert]
                delay = self.pipe.fire_delay(rule, rng, group_open=bool(node.fired))
                self.at(self.now + delay, self._fire, node.slot, node.generation, fault)
            else:
                found = override if override is not None else self.sc.job_timeout_s
                self.at(self.now + found, self._found_by_job, node.slot, node.generation, fault)
            if cause.kind == "external" and cause.external_repair_s is not None:
                self.at(self.now + cause.external_repair_s, self._clear_fault, node.slot, node.generation, fault)
            self.at(self.now + self.sc.manual_repair_s, self._manual, node.slot, node.generation, fault)
        if node.workload is not None:
            self._job_hit(node, fault)

    def _found_by_job(self, slot: int, generation: int, fault: Fault) -> None:
        """No rule sees it: the node is found by the jobs that fail on it and kept out until a person repairs it."""
        node = self.nodes[slot]
        if node.generation == generation and node.fault is fault:
            node.excluded_by_job = True
            self._node_changed(node)

    def _clear_fault(self, slot: int, generation: int, fault: Fault) -> None:
        node = self.nodes[slot]
        if node.generation != generation or node.fault is not fault:
            return
        fault.cleared = self.now
        node.fault = None
        node.excluded_by_job = False
        rule = self.pipe.alerts.get(fault.alert) if fault.alert else None
        if rule is not None:
            fp = self._fingerprint(fault)
            if fp in node.fired:
                delay = self.pipe.resolve_delay(rule, random.Random(fault.seed + 1))
                self.at(self.now + delay, self._resolve, slot, generation, fp, node.fired[fp])
        self._node_changed(node)

    def _manual(self, slot: int, generation: int, fault: Fault) -> None:
        """A person takes what gpuhealth could not fix by then: a node that does not come back (or whose
        replacement stopped) is swapped for a new one; a fault still there is repaired in place (its alerts
        resolve and the remediator returns the node)."""
        node = self.nodes[slot]
        if node.generation != generation or node.replacing:
            return
        if not node.ready or node.state.rung == "replace":
            self._replace_now(node)
        elif node.fault is fault:
            self._clear_fault(slot, generation, fault)

    # --- alerts, as Alertmanager delivers them ------------------------------------------------
    def _fingerprint(self, fault: Fault) -> str:
        gpu = f"/{fault.gpu}" if fault.cause.scope == "gpu" else ""
        return f"{fault.alert}{gpu}"

    def _record(self, node: SimNode, fp: str, record: AlertRecord) -> None:
        node.state = record_alerts(node.state, [(fp, record)], to_datetime(self.now))
        node.version += 1
        self.tracked.add(node.slot)

    def _fire(self, slot: int, generation: int, fault: Fault) -> None:
        node = self.nodes[slot]
        if node.generation != generation or node.fault is not fault:
            return
        assert fault.alert is not None
        rule = self.pipe.alerts[fault.alert]
        fp = self._fingerprint(fault)
        starts = to_datetime(self.now)
        node.fired[fp] = starts
        self._record(node, fp, self._alert(rule.name, rule.remediation, fault, starts))
        self.at(self.now + self.pipe.route(rule).repeat_interval_s, self._repeat, slot, generation, fp, starts, fault)
        self.request_pass(self.now, wake=True)

    def _alert(self, name: str, remediation: str, fault: Fault, starts: datetime,
               resolved: bool = False) -> AlertRecord:
        gpu = str(fault.gpu) if fault.cause.scope == "gpu" else None
        now = to_datetime(self.now)
        return AlertRecord(name=name, remediation=remediation, status="resolved" if resolved else "firing",
                           starts_at=starts, last_seen=now, ends_at=now if resolved else None, gpu=gpu)

    def _repeat(self, slot: int, generation: int, fp: str, starts: datetime, fault: Fault) -> None:
        node = self.nodes[slot]
        if node.generation != generation or node.fired.get(fp) != starts:
            return
        rule = self.pipe.alerts[fault.alert or ""]
        self._record(node, fp, self._alert(rule.name, rule.remediation, fault, starts))
        self.at(self.now + self.pipe.route(rule).repeat_interval_s, self._repeat, slot, generation, fp, starts, fault)
        # serve would wake for this write too; a repeat moves only last_seen, which decides nothing before
        # episode.quiet_timeout, so the pass is left to the next thing that is due (it reads this last_seen)

    def _resolve(self, slot: int, generation: int, fp: str, starts: datetime) -> None:
        node = self.nodes[slot]
        if node.generation != generation or node.fired.get(fp) != starts:
            return
        del node.fired[fp]
        old = node.state.alerts.get(fp)
        if old is None:
            return
        now = to_datetime(self.now)
        record = AlertRecord(name=old.name, remediation=old.remediation, status="resolved", starts_at=starts,
                             last_seen=now, ends_at=now, gpu=old.gpu)
        self._record(node, fp, record)
        self.request_pass(self.now, wake=True)

    # --- the remediator's passes ---------------------------------------------------------------
    def request_pass(self, t: float, wake: bool = False) -> None:
        """A pass at t (a webhook wakes serve at once), or at the first tick of serve's interval from t."""
        interval = self.pipe.pass_interval_s
        if not wake and self.last_pass > -math.inf:
            t = self.last_pass + math.ceil((t - self.last_pass) / interval - 1e-9) * interval
        if self.pass_at is not None and self.pass_at <= t:
            return
        self.pass_token += 1
        self.pass_at = t
        self.at(t, self._pass, self.pass_token)

    def _pass(self, token: int) -> None:
        if token != self.pass_token:
            return
        self.pass_at = None
        self.last_pass = self.now
        self.passes += 1
        nodes = [self.nodes[s] for s in sorted(self.tracked)]
        ledger, plans = self.remediator.decide(nodes, self.now)
        rate_capped = False
        for plan in sorted(plans, key=lambda p: not any(d.action == "cordon" for d in p.decisions)):
            for d in plan.decisions:
                self.decisions[f"{d.action}:{d.decision}"] += 1
                if d.deferral is not None:  # held back by the budget (typed by decide/budget.py)
                    self.deferred[d.deferral.value] += 1
                    rate_capped = rate_capped or d.deferral == Deferral.RATE_CAP
            self._execute(plan)
        self._account_budget(ledger)
        hour_ago = to_datetime(self.now - HOUR)
        for slot in list(self.tracked):
            n = self.nodes[slot]
            st = n.state
            if not (st.active or st.alerts or n.our_taint or n.unschedulable or st.actions_since(hour_ago)):
                self.tracked.discard(slot)
        wake = self.remediator.next_wake((self.nodes[s] for s in self.tracked), self.now, rate_capped)
        if wake is not None:
            self.request_pass(wake)

    def _account_budget(self, ledger: Any) -> None:
        disrupted = {p: len(u.disrupted) for p, u in ledger.pools.items()}
        limits = {p: ledger.disrupted_limit(p) for p in ledger.pools}
        open_ = {p: ledger.breaker_open(p) for p in ledger.pools}
        if self._last_budget is not None:
            t0, _, _, was_open = self._last_budget
            for p, is_open in was_open.items():
                if is_open:
                    self.breaker_open_s[p] = self.breaker_open_s.get(p, 0.0) + self.now - t0
        for p, n in disrupted.items():
            self.max_disrupted[p] = max(self.max_disrupted.get(p, 0), n)
        self._last_budget = (self.now, disrupted, limits, open_)

    def _execute(self, plan: NodePlan) -> None:
        slot = self.by_name.get(plan.node)
        if slot is None:
            return
        node = self.nodes[slot]
        executes = plan.executes()
        if not executes and not plan.changed:
            return
        node.state = plan.final_state
        node.version += 1
        for d in executes:
            if d.action == "cordon":
                node.our_taint = True
                if plan.final_state.cordoned:
                    node.unschedulable = True
                self._excluded(node)
            elif d.action == "drain":
                self._drain(node)
            elif d.action == "reset_gpu":
                model = self.sc.rungs["reset_gpu"]
                ok = self._rung_rng(node, "reset_gpu").random() < model.success
                node.job_status = "running"
                self.at(self.now + model.duration_s, self._reset_done, slot, node.generation, plan.final_state.job,
                        ok)
            elif d.action == "reboot":
                model = self.sc.rungs["reboot"]
                ok = self._rung_rng(node, "reboot").random() < model.success
                node.job_status = "running"
                node.ready = False
                self._excluded(node)
                self.at(self.now + model.duration_s, self._reboot_done, slot, node.generation, ok)
            elif d.action == "replace":
                model = self.sc.rungs["replace"]
                node.replacing = True
                if self._rung_rng(node, "replace").random() < model.success:
                    self.at(self.now + model.duration_s, self._replaced, slot, node.generation)
                else:  # times out in the ladder; a person swaps it later
                    self.at(self.now + self.sc.manual_repair_s, self._replaced, slot, node.generation)
            elif d.action == "uncordon":
                node.our_taint = False
                if plan.base_state.cordoned:
                    node.unschedulable = False
        self._node_changed(node)

    def _rung_rng(self, node: SimNode, rung: str) -> random.Random:
        seed = node.fault.seed if node.fault is not None else node.slot
        return random.Random(f"{seed}/{rung}/{time_text(node.state.episode)}/{len(node.state.actions)}")

    def _drain(self, node: SimNode) -> None:
        if node.workload is not None:
            self._evicted(node)
        node.pods = [PodRef(p.namespace, p.name, p.uses_gpu, terminating=True) for p in node.pods]
        self.at(self.now + self.sc.rungs["drain"].duration_s, self._pods_gone, node.slot, node.generation)

    def _pods_gone(self, slot: int, generation: int) -> None:
        node = self.nodes[slot]
        if node.generation != generation:
            return
        node.pods = [p for p in node.pods if not p.terminating]
        self.request_pass(self.now)

    def _reset_done(self, slot: int, generation: int, job: str | None, ok: bool) -> None:
        node = self.nodes[slot]
        if node.generation != generation or node.state.job != job:
            return
        node.job_status = "succeeded" if ok else "failed"
        if ok and node.fault is not None and node.fault.fix == "reset_gpu":
            self._clear_fault(slot, generation, node.fault)
        self.request_pass(self.now)

    def _reboot_done(self, slot: int, generation: int, ok: bool) -> None:
        node = self.nodes[slot]
        if node.generation != generation:
            return
        if ok:
            node.boot += 1
            node.ready = True
            node.job_status = None
            if node.fault is not None and node.fault.fix in ("reset_gpu", "reboot"):
                self._clear_fault(slot, generation, node.fault)
            self._node_changed(node)
        self.request_pass(self.now)

    def _replaced(self, slot: int, generation: int) -> None:
        node = self.nodes[slot]
        if node.generation == generation and node.replacing:
            self._replace_now(node)

    def _replace_now(self, node: SimNode) -> None:
        if node.workload is not None:
            self._evicted(node)
        self._new_generation(node)
        self.request_pass(self.now)

    def _node_changed(self, node: SimNode) -> None:
        self.avail.update(node, self.now)
        if node.schedulable and node.workload is None:
            if node.slot not in self.free:
                self.free.add(node.slot)
                self._nodes_freed()
        else:
            self.free.discard(node.slot)

    # --- training jobs -------------------------------------------------------------------------
    def _start_jobs(self) -> None:
        for i, spec in enumerate(self.sc.training):
            job = TrainingJob(spec=spec, jid=f"{spec.name}-{i}", started=0.0)
            self.training.append(job)
            self._try_place_training(job, first=True)
        small = self.sc.small
        if small is not None:
            allowed = {small.pool} if small.pool else None
            eligible = sum(1 for n in self.nodes if allowed is None or n.pool in allowed)
            held = sum(len(j.nodes) for j in self.training)
            streams = int(small.utilization * max(0, eligible - held) / small.nodes)
            for s in range(streams):
                self._submit_small(s)

    def _pools(self, pool: str | None) -> set[str] | None:
        return {pool} if pool else None

    def _take(self, slots: list[int], owner: str) -> None:
        for s in slots:
            node = self.nodes[s]
            node.workload = owner
            node.pods = [PodRef("jobs", f"{owner}-{s}", True)]
            self.free.discard(s)

    def _release(self, node: SimNode) -> None:
        node.workload = None
        node.pods = [p for p in node.pods if p.terminating]
        self._node_changed(node)

    def _try_place_training(self, job: TrainingJob, first: bool = False) -> None:
        need = job.spec.nodes - len(job.nodes)
        allowed = self._pools(job.spec.pool)
        picked = self.free.pick(self.place_rng, need, allowed, self.pool_of) if need > 0 else []
        if picked is None and need <= self._free_count(allowed) + self._small_held(allowed):
            # training comes first: small jobs give their nodes back (they are retried)
            self._preempt_small(need - self._free_count(allowed), allowed)
            picked = self.free.pick(self.place_rng, need, allowed, self.pool_of)
        if picked is None:
            job.state = "waiting"
            return
        self._take(picked, job.jid)
        job.nodes.update(picked)
        job.token += 1
        if first:
            job.state, job.run_since = "running", self.now
            self._schedule_finish(job)
        else:
            job.state = "restarting"
            self.at(self.now + job.spec.restart_overhead_s, self._training_runs, job, job.token)
        for s in picked:  # landed on a node whose fault no one has seen yet
            fault = self.nodes[s].fault
            if fault is not None and fault.cause.node_fault:
                self._job_hit(self.nodes[s], fault)

    def _free_count(self, allowed: set[str] | None) -> int:
        if allowed is None:
            return len(self.free)
        return sum(1 for s in self.free._items if self.pool_of[s] in allowed)

    def _small_held(self, allowed: set[str] | None) -> int:
        return sum(1 for j in self.small_jobs.values() for s in j.nodes
                   if (allowed is None or self.pool_of[s] in allowed) and self.nodes[s].schedulable)

    def _training_runs(self, job: TrainingJob, token: int) -> None:
        if token != job.token:
            return
        job.state, job.run_since = "running", self.now
        self._schedule_finish(job)

    def _schedule_finish(self, job: TrainingJob) -> None:
        left = job.time_to_finish()
        if left is not None:
            self.at(self.now + left, self._training_done, job, job.token)

    def _training_done(self, job: TrainingJob, token: int) -> None:
        if token != job.token or job.state != "running":
            return
        job.commit(self.now)
        job.state, job.ended = "done", self.now
        for s in list(job.nodes):
            self._release(self.nodes[s])
        job.nodes.clear()

    def _job_hit(self, node: SimNode, fault: Fault) -> None:
        owner = node.workload
        job = next((j for j in self.training if j.jid == owner), None)
        if job is None:
            self._small_hit(node, fault)
            return
        if node.slot in job.failed:
            return
        job.commit(self.now)
        job.state = "recovering"
        job.token += 1
        job.interruptions[fault.cause.name] += 1
        job.failed[node.slot] = "detecting"
        override = self.pipe.detection_delay_s
        knows = override if override is not None else (0.0 if fault.cause.job == "crash" else self.sc.job_timeout_s)
        self.at(self.now + knows, self._training_knows, job, node.slot, node.generation, fault)

    def _training_knows(self, job: TrainingJob, slot: int, generation: int, fault: Fault) -> None:
        if job.failed.get(slot) != "detecting":
            return
        node = self.nodes[slot]
        rule = self.pipe.alerts.get(fault.alert) if fault.alert else None
        if node.generation != generation or node.workload != job.jid:
            job.failed[slot] = "released"
        elif not fault.cause.node_fault:
            job.failed[slot] = "keep"  # the node is fine: the job restarts where it was
        elif not node.schedulable:
            self._drop_node(job, node)
        elif rule is not None and rule.remediation != "none" and self.pipe.detection_delay_s is None:
            job.failed[slot] = "waiting"  # for gpuhealth to cordon it; the job gives up waiting after a while
            self.at(self.now + self.sc.exclude_after_s, self._training_excludes, job, slot, generation)
            return
        else:
            node.excluded_by_job = node.fault is fault
            self._drop_node(job, node)
        self._maybe_restart(job)

    def _training_excludes(self, job: TrainingJob, slot: int, generation: int) -> None:
        node = self.nodes[slot]
        if job.failed.get(slot) == "waiting" and node.generation == generation:
            node.excluded_by_job = node.fault is not None
            self._drop_node(job, node)
            self._maybe_restart(job)

    def _drop_node(self, job: TrainingJob, node: SimNode) -> None:
        job.failed[node.slot] = "released"
        job.nodes.discard(node.slot)
        if node.workload == job.jid:
            self._release(node)

    def _excluded(self, node: SimNode) -> None:
        """gpuhealth took the node out of scheduling: a job waiting for that can go on without it."""
        job = next((j for j in self.training if j.jid == node.workload), None)
        if job is not None and job.failed.get(node.slot) == "waiting":
            self._drop_node(job, node)
            self._maybe_restart(job)
        else:
            self._node_changed(node)

    def _evicted(self, node: SimNode) -> None:
        """A drain (or a replacement) ends the job's pod on the node."""
        owner = node.workload
        job = next((j for j in self.training if j.jid == owner), None)
        if job is None:
            self._small_evicted(node)
            return
        state = job.failed.get(node.slot)
        if state is None and node.fault is not None:
            self._job_hit(node, node.fault)
        elif state is None:
            job.commit(self.now)
            job.state = "recovering"
            job.token += 1
            job.interruptions["drain"] += 1
        self._drop_node(job, node)
        self._maybe_restart(job)

    def _maybe_restart(self, job: TrainingJob) -> None:
        if job.state == "done" or any(v in ("detecting", "waiting") for v in job.failed.values()):
            return
        job.failed.clear()
        self._try_place_training(job)

    def _nodes_freed(self) -> None:
        """Nodes came free: jobs waiting for nodes are placed (once at a time: placing frees and takes nodes)."""
        if self._freeing:
            self._free_again = True
            return
        self._freeing = True
        try:
            again = True
            while again:
                self._free_again = False
                for job in self.training:
                    if job.state == "waiting" and not job.failed:
                        self._try_place_training(job)
                if self.small_waiting and self.free:
                    waiting, self.small_waiting = self.small_waiting, []
                    for j in waiting:
                        self._start_small(j)
                again = self._free_again and bool(self.free)
        finally:
            self._freeing = False

    # --- small jobs ----------------------------------------------------------------------------
    def _submit_small(self, stream: int) -> None:
        spec = self.sc.small
        assert spec is not None
        self._small_ids += 1
        rng = random.Random(f"{self.seed}/small/{stream}/{self._small_ids}")
        job = SmallJob(spec, self._small_ids, stream, rng, rng.expovariate(1.0 / spec.duration_s),
                       rng.random() < spec.app_bug_fraction)
        self.small_jobs[job.jid] = job
        self.tally.submitted += 1
        self._start_small(job)

    def _start_small(self, job: SmallJob) -> None:
        if self.now >= self.end:
            return
        picked = self.free.pick(self.place_rng, job.spec.nodes, self._pools(job.spec.pool), self.pool_of)
        if picked is None:
            self.small_waiting.append(job)
            return
        owner = f"small-{job.jid}"
        self._take(picked, owner)
        job.nodes = picked
        job.attempts += 1
        job.token += 1
        job.hung = False
        self.tally.attempts += 1
        fails = job.rng.expovariate(1.0 / job.spec.app_failure_mean_s) if job.buggy else math.inf
        if fails < job.duration:
            self.at(self.now + fails, self._small_app_fails, job, job.token)
        else:
            self.at(self.now + job.duration, self._small_done, job, job.token)
        for s in picked:
            fault = self.nodes[s].fault
            if fault is not None and fault.cause.node_fault:
                self._small_hit(self.nodes[s], fault)
                break

    def _small_of(self, node: SimNode) -> SmallJob | None:
        owner = node.workload
        if owner is None or not owner.startswith("small-"):
            return None
        return self.small_jobs.get(int(owner[6:]))

    def _small_leave(self, job: SmallJob) -> None:
        job.token += 1
        for s in job.nodes:
            node = self.nodes[s]
            if node.workload == f"small-{job.jid}":
                self._release(node)
        job.nodes = []

    def _small_end(self, job: SmallJob, outcome: str) -> None:
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
        del self.small_jobs[job.jid]
        self._submit_small(job.stream)

    def _small_done(self, job: SmallJob, token: int) -> None:
        if token != job.token:
            return
        self._small_leave(job)
        self._small_end(job, "completed")

    def _small_app_fails(self, job: SmallJob, token: int) -> None:
        if token != job.token:
            return
        self._small_leave(job)
        job.app_failures += 1
        if job.app_failures >= self.policy.workloads.restart_loop_threshold:
            self._small_end(job, "app")  # the restart-loop guard stops it
        else:
            self.at(self.now + job.spec.restart_overhead_s, self._start_small, job)

    def _small_hit(self, node: SimNode, fault: Fault) -> None:
        job = self._small_of(node)
        if job is None or job.hung:
            return
        if fault.cause.kind == "application":
            return  # small jobs' own bugs are drawn per job (app_bug_fraction)
        if fault.cause.job == "hang":
            job.hung = True
            self.at(self.now + self.sc.job_timeout_s, self._small_infra_fails, job, job.token)
        else:
            self._small_infra_fails(job, job.token)

    def _small_evicted(self, node: SimNode) -> None:
        job = self._small_of(node)
        if job is not None:
            self._small_infra_fails(job, job.token, evicted=True)

    def _small_infra_fails(self, job: SmallJob, token: int, evicted: bool = False) -> None:
        if token != job.token or job.jid not in self.small_jobs:
            return
        self._small_leave(job)
        self.tally.attempts_by_platform += 1
        # an eviction carries the DisruptionTarget condition: never misread as the application's
        if not evicted and job.rng.random() < job.spec.misclassification:
            self._small_end(job, "platform")
            return
        job.infra_retries += 1
        if job.infra_retries > job.spec.max_retries:
            self._small_end(job, "platform")
            return
        self.at(self.now + job.spec.restart_overhead_s, self._start_small, job)

    def _preempt_small(self, count: int, allowed: set[str] | None) -> None:
        if count <= 0:
            return
        victims = [j for j in self.small_jobs.values() if j.nodes and (
            allowed is None or all(self.pool_of[s] in allowed for s in j.nodes))]
        for job in victims[:count]:
            if all(self.nodes[s].schedulable for s in job.nodes):
                self.tally.preempted += 1
                self.tally.attempts_by_platform += 1
                self._small_leave(job)
                self.small_waiting.append(job)

    # --- sampling and the result ---------------------------------------------------------------
    def _sample(self) -> None:
        out: dict[str, int] = defaultdict(int)
        for slot in self.avail.out:
            n = self.nodes[slot]
            if not n.in_service:
                rung = n.state.rung if n.state.active and n.state.rung else (
                    "replace" if n.replacing else "detecting")
                out[rung] += 1
        budget = self._last_budget
        elapsed = self.now * len(self.nodes)
        down = self.avail.closed_s + sum(self.now - (self.nodes[s].out_since or self.now) for s in self.avail.out)
        t = self.tally
        self.samples.append(Sample(
            self.now, dict(out), dict(budget[1]) if budget else {}, dict(budget[2]) if budget else {},
            dict(budget[3]) if budget else {}, 1.0 - down / elapsed if elapsed else 1.0,
            t.completed_sound / t.sound_ended if t.sound_ended else None))
        self.at(self.now + self.sc.sample_interval_s, self._sample)

    def _result(self) -> RunResult:
        for n in self.nodes:
            self.avail.close(n, self.end)
        if self._last_budget is not None:
            t0, _, _, was_open = self._last_budget
            for p, is_open in was_open.items():
                if is_open:
                    self.breaker_open_s[p] += self.end - t0
        gpn = self.sc.gpus_per_node
        by_cause: dict[str, float] = defaultdict(float)
        by_rung: dict[str, float] = defaultdict(float)
        out_s = out_gpu = 0.0
        for o in self.avail.outages:
            d = o.end - o.start
            out_s += d
            out_gpu += d * gpn - o.partial_s * (gpn - 1)
            by_cause[o.cause] += d / HOUR
            by_rung[o.rung or "none"] += d / HOUR
        for job in self.training:
            job.commit(self.end)
        outages = self.avail.outages
        return RunResult(
            seed=self.seed, scenario=self.sc.name, days=self.sc.days, nodes=len(self.nodes),
            node_seconds=len(self.nodes) * self.end, out_node_seconds=out_s, out_gpu_seconds=out_gpu,
            gpus_per_node=gpn, ettr={j.jid: j.ettr(self.end) for j in self.training},
            interruptions={j.jid: dict(j.interruptions) for j in self.training}, faults=dict(self.faults),
            out_hours_by_cause=dict(by_cause), out_hours_by_rung=dict(by_rung), outages=len(outages),
            mean_outage_h=(out_s / len(outages) / HOUR) if outages else 0.0, jobs=self.tally,
            deferred=dict(self.deferred), breaker_trips=self.remediator.trips,
            breaker_open_hours={p: s / HOUR for p, s in self.breaker_open_s.items()},
            max_disrupted=self.max_disrupted, passes=self.passes, decisions=dict(self.decisions),
            samples=self.samples)

