"""The sync with Alertmanager, run by the leader's loop: read the active alerts, record what webhooks lost and
resolve what Alertmanager no longer has (the plan is alert_sync.py's, pure), then report it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.alertmanager import AlertmanagerClient, AlertmanagerUnavailable
from gpuhealth.remediator.clock import Clock
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.intake.alert_sync import SyncPlan, read_alertmanager, recorded_states, sync_batch
from gpuhealth.remediator.intake.recorder import Recorder
from gpuhealth.remediator.metrics import AlertIgnoredReason, Metrics, SyncResult
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")


class AlertmanagerSync:
    def __init__(self, client: AlertmanagerClient | None, policy: Policy, recorder: Recorder, metrics: Metrics,
                 clock: Clock) -> None:
        self.client, self.policy, self.recorder, self.metrics, self.clock = client, policy, recorder, metrics, clock
        self._synced: datetime | None = None  # when the last sync was tried (None: due now)
        self._addresses: dict[str, int] = {}  # each member's address count, as last said

    def due(self, now: datetime) -> bool:
        interval = self.policy.alertmanager.sync_interval
        if self.client is None or interval is None:
            return False
        return self._synced is None or now - self._synced >= interval

    def _check_members(self, client: AlertmanagerClient) -> None:
        """Says when a member's URL stands for several Alertmanagers (a headless Service's name): its calls land on
        any of them, so "every member answered" and each member's uptime would be asked of different pods."""
        for member in client.members:
            count = len(client.addresses(member))
            self.metrics.am_member_addresses.labels(member).set(count)
            if count > 1 and self._addresses.get(member) != count:
                log.warning("Alertmanager member %s resolves to %d addresses: each call is answered by any of them. "
                            "List every Alertmanager in alertmanager.url (the chart: remediator.alertmanager."
                            "statefulSet)", member, count)
            self._addresses[member] = count

    def due_now(self) -> None:
        """A new leader agrees with Alertmanager before its first action."""
        self._synced = None

    def sync(self, nodes: list[RawNode],
             reading_bound: Callable[[], AbstractContextManager[None]] = nullcontext) -> SyncPlan | None:
        """None when Alertmanager could not be read: then nothing is resolved (missing data is never a
        resolution) and the webhooks and episode.quiet_timeout carry on alone. `reading_bound`: the scope the
        reading runs in (the loop's: the pass's deadline)."""
        assert self.client is not None
        asked_at = self._synced = self.clock()
        try:
            with reading_bound():
                self._check_members(self.client)
                reading = read_alertmanager(self.client, self.policy)
        except AlertmanagerUnavailable as exc:
            self.metrics.am_syncs.labels(SyncResult.ERROR).inc()
            self.metrics.am_up.set(0)
            log.warning("Alertmanager sync: %s: nothing is resolved until it answers (webhooks and "
                        "episode.quiet_timeout only)", exc)
            audit(AuditKind.ALERTMANAGER_SYNC, result=SyncResult.ERROR, error=str(exc))
            return None
        kube = self.recorder.kube
        states = recorded_states(nodes, kube.recorded_overlay())
        for fingerprint, why in reading.skipped:  # listed but not well-formed: never fatal to the sync
            self.metrics.alert_ignored(AlertIgnoredReason.UNUSABLE)
            log.warning("Alertmanager sync: skipped alert %s: %s", fingerprint or "(no fingerprint)", why)
        plan = sync_batch(states, reading.active, asked_at, self.clock(), self.policy,
                          resolve=reading.untrusted is None, unreadable={fp for fp, _ in reading.skipped})
        failed: list[tuple[str, str]] = []
        if plan.batch.alerts:
            failed = self.recorder.record(plan.batch, self.clock()).failed
        self.metrics.am_syncs.labels(SyncResult.OK).inc()
        self.metrics.am_up.set(1)
        for change, count in plan.changes().items():
            self.metrics.am_sync_changes.labels(change).inc(count)
        if not failed:
            self.metrics.am_last_sync.set(asked_at.timestamp())
        if plan.recorded or plan.resolved or failed or reading.untrusted:
            audit(AuditKind.ALERTMANAGER_SYNC, result=SyncResult.OK, members=reading.members,
                  active=len(reading.active), ignored=len(reading.ignored), unknown_nodes=plan.unknown_nodes,
                  not_resolving=reading.untrusted, failed=[n for n, _ in failed], dry_run=kube.dry_run,
                  **plan.changes())
        return plan
