"""The remediator as the Flask app and the CLI see it: one facade over the intake (receiver, recorder, queue),
the loop (reconciler, executor) and the clients. The app calls these methods and nothing below them.

A dry run is the same program with two stand-ins: a DryRunKube (reads the cluster, records each write
instead of making it) and a Spectator (no part in the Lease's election).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuhealth.remediator.act.reconciler import Reconciler
from gpuhealth.remediator.clients.alertmanager import client_from
from gpuhealth.remediator.clients.dry_run import DryRunKube
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.leader import Elector, LeaderElector, Spectator
from gpuhealth.remediator.clients.silences import SilenceChecker
from gpuhealth.remediator.clock import Clock, utcnow
from gpuhealth.remediator.decide.decision import NodePlan, SilenceCheck
from gpuhealth.remediator.intake.alertmanager_sync import AlertmanagerSync
from gpuhealth.remediator.intake.queue import Intake
from gpuhealth.remediator.intake.receiver import Accepted, Receiver
from gpuhealth.remediator.intake.recorder import Recorder
from gpuhealth.remediator.intake.webhook import Batch
from gpuhealth.remediator.metrics import Metrics
from gpuhealth.remediator.policy import Policy

if TYPE_CHECKING:
    from gpuhealth.remediator.workloads.watcher import WorkloadWatcher


def _freeze_when_synced(kube: Kube, stop: threading.Event) -> bool:
    """Once the Nodes are listed, what this process holds (its modules, the fleet's first versions) leaves the
    garbage collector's oldest generation: a full collection walked all of it, ~160,000 objects at 10,000 nodes,
    and stopped every answering thread for 120-160 ms (docs/benchmarks.md, "The intake lets the answers in").
    Objects made later are collected as before. True once it froze; False when there was no cache or it was stopped
    first."""
    cache = kube.cache
    while cache is not None and not stop.is_set():
        if cache.wait_synced(1.0):
            gc.collect()  # what startup left as garbage is not frozen with the rest
            gc.freeze()
            return True
    return False


class Remediator:
    def __init__(self, kube: Kube, policy: Policy, identity: str, *, dry_run: bool = False,
                 clock: Clock = utcnow, sleep: Callable[[float], None] = time.sleep,
                 metrics: Metrics | None = None, silences: SilenceCheck | None = None,
                 elector: Elector | None = None) -> None:
        if dry_run and not kube.dry_run:
            started = kube.cache
            kube = DryRunKube(kube.api_client, kube.timeout)
            kube.cache = started
        self.kube, self.policy, self.identity, self.clock = kube, policy, identity, clock
        self.metrics = metrics or Metrics()
        self.metrics.watch_events(kube.events)  # Events kept while the API fails: pending, sent late, dropped
        alertmanager = client_from(policy)  # None: `alertmanager.url: none`
        if alertmanager is not None:
            alertmanager.on_cut = lambda reason: self.metrics.am_calls_cut.labels(reason).inc()
        if silences is None and alertmanager is not None:
            silences = SilenceChecker(alertmanager, policy.alert_labels.node)
        if silences is None and policy.alertmanager.url != "none":
            raise ValueError("alertmanager.url is required: an http(s) URL to check silences, or `none` to opt out")
        self.silences = silences
        if elector is None:
            elector = LeaderElector(kube.coordination, policy.leader.namespace, policy.leader.name, identity,
                                    policy.leader.lease_duration, clock, kube.timeout)
        if isinstance(elector, LeaderElector):
            elector.on_release = self.metrics.lease_releases.inc
        if kube.dry_run and isinstance(elector, LeaderElector):
            elector = Spectator(elector)
        self.elector = elector
        self.wake = threading.Event()
        self.recorder = Recorder(kube, self.metrics, clock, on_write=self.wake.set,
                                 stopped=lambda: self.elector.stopped_by)
        self.receiver = Receiver(kube, self.recorder, self.metrics, clock)
        self.am_sync = AlertmanagerSync(alertmanager, policy, self.recorder, self.metrics, clock)
        self.loop = Reconciler(kube, policy, identity, elector, self.metrics, clock, sleep, silences, self.am_sync)
        self.loop.wake = self.wake

    @property
    def queues_webhooks(self) -> bool:
        """True: webhooks are answered once queued (serve); False: recorded before the answer."""
        return self.receiver.intake is not None

    # --- the receiver ------------------------------------------------------------------------------
    def start_intake(self, stop: threading.Event | None = None, retry: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0),
                     hold_off: float = 5.0) -> Intake:
        return self.receiver.start_intake(stop, retry, hold_off)

    def accept(self, batch: Batch) -> Accepted:
        """Queued for the intake's workers (or recorded now, without an intake); unknown nodes reported."""
        return self.receiver.accept(batch)

    def ready(self) -> bool:
        """The Kubernetes API answers (the last write and the last pass reached it; the watches are healthy)."""
        cache = self.kube.cache
        return self.kube.health.ok and (cache is None or cache.healthy)

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    # --- the loop ----------------------------------------------------------------------------------
    def run_once(self) -> list[NodePlan] | None:
        return self.loop.run_once()

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        self.loop.run_forever(stop, interval)

    def start(self, stop: threading.Event) -> None:
        """What `serve` runs beside the receiver: the watch caches (nodes and pods), the intake's workers."""
        if self.kube.cache is None:
            self.kube.start_cache(stop)
        if self.receiver.intake is None:
            self.start_intake(stop)

    def start_receiver(self, stop: threading.Event, wake: Callable[[str], None],
                       stopped_by: Callable[[], str | None]) -> None:
        """What `serve` runs beside the receiver when the loop has a process of its own (loop_process.py): the watch
        of the Nodes alone (a post's nodes checked, the recording's reads) and the intake's workers. Each recording
        wakes the loop there (`wake`, with the newest resourceVersion written), and the cleanup's mark on the Lease
        is read from there (`stopped_by`): this process takes no part in the election."""
        self.recorder.on_write = lambda: wake(self.kube.written_rv)
        self.recorder.stopped = stopped_by
        self.kube.start_cache(stop, pods=False)
        self.start_intake(stop)
        threading.Thread(target=_freeze_when_synced, args=(self.kube, stop), name="gc-freeze", daemon=True).start()

    def start_workload_watcher(self, stop: threading.Event, interval: float) -> WorkloadWatcher:
        """Classify failed workload pods (docs/jobs.md); only the leader writes."""
        from gpuhealth.remediator.workloads.watcher import start_watcher

        return start_watcher(self.kube, self.policy, self.metrics, stop, interval, clock=self.clock,
                             dry_run=self.kube.dry_run, is_leader=self.is_leader)

    # --- on the way out ----------------------------------------------------------------------------
    def flush_intake(self) -> None:
        """Answered webhooks recorded, if the API lets us (Alertmanager's repeats bring back the rest)."""
        if self.receiver.intake is not None:
            self.receiver.intake.flush_at_exit()

    def flush_events(self) -> None:
        """Events kept while the API failed: one last try."""
        self.kube.events.flush(timeout=1.0)
