"""Recording alerts on the Nodes: each node's alerts merged into its state annotation, one PATCH per node,
guarded by the resourceVersion it was computed from and retried on a conflict. Failures are returned (the
intake retries them, or the receiver answers 5xx so that Alertmanager does); nothing is dropped silently.

A dry run records through a DryRunKube: the states are kept in its overlay, and read back from it. While
`gpuhealth-remediator cleanup` holds the Lease (`stopped`: what it marked the Lease with), nothing is recorded: the
alerts are ignored, so that no state comes back on a Node the cleanup has cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.errors import Conflict, KubeError, NotFound
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clock import Clock
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.nodestate import (
    MAX_ALERT_RECORDS,
    MAX_RECORDS_BYTES,
    STATE_ANNOTATION,
    AlertRecord,
    NodeState,
    record_alerts,
    time_text,
)
from gpuhealth.remediator.intake.webhook import Batch
from gpuhealth.remediator.metrics import AlertIgnoredReason, ApiOperation, Metrics

log = logging.getLogger("gpuhealth.remediator")

SEEN_AGAIN_WRITE_EVERY = timedelta(minutes=1)
ATTEMPTS = 3  # a 409 (the Node changed since it was read) is tried again with a fresh read, this many times
# How long the intake's workers let go of the interpreter after each node whose alerts were only seen again. Such a
# node costs ~0.1 ms of CPU and no API call, so a burst of Alertmanager's repeats (2,000 alerts in 50 posts in a
# third of a second) would keep the two workers on the interpreter's lock back to back, and every answer waited for
# it at each step it takes the lock (docs/benchmarks.md, "The intake lets the answers in"). A node written to the API
# server lets go anyway, while its PATCH is under way.
UNCHANGED_PAUSE_S = 0.0002


@dataclass
class RecordResult:
    recorded: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (node, reason): unknown node, unreadable state
    failed: list[tuple[str, str]] = field(default_factory=list)  # (node, error): answer 5xx, Alertmanager retries
    api_failing: bool = False  # a failure was the API's (5xx, no answer), not one node's rejection (4xx)
    rejected: list[str] = field(default_factory=list)  # failed nodes whose own 4xx it was: retrying cannot help


class Recorder:
    """`record(batch)`; each write's outcome is told to kube.health (for /readyz)."""

    def __init__(self, kube: Kube, metrics: Metrics, clock: Clock, on_write: Callable[[], None],
                 stopped: Callable[[], str | None] = lambda: None) -> None:
        # Concurrent writers of one Node (the intake's workers, the loop's sync) are guarded by resourceVersion:
        # the API server's, or a dry run's overlay versions (clients/dry_run.py), so a lost update is a 409.
        self.kube, self.metrics, self.clock, self.on_write = kube, metrics, clock, on_write
        self.stopped = stopped

    def record(self, batch: Batch, now: datetime | None = None,
               pause: Callable[[float], None] | None = None) -> RecordResult:
        """`pause`: called with UNCHANGED_PAUSE_S after each node with nothing to write (the intake's workers, which
        record behind the answer; never where the answer or a pass waits for the recording)."""
        now = now or self.clock()
        result = RecordResult()
        cleanup = self.stopped()
        if cleanup:
            why = f"gpuhealth-remediator cleanup holds the Lease ({cleanup}): not recorded"
            for node, alerts in batch.by_node().items():
                audit(AuditKind.ALERT_IGNORED, node=node, reason=why)
                self.metrics.alert_ignored(AlertIgnoredReason.CLEANUP, len(alerts))
                result.ignored.append((node, why))
            return result
        wrote = False
        for node, alerts in batch.by_node().items():
            outcome = self._attempts(node, alerts, now)
            if outcome is None or outcome[0] == "unchanged":
                result.recorded.append(node)
                wrote = wrote or outcome is None
                if outcome is not None and pause is not None:  # nothing written: let the answering threads in
                    pause(UNCHANGED_PAUSE_S)
            elif outcome[0] == "ignored":
                result.ignored.append((node, outcome[1]))
            else:
                result.failed.append((node, outcome[1]))
                result.api_failing = result.api_failing or outcome[0] == "failed"
                if outcome[0] == "rejected":
                    result.rejected.append(node)
        if wrote:  # something new for the loop to decide on
            self.on_write()
        return result

    def _attempts(self, node: str, alerts: list[tuple[str, AlertRecord]], now: datetime) -> tuple[str, str] | None:
        """None (written), or (kind, detail): unchanged, ignored, rejected (a 4xx for this node), conflict
        (409s that outlasted the retries: worth another try later) or failed (the API: 5xx, no answer)."""
        error = "conflict"
        for attempt in range(ATTEMPTS):
            try:
                # the watch cache's copy first (a stale one costs a 409 and a fresh read), else the API
                current = (self.kube.cached_node(node) if attempt == 0 else None) or self.kube.get_node(node)
                base = NodeState.from_json(api_objects.annotations(current).get(STATE_ANNOTATION))
                new = record_alerts(base, alerts, now)
                unchanged = _seen_again(base, new)
                if not unchanged:
                    self.kube.write_state(node, new, api_objects.resource_version(current))
                self._report_forgotten(node, base, new, alerts)
                audit(AuditKind.RECORDED, node=node, alerts=len(alerts), episode=time_text(new.episode),
                      dry_run=self.kube.dry_run)
                self.kube.health.ok = True
                return ("unchanged", "") if unchanged else None
            except NotFound:
                audit(AuditKind.ALERT_IGNORED, node=node, reason="node not found")
                self.metrics.alert_ignored(AlertIgnoredReason.UNKNOWN_NODE, len(alerts))
                return "ignored", "node not found"
            except Conflict as exc:
                self.metrics.api_error(ApiOperation.RECORD)
                log.warning("recording alerts on %s: %s", node, exc)
                error = str(exc)
            except KubeError as exc:
                self.metrics.api_error(ApiOperation.RECORD)
                log.warning("recording alerts on %s: %s", node, exc)
                self.kube.health.ok = not exc.transient
                return ("failed" if exc.transient else "rejected"), str(exc)
            except ValueError as exc:  # the state annotation cannot be read: never overwrite it
                log.error("recording alerts on %s: %s", node, exc)
                self.metrics.alert_ignored(AlertIgnoredReason.UNREADABLE_STATE, len(alerts))
                return "ignored", f"state annotation unreadable ({exc}): node left alone"
            except Exception as exc:  # an answer the client could not read: kept for a retry, never dropped
                self.metrics.api_error(ApiOperation.RECORD)
                log.warning("recording alerts on %s: %s", node, exc)
                self.kube.health.ok = False
                return "failed", str(exc)
        return "conflict", error

    def _report_forgotten(self, node: str, base: NodeState, new: NodeState,
                          alerts: list[tuple[str, AlertRecord]]) -> None:
        """The records the state's caps left out (nodestate.bounded_alerts): counted, logged and audited."""
        forgotten = sorted((base.alerts.keys() | {fp for fp, _ in alerts}) - new.alerts.keys())
        if not forgotten:
            return
        self.metrics.alert_ignored(AlertIgnoredReason.STATE_FULL, len(forgotten))
        log.warning("recording alerts on %s: the state annotation is at its cap (%d alert records, %d bytes of "
                    "records): %d record(s) forgotten, resolved and lowest-rung first", node, MAX_ALERT_RECORDS,
                    MAX_RECORDS_BYTES, len(forgotten))
        audit(AuditKind.ALERTS_FORGOTTEN, node=node, fingerprints=forgotten[:20], count=len(forgotten))


def _seen_again(before: NodeState, after: NodeState) -> bool:
    """Nothing to write: the same alerts seen again within a minute of the last write (duplicates from HA
    Alertmanagers, storms of repeats). Only `last_seen` would move, and it matters at the scale of
    episode.quiet_timeout (hours)."""
    if before.alerts.keys() != after.alerts.keys():
        return False
    for fp, new in after.alerts.items():
        old = before.alerts[fp]
        if replace(new, last_seen=old.last_seen) != old:
            return False
        if new.last_seen - old.last_seen >= SEEN_AGAIN_WRITE_EVERY:
            return False
    return replace(after, alerts=before.alerts) == before
