"""Detection that is not perfect: a fault its alert misses, an alert on a healthy node, an alert that flaps.

- coverage (causes.yaml `detection.coverage`): the share of a cause's faults whose signal raises its alert. A fault
  drawn outside it is seen by no rule: only the jobs that fail on the node (and then people) find it, as a cause
  with no alert is (faults.py `_found_by_job`).
- false positives (scenario `detection.false_positives`, by default data/false_positives.yaml): each node raises
  each alert now and then while healthy, a Poisson process of its rate. The false reading is gone once the alert
  fires; the alert then resolves after its rule's timings, and the remediator's real decisions act on it
  meanwhile (a cordon, a drain, a reset, the validation before return to service).
- flapping (causes.yaml `detection.flapping`, `signal`, `quiet`): the share of a cause's seen faults whose signal
  comes and goes while the fault persists: there for an exponential time of mean `signal`, then quiet for one of
  mean `quiet`.
  A quiet spell longer than the rule's resolution (its window, keep_firing_for, the next evaluation and
  group_interval tick) resolves the alert; the signal's return fires it again, a new alert to the remediator.

Every draw comes from the fault's own seed or the node's own noise stream, whatever the policy does, so two
policies meet the same noise (`gpuhealth-sim diff`).
"""

from __future__ import annotations

import random
from collections import Counter

from gpuhealth.simulator.alerts import Alerting
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.failure_data import Cause
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.scenario import Scenario
from gpuhealth.simulator.scenario_parts import DAY

FALSE_POSITIVE = "false_positive"  # the kind of a false positive's Cause: no fault on the node (node_fault False)


def seen_by(cause: Cause, seed: int) -> str | None:
    """The alert that sees a fault of this cause: its rule's, or none when the fault falls outside its coverage
    (drawn from the fault's own seed)."""
    if cause.alert is None:
        return None
    coverage = cause.detection.coverage
    if coverage >= 1.0 or random.Random(f"{seed}/coverage").random() < coverage:
        return cause.alert
    return None


def false_positive_cause(alert: str, scope: str) -> Cause:
    return Cause(f"False positive: {alert}", alert, scope, "crash", FALSE_POSITIVE, ())


class Noise:
    def __init__(self, queue: EventQueue, scenario: Scenario, fleet: Fleet, alerts: Alerting, seed: int) -> None:
        self._queue, self._fleet, self._alerts, self._seed = queue, fleet, alerts, seed
        scopes = {c.alert: c.scope for c in scenario.causes.values() if c.alert is not None}
        self._false = tuple((false_positive_cause(a, scopes.get(a, "node")), r / 1000.0 / DAY)
                            for a, r in scenario.false_positives if r > 0)
        self._rate = sum(r for _, r in self._false)
        self._gpus = scenario.gpus_per_node
        self.false_fired: Counter[str] = Counter()  # alert -> false positives that fired
        self.flapped = 0  # times a persisting fault's alert resolved and fired again
        self._ids = 0
        alerts.false_fired = self.fired

    def start(self) -> None:
        if self._rate <= 0:
            return
        for node in self._fleet.nodes:
            rng = random.Random(f"{self._seed}/noise/{node.slot}")
            self._queue.at(rng.expovariate(self._rate), self._false_reading, node.slot, rng)

    # --- false positives ---------------------------------------------------------------------
    def _false_reading(self, slot: int, rng: random.Random) -> None:
        """The slot's node reads falsely (whichever node is in the slot now): a healthy node in service raises the
        alert; one out of service, already broken or already reading falsely runs nothing that could."""
        node = self._fleet.nodes[slot]
        x = rng.random() * self._rate
        cause = self._false[-1][0]
        for c, r in self._false:
            x -= r
            if x < 0:
                cause = c
                break
        gpu, seed = rng.randrange(self._gpus), rng.getrandbits(48)
        self._queue.at(self._queue.now + rng.expovariate(self._rate), self._false_reading, slot, rng)
        if not node.in_service or node.fault is not None or node.noise is not None:
            return
        self._ids += 1
        fault = Fault(-self._ids, cause, self._queue.now, "", gpu, seed, cause.alert)
        node.noise = fault
        self._alerts.fault_seen(node, fault)

    def fired(self, node: SimNode, fault: Fault) -> None:
        """A false positive's alert fired: the false reading is gone; the alert resolves after its rule's timings."""
        if node.noise is not fault:
            return
        node.noise = None
        node.noise_cause = fault.cause.name
        self.false_fired[fault.alert or ""] += 1
        self._alerts.fault_cleared(node, fault)

    # --- flapping ----------------------------------------------------------------------------
    def flaps(self, node: SimNode, fault: Fault) -> None:
        """A seen fault whose signal comes and goes (its cause's `flapping` share, drawn from its own seed)."""
        model = fault.cause.detection
        if model.flapping <= 0 or fault.alert is None:
            return
        rng = random.Random(f"{fault.seed}/flap")
        if rng.random() >= model.flapping:
            return
        self._queue.at(self._queue.now + rng.expovariate(1.0 / model.signal_s), self._quiet, node.slot,
                       node.generation, fault, rng)

    def _quiet(self, slot: int, generation: int, fault: Fault, rng: random.Random) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.fault is not fault:
            return
        self._alerts.fault_cleared(node, fault)
        self._queue.at(self._queue.now + rng.expovariate(1.0 / fault.cause.detection.quiet_s), self._back, slot,
                       generation, fault, rng)

    def _back(self, slot: int, generation: int, fault: Fault, rng: random.Random) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.fault is not fault:
            return
        if self._alerts.signal_back(node, fault):
            self.flapped += 1
        self._queue.at(self._queue.now + rng.expovariate(1.0 / fault.cause.detection.signal_s), self._quiet, slot,
                       generation, fault, rng)
