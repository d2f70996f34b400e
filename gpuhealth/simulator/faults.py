"""The fault trace, and the node generations it runs on.

Every random draw that shapes the trace comes from a per-node stream seeded by (seed, slot, generation), drawn in
the same order whatever the policy does, so two policies see the same trace (`gpuhealth-sim diff`). Faults that
arrive while a node is out of service are dropped: by memorylessness, the faults a node meets in service stay a
Poisson process of its rate, and availability is an alternating renewal process (1 / (1 + r_f MTTR) for a fixed
repair time). A fault ends when a rung fixes it, when its external cause clears, or when a person repairs or
replaces the node after `manual_repair`.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable

from gpuhealth.remediator.decide.validation import held_for_a_person, released
from gpuhealth.remediator.decide.vocabulary import Rung
from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.alerts import Alerting
from gpuhealth.simulator.detection import Pipeline
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.failure_data import Cause
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.jobs.scheduler import JobScheduler
from gpuhealth.simulator.noise import Noise, seen_by
from gpuhealth.simulator.passes import PassSchedule
from gpuhealth.simulator.remediation import to_datetime
from gpuhealth.simulator.scenario import Scenario

SWITCH_CAUSE = "Network switch (correlated)"
# rules/recording/jobs.yaml: gpuhealth_workload_node_suspect_workloads >= 3 over workloads.node_suspect_window (1 h)
WORKLOADS_ALERT = "WorkloadsFailingOnNode"
WORKLOADS_FAILING = 3
WORKLOADS_WINDOW_S = 3600.0


def choose(rng: random.Random, weights: tuple[tuple[str, float], ...]) -> str:
    total = sum(w for _, w in weights)
    x = rng.random() * total
    for name, w in weights:
        x -= w
        if x < 0:
            return name
    return weights[-1][0] if weights else ""


class FaultSource:
    def __init__(self, queue: EventQueue, scenario: Scenario, pipeline: Pipeline, fleet: Fleet, alerts: Alerting,
                 jobs: JobScheduler, passes: PassSchedule, seed: int) -> None:
        self._queue, self._sc, self._pipe, self._fleet = queue, scenario, pipeline, fleet
        self._alerts, self._jobs, self._passes, self._seed = alerts, jobs, passes, seed
        self.counts: Counter[str] = Counter()  # cause -> faults that hit a node in service
        self._streams: dict[tuple[int, int], random.Random] = {}
        self._ids = 0
        self._kept_lemons: dict[int, tuple[bool, float]] = {}  # failures.lemon.kept: slot -> (lemon, multiplier)
        self._reported: set[int] = set()  # faults no rule sees that a failed job has reported to people
        self._failures: dict[int, list[float]] = {}  # fault -> when jobs failed on it (the classifier's count)
        self.classifier = False  # the policy's workloads.enabled
        self.quiet_after = Policy().episode.quiet_timeout  # the policy's, which a person's release reads (engine)
        self.releases = 0  # nodes a person handed back with `gpuhealth-remediator release`
        self._rate = scenario.rate_per_node_second
        self.replacer: Callable[[SimNode], None] | None = None  # the cluster's swap (SimCluster sets it)
        # the cluster's replacement, provisioning included (SimCluster.provision sets it): what a repairer asks for
        self.provisioner: Callable[[SimNode, random.Random], None] | None = None
        self.noise = Noise(queue, scenario, fleet, alerts, seed)
        self.arrived_faulty = 0  # new nodes that came with a fault
        self._mix = tuple((c, w) for c, w in scenario.mix if w > 0)
        self._switch_cause = Cause(SWITCH_CAUSE, scenario.switches.alert, "node", "hang", "external",
                                   (("external", 1.0),), scenario.switches.repair_s)

    def start(self) -> None:
        for node in self._fleet.nodes:
            self._draw_generation(node)
        self._schedule_switches()
        self.noise.start()

    # --- node generations -------------------------------------------------------------------
    def _stream(self, node: SimNode) -> random.Random:
        key = (node.slot, node.generation)
        rng = self._streams.get(key)
        if rng is None:
            rng = self._streams[key] = random.Random(f"{self._seed}/node/{node.slot}/{node.generation}")
        return rng

    def replace_now(self, node: SimNode) -> None:
        """The node is to be swapped for a new one: the cluster's replacement (a spare of its pool, then the new
        node's arrival: gpuhealth/simulator/cluster.py), set by SimCluster."""
        assert self.replacer is not None, "SimCluster sets FaultSource.replacer"
        self.replacer(node)

    def provision(self, node: SimNode, rng: random.Random) -> None:
        """A repairer replaces the node: the new node is provisioned, or the provisioning fails, at the odds and in
        the time of the replace rung (SimCluster.provision, the one definition every repairer uses)."""
        assert self.provisioner is not None, "SimCluster sets FaultSource.provisioner"
        self.provisioner(node, rng)

    def renew(self, node: SimNode, outside: Fault | None = None) -> None:
        """The slot's node is swapped for a new one (its job's pod ends), which draws its own rate and faults; a
        fault fixed outside the node (`outside`) stays with the slot."""
        if node.workload is not None:
            self._jobs.evicted(node)
        self._streams.pop((node.slot, node.generation), None)
        self._fleet.renew(node)
        if outside is not None:
            self.carry_over(node, outside)
        self._draw_generation(node)
        self._passes.request(self._queue.now)

    def arrival_stream(self, node: SimNode) -> random.Random:
        """The new node's own draws at its arrival (is it bad, and with what), apart from its fault stream."""
        return random.Random(f"{self._seed}/arrival/{node.slot}/{node.generation}")

    def arrives_faulty(self, node: SimNode, rng: random.Random) -> None:
        """The new node came with a fault: a hardware cause of the scenario's mix, there from its first minute."""
        hardware = tuple((c, w) for c, w in self._mix if self._sc.causes[c].kind == "hardware")
        if not hardware:
            return
        cause = self._sc.causes[choose(rng, hardware)]
        self._ids += 1
        seed = rng.getrandbits(48)
        fault = Fault(self._ids, cause, self._queue.now, choose(rng, cause.fixed_by) if cause.fixed_by else "",
                      rng.randrange(self._sc.gpus_per_node), seed, seen_by(cause, seed))
        self.arrived_faulty += 1
        self._strike(node, fault)

    def carry_over(self, node: SimNode, fault: Fault) -> None:
        """A fault fixed outside the node (a cable, a switch, host maintenance) stays with the slot: the new node
        meets it until its outside fix, as the old one would have."""
        cause = fault.cause
        ends = fault.started + (cause.external_repair_s or 0.0)
        if ends <= self._queue.now:
            return
        self._ids += 1
        # it keeps its own start: the outside repair ends when it would have, however often the slot's node is swapped
        carried = Fault(self._ids, cause, fault.started, fault.fix, fault.gpu, fault.seed + 7, fault.alert,
                        switch=fault.switch)
        node.fault = carried
        self._jobs.node_changed(node)
        if carried.alert is not None:
            self._alerts.fault_seen(node, carried)
        else:
            self._unseen(node, carried)
        self._queue.at(ends, self._clears, node.slot, node.generation, carried)

    def _draw_generation(self, node: SimNode) -> None:
        rng = self._stream(node)
        lemon = self._sc.lemon
        node.lemon = rng.random() < lemon.fraction
        mult = rng.uniform(*lemon.multiplier) if node.lemon else 1.0
        if lemon.kept:  # the slot's first node decides: a replacement is the same lemon, repaired and returned
            node.lemon, mult = self._kept_lemons.setdefault(node.slot, (node.lemon, mult))
        # lemons are drawn on top of the fleet's rate: the fleet's mean rate stays the scenario's
        base = self._rate / (1.0 + lemon.fraction * (sum(lemon.multiplier) / 2 - 1.0))
        node.rate = base * mult
        self._next_fault(node)
        self._jobs.node_changed(node)

    def _next_fault(self, node: SimNode) -> None:
        if node.rate <= 0 or not self._mix:
            return
        rng = self._stream(node)
        gap = rng.expovariate(node.rate)
        cause = self._sc.causes[choose(rng, self._mix)]
        fix = choose(rng, cause.fixed_by) if cause.fixed_by else ""
        gpu = rng.randrange(self._sc.gpus_per_node)
        seed = rng.getrandbits(48)
        self._ids += 1
        now = self._queue.now
        # a rate counted from health-check hits (failures.counted_by: health_checks) holds only faults that were seen:
        # its faults are not thinned again by the alert's coverage
        fault = Fault(self._ids, cause, now + gap, fix, gpu, seed,
                      cause.alert if self._sc.rate_seen else seen_by(cause, seed))
        self._queue.at(now + gap, self._arrives, node.slot, node.generation, fault)

    # --- correlated switch failures ---------------------------------------------------------
    def _schedule_switches(self) -> None:
        sw = self._sc.switches
        if sw.rate_per_1000_days <= 0:
            return
        count = math.ceil(len(self._fleet.nodes) / sw.nodes_per_switch)
        rate = sw.rate_per_1000_days / 1000.0 / 86400.0
        for i in range(count):
            rng = random.Random(f"{self._seed}/switch/{i}")
            t = rng.expovariate(rate)
            while t < self._queue.end:
                self._queue.at(t, self._switch_fails, i, rng.getrandbits(48))
                t += sw.repair_s + rng.expovariate(rate)

    def _switch_fails(self, switch: int, seed: int) -> None:
        k = self._sc.switches.nodes_per_switch
        nodes = self._fleet.nodes
        for slot in range(switch * k, min(len(nodes), (switch + 1) * k)):
            node = nodes[slot]
            if not node.in_service:
                continue
            self._ids += 1
            fault = Fault(self._ids, self._switch_cause, self._queue.now, "external", 0, seed + slot,
                          seen_by(self._switch_cause, seed + slot), switch=switch)
            self._strike(node, fault)

    # --- a fault's life ---------------------------------------------------------------------
    def _arrives(self, slot: int, generation: int, fault: Fault) -> None:
        node = self._fleet.live(slot, generation)
        if node is None:
            return
        self._next_fault(node)
        if not node.in_service:
            return  # a node out of service runs nothing: the fault does not happen (memoryless: same process)
        self._strike(node, fault)

    def _strike(self, node: SimNode, fault: Fault) -> None:
        cause = fault.cause
        self.counts[cause.name] += 1
        if cause.node_fault:
            node.fault = fault
            self._jobs.node_changed(node)
            self._schedule_ends(node, fault)
        if node.workload is not None:
            self._jobs.hit(node, fault)

    def _schedule_ends(self, node: SimNode, fault: Fault) -> None:
        """Its alert (or the jobs that fail on the node, when no rule sees it), its own end, a person's repair."""
        now, at, cause = self._queue.now, self._queue.at, fault.cause
        if fault.alert is not None:
            self._alerts.fault_seen(node, fault)
            self.noise.flaps(node, fault)
        else:
            self._unseen(node, fault)
        if cause.kind == "external" and cause.external_repair_s is not None:
            at(now + cause.external_repair_s, self._clears, node.slot, node.generation, fault)
        at(now + self._sc.manual_repair_s, self._manual, node.slot, node.generation, fault)

    def job_failed_on(self, node: SimNode, fault: Fault) -> None:
        """A job failed on the node. A fault no rule sees is found by people through the jobs that fail on it:
        `detection.found_by_people` after the first, they keep the node out until it is repaired. With the
        workload classifier on (`workloads.enabled`), WORKLOADS_ALERT fires once WORKLOADS_FAILING jobs failed on
        the node within WORKLOADS_WINDOW_S (rules/recording/jobs.yaml), through the rules' timings and the
        remediator's own decision (a cordon)."""
        if fault.alert is not None or node.fault is not fault:
            return
        if self.classifier and WORKLOADS_ALERT in self._pipe.alerts:
            now = self._queue.now
            times = [t for t in self._failures.get(fault.fid, []) if t > now - WORKLOADS_WINDOW_S] + [now]
            self._failures[fault.fid] = times
            if len(times) >= WORKLOADS_FAILING:
                fault.alert = WORKLOADS_ALERT  # the signal the failed jobs make: the node's alert from here on
                self._alerts.fault_seen(node, fault)
        if fault.fid in self._reported:
            return
        self._reported.add(fault.fid)
        self._queue.at(self._queue.now + self._sc.found_by_people_s, self._found_by_job, node.slot, node.generation,
                       fault)
    def _unseen(self, node: SimNode, fault: Fault) -> None:
        """A fault no rule sees: found by people through the jobs that fail on it (job_failed_on); in the model
        checks (--detection-delay), after that fixed delay."""
        if self._pipe.detection_delay_s is not None:
            self._queue.at(self._queue.now + self._pipe.detection_delay_s, self._found_by_job, node.slot,
                           node.generation, fault)


    def _found_by_job(self, slot: int, generation: int, fault: Fault) -> None:
        """No rule sees it: the node is found through the jobs that failed on it and kept out until a person
        repairs it."""
        node = self._fleet.live(slot, generation)
        if node is not None and node.fault is fault:
            node.excluded_by_job = True
            self._jobs.node_changed(node)

    def _clears(self, slot: int, generation: int, fault: Fault) -> None:
        node = self._fleet.live(slot, generation)
        if node is not None and node.fault is fault:
            self.clear(node, fault)

    def clear(self, node: SimNode, fault: Fault) -> None:
        """The fault is gone (fixed by a rung, cleared on its own, repaired): its alert resolves."""
        fault.cleared = self._queue.now
        node.fault = None
        node.excluded_by_job = False
        self._alerts.fault_cleared(node, fault)
        self._jobs.node_changed(node)

    def _manual(self, slot: int, generation: int, fault: Fault) -> None:
        """A person takes what gpuhealth could not fix by then: a node that does not come back (or whose
        replacement stopped) is swapped for a new one; a fault still there is repaired in place (its alerts
        resolve and the remediator returns the node). A node gpuhealth holds for a person whatever its alerts do (a
        failed validation, an episode gone quiet) is handed back as in production: the person runs
        `gpuhealth-remediator release` (decide/validation.py released, the command's own state)."""
        node = self._fleet.live(slot, generation)
        if node is None or node.replacing:
            return
        if not node.ready or node.state.rung == Rung.REPLACE:
            self.replace_now(node)
        elif node.fault is fault:
            if held_for_a_person(node.state):
                node.state = released(node.state, to_datetime(self._queue.now), self.quiet_after)
                node.version += 1
                self.releases += 1
            self.clear(node, fault)
