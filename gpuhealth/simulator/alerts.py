"""Alerts as Alertmanager delivers them: a fault's alert fires after its rule's delay, is sent again on its route's
repeat interval while it fires, and resolves after the fault clears. Each delivery is recorded on the Node as
serve's receiver records it: the alert as Alertmanager's webhook carries it (its rule's labels as rules/ writes them,
the node's and the GPU's added) is read by the receiver's own reader (gpuhealth/remediator/intake/webhook.py
parse_listed) into the AlertRecord of the state annotation, so every gate of the policy that reads a label (the
diagnosis before a replacement reads `component`) sees what it sees in a cluster; a firing or a resolved alert wakes
a pass."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from gpuhealth.remediator.decide.nodestate import AlertRecord, record_alerts
from gpuhealth.remediator.decide.vocabulary import AlertStatus
from gpuhealth.remediator.intake.webhook import parse_listed
from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.detection import AlertRule, Pipeline
from gpuhealth.simulator.events import EventQueue
from gpuhealth.simulator.fleet import Fault, Fleet, SimNode
from gpuhealth.simulator.passes import PassSchedule
from gpuhealth.simulator.remediation import to_datetime


def fingerprint(fault: Fault) -> str:
    """One alert per rule and node, or per rule and GPU for a GPU-scoped cause."""
    gpu = f"/{fault.gpu}" if fault.cause.scope == "gpu" else ""
    return f"{fault.alert}{gpu}"


class Alerting:
    def __init__(self, queue: EventQueue, pipeline: Pipeline, fleet: Fleet, passes: PassSchedule,
                 policy: Policy) -> None:
        self._queue = queue
        self._policy = policy  # its alert_labels: the labels naming the node and the GPU
        self._pipe = pipeline
        self._fleet = fleet
        self._passes = passes
        # a false positive's alert fired (noise.py sets it): its false reading is gone
        self.false_fired: Callable[[SimNode, Fault], None] | None = None
        # a peer's watcher of firing alerts (gpuhealth/simulator/peers.py: people, Karpenter): node, fault, fingerprint,
        # startsAt
        self.on_fired: Callable[[SimNode, Fault, str, datetime], None] | None = None

    def fault_seen(self, node: SimNode, fault: Fault) -> None:
        """The fault's alert fires after its rule's delay (shorter when the node's alert group is already open)."""
        assert fault.alert is not None
        rule = self._pipe.alerts[fault.alert]
        rng = random.Random(fault.seed if not fault.epoch else f"{fault.seed}/fire/{fault.epoch}")
        delay = self._pipe.fire_delay(rule, rng, group_open=bool(node.fired))
        self._queue.at(self._queue.now + delay, self._fire, node.slot, node.generation, fault, fault.epoch)

    def fault_cleared(self, node: SimNode, fault: Fault) -> None:
        """The fault's signal stopped (the fault is gone, or its signal went quiet): its alert, if it fired,
        resolves after its rule's delay, unless the signal is back by then (noise.py, flapping)."""
        fault.epoch += 1
        rule = self._pipe.alerts.get(fault.alert) if fault.alert else None
        if rule is None:
            return
        fp = fingerprint(fault)
        if fp in node.fired:
            rng = random.Random(fault.seed + 1 if fault.epoch == 1 else f"{fault.seed}/resolve/{fault.epoch}")
            delay = self._pipe.resolve_delay(rule, rng)
            self._queue.at(self._queue.now + delay, self._resolve, node.slot, node.generation, fp, node.fired[fp],
                           fault, fault.epoch)

    def signal_back(self, node: SimNode, fault: Fault) -> bool:
        """A persisting fault's quiet signal is back: an alert still firing stays (its resolution is called off);
        one that resolved fires again after its rule's delay (True)."""
        fault.epoch += 1
        if fingerprint(fault) in node.fired:
            return False
        self.fault_seen(node, fault)
        return True

    def _record(self, node: SimNode, fp: str, record: AlertRecord | None) -> None:
        if record is None:
            return  # the receiver ignores it (no remediation label): nothing is recorded, as in a cluster
        node.state = record_alerts(node.state, [(fp, record)], to_datetime(self._queue.now))
        node.version += 1
        self._fleet.tracked.add(node.slot)

    def delivered(self, node: SimNode, fault: Fault, status: AlertStatus, starts: datetime,
                  ends: datetime | None = None) -> AlertRecord | None:
        """The fault's alert as the webhook delivers it, read by serve's receiver (None: it ignores the alert)."""
        return webhook_record(self._pipe.alerts[fault.alert or ""], self._policy, node.name,
                              str(fault.gpu) if fault.cause.scope == "gpu" else None, fingerprint(fault), status,
                              starts, ends)

    def _firing(self, node: SimNode, fault: Fault, starts: datetime) -> AlertRecord | None:
        return self.delivered(node, fault, AlertStatus.FIRING, starts)

    def _send_again(self, node: SimNode, fp: str, starts: datetime, fault: Fault) -> None:
        rule = self._pipe.alerts[fault.alert or ""]
        when = self._queue.now + self._pipe.route(rule).repeat_interval_s
        self._queue.at(when, self._repeat, node.slot, node.generation, fp, starts, fault)

    def _fire(self, slot: int, generation: int, fault: Fault, epoch: int) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or (node.fault is not fault and node.noise is not fault) or fault.epoch != epoch:
            return
        fp = fingerprint(fault)
        if fp in node.fired:
            return  # the same alert still fires (a flapping signal back before its resolution was sent)
        starts = to_datetime(self._queue.now)
        node.fired[fp] = starts
        self._record(node, fp, self._firing(node, fault, starts))
        self._send_again(node, fp, starts, fault)
        self._passes.request(self._queue.now, wake=True)
        if self.on_fired is not None:
            self.on_fired(node, fault, fp, starts)
        if node.noise is fault and self.false_fired is not None:
            self.false_fired(node, fault)

    def _repeat(self, slot: int, generation: int, fp: str, starts: datetime, fault: Fault) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.fired.get(fp) != starts:
            return
        self._record(node, fp, self._firing(node, fault, starts))
        self._send_again(node, fp, starts, fault)
        # serve would wake for this write too; a repeat moves only last_seen, which decides nothing before
        # episode.quiet_timeout, so the pass is left to the next thing that is due (it reads this last_seen)

    def _resolve(self, slot: int, generation: int, fp: str, starts: datetime, fault: Fault, epoch: int) -> None:
        node = self._fleet.live(slot, generation)
        if node is None or node.fired.get(fp) != starts or fault.epoch != epoch:
            return
        del node.fired[fp]
        if fp not in node.state.alerts:
            return
        self._record(node, fp, self.delivered(node, fault, AlertStatus.RESOLVED, starts, to_datetime(self._queue.now)))
        self._passes.request(self._queue.now, wake=True)


def webhook_record(rule: AlertRule, policy: Policy, node: str, gpu: str | None, fp: str, status: AlertStatus,
                   starts: datetime, ends: datetime | None = None) -> AlertRecord | None:
    """An alert of `rule` on `node` (and `gpu`) as Alertmanager's webhook carries it: the rule's own labels (read from
    rules/, not restated here), `alertname`, and the labels policy.alert_labels names for the node and the GPU; read
    by serve's receiver (intake/webhook.py parse_listed). None when the receiver ignores it."""
    labels = {**dict(rule.labels), "alertname": rule.name, policy.alert_labels.node: node}
    if gpu is not None:
        labels[policy.alert_labels.gpu] = gpu
    alert: dict[str, object] = {"status": str(status), "labels": labels, "fingerprint": fp,
                                "startsAt": starts.isoformat()}
    if ends is not None:
        alert["endsAt"] = ends.isoformat()
    batch, _ = parse_listed([alert], policy)
    return batch.alerts[0].record if batch.alerts else None
