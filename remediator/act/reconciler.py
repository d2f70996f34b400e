"""The remediator's loop: record what webhooks said on the Nodes, and, as leader, act on it.

`evaluate` is the single decision path: `serve` (Remediator.reconcile) and `plan` (plan_from_json)
both call it, so what `plan` prints is what `serve` would do.

Recording: with an intake (serve), the webhook is answered once queued and the intake's workers record
it (intake.py); without one, it is recorded before the answer. Nodes and pods come from the watch
cache (fleet_cache.py) when one is started, else from a list per pass. Executing a node's plan: the
leader checks it still leads before every write; before a disruptive step it re-reads the Node and
drops the plan if the Node changed since the cache or list had it (the next pass decides again); it
writes the plan's final state once, with the resourceVersion it was computed from, and only then
performs the side effects (evictions, Jobs, replacement) and reports them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from remediator.act.drain import OutOfTime, drain_pass
from remediator.act.node_jobs import create_job, job_statuses, render_job
from remediator.act.replace import replace_node
from remediator.clients.alertmanager import AlertmanagerUnavailable, client_from
from remediator.clients.kube import (
    Kube,
    claim_do_not_disrupt,
    cordon_body,
    state_body,
    uncordon_body,
    with_do_not_disrupt,
)
from remediator.clients.leader import LeaderElector, breaker_trips_of
from remediator.clients.silences import SilenceChecker
from remediator.clock import Clock, utcnow
from remediator.decide.budget import Ledger
from remediator.decide.event_reasons import action_failed_reason, action_reason
from remediator.decide.ladder import Decision, NodePlan, SilenceCheck, decide
from remediator.decide.nodestate import (
    DISRUPTIVE,
    STATE_ANNOTATION,
    TAINT_KEY,
    NodeState,
    fmt_time,
    parse_time,
    record_alerts,
)
from remediator.decide.views import NodeView, build_views, evictable_pods
from remediator.intake.alert_sync import SyncPlan, read_alertmanager, recorded_states, sync_batch
from remediator.intake.queue import Intake, Outcome
from remediator.intake.webhook import Batch
from remediator.metrics import Metrics
from remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")

def audit(event: str, **fields: Any) -> None:
    """One structured (JSON) log line per decision or action."""
    log.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))


class PassAborted(Exception):
    """This replica lost the Lease, or the pass ran past its deadline: stop writing at once."""


@dataclass
class Accepted:
    """What the receiver answers: the nodes queued for recording, those ignored, or why it refuses (5xx)."""

    queued: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    refused: str | None = None


@dataclass
class RecordResult:
    recorded: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (node, reason): unknown node, unreadable state
    failed: list[tuple[str, str]] = field(default_factory=list)  # (node, error): answer 5xx, Alertmanager retries
    api_failing: bool = False  # a failure was the API's (5xx, no answer), not one node's rejection (4xx)
    rejected: list[str] = field(default_factory=list)  # failed nodes whose own 4xx it was: retrying cannot help


def evaluate(views: list[NodeView], policy: Policy, now: datetime, breaker_trips: dict[str, str] | None = None,
             silences: SilenceCheck | None = None,
             pool_sizes: dict[str, int] | None = None) -> tuple[Ledger, list[NodePlan]]:
    """pool_sizes: see Ledger.from_views (None for serve and plan, which pass every node)."""
    ledger = Ledger.from_views(views, policy, now, breaker_trips, pool_sizes)
    return ledger, decide(views, policy, now, ledger, silences)


def plan_from_json(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None, batches: Iterable[Batch],
                   policy: Policy, now: datetime, silences: SilenceCheck | None = None,
                   breaker_trips: dict[str, str] | None = None) -> list[Decision]:
    """What serve would decide now, from `kubectl get nodes/pods -o json`, the Lease's breaker state and
    webhook bodies; no cluster. pods None: unknown (drains and Jobs are deferred, not assumed empty)."""
    by_name = {(n.get("metadata") or {}).get("name", ""): n for n in nodes}
    states: dict[str, NodeState] = {}
    missing: list[str] = []
    damaged: set[str] = set()
    for batch in batches:
        for node, alerts in batch.by_node().items():
            if node not in by_name:
                missing.append(node)
                continue
            if node in damaged:
                continue
            if node not in states:
                raw = ((by_name[node].get("metadata") or {}).get("annotations") or {}).get(STATE_ANNOTATION)
                try:
                    states[node] = NodeState.from_json(raw)
                except ValueError:
                    damaged.add(node)  # the view reports it (fail closed)
                    continue
            states[node] = record_alerts(states[node], alerts, now)

    pods_on = None
    if pods is not None:
        known = pods

        def pods_on(name: str) -> list[dict[str, Any]]:
            return [p for p in known if (p.get("spec") or {}).get("nodeName") == name]

    views = build_views(nodes, policy, pods_on, None, states)
    _, plans = evaluate(views, policy, now, breaker_trips, silences)
    out = [d for p in plans for d in p.decisions]
    decided = {d.node for d in out}
    out += [Decision(n, "none", "skipped", "no action needed") for n in states if n not in decided]
    out += [Decision(n, "none", "skipped", "node not found in the nodes file") for n in dict.fromkeys(missing)]
    return out


class Remediator:
    def __init__(self, kube: Kube, policy: Policy, identity: str, *, dry_run: bool = False,
                 clock: Clock = utcnow, sleep: Callable[[float], None] = time.sleep,
                 metrics: Metrics | None = None, silences: SilenceCheck | None = None,
                 elector: LeaderElector | None = None) -> None:
        self.kube, self.policy, self.identity, self.dry_run = kube, policy, identity, dry_run
        self.clock, self.sleep = clock, sleep
        self.metrics = metrics or Metrics()
        self.alertmanager = client_from(policy)  # None: `alertmanager.url: none`
        if silences is None and self.alertmanager is not None:
            silences = SilenceChecker(self.alertmanager, policy.label_node)
        if silences is None and policy.alertmanager_url != "none":
            raise ValueError("alertmanager.url is required: an http(s) URL to check silences, or `none` to opt out")
        self.silences = silences
        self.elector = elector or LeaderElector(kube.coordination, policy.lease_namespace, policy.lease_name,
                                                identity, policy.lease_duration, clock, kube.timeout)
        self.overlay: dict[str, NodeState] = {}  # dry-run only: what we would have recorded
        self.overlay_lock = threading.Lock()
        self.wake = threading.Event()
        self.api_ok = True
        self.last_plans: list[NodePlan] = []
        self._deadline: datetime | None = None
        self._was_leader = False
        self.intake: Intake | None = None  # None: webhooks are recorded before they are answered
        self._readable: dict[tuple[str, str], str | None] = {}  # (node, resourceVersion) -> state parse error
        self._am_synced: datetime | None = None  # when the last sync with Alertmanager was tried (None: due now)

    # --- intake: answered first, recorded by the intake's workers (intake.py) ---------------
    def start_intake(self, stop: threading.Event | None = None, retry: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0),
                     hold_off: float = 5.0) -> Intake:
        def record(batch: Batch, received: datetime) -> Outcome:
            result = self.record(batch, received)
            return Outcome(result.recorded, result.failed, result.api_failing, frozenset(result.rejected))

        def dropped(node: str, error: str) -> None:
            self.metrics.webhook_errors.labels("record_failed").inc()
            audit("record_dropped", node=node, error=error)

        self.intake = Intake(record, self.clock, retry=retry, on_drop=dropped, hold_off=hold_off)
        self.intake.start(stop)
        return self.intake

    def accept(self, batch: Batch) -> Accepted:
        """The receiver's answer: queued for the intake's workers, after a look at the watch cache for nodes
        that do not exist or whose state cannot be read (those are reported, not queued)."""
        if self.intake is None:
            result = self.record(batch)
            refused = None
            if result.failed:
                refused = "; ".join(f"{n}: {e}" for n, e in result.failed)
            return Accepted(result.recorded, result.ignored, refused)
        failing = self.intake.failing
        if failing:
            return Accepted(refused=f"recording on the Nodes is failing ({failing})")
        out = Accepted()
        cache = self.kube.cache
        keep = []
        for node, alerts in batch.by_node().items():
            why = self._unusable(cache.nodes.get(node) if cache is not None and cache.synced else {}, len(alerts))
            if why:
                out.ignored.append((node, why))
                audit("alert_ignored", node=node, reason=why)
            else:
                out.queued.append(node)
                keep.append(node)
        queued = Batch(alerts=[a for a in batch.alerts if a.node in set(keep)])
        if queued.alerts and not self.intake.submit(queued):
            return Accepted(ignored=out.ignored, refused="too many webhooks waiting to be recorded")
        return out

    def _unusable(self, node: dict[str, Any] | None, alerts: int) -> str | None:
        """Why alerts for this cached node cannot be recorded ({}: not known to the cache: the workers ask)."""
        if node is None:
            self.metrics.alerts_ignored.labels("unknown node").inc(alerts)
            return "node not found"
        meta = node.get("metadata") or {}
        raw = (meta.get("annotations") or {}).get(STATE_ANNOTATION)
        if raw is None or self.dry_run:
            return None
        key = (meta.get("name", ""), meta.get("resourceVersion", ""))
        memo = self._readable  # shared by the request threads: one lookup, and a local result
        if key in memo:  # parsed once per version of the Node, not once per post
            error = memo.get(key)
        else:
            if len(memo) > 50_000:
                memo.clear()
            try:
                NodeState.from_json(raw)
                error = None
            except ValueError as exc:
                error = str(exc)
            memo[key] = error
        if error is not None:
            self.metrics.alerts_ignored.labels("unreadable state").inc(alerts)
            return f"state annotation unreadable ({error}): node left alone"
        return None

    # --- recording on the Nodes (by the intake's workers, or before answering without an intake) ----
    def record(self, batch: Batch, now: datetime | None = None) -> RecordResult:
        """One PATCH per node (resourceVersion-guarded, retried on 409). Failures are returned (retried by
        the intake, or answered 5xx so that Alertmanager retries); nothing is dropped silently."""
        now = now or self.clock()
        result = RecordResult()
        wrote = False
        for node, alerts in batch.by_node().items():
            outcome = self._record(node, alerts, now)
            if outcome is None or outcome[0] == "unchanged":
                result.recorded.append(node)
                wrote = wrote or outcome is None
            elif outcome[0] == "ignored":
                result.ignored.append((node, outcome[1]))
            else:
                result.failed.append((node, outcome[1]))
                result.api_failing = result.api_failing or outcome[0] == "failed"
                if outcome[0] == "rejected":
                    result.rejected.append(node)
        if wrote:  # something new for the loop to decide on
            self.wake.set()
        return result

    def _record(self, node: str, alerts: list[Any], now: datetime) -> tuple[str, str] | None:
        """None (written), or (kind, detail): unchanged, ignored, rejected (a 4xx for this node), conflict
        (409s that outlasted the retries: worth another try later) or failed (the API: 5xx, no answer)."""
        error, kind = "conflict", "conflict"
        cache = self.kube.cache
        for attempt in range(3):
            try:
                # the watch cache's copy first (a stale one costs a 409 and a fresh read), else the API
                cached = cache.nodes.get(node) if cache is not None and attempt == 0 else None
                current = cached or self.kube.get_node(node)
                raw = (current["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
                with self.overlay_lock:
                    base = self.overlay[node] if self.dry_run and node in self.overlay else NodeState.from_json(raw)
                    new = record_alerts(base, alerts, now)
                    if self.dry_run:
                        self.overlay[node] = new
                unchanged = _seen_again(base, new)
                if not self.dry_run and not unchanged:
                    self.kube.write_state(node, new, current["metadata"].get("resourceVersion"))
                audit("recorded", node=node, alerts=len(alerts), episode=new.episode, dry_run=self.dry_run)
                self.api_ok = True
                return ("unchanged", "") if unchanged else None
            except ApiException as exc:
                if exc.status == 404:
                    audit("alert_ignored", node=node, reason="node not found")
                    self.metrics.alerts_ignored.labels("unknown node").inc(len(alerts))
                    return "ignored", "node not found"
                self.metrics.api_errors.labels("record").inc()
                log.warning("recording alerts on %s: HTTP %s %s", node, exc.status, exc.reason)
                error = f"HTTP {exc.status} {exc.reason}"
                if exc.status != 409:
                    self.api_ok = exc.status < 500
                    kind = "rejected" if exc.status < 500 else "failed"
                    break
            except ValueError as exc:  # the state annotation cannot be read: never overwrite it
                log.error("recording alerts on %s: %s", node, exc)
                self.metrics.alerts_ignored.labels("unreadable state").inc(len(alerts))
                return "ignored", f"state annotation unreadable ({exc}): node left alone"
            except Exception as exc:
                self.metrics.api_errors.labels("record").inc()
                log.warning("recording alerts on %s: %s", node, exc)
                self.api_ok = False
                error, kind = str(exc), "failed"
                break
        return kind, error

    # --- level-triggered: the Nodes' records against Alertmanager's active alerts (alert_sync.py) ----
    def sync_due(self, now: datetime) -> bool:
        interval = self.policy.alertmanager_sync_interval
        if self.alertmanager is None or interval is None:
            return False
        return self._am_synced is None or now - self._am_synced >= interval

    def sync_alertmanager(self, nodes: list[dict[str, Any]]) -> SyncPlan | None:
        """Record what webhooks lost, resolve what Alertmanager no longer has (alert_sync.py). None when
        Alertmanager could not be read: then nothing is resolved (missing data is never a resolution) and
        the webhooks and episode.quiet_timeout carry on alone."""
        assert self.alertmanager is not None
        asked_at = self._am_synced = self.clock()
        try:
            reading = read_alertmanager(self.alertmanager, self.policy)
        except AlertmanagerUnavailable as exc:
            self.metrics.am_syncs.labels("error").inc()
            self.metrics.am_up.set(0)
            log.warning("Alertmanager sync: %s: nothing is resolved until it answers (webhooks and "
                        "episode.quiet_timeout only)", exc)
            audit("alertmanager_sync", result="error", error=str(exc))
            return None
        with self.overlay_lock:
            overlay = dict(self.overlay) if self.dry_run else None
        states = recorded_states(nodes, overlay)
        plan = sync_batch(states, reading.active, asked_at, self.clock(), self.policy,
                          resolve=reading.untrusted is None)
        failed: list[tuple[str, str]] = []
        if plan.batch.alerts:
            failed = self.record(plan.batch, self.clock()).failed
        self.metrics.am_syncs.labels("ok").inc()
        self.metrics.am_up.set(1)
        for change, count in plan.changes().items():
            self.metrics.am_sync_changes.labels(change).inc(count)
        if not failed:
            self.metrics.am_last_sync.set(asked_at.timestamp())
        if plan.recorded or plan.resolved or failed or reading.untrusted:
            audit("alertmanager_sync", result="ok", members=reading.members, active=len(reading.active),
                  ignored=len(reading.ignored), unknown_nodes=plan.unknown_nodes, not_resolving=reading.untrusted,
                  failed=[n for n, _ in failed], dry_run=self.dry_run, **plan.changes())
        return plan

    # --- the pass --------------------------------------------------------------------------
    def run_once(self) -> list[NodePlan] | None:
        """Reconcile if leader (None when not). A dry run takes no part in leader election: it only reads."""
        if self.dry_run:
            return self.reconcile()
        leader = self.elector.try_acquire()
        self.metrics.leader.set(1 if leader else 0)
        was_leader, self._was_leader = self._was_leader, leader
        if not leader:
            return None
        if not was_leader:
            self._am_synced = None  # a new leader agrees with Alertmanager before its first action
        if not was_leader and self.kube.cache is not None and self.kube.cache.synced:
            try:  # a new leader counts budgets from a fresh list, whatever its watch may still be bringing
                self.kube.cache.nodes.relist()
            except Exception as exc:
                self.metrics.api_errors.labels("list_nodes").inc()
                self.api_ok = False
                log.warning("listing nodes on taking the Lease: %s", exc)
                self._was_leader = False  # list again next time
                return None
        return self.reconcile()

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        if not self.dry_run:
            threading.Thread(target=self.elector.renew_loop, args=(stop,), name="remediator-lease",
                             daemon=True).start()
        cache = self.kube.cache
        while cache is not None and not cache.wait_synced(1.0) and not stop.is_set():
            log.info("waiting for the watch caches to list the fleet")
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("reconcile pass failed")
                self.api_ok = False
            self.wake.wait(interval)
            self.wake.clear()

    def _guard(self) -> None:
        """Before every write: still the leader, and the pass within its deadline."""
        if self.dry_run:
            return
        if not self.elector.is_leader():
            raise PassAborted("lost the Lease")
        if self._deadline is not None and self.clock() >= self._deadline:
            raise PassAborted(f"pass ran past its deadline ({self.elector.renew_deadline})")

    def _pass_sleep(self, seconds: float) -> None:
        """Backoff within a pass, never past the pass's deadline."""
        if self._deadline is not None and self.clock().timestamp() + seconds >= self._deadline.timestamp():
            raise OutOfTime()
        self.sleep(seconds)

    def reconcile(self) -> list[NodePlan]:
        self.metrics.passes.inc()
        try:
            nodes = self._nodes()
            if self.sync_due(self.clock()):  # before the pass's clock starts: the sync's writes are not the pass's
                synced = self.sync_alertmanager(nodes)
                if synced is not None and synced.batch.alerts:
                    nodes = self._nodes()  # with what the sync wrote (our writes are in the cache at once)
        except Exception as exc:
            self.metrics.api_errors.labels("list_nodes").inc()
            self.api_ok = False
            log.warning("listing nodes: %s", exc)
            return []
        self.api_ok = True
        now = self.clock()
        self._deadline = now + self.elector.renew_deadline  # decisions older than that are not acted on
        by_name = {n["metadata"]["name"]: n for n in nodes}
        with self.overlay_lock:
            overlay = dict(self.overlay) if self.dry_run else None
        cache = self.kube.cache
        pods_on = cache.pods_on if cache is not None else self.kube.pods_on
        views = build_views(nodes, self.policy, pods_on, self._job_status_lookup(), overlay)
        trips = self.elector.breaker_trips() if not self.dry_run else breaker_trips_of(self.elector.peek())
        ledger, plans = evaluate(views, self.policy, now, trips, self.silences)
        view_of = {v.name: v for v in views}
        try:
            self._report_budget(ledger, trips, now)
            # Cordons first: they are urgent and cheap, and must not wait behind a drain that backs off.
            for plan in sorted(plans, key=lambda p: not any(d.action == "cordon" for d in p.decisions)):
                try:
                    self._execute(plan, view_of[plan.node], by_name[plan.node], now)
                except PassAborted:
                    raise
                except Exception as exc:
                    self.metrics.api_errors.labels("execute").inc()
                    log.warning("node %s: %s", plan.node, exc)
        except PassAborted as exc:
            self.metrics.passes_aborted.labels(str(exc).split(" (")[0]).inc()
            audit("pass_aborted", reason=str(exc), identity=self.identity)
        finally:
            self._deadline = None
        self.last_plans = plans
        return plans

    def _nodes(self) -> list[dict[str, Any]]:
        """The fleet as the watch cache has it (a list of every Node when there is no cache)."""
        cache = self.kube.cache
        if cache is None:
            return self.kube.list_nodes()
        if not cache.synced:
            raise RuntimeError("the watch cache has not listed the fleet yet")
        if not cache.nodes.healthy:  # its watch is failing: it may be any age, and budgets come from the cluster
            return self.kube.list_nodes()
        return cache.nodes.items()

    def _job_status_lookup(self) -> Callable[[str], str]:
        """Job status by name for this pass: the gpuhealth Jobs listed once, on the first question."""
        listed: dict[str, str] | None = None
        unknown = False

        def status(name: str) -> str:
            nonlocal listed, unknown
            if listed is None:
                try:
                    listed = job_statuses(self.kube.batch, self.policy.jobs_namespace, self.kube.timeout)
                except Exception as exc:
                    # A Job rung's outcome is unknown this pass (403: the Role lacks jobs list; docs/install.md)
                    log.warning("listing jobs in %s: %s", self.policy.jobs_namespace, exc)
                    self.metrics.api_errors.labels("list_jobs").inc()
                    listed, unknown = {}, True
            if unknown:
                return "running"  # neither done nor failed; look again next pass
            return listed.get(name, "missing")

        return status

    def _report_budget(self, ledger: Ledger, stored_trips: dict[str, str], now: datetime) -> None:
        m = self.metrics
        for pool, usage in ledger.pools.items():
            m.budget_in_use.labels(pool, "disrupted").set(len(usage.disrupted))
            m.budget_in_use.labels(pool, "cordoned").set(len(usage.cordoned))
            m.budget_limit.labels(pool, "disrupted").set(ledger.disrupted_limit(pool))
            m.budget_limit.labels(pool, "cordoned").set(ledger.cordoned_limit(pool))
            m.breaker_open.labels(pool).set(1 if ledger.breaker_open(pool) else 0)
        for pool, why in ledger.newly_tripped.items():  # closed -> open only
            audit("breaker_open", pool=pool, reason=why, dry_run=self.dry_run)
            if self.dry_run:
                continue
            self._guard()
            try:
                self.kube.event(self.policy.lease_name, "CircuitBreakerOpen",
                                f"pool {pool}: {why}; new disruptive actions stop for "
                                f"{self.policy.breaker_cooldown}", now, warning=True, kind="Lease",
                                namespace=self.policy.lease_namespace, api_version="coordination.k8s.io/v1")
            except Exception as exc:
                log.warning("breaker event: %s", exc)
        if ledger.breaker_trips != stored_trips and not self.dry_run:
            self._guard()
            try:
                self.elector.save_breaker_trips(ledger.breaker_trips)
            except Exception as exc:
                log.warning("saving breaker state on the Lease: %s", exc)

    # --- executing one node's plan ----------------------------------------------------------
    def _event(self, node: str, reason: str, message: str, now: datetime, warning: bool = False) -> None:
        if self.dry_run:
            return
        try:
            self.kube.event(node, reason, message, now, warning=warning)
        except Exception as exc:
            log.warning("event %s on %s: %s", reason, node, exc)

    def _fields(self, d: Decision, **extra: Any) -> dict[str, Any]:
        return {"node": d.node, "pool": d.pool, "action": d.action, "decision": d.decision, "reason": d.reason,
                "dry_run": self.dry_run, **extra}

    def _drop(self, plan: NodePlan, why: str) -> None:
        for d in plan.executes():
            self.metrics.actions.labels(d.action, "skipped").inc()
            audit("decision", **self._fields(d, decision="skipped", reason=why))

    def _execute(self, plan: NodePlan, view: NodeView, node: dict[str, Any], now: datetime) -> None:
        executes = plan.executes()
        for d in plan.decisions:
            if d.decision != "execute":
                self.metrics.actions.labels(d.action, d.decision).inc()
                audit("decision", **self._fields(d))
        if self.dry_run:
            for d in executes:
                self.metrics.actions.labels(d.action, "dry_run").inc()
                audit("decision", **self._fields(d, result="dry_run"))
            for note in plan.notes:
                audit("progress", node=plan.node, reason=note.reason, message=note.message, dry_run=True)
            return
        if not executes and not plan.changed:
            return

        # 1. re-check before anything disruptive: the Node as listed, and (for Jobs and replacement)
        #    nothing left to evict on it
        if any(d.action in DISRUPTIVE for d in executes):
            self._guard()
            fresh = self.kube.get_node(plan.node)
            if fresh["metadata"].get("resourceVersion") != plan.resource_version:
                return self._drop(plan, "the node changed since this pass read it (a hold, a person, another "
                                  "replica): re-deciding next pass")
            if any(d.action in ("reset_gpu", "reboot", "replace") for d in executes):
                left = evictable_pods(self.kube.pods_on(plan.node))
                if left:
                    return self._drop(plan, f"{len(left)} evictable pod(s) on the node right before the "
                                      "disruptive step: draining again next pass")

        # 2. the final state, written once, with the resourceVersion the plan was computed from
        plan.final_state = claim_do_not_disrupt(node, plan.base_state, plan.final_state)
        actions = {d.action for d in executes}
        if "cordon" in actions:
            body = cordon_body(node, plan.final_state)
        elif "uncordon" in actions:
            body = uncordon_body(node, plan.base_state, plan.final_state, now)
        else:
            body = state_body(plan.final_state) if plan.changed else {}
        body, karpenter_note = with_do_not_disrupt(body, plan.base_state, plan.final_state)
        if body:
            self._guard()
            try:
                node = self.kube.patch_node(plan.node, body, plan.resource_version)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                return self._drop(plan, "the node changed since this pass read it (409 Conflict): "
                                  "re-deciding next pass")
            if karpenter_note:
                audit("annotation", node=plan.node, detail=karpenter_note, dry_run=False)
        for note in plan.notes:
            audit("progress", node=plan.node, reason=note.reason, message=note.message, dry_run=False)
            if note.timed_out is not None:
                self.metrics.rung_timeouts.labels(note.timed_out).inc()
            self._event(plan.node, note.reason, note.message, now, warning=note.warning)

        # 3. the side effects, now that the intent is on the Node
        for d in executes:
            fields = self._fields(d)
            try:
                self._guard()
                message = self._perform(d, view, node, plan, now)
            except PassAborted:
                raise
            except Exception as exc:
                self.metrics.actions.labels(d.action, "failed").inc()
                audit("action", **fields, result="failed", error=str(exc))
                self._event(d.node, action_failed_reason(d.action), f"{d.reason}: {exc}", now, warning=True)
                return
            if karpenter_note and d.action in ("drain", "uncordon", "replace"):
                message, karpenter_note = f"{message}; {karpenter_note}" if message else karpenter_note, ""
            self.metrics.actions.labels(d.action, "executed").inc()
            audit("action", **fields, result="executed", detail=message)
            if d.new or message:
                self._event(d.node, action_reason(d.action), f"{d.reason}{': ' + message if message else ''}", now)

    def _perform(self, d: Decision, view: NodeView, node: dict[str, Any], plan: NodePlan, now: datetime) -> str:
        kube, policy = self.kube, self.policy
        if d.action in ("cordon", "uncordon"):
            return ""  # done by the state write
        if d.action == "drain":
            pods = evictable_pods(kube.pods_on(d.node))  # as they are now, not as listed
            result = drain_pass(kube.core, pods, policy.eviction_backoff, self._pass_sleep, d.force,
                                kube.timeout, guard=self._guard)
            if result.errors and not result.evicted and not result.blocked:
                raise RuntimeError(f"drain pass failed: {result.summary()}")
            return result.summary() if (result.evicted or result.errors or d.new) else ""
        if not any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or []):
            raise RuntimeError("gpuhealth's taint is not on the node: a person took over; not starting")
        if d.action in ("reset_gpu", "reboot"):
            assert d.job is not None
            manifest = render_job(d.action, d.job, d.node, policy, d.gpu)
            created = create_job(kube.batch, manifest, kube.timeout)
            return f"job {policy.jobs_namespace}/{d.job} {'created' if created else 'already exists'}"
        if d.action == "replace":
            try:
                return replace_node(kube, d.node, policy, now, d.reason)
            except Exception:
                # our own write's resourceVersion: the Node exactly as this plan left it
                failed = replace(plan.final_state, rung_status="failed", rung_done=fmt_time(now))
                self._guard()
                kube.write_state(d.node, failed, node["metadata"].get("resourceVersion"))
                raise
        raise ValueError(f"unknown action {d.action}")


SEEN_AGAIN_WRITE_EVERY = timedelta(minutes=1)


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
        if parse_time(new.last_seen) - parse_time(old.last_seen) >= SEEN_AGAIN_WRITE_EVERY:
            return False
    return replace(after, alerts=before.alerts) == before


