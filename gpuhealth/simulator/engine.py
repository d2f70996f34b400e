"""The discrete-event simulation: faults -> signals -> alerts -> the remediator's passes -> the cluster.

`Simulation` builds the parts and runs the leader's passes; each part owns its own state and events:

- events.py: the clock and the one heap of events (time is seconds from gpuhealth.simulator.remediation.EPOCH);
- faults.py: the fault trace on per-node random streams, node generations, a person's repairs;
- noise.py: detection's coverage, false positives and flapping;
- alerts.py: alerts as Alertmanager delivers them, recorded on the Nodes as serve's receiver does;
- passes.py: when serve runs a pass (at once after a webhook, else on its interval when something is due);
- remediation.py: the pass itself, the remediator's real `evaluate` on views of the simulated Nodes;
- cluster.py: a pass's plans applied to the Nodes, and the rungs' effects and ends; replacements from the pools'
  spares (spares.py) and the new nodes' arrival;
- jobs/: the training and small jobs and the scheduler that places them;
- recording.py and results.py: what a run records, and its result.
"""

from __future__ import annotations

from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.vocabulary import Action
from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.alerts import Alerting
from gpuhealth.simulator.cluster import SimCluster
from gpuhealth.simulator.detection import Pipeline
from gpuhealth.simulator.events import HOUR, EventQueue
from gpuhealth.simulator.faults import FaultSource
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.jobs.scheduler import JobScheduler
from gpuhealth.simulator.passes import PassSchedule
from gpuhealth.simulator.peers import GPUHEALTH, KARPENTER, Karpenter, People, for_peer
from gpuhealth.simulator.recording import BudgetWatch, DecisionTally, Sampler, out_of_service
from gpuhealth.simulator.remediation import SimLeader, as_deployed, to_datetime
from gpuhealth.simulator.results import RunResult
from gpuhealth.simulator.scenario import Scenario

SWEEP_TICK_S = HOUR  # how often a pass looks for idle nodes to sweep when nothing else asks for one


def _cordons_last(plan: NodePlan) -> bool:
    """Sort key: the plans that cordon are applied first (False sorts first)."""
    return not any(d.action == Action.CORDON for d in plan.decisions)


