"""The receiver's answer to a webhook: queued for the intake's workers (queue.py), or recorded before the
answer when there is no intake. Nodes the watch cache does not know, or whose state cannot be read, are
reported in the answer, not queued."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clock import Clock
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, NodeState
from gpuhealth.remediator.intake.queue import Intake, RecordSummary
from gpuhealth.remediator.intake.recorder import Recorder
from gpuhealth.remediator.intake.webhook import Batch
from gpuhealth.remediator.metrics import AlertIgnoredReason, Metrics, WebhookErrorReason

MEMO_LIMIT = 50_000  # Node versions whose state was parsed (a lookup per post, not a parse)


@dataclass
class Accepted:
    """What the receiver answers: the nodes queued for recording, those ignored, or why it refuses (5xx)."""

    queued: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    refused: str | None = None


class Receiver:
    def __init__(self, kube: Kube, recorder: Recorder, metrics: Metrics, clock: Clock) -> None:
        self.kube, self.recorder, self.metrics, self.clock = kube, recorder, metrics, clock
        self.intake: Intake | None = None  # None: webhooks are recorded before they are answered
        self._readable: dict[tuple[str, str], str | None] = {}  # (node, resourceVersion) -> state parse error
        self.pause: Callable[[float], None] = time.sleep  # the intake's workers make way for the answers with it

    def start_intake(self, stop: threading.Event | None = None, retry: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0),
                     hold_off: float = 5.0) -> Intake:
        def record(batch: Batch, received: datetime) -> RecordSummary:
            result = self.recorder.record(batch, received, pause=self.pause)  # recorded behind the answer
            return RecordSummary(result.recorded, result.failed, result.api_failing, frozenset(result.rejected))

        def dropped(node: str, error: str) -> None:
            self.metrics.webhook_error(WebhookErrorReason.RECORD_FAILED)
            audit(AuditKind.RECORD_DROPPED, node=node, error=error)

        self.intake = Intake(record, self.clock, retry=retry, on_drop=dropped, hold_off=hold_off)
        self.intake.start(stop)
        return self.intake

    def accept(self, batch: Batch) -> Accepted:
        if self.intake is None:
            result = self.recorder.record(batch)
            refused = "; ".join(f"{n}: {e}" for n, e in result.failed) if result.failed else None
            return Accepted(result.recorded, result.ignored, refused)
        failing = self.intake.failing
        if failing:
            return Accepted(refused=f"recording on the Nodes is failing ({failing})")
        out = Accepted()
        cache = self.kube.cache
        keep = set()
        for node, alerts in batch.by_node().items():
            why = self._unusable(cache.nodes.get(node) if cache is not None and cache.synced else {}, len(alerts))
            if why:
                out.ignored.append((node, why))
                audit(AuditKind.ALERT_IGNORED, node=node, reason=why)
            else:
                out.queued.append(node)
                keep.add(node)
        queued = Batch(alerts=[a for a in batch.alerts if a.node in keep])
        if queued.alerts and not self.intake.submit(queued):
            return Accepted(ignored=out.ignored, refused="too many webhooks waiting to be recorded")
        return out

    def _unusable(self, node: RawNode | None, alerts: int) -> str | None:
        """Why alerts for this cached node cannot be recorded ({}: not known to the cache: the workers ask)."""
        if node is None:
            self.metrics.alert_ignored(AlertIgnoredReason.UNKNOWN_NODE, alerts)
            return "node not found"
        raw = api_objects.annotations(node).get(STATE_ANNOTATION)
        if raw is None:
            return None
        key = (api_objects.name(node), api_objects.resource_version(node) or "")
        memo = self._readable  # shared by the request threads: one lookup, and a local result
        if key in memo:  # parsed once per version of the Node, not once per post
            error = memo.get(key)
        else:
            if len(memo) > MEMO_LIMIT:
                memo.clear()
            try:
                NodeState.from_json(raw)
                error = None
            except ValueError as exc:
                error = str(exc)
            memo[key] = error
        if error is not None:
            self.metrics.alert_ignored(AlertIgnoredReason.UNREADABLE_STATE, alerts)
            return f"state annotation unreadable ({error}): node left alone"
        return None
