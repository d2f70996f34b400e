"""The peers gpuhealth is compared with, on the same fault traces (`gpuhealth-sim run --remediation MODE`):

- `none`: no automated remediation. No pass of the remediator runs; people are the only repair. A fault no rule
  sees is found through the jobs that fail on it, as in every mode (gpuhealth/simulator/faults.py); a fault whose alert
  fires is found by a person through that alert: `detection.found_by_people` after it fires the person takes the node
  out of work, and the fault is repaired `remediation.manual_repair` after it began (the repair every mode has). A
  false positive's alert is looked at and left (the person finds nothing).
- `karpenter`: Karpenter's node repair alone, with the EKS node monitoring agent setting the Node conditions. For a
  fault whose alert maps to a condition the agent would set (KARPENTER_CONDITIONS), the condition is False from
  the alert's firing until it resolves; Karpenter force-replaces the node (the model's replace path: a spare of the
  pool, a new node that may be bad, a fault outside the node staying with the slot) once the condition has been
  False for its toleration, unless more than 20% of the pool's nodes have a watched condition False (its guard;
  it looks again every KARPENTER_RECHECK_S). The replacement is the replace rung's (SimCluster.provision, the one
  definition both use): the node leaves work at once, the new one takes `remediation.replace.duration` to provision
  and fails as often, and a failed one waits `remediation.manual_repair` for a person. A false positive of a
  mapped alert sets the condition too. Everything else goes to people, as under `none`.
- `gpuhealth` (the default): the remediator's passes, the real decide().

Neither peer has burn-in (nothing would take the startup taint off) or the workload classifier.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime

from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.faults import FaultSource
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.jobs.scheduler import JobScheduler
from gpuhealth.simulator.scenario import Scenario

GPUHEALTH, NONE, KARPENTER = "gpuhealth", "none", "karpenter"
MODES = (GPUHEALTH, NONE, KARPENTER)

# Karpenter's AWS node repair (kubernetes-sigs/karpenter node repair, aws provider's RepairPolicies; DESIGN.md):
# the condition types it watches, each with the time it must stay False before the node is replaced.
TOLERATION_S = {"AcceleratedHardwareReady": 600.0, "NetworkingReady": 1800.0, "KernelReady": 1800.0,
                "StorageReady": 1800.0, "Ready": 1800.0}
UNHEALTHY_GUARD = 0.20  # more than this share of a NodePool's nodes unhealthy: Karpenter repairs none of them
KARPENTER_RECHECK_S = 300.0  # a guarded node is looked at again this often (judgement: its controller's requeue)

# Which condition the EKS node monitoring agent would set for each rules/ alert's fault (judgement, the reason with
# each; an alert not here sets none, and its faults go to people):
KARPENTER_CONDITIONS = {
    "GPUXidFatal": "AcceleratedHardwareReady",  # the agent sets it on fatal Xids (DESIGN.md)
    "GPUECCDoubleBitErrors": "AcceleratedHardwareReady",  # its DCGM/NVML monitor reads double-bit ECC
    "MLX5Fatal": "NetworkingReady",  # the NIC's device failing: its networking monitor's interfaces
    "NetdevTransmitTimeout": "NetworkingReady",  # the link (NETDEV WATCHDOG): a networking fault to the agent
    "HostHungTask": "KernelReady",  # hung tasks: its kernel monitor's log patterns
    "HostMachineCheck": "KernelReady",  # machine checks in the kernel log
    "GpuhealthExporterDown": "Ready",  # the host is down (maintenance, PSU, chassis): the kubelet stops reporting
    # left out: GPUThermalViolation (throttling: an Event to the agent, not a condition), PCIeAERFatal (a
    # corrected/uncorrected AER on the GPU's link is no condition it documents), WorkloadsFailingOnNode (gpuhealth's)
}


def for_peer(scenario: Scenario) -> Scenario:
    """The scenario as a peer runs it: no burn-in (no one would take the startup taint off)."""
    if scenario.remediation == GPUHEALTH:
        return scenario
    return replace(scenario, replacement=replace(scenario.replacement, burn_in=False))


class People:
    """`none`: a person finds an alerted fault through its alert and takes the node out until it is repaired."""

    def __init__(self, queue: EventQueue, scenario: Scenario, fleet: Fleet, jobs: JobScheduler) -> None:
        self._queue, self._sc, self._fleet, self._jobs = queue, scenario, fleet, jobs
        self.taken_out = 0

    def figures(self) -> dict[str, float]:
        """What the peer did in the run (RunResult.peer; `gpuhealth-sim run --json`: "peer")."""
        return {"people_took_out": float(self.taken_out)}

    def fired(self, node: SimNode, fault: Fault, fp: str, starts: datetime) -> None:
        if node.fault is fault:
            self._queue.at(self._queue.now + self._sc.found_by_people_s, self._take_out, node.slot, node.generation,
                           fault)

    def _take_out(self, slot: int, generation: int, fault: Fault) -> None:
        node = self._fleet.live(slot, generation)
        if node is not None and node.fault is fault and not node.excluded_by_job:
            node.excluded_by_job = True
            self.taken_out += 1
            self._jobs.node_changed(node)


class Karpenter(People):
    """`karpenter`: people as under `none`, and Karpenter's node repair for the faults the agent sets a condition
    for."""

    def __init__(self, queue: EventQueue, scenario: Scenario, fleet: Fleet, jobs: JobScheduler,
                 faults: FaultSource) -> None:
        super().__init__(queue, scenario, fleet, jobs)
        self._faults = faults
        self.conditions = 0  # watched conditions turned False (a mapped alert fired, false positives too)
        self.replaced = 0
        self.guarded = 0  # checks the 20% guard blocked
        self.cleared = 0  # conditions True again (the alert resolved) before Karpenter replaced the node
        self._held: dict[tuple[int, int, str], float] = {}  # replacements the guard holds back: since when
        self.held = 0  # replacements the guard held back at least once
        self.held_s = 0.0  # time they were held back, to their replacement or their condition's clearing

    def figures(self) -> dict[str, float]:
        return {**super().figures(), "karpenter_conditions": float(self.conditions),
                "karpenter_replaced": float(self.replaced), "karpenter_cleared": float(self.cleared),
                "karpenter_guard_blocked_checks": float(self.guarded), "karpenter_guard_held": float(self.held),
                "karpenter_guard_held_hours": (self.held_s + sum(self._queue.now - t for t in self._held.values()))
                / 3600.0}

    def fired(self, node: SimNode, fault: Fault, fp: str, starts: datetime) -> None:
        super().fired(node, fault, fp, starts)
        condition = KARPENTER_CONDITIONS.get(fault.alert or "")
        if condition is not None:
            self.conditions += 1
            self._queue.at(self._queue.now + TOLERATION_S[condition], self._check, node.slot, node.generation, fp,
                           starts)

    def unhealthy(self, pool: str) -> int:
        """The pool's nodes with a watched condition False now (a mapped alert firing)."""
        nodes = self._fleet.nodes  # a node with an alert firing is tracked (alerts.py); no pass untracks it here
        return sum(1 for s in self._fleet.tracked if nodes[s].pool == pool and any(
            fp.split("/")[0] in KARPENTER_CONDITIONS for fp in nodes[s].fired))

    def _check(self, slot: int, generation: int, fp: str, starts: datetime) -> None:
        node = self._fleet.live(slot, generation)
        key = (slot, generation, fp)
        if node is None or node.fired.get(fp) != starts or node.replacing:
            # the condition turned True (the alert resolved), or the node is gone or being replaced already
            self.cleared += node is not None and node.fired.get(fp) != starts
            self._release(key)
            return
        if self.unhealthy(node.pool) > UNHEALTHY_GUARD * self._fleet.pool_sizes[node.pool]:
            self.guarded += 1
            if key not in self._held:
                self.held += 1
                self._held[key] = self._queue.now
            self._queue.at(self._queue.now + KARPENTER_RECHECK_S, self._check, slot, generation, fp, starts)
            return
        self._release(key)
        self.replaced += 1
        # the replace rung's provisioning, odds and failure cost (SimCluster.provision), on the fault's own stream
        seed = node.fault.seed if node.fault is not None else node.noise.seed if node.noise is not None else slot
        self._faults.provision(node, random.Random(f"{seed}/karpenter/{generation}/{self.replaced}"))

    def _release(self, key: tuple[int, int, str]) -> None:
        since = self._held.pop(key, None)
        if since is not None:
            self.held_s += self._queue.now - since
