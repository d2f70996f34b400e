"""The scheduler as the rest of the simulation sees it: the faults and the cluster tell it what happened to a node
(changed, hit by a fault, drained, taken out of scheduling), and it places the jobs waiting for nodes."""

from __future__ import annotations

from collections.abc import Callable

from gpuhealth.simulator.detection import Pipeline
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.jobs.outcomes import Outcomes
from gpuhealth.simulator.jobs.placement import Placement
from gpuhealth.simulator.jobs.small import SmallJobs
from gpuhealth.simulator.jobs.training import TrainingJobs
from gpuhealth.simulator.scenario import Scenario
from gpuhealth.simulator.workload import JobTally, TrainingJob


class JobScheduler:
    def __init__(self, queue: EventQueue, fleet: Fleet, scenario: Scenario, pipeline: Pipeline,
                 restart_loop_threshold: int, seed: int, classifier: bool = False, aggregate: bool = False) -> None:
        self._fleet = fleet
        self._sc = scenario
        self.outcomes = Outcomes()
        self._placement = Placement(queue, fleet, seed, self._nodes_freed)
        self._small = SmallJobs(queue, fleet, self._placement, scenario.small, scenario.job_timeout_s,
                                restart_loop_threshold, seed, self.outcomes, classifier, aggregate,
                                scenario.other_failure_rate)
        self._placement.on_bad_free = self._small.bad_node_free
        self._training = TrainingJobs(queue, fleet, self._placement, self._small, scenario, pipeline, self.outcomes,
                                      seed)
        self._freeing = self._free_again = False

    def on_failed(self, hook: Callable[[SimNode, Fault], None]) -> None:
        """Who hears that a job failed on a node (people find faults no rule sees through failed jobs)."""
        self._small.on_failed = self._training.on_failed = hook

    def close(self, end: float) -> None:
        """The run ends: the aggregated small jobs are counted up to the end, running attempts' time too."""
        self._small.settle(end)
        self._training.close(end)

    @property
    def training(self) -> list[TrainingJob]:
        return self._training.jobs

    @property
    def tally(self) -> JobTally:
        return self._small.tally

    def start(self) -> None:
        """The training jobs, then as many streams of small jobs as fill their share of what training leaves."""
        self._training.start()
        small = self._sc.small
        if small is None:
            return
        allowed = {small.pool} if small.pool else None
        eligible = sum(1 for n in self._fleet.nodes if allowed is None or n.pool in allowed)
        held = sum(len(j.nodes) for j in self.training)
        streams = int(small.utilization * max(0, eligible - held) / small.nodes)
        for s in range(streams):
            self._small.submit(s)

    # --- what happens to a node -------------------------------------------------------------
    def node_changed(self, node: SimNode) -> None:
        self._placement.node_changed(node)

    def hit(self, node: SimNode, fault: Fault) -> None:
        self._training.hit(node, fault)

    def evicted(self, node: SimNode) -> None:
        self._training.evicted(node)

    def excluded(self, node: SimNode) -> None:
        self._training.excluded(node)

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
                self._training.place_waiting()
                self._small.start_waiting()
                again = self._free_again and bool(self._placement.free)
        finally:
            self._freeing = False
