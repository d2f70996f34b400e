"""The remediator's loop: record what webhooks said on the Nodes, and, as leader, act on it.

`evaluate` is the single decision path: `serve` (Remediator.reconcile) and `plan` (plan_from_json)
both call it, so what `plan` prints is what `serve` would do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from remediator.actions import Kube
from remediator.budget import Ledger
from remediator.cluster import NodeView, build_views
from remediator.drain import drain_pass
from remediator.jobs import create_job, job_status, render_job
from remediator.ladder import Decision, NodePlan, SilenceCheck, decide
from remediator.leader import LeaderElector
from remediator.metrics import Metrics
from remediator.nodestate import DISRUPTIVE, STATE_ANNOTATION, NodeState, hold_of, record_alerts
from remediator.policy import Policy
from remediator.replace import replace_node
from remediator.silences import SilenceChecker
from remediator.webhook import Batch, NodeAlert

log = logging.getLogger("gpuhealth.remediator")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def audit(event: str, **fields: Any) -> None:
    """One structured (JSON) log line per decision or action."""
    log.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))


def evaluate(views: list[NodeView], policy: Policy, now: datetime, breaker_trips: dict[str, str] | None = None,
             silences: SilenceCheck | None = None) -> tuple[Ledger, list[NodePlan]]:
    ledger = Ledger.from_views(views, policy, now, breaker_trips)
    return ledger, decide(views, policy, now, ledger, silences)


def plan_from_json(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], batches: Iterable[Batch],
                   policy: Policy, now: datetime, silences: SilenceCheck | None = None) -> list[Decision]:
    """What serve would decide now, from `kubectl get nodes/pods -o json` and webhook bodies; no cluster."""
    by_name = {(n.get("metadata") or {}).get("name", ""): n for n in nodes}
    states: dict[str, NodeState] = {}
    missing: list[str] = []
    for batch in batches:
        for node, alerts in batch.by_node().items():
            if node not in by_name:
                missing.append(node)
                continue
            if node not in states:
                raw = ((by_name[node].get("metadata") or {}).get("annotations") or {}).get(STATE_ANNOTATION)
                states[node] = NodeState.from_json(raw)
            states[node] = record_alerts(states[node], alerts, now)

    def pods_on(name: str) -> list[dict[str, Any]]:
        return [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]

    views = build_views(nodes, policy, pods_on, None, states)
    _, plans = evaluate(views, policy, now, None, silences)
    out = [d for p in plans for d in p.decisions]
    decided = {d.node for d in out}
    out += [Decision(n, "none", "skipped", "no action needed") for n in states if n not in decided]
    out += [Decision(n, "none", "skipped", "node not found in the nodes file") for n in dict.fromkeys(missing)]
    return out


class Remediator:
    def __init__(self, kube: Kube, policy: Policy, identity: str, *, dry_run: bool = False,
                 clock: Clock = utcnow, sleep: Callable[[float], None] = time.sleep,
                 metrics: Metrics | None = None, silences: SilenceCheck | None = None,
                 elector: LeaderElector | None = None, inbox_size: int = 1000) -> None:
        self.kube, self.policy, self.identity, self.dry_run = kube, policy, identity, dry_run
        self.clock, self.sleep = clock, sleep
        self.metrics = metrics or Metrics()
        if silences is None and policy.alertmanager_url:
            silences = SilenceChecker(policy.alertmanager_url, policy.label_node, policy.alertmanager_timeout)
        self.silences = silences
        self.elector = elector or LeaderElector(kube.coordination, policy.lease_namespace, policy.lease_name,
                                                identity, policy.lease_duration, clock, kube.timeout)
        self.inbox: queue.Queue[Batch] = queue.Queue(maxsize=inbox_size)
        self.overlay: dict[str, NodeState] = {}  # dry-run only: what we would have recorded
        self.wake = threading.Event()
        self.api_ok = True
        self.last_plans: list[NodePlan] = []

    # --- intake ----------------------------------------------------------------------------
    def submit(self, batch: Batch) -> bool:
        """Queue a validated webhook for the loop; False when the inbox is full (answer 503, AM retries)."""
        try:
            self.inbox.put_nowait(batch)
        except queue.Full:
            return False
        self.wake.set()
        return True

    def record_pending(self) -> None:
        batches: list[Batch] = []
        while True:
            try:
                batches.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        for batch in batches:
            for node, alerts in batch.by_node().items():
                self._record(node, alerts, batch.received_at or self.clock())

    def _record(self, node: str, alerts: list[Any], now: datetime) -> None:
        for _ in range(3):
            try:
                current = self.kube.get_node(node)
                raw = (current["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
                base = self.overlay[node] if self.dry_run and node in self.overlay else NodeState.from_json(raw)
                new = record_alerts(base, alerts, now)
                if self.dry_run:
                    self.overlay[node] = new
                elif new != base:
                    self.kube.write_state(node, new, current["metadata"].get("resourceVersion"))
                audit("recorded", node=node, alerts=len(alerts), episode=new.episode, dry_run=self.dry_run)
                self.api_ok = True
                return
            except ApiException as exc:
                if exc.status == 404:
                    audit("ignored", node=node, reason="node not found")
                    self.metrics.alerts_ignored.labels("unknown node").inc(len(alerts))
                    return
                self.metrics.api_errors.labels("record").inc()
                log.warning("recording alerts on %s: HTTP %s %s", node, exc.status, exc.reason)
                if exc.status != 409:
                    self.api_ok = exc.status < 500
                    break
            except Exception as exc:
                self.metrics.api_errors.labels("record").inc()
                log.warning("recording alerts on %s: %s", node, exc)
                self.api_ok = False
                break
        # not recorded: put it back for the next pass (Alertmanager would resend anyway)
        batch = Batch(received_at=now)
        batch.alerts = [NodeAlert(node, fp, rec) for fp, rec in alerts]
        with contextlib.suppress(queue.Full):
            self.inbox.put_nowait(batch)

    # --- the pass --------------------------------------------------------------------------
    def run_once(self) -> list[NodePlan] | None:
        """Record, then reconcile if leader. None when not leader."""
        self.record_pending()
        leader = self.elector.try_acquire()
        self.metrics.leader.set(1 if leader else 0)
        if not leader:
            return None
        return self.reconcile()

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("reconcile pass failed")
                self.api_ok = False
            self.wake.wait(interval)
            self.wake.clear()

    def reconcile(self) -> list[NodePlan]:
        now = self.clock()
        self.metrics.passes.inc()
        try:
            nodes = self.kube.list_nodes()
        except Exception as exc:
            self.metrics.api_errors.labels("list_nodes").inc()
            self.api_ok = False
            log.warning("listing nodes: %s", exc)
            return []
        self.api_ok = True
        by_name = {n["metadata"]["name"]: n for n in nodes}
        views = build_views(nodes, self.policy, self._pods_on, self._job_status,
                            self.overlay if self.dry_run else None)
        ledger, plans = evaluate(views, self.policy, now, self.elector.breaker_trips(), self.silences)
        self._report_budget(ledger, now)
        view_of = {v.name: v for v in views}
        for plan in plans:
            try:
                self._execute(plan, view_of[plan.node], by_name[plan.node], now)
            except Exception as exc:
                self.metrics.api_errors.labels("execute").inc()
                log.warning("node %s: %s", plan.node, exc)
        self.last_plans = plans
        return plans

    def _pods_on(self, node: str) -> list[dict[str, Any]]:
        return self.kube.pods_on(node)

    def _job_status(self, name: str) -> str:
        try:
            return job_status(self.kube.batch, self.policy.jobs_namespace, name, self.kube.timeout)
        except Exception as exc:
            log.warning("job %s status: %s", name, exc)
            return "running"  # unknown: neither done nor failed; look again next pass

    def _report_budget(self, ledger: Ledger, now: datetime) -> None:
        m = self.metrics
        for pool, usage in ledger.pools.items():
            m.budget_in_use.labels(pool, "disrupted").set(len(usage.disrupted))
            m.budget_in_use.labels(pool, "cordoned").set(len(usage.cordoned))
            m.budget_limit.labels(pool, "disrupted").set(ledger.disrupted_limit(pool))
            m.budget_limit.labels(pool, "cordoned").set(ledger.cordoned_limit(pool))
            m.breaker_open.labels(pool).set(1 if ledger.breaker_open(pool) else 0)
        for pool, why in ledger.newly_tripped.items():
            audit("breaker_open", pool=pool, reason=why, dry_run=self.dry_run)
            if self.dry_run:
                continue
            try:
                self.kube.event(self.policy.lease_name, "CircuitBreakerOpen",
                                f"pool {pool}: {why}; new disruptive actions stop for "
                                f"{self.policy.breaker_cooldown}", now, warning=True, kind="Lease",
                                namespace=self.policy.lease_namespace, api_version="coordination.k8s.io/v1")
            except Exception as exc:
                log.warning("breaker event: %s", exc)
        if ledger.newly_tripped and not self.dry_run:
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

    def _recheck(self, name: str) -> tuple[dict[str, Any], str | None]:
        """Just before a disruptive step: a hold or a person's cordon set since the pass began stops it."""
        node = self.kube.get_node(name)
        if hold_of(node["metadata"].get("annotations") or {}):
            return node, "a hold was set on the node"
        return node, None

    def _execute(self, plan: NodePlan, view: NodeView, node: dict[str, Any], now: datetime) -> None:
        for reason, message in plan.notes:
            audit("progress", node=plan.node, reason=reason, message=message, dry_run=self.dry_run)
            self._event(plan.node, reason, message, now, warning="Fail" in reason or "Timed" in reason)
        wrote = False
        for d in plan.decisions:
            fields = {"node": d.node, "pool": d.pool, "action": d.action, "decision": d.decision, "reason": d.reason,
                      "dry_run": self.dry_run}
            if d.decision != "execute":
                self.metrics.actions.labels(d.action, d.decision).inc()
                audit("decision", **fields)
                continue
            if self.dry_run:
                self.metrics.actions.labels(d.action, "dry_run").inc()
                audit("decision", **fields, result="dry_run")
                continue
            try:
                if d.action in DISRUPTIVE and d.new:
                    node, stop = self._recheck(d.node)
                    if stop:
                        self.metrics.actions.labels(d.action, "skipped").inc()
                        audit("decision", **{**fields, "decision": "skipped", "reason": stop})
                        return
                node, message = self._perform(d, view, node, now)
                wrote = True
            except Exception as exc:
                self.metrics.actions.labels(d.action, "failed").inc()
                audit("action", **fields, result="failed", error=str(exc))
                self._event(d.node, f"{_camel(d.action)}Failed", f"{d.reason}: {exc}", now, warning=True)
                return
            self.metrics.actions.labels(d.action, "executed").inc()
            audit("action", **fields, result="executed", detail=message)
            if d.new or message:
                self._event(d.node, _camel(d.action), f"{d.reason}{': ' + message if message else ''}", now)
        if not wrote and not self.dry_run and plan.base_state != view.state:
            self.kube.write_state(plan.node, plan.base_state, node["metadata"].get("resourceVersion"))

    def _perform(self, d: Decision, view: NodeView, node: dict[str, Any], now: datetime) -> tuple[dict[str, Any], str]:
        kube, policy = self.kube, self.policy
        rv = node["metadata"].get("resourceVersion")
        state = d.state_after or view.state
        if d.action == "cordon":
            return kube.cordon(node, state), ""
        if d.action == "uncordon":
            return kube.uncordon(node, view.state, state, now), ""
        if d.action == "drain":
            if state != view.state:
                node = kube.write_state(d.node, state, rv)
            result = drain_pass(kube.core, view.evictable, policy.eviction_backoff, self.sleep, d.force, kube.timeout)
            if result.errors and not result.evicted and not result.blocked:
                raise RuntimeError(f"drain pass failed: {result.summary()}")
            return node, result.summary() if (result.evicted or result.errors or d.new) else ""
        if d.action in ("reset_gpu", "reboot"):
            assert state.job is not None
            manifest = render_job(d.action, state.job, d.node, policy, state.gpu)
            created = create_job(kube.batch, manifest, kube.timeout)
            node = kube.write_state(d.node, state, rv)
            return node, f"job {policy.jobs_namespace}/{state.job} {'created' if created else 'already exists'}"
        if d.action == "replace":
            node = kube.write_state(d.node, state, rv)
            try:
                done = replace_node(kube, d.node, policy, now, d.reason)
            except Exception:
                failed = NodeState(**{**state.__dict__, "rung_status": "failed"})
                kube.write_state(d.node, failed, node["metadata"].get("resourceVersion"))
                raise
            return node, done
        raise ValueError(f"unknown action {d.action}")


def _camel(action: str) -> str:
    return {"cordon": "Cordoned", "drain": "Draining", "reset_gpu": "GPUReset", "reboot": "Reboot",
            "replace": "Replace", "uncordon": "ReturnedToService"}.get(action, action.title())
