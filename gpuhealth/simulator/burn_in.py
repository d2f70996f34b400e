"""Burn-in of new nodes in the simulation (docs/remediation.md, "Burn-in of new nodes";
gpuhealth/remediator/decide/burn_in.py).

With the scenario's `fleet.burn_in` (the NodePool's startup taint), a node that arrives in a slot (a spare after a
replacement) carries the burn-in taint: Ready, its GPUs advertised, out of work. The remediator's real decide() asks
for the diagnostic Job (SimCluster._diagnose: its level's time, the shared DIAGNOSE_COVERAGE on a fault that is
there) and ends the burn-in (END_BURN_IN): on a pass the node enters service; on a failure gpuhealth's taint and
cordon replace the burn-in's and the ladder climbs on the failed node, which stays out.

The time in burn-in is not out-of-service time (the node never was in service): it is counted here, apart, with the
faulty new nodes the burn-in caught and those it let through (outside the diagnostic's coverage).
"""

from __future__ import annotations

from gpuhealth.simulator.fleet import Fault, SimNode


class BurnIns:
    def __init__(self) -> None:
        self.started: dict[tuple[int, int], float] = {}  # (slot, generation) -> when its burn-in began
        self.arrived_with: dict[tuple[int, int], Fault] = {}  # the fault a new node arrived with
        self.seconds = 0.0  # node-seconds in burn-in, the open ones closed at the end
        self.count = 0  # burn-ins begun
        self.caught = 0  # new nodes that arrived faulty and were failed or repaired in burn-in: before any job
        self.passed_faulty = 0  # passed with the fault they arrived with (outside the diagnostic's coverage)
        self.failed = 0  # failed (a fault there, or an alert's episode that ended it)
        self.met_by_job = 0  # new nodes whose fault a job met first (without burn-in, or let through by it)

    def begin(self, node: SimNode, now: float) -> None:
        node.burn_in = True
        self.count += 1
        self.started[(node.slot, node.generation)] = now

    def arrived(self, node: SimNode) -> None:
        """The new node's draw is made: the fault it came with, if any (a hardware fault of the scenario's mix), with
        or without burn-in: whether a job meets it first is counted either way."""
        if node.fault is not None:
            self.arrived_with[(node.slot, node.generation)] = node.fault

    def end(self, node: SimNode, now: float, failed: bool) -> None:
        """END_BURN_IN executed: the taint comes off (a pass: the node enters service) or is replaced by gpuhealth's
        (a failure). A faulty new node is caught when the burn-in failed on its fault, or an alert's episode during
        the burn-in repaired it (the ladder's, as on any node); let through when it enters service with it."""
        if not node.burn_in:
            return
        node.burn_in = False
        key = (node.slot, node.generation)
        self.seconds += now - self.started.pop(key, now)
        fault = self.arrived_with.get(key)
        self.failed += failed
        if fault is not None and not failed and node.fault is fault:
            self.passed_faulty += 1  # kept: a job may meet it now
        elif fault is not None:
            self.caught += 1
            del self.arrived_with[key]

    def job_failed(self, node: SimNode, fault: Fault) -> None:
        """A job failed on a node's fault: the first to meet the fault the node arrived with is counted."""
        key = (node.slot, node.generation)
        if self.arrived_with.get(key) is fault:
            self.met_by_job += 1
            del self.arrived_with[key]

    def gone(self, node: SimNode, now: float) -> None:
        """The node leaves its slot (replaced): during its burn-in (an alert's episode climbed to a replacement, or
        a failed burn-in did), a fault it arrived with was caught before any job."""
        fault = self.arrived_with.pop((node.slot, node.generation), None)
        self.caught += fault is not None and node.burn_in
        begun = self.started.pop((node.slot, node.generation), None)
        if begun is not None:
            self.seconds += now - begun

    def figures(self, end: float) -> dict[str, float]:
        open_s = sum(end - t for t in self.started.values())
        return {"burn_ins": float(self.count), "burn_in_hours": (self.seconds + open_s) / 3600.0,
                "burn_in_caught": float(self.caught), "burn_in_failed": float(self.failed),
                "burn_in_passed_faulty": float(self.passed_faulty),
                "new_node_faults_met_by_a_job": float(self.met_by_job)}