class Simulation:
    def __init__(self, scenario: Scenario, policy: Policy, pipeline: Pipeline, seed: int,
                 samples: bool = False) -> None:
        scenario = for_peer(scenario)
        self.sc, self.seed = scenario, seed
        classifier = policy.workloads.enabled and scenario.remediation == GPUHEALTH
        self.queue = EventQueue(scenario.duration_s)
        self.fleet = Fleet(scenario.pools, scenario.gpus_per_node, scenario.switches.nodes_per_switch, scenario.dra)
        self.leader = SimLeader(as_deployed(policy), self.fleet.pool_sizes,
                                scenario.gpus_per_node if scenario.dra else 0)
        self.passes = PassSchedule(self.queue, pipeline.pass_interval_s, self._pass)
        self.jobs = JobScheduler(self.queue, self.fleet, scenario, pipeline,
                                 policy.workloads.restart_loop_threshold, seed, classifier=classifier,
                                 aggregate=scenario.aggregate_small and not samples)
        self.alerts = Alerting(self.queue, pipeline, self.fleet, self.passes, self.leader.policy)
        self.faults = FaultSource(self.queue, scenario, pipeline, self.fleet, self.alerts, self.jobs, self.passes,
                                  seed)
        self.faults.classifier = classifier
        self.faults.quiet_after = policy.episode.quiet_timeout
        self.jobs.on_failed(self._job_failed_on)
        self.cluster = SimCluster(self.queue, scenario, self.fleet, self.faults, self.jobs, self.passes,
                                  policy.diagnose.validation_level, policy.diagnose.level, policy.sweep.level,
                                  policy.burn_in.level)
        self.peer = self._peer()
        self.decisions = DecisionTally()
        self.budget = BudgetWatch(self.fleet.pool_sizes)
        self.sampler = (Sampler(self.queue, self.fleet, self.budget, self.jobs.tally, scenario.sample_interval_s)
                        if samples else None)

    def _peer(self) -> People | None:
        """Under a peer (scenario.remediation none or karpenter) no pass runs; people, or Karpenter and people,
        act on the alerts instead (gpuhealth/simulator/peers.py)."""
        mode = self.sc.remediation
        if mode == GPUHEALTH:
            return None
        peer = (Karpenter(self.queue, self.sc, self.fleet, self.jobs, self.faults) if mode == KARPENTER
                else People(self.queue, self.sc, self.fleet, self.jobs))
        self.passes.off = True
        self.alerts.on_fired = peer.fired
        return peer

    def _job_failed_on(self, node: SimNode, fault: Fault) -> None:
        """A job failed on a node's fault: people's (and the classifier's) finding, and burn-in's tally."""
        self.faults.job_failed_on(node, fault)
        self.cluster.burn_ins.job_failed(node, fault)

    def run(self) -> RunResult:
        if self.leader.policy.sweep.enabled:
            self.queue.at(0.0, self._sweep_tick)
        self.faults.start()
        self.jobs.start()
        if self.sampler is not None:
            self.sampler.start()
        self.queue.run()
        return self._result()

    def _sweep_tick(self) -> None:
        """Idle-node sweeps need a pass even when nothing else is due: serve's interval runs one; here, every
        SWEEP_TICK_S."""
        self.passes.request(self.queue.now)
        self.queue.at(self.queue.now + SWEEP_TICK_S, self._sweep_tick)

    def _pass(self) -> None:
        """One pass of the leader: decide on the nodes that carry anything, apply the plans (cordons first), and
        ask for the next pass when the ladder next needs to decide."""
        now = self.queue.now
        nodes = self.fleet.tracked_nodes() + self.fleet.sweep_candidates(self.leader.policy, to_datetime(now))
        ledger, plans = self.leader.decide(nodes, now)
        rate_capped = False
        for plan in sorted(plans, key=_cordons_last):
            rate_capped = self.decisions.count(plan) or rate_capped
            self.cluster.apply(plan)
        self.budget.account(ledger, now)
        self.fleet.untrack_settled(to_datetime(now - HOUR))
        wake = self.leader.next_wake((self.fleet.nodes[s] for s in self.fleet.tracked), now, rate_capped)
        if wake is not None:
            self.passes.request(wake)

    def _result(self) -> RunResult:
        end, fleet, sc, training = self.queue.end, self.fleet, self.sc, self.jobs.training
        for n in fleet.nodes:
            fleet.avail.close(n, end)
        self.budget.close(end)
        out = out_of_service(fleet.avail.outages, sc.gpus_per_node)
        for job in training:
            job.commit(end)
        self.jobs.close(end)
        training = [j for j in training if not j.spec.repeat]  # ETTR: the long jobs (repeated ones: by size)
        outages = len(fleet.avail.outages)
        return RunResult(
            seed=self.seed, scenario=sc.name, days=sc.days, nodes=len(fleet.nodes),
            node_seconds=len(fleet.nodes) * end, out_node_seconds=out.node_seconds, out_gpu_seconds=out.gpu_seconds,
            gpus_per_node=sc.gpus_per_node, ettr={j.jid: j.ettr(end) for j in training},
            interruptions={j.jid: dict(j.interruptions) for j in training}, faults=dict(self.faults.counts),
            out_hours_by_cause=out.hours_by_cause, out_hours_by_rung=out.hours_by_rung, outages=outages,
            gpu_hours_kept=out.gpu_seconds_kept / HOUR,
            mean_outage_h=(out.node_seconds / outages / HOUR) if outages else 0.0, jobs=self.jobs.tally,
            deferred=dict(self.decisions.deferred), breaker_trips=self.leader.trips,
            breaker_open_hours={p: s / HOUR for p, s in self.budget.breaker_open_s.items()},
            max_disrupted=self.budget.max_disrupted, passes=self.passes.passes,
            decisions=dict(self.decisions.decisions), samples=self.sampler.samples if self.sampler else [],
            outcomes=self.jobs.outcomes, false_positives=dict(self.faults.noise.false_fired),
            flapped=self.faults.noise.flapped, replacement=self.cluster.replacement_figures(end),
            peer=self.peer.figures() if self.peer is not None else {})
