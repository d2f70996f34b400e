"""The leader's loop: each pass lists the fleet, syncs with Alertmanager when due, decides (decide/plan.py's
`evaluate`, the path `plan` and the simulator share) and hands each node's plan to the executor.

Nodes and pods come from the watch cache (clients/fleet_cache.py) when one is started, else from a list per
pass. Cordons go first: they are urgent and cheap, and must not wait behind a drain that backs off; the nodes'
plans run policy kube_api.parallel_writes at a time (act/parallel.py), once the pass's budgets are decided. A pass
stops at once when this replica loses the Lease or runs past its deadline (act/pass_guard.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from gpuhealth.remediator.act.executor import Executor
from gpuhealth.remediator.act.node_jobs import job_records
from gpuhealth.remediator.act.offender_gauge import OffenderGauge
from gpuhealth.remediator.act.parallel import execute_plans
from gpuhealth.remediator.act.pass_guard import PassAborted, PassGuard
from gpuhealth.remediator.act.unreadable import UnreadableNodes
from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.alertmanager import pass_deadline
from gpuhealth.remediator.clients.errors import Forbidden, KubeError, NotFound
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.leader import Elector
from gpuhealth.remediator.clock import Clock
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.correlated import SharedFault
from gpuhealth.remediator.decide.decision import NodePlan, SilenceCheck
from gpuhealth.remediator.decide.devices import claim_index, devices_by_node
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.job_start import MISSING, JobRecord
from gpuhealth.remediator.decide.monitoring_fault import FaultKey
from gpuhealth.remediator.decide.plan import evaluate
from gpuhealth.remediator.decide.views import DraFleet, NodeView, attach_dra, build_views, needs_dra
from gpuhealth.remediator.decide.vocabulary import Deferral, JobStatus
from gpuhealth.remediator.decide.wake import next_decision
from gpuhealth.remediator.intake.alertmanager_sync import AlertmanagerSync
from gpuhealth.remediator.metrics import ApiOperation, Metrics
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")

SWEEP_AT_REST = timedelta(minutes=5)  # how often passes that need no DRA look for gpuhealth's leftover device taints
# The shortest wait before a pass the ladder's own timing asks for (decide/wake.py): never longer than --interval
MIN_WAIT_S = 1.0
# A pass (its Alertmanager sync included) still running this many lease durations after it began is stuck in
# something that does not return: /healthz fails and the kubelet restarts the container. Its own deadline is two
# thirds of one (act/pass_guard.py), the sync's read as long again, and the Lease is let go a third of one past the
# deadline (clients/leader.py); 8 leave room for the sync's writes and the last calls under way (2 min by default).
PASS_LIVENESS_LEASES = 8


def pass_liveness_bound(policy: Policy) -> timedelta:
    """How long one pass may run before the loop counts as hung (policy leader.lease_duration x 8)."""
    return policy.leader.lease_duration * PASS_LIVENESS_LEASES


class Reconciler:
    def __init__(self, kube: Kube, policy: Policy, identity: str, elector: Elector, metrics: Metrics, clock: Clock,
                 sleep: Callable[[float], None], silences: SilenceCheck | None, am_sync: AlertmanagerSync) -> None:
        self.kube, self.policy, self.identity, self.elector = kube, policy, identity, elector
        self.metrics, self.clock, self.silences, self.am_sync = metrics, clock, silences, am_sync
        self.guard = PassGuard(elector, clock, sleep)
        self.executor = Executor(kube, policy, metrics, self.guard)
        self.offenders = OffenderGauge(metrics, policy)
        self.unreadable = UnreadableNodes(kube, metrics)
        self.wake = threading.Event()
        self.last_plans: list[NodePlan] = []
        self._was_leader = False
        self._dra_unavailable = False  # said once: the cluster serves no DRA, or the chart grants no access
        self._swept_at: datetime | None = None  # the last sweep of gpuhealth's DeviceTaintRules while at rest
        self._needed_dra = True  # the pass before read DRA (needs_dra): the next one sweeps, at rest or not
        self._monitoring_faults: set[FaultKey] = set()  # reported (gauge, audit line) by the last pass
        self._correlated_faults: set[SharedFault] = set()  # reported (gauge, audit line) by the last pass
        self.next_due: datetime | None = None  # when the last pass's decisions change by time alone (decide/wake.py)
        self.pass_began: datetime | None = None  # on the loop's clock, while a pass runs (None between passes)

    def stuck(self) -> str | None:
        """Why the loop counts as hung (its pass has run past pass_liveness_bound), or None: what /healthz reads."""
        began, bound = self.pass_began, pass_liveness_bound(self.policy)
        if began is None or self.clock() - began <= bound:
            return None
        return (f"the reconcile pass that began at {began.isoformat(timespec='seconds')} has run over "
                f"{bound.total_seconds():g} s ({PASS_LIVENESS_LEASES} x leader.lease_duration): it is stuck")

    def run_once(self) -> list[NodePlan] | None:
        """Reconcile if leader (None when not), watched by stuck(). A dry run takes no part in the election."""
        self.pass_began = self.clock()
        try:
            return self._run_once()
        finally:
            self.pass_began = None

    def _run_once(self) -> list[NodePlan] | None:
        self.next_due = None  # set again only by a pass that ends: a stale one must not shorten the waits
        if not self.elector.takes_part:
            return self.reconcile()
        leader = self.elector.try_acquire()
        self.metrics.leader.set(1 if leader else 0)
        was_leader, self._was_leader = self._was_leader, leader
        if not leader:
            return None
        if not was_leader:
            self.am_sync.due_now()  # a new leader agrees with Alertmanager before its first action
        cache = self.kube.cache
        if not was_leader and cache is not None and cache.synced:
            try:  # a new leader counts budgets from a fresh list, whatever its watch may still be bringing
                cache.nodes.relist()
            except Exception as exc:  # the API's trouble or an unreadable answer: not leading on stale counts
                self.metrics.api_error(ApiOperation.LIST_NODES)
                self.kube.health.ok = False
                log.warning("listing nodes on taking the Lease: %s", exc)
                self._was_leader = False  # list again next time
                return None
        return self.reconcile()

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        threading.Thread(target=self.elector.renew_loop, args=(stop,), name="remediator-lease", daemon=True).start()
        cache = self.kube.cache
        while cache is not None and not cache.wait_synced(1.0) and not stop.is_set():
            log.info("waiting for the watch caches to list the fleet")
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:  # a bug in a pass must not end the loop: logged, /readyz fails, the next pass runs
                log.exception("reconcile pass failed")
                self.kube.health.ok = False
            self.wake.wait(self.wait_s(interval))
            self.wake.clear()

    def wait_s(self, interval: float) -> float:
        """Until the next pass: --interval, or less when a rung's timeout, an escalation, the healthy delay or the
        like falls due before it (the ladder's own word for when, decide/wake.py), but at least MIN_WAIT_S."""
        left = (self.next_due - self.clock()).total_seconds() if self.next_due is not None else interval
        return interval if left <= 0 else min(interval, max(MIN_WAIT_S, left))

    def reconcile(self) -> list[NodePlan]:
        self.metrics.passes.inc()
        try:
            nodes = self._nodes()
            if self._sync(nodes):  # before the pass's clock starts: the sync's writes are not the pass's
                nodes = self._nodes()  # with what the sync wrote (our writes are in the cache at once)
        except Exception as exc:  # the API's trouble or a cache not ready: no pass on what cannot be read
            self.metrics.api_error(ApiOperation.LIST_NODES)
            self.kube.health.ok = False
            log.warning("listing nodes: %s", exc)
            return []
        self.kube.health.ok = True
        now = self.clock()
        self.guard.begin(now)
        by_name = {api_objects.name(n): n for n in nodes}
        cache = self.kube.cache
        pods_on = cache.pods_on if cache is not None else self.kube.pods_on
        views = build_views(nodes, self.policy, pods_on, self._job_status_lookup(), self.kube.recorded_overlay(),
                            now=now)
        dra = self._dra() if needs_dra(views) else None  # only a pass that can use them reads the DRA objects
        if dra is not None:
            attach_dra(views, dra)
        trips = self.elector.breaker_trips()
        with pass_deadline(self.guard.seconds_left()):  # the silence checks end with the pass
            ledger, plans = evaluate(views, self.policy, now, trips, self.silences)
        view_of = {v.name: v for v in views}
        try:
            self._report_budget(ledger, trips, now)
            self._report_monitoring_faults(ledger)
            self._report_correlated_faults(ledger)
            self.offenders.refresh(views, now)
            self.unreadable.report(views, now)
            # cordons first, then the rest, parallel_writes nodes at once (act/parallel.py); budgets are decided above
            execute_plans(plans, lambda p: self._execute(p, view_of[p.node], by_name[p.node], now), self._workers())
            self._sweep_device_taints(views, plans, dra, now)
        except PassAborted as exc:
            self.metrics.pass_aborted(exc.reason)
            audit(AuditKind.PASS_ABORTED, reason=str(exc), identity=self.identity)
        finally:
            self.guard.end()
        self.last_plans = plans
        capped = any(d.deferral == Deferral.RATE_CAP for p in plans for d in p.decisions)
        self.next_due = next_decision((p.final_state for p in plans), self.policy, trips, now, capped)
        return plans

    def _sync(self, nodes: list[RawNode]) -> bool:
        """The sync with Alertmanager when it is due: whether it recorded anything. Its own trouble (a bug, an answer
        no check foresaw) is its own: logged and counted as a failed sync, and the pass goes on without it."""
        if not self.am_sync.due(self.clock()):
            return False
        try:
            synced = self.am_sync.sync(nodes, self._read_until)
        except Exception as exc:
            self.metrics.am_syncs.labels("error").inc()
            log.error("Alertmanager sync failed (%s: %s): the pass goes on without it", type(exc).__name__, exc,
                      exc_info=exc)
            return False
        return synced is not None and bool(synced.batch.alerts)

    def _execute(self, plan: NodePlan, view: NodeView, node: RawNode, now: datetime) -> None:
        """One node's plan; its trouble is counted and logged, and is not the next node's."""
        try:
            self.executor.execute(plan, view, node, now)
        except PassAborted:
            raise
        except Exception as exc:
            self.metrics.api_error(ApiOperation.EXECUTE)
            log.warning("node %s: %s", plan.node, exc)

    def _workers(self) -> int:
        """Nodes written at once: policy kube_api.parallel_writes; a dry run's report stays in the pass's order."""
        return 1 if self.kube.dry_run else self.policy.kube_api.parallel_writes

    @contextmanager
    def _read_until(self) -> Iterator[None]:
        """The sync's reading of Alertmanager: bounded as a pass is (the renew deadline), and watched as one (a read
        that does not end lets the Lease go). Its writes to the Nodes come after, outside it."""
        deadline = self.elector.renew_deadline
        self.elector.pass_due = self.clock() + deadline
        try:
            with pass_deadline(deadline.total_seconds()):
                yield
        finally:
            self.elector.pass_due = None

    def _dra(self) -> DraFleet | None:
        """What DRA publishes this pass (None: node scope for every node), read only in a pass that can use it
        (views.needs_dra), fresh and in pages (clients/kube.py). A cluster that serves no ResourceSlice (404) or a
        chart without the grants (403) is node scope, said once; the API's trouble is counted."""
        if not self.policy.dra.enabled:
            return None
        try:
            devices = devices_by_node(self.kube.list_resource_slices(), self.policy.dra.driver)
            if not devices:
                return None
            claims = claim_index(self.kube.list_resource_claims())
            return DraFleet(devices, claims, self.executor.taints.served_version())
        except (NotFound, Forbidden) as exc:
            if not self._dra_unavailable:
                log.warning("DRA objects cannot be read (%s): every node is remediated at node scope", exc)
            self._dra_unavailable = True
        except Exception as exc:  # the API's trouble, an answer the client cannot read: node scope, not no pass
            self.metrics.api_error(ApiOperation.LIST_DRA)
            log.warning("listing DRA objects: %s: nodes without a GPU scope episode get node scope this pass", exc)
        return None

    def _sweep_device_taints(self, views: list[NodeView], plans: list[NodePlan], dra: DraFleet | None,
                             now: datetime) -> None:
        """gpuhealth's DeviceTaintRules whose node has no episode that holds them (a release that failed, an episode
        a person closed, a node replaced or deleted): removed, so no GPU stays quarantined with no state behind it.
        Every pass that needs DRA and the first pass after; otherwise every SWEEP_AT_REST."""
        busy, self._needed_dra = self._needed_dra, needs_dra(views)
        if not self.policy.dra.enabled or self.kube.dry_run:
            return
        if not (busy or self._needed_dra) and self._swept_at is not None and now - self._swept_at < SWEEP_AT_REST:
            return
        try:
            taint_api = dra.taint_api if dra is not None else self.executor.taints.served_version()
        except KubeError as exc:
            self.metrics.api_error(ApiOperation.LIST_DRA)
            log.warning("asking which version serves DeviceTaintRule: %s", exc)
            return
        self._swept_at = now
        if taint_api is None:
            return
        holding = {v.name for v in views if v.damaged is not None or (v.state.active and v.state.gpu_scope.devices)}
        # started this pass
        holding |= {p.node for p in plans if p.final_state.active and p.final_state.gpu_scope.devices}
        try:
            for node in self.executor.taints.nodes_with_rules(taint_api):
                if node not in holding:
                    released = self.executor.taints.release(taint_api, node)
                    audit(AuditKind.DEVICE_TAINTS_SWEPT, node=node, rules=released)
        except KubeError as exc:
            self.metrics.api_error(ApiOperation.LIST_DRA)
            log.warning("sweeping gpuhealth's device taints: %s", exc)

    def _nodes(self) -> list[RawNode]:
        """The fleet as the watch cache has it (a list of every Node when there is no cache)."""
        cache = self.kube.cache
        if cache is None:
            return self.kube.list_nodes()
        if not cache.synced:
            raise RuntimeError("the watch cache has not listed the fleet yet")
        if not cache.nodes.healthy:  # its watch is failing: it may be any age, and budgets come from the cluster
            return self.kube.list_nodes()
        return cache.nodes.items()

    def _job_status_lookup(self) -> Callable[[str], JobRecord]:
        """Job status by name for this pass: the gpuhealth Jobs listed once, on the first question."""
        listed: dict[str, JobRecord] | None = None
        unknown = False

        def status(name: str) -> JobRecord:
            nonlocal listed, unknown
            if listed is None:
                try:
                    listed = job_records(self.kube, self.policy.jobs.namespace)
                except Exception as exc:
                    # A Job rung's outcome is unknown this pass (403: the Role lacks jobs list; docs/install.md)
                    log.warning("listing jobs in %s: %s", self.policy.jobs.namespace, exc)
                    self.metrics.api_error(ApiOperation.LIST_JOBS)
                    listed, unknown = {}, True
            if unknown:
                return JobRecord(JobStatus.RUNNING)  # neither done nor failed; look again next pass
            return listed.get(name, MISSING)

        return status

    def _report_monitoring_faults(self, ledger: Ledger) -> None:
        """Each monitoring fault: its nodes in the gauge while it lasts (0 after), an audit and log line when it begins
        and ends (the nodes' Events are their plans' notes)."""
        faults = ledger.faults
        for key in sorted(set(faults.faults) - self._monitoring_faults):
            log.warning("monitoring fault: %s", faults.why(key))
            audit(AuditKind.MONITORING_FAULT, pool=key.pool, alert=key.alert, probe=key.probe, reason=key.reason,
                  nodes=sorted(faults.faults[key]), pool_size=faults.pool_sizes.get(key.pool, 0),
                  dry_run=self.kube.dry_run)
        for key in sorted(self._monitoring_faults - set(faults.faults)):
            audit(AuditKind.MONITORING_FAULT_OVER, pool=key.pool, alert=key.alert, probe=key.probe, reason=key.reason,
                  nodes_firing=len(faults.firing.get(key, ())), dry_run=self.kube.dry_run)
            self.metrics.monitoring_fault.labels(key.pool, key.alert, key.probe, key.reason).set(0)
        for key, nodes in faults.faults.items():
            self.metrics.monitoring_fault.labels(key.pool, key.alert, key.probe, key.reason).set(len(nodes))
        self._monitoring_faults = set(faults.faults)

    def _report_correlated_faults(self, ledger: Ledger) -> None:
        """Each correlated fault (decide/correlated.py): its nodes in the gauge while it lasts (0 after: the page
        resolves), an audit and log line when it begins and ends."""
        shared = ledger.correlated
        for key in sorted(set(shared.faults) - self._correlated_faults):
            log.warning("correlated fault: %s", shared.why(key))
            audit(AuditKind.CORRELATED_FAULT, alert=key.alert, label=key.label, value=key.value,
                  nodes=sorted(shared.faults[key]), dry_run=self.kube.dry_run)
        for key in sorted(self._correlated_faults - set(shared.faults)):
            audit(AuditKind.CORRELATED_FAULT_OVER, alert=key.alert, label=key.label, value=key.value,
                  dry_run=self.kube.dry_run)
            self.metrics.correlated_fault.labels(key.alert, key.label, key.value).set(0)
        for key, nodes in shared.faults.items():
            self.metrics.correlated_fault.labels(key.alert, key.label, key.value).set(len(nodes))
        self._correlated_faults = set(shared.faults)

    def _report_budget(self, ledger: Ledger, stored_trips: dict[str, str], now: datetime) -> None:
        m = self.metrics
        for pool, usage in ledger.pools.items():
            m.budget_in_use.labels(pool, "disrupted").set(len(usage.disrupted))
            m.budget_in_use.labels(pool, "cordoned").set(len(usage.cordoned))
            m.budget_limit.labels(pool, "disrupted").set(ledger.disrupted_limit(pool))
            m.budget_limit.labels(pool, "cordoned").set(ledger.cordoned_limit(pool))
            m.breaker_open.labels(pool).set(1 if ledger.breaker_open(pool) else 0)
            if usage.gpus:  # GPU scope: quarantined GPUs against their own budget
                m.budget_in_use.labels(pool, "quarantined_gpus").set(len(usage.quarantined))
                m.budget_limit.labels(pool, "quarantined_gpus").set(ledger.quarantined_limit(pool))
        for pool, why in ledger.newly_tripped.items():  # closed -> open only
            audit(AuditKind.BREAKER_OPEN, pool=pool, reason=why, dry_run=self.kube.dry_run)
            self.guard.check()
            self.kube.event(self.policy.leader.name, EventReason.CIRCUIT_BREAKER_OPEN,
                            f"pool {pool}: {why}; new disruptive actions stop for {self.policy.breaker.cooldown}",
                            now, warning=True, kind="Lease", namespace=self.policy.leader.namespace,
                            api_version="coordination.k8s.io/v1")
        if ledger.breaker_trips != stored_trips:
            self.guard.check()
            try:
                self.elector.save_breaker_trips(ledger.breaker_trips)
            except Exception as exc:  # kept in memory; the next pass saves it again
                log.warning("saving breaker state on the Lease: %s", exc)
