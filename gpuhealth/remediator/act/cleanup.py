"""`gpuhealth-remediator cleanup`: take gpuhealth's marks off the cluster, as `helm uninstall`'s pre-delete hook does.

1. Stop the remediators: take their Lease (clients/leader.py `take_over`), marked gpuhealth.io/cleanup, and wait
   until the replica that held it can no longer count itself leader (the Lease's duration). Every replica honours
   the holder, so no rung and no Job starts, and none records alerts while the mark is on. The Lease is renewed
   while the cleanup runs.
2. Wait for gpuhealth's reset and reboot Jobs that still run (at most `wait`). A node whose Job still runs after
   that is left as it is and reported: a reset or a reboot is never cut off, and never undone under it.
3. On every Node, undo what gpuhealth did and nothing a person did (decide/undo.py): each write guarded by the
   resourceVersion it was computed from (a conflict reads the Node again and computes again), then the node's
   DeviceTaintRules (gpuhealth's label), an Event on the Node and an audit line. Then the DeviceTaintRules of Nodes
   that no longer exist.
4. Leave the Lease held for `hold`, so that a remediator still going away (`helm uninstall` deletes it next) never
   acts again; a remediator that outlives the hold takes the Lease back as from a dead leader.

A dry run reads the same and writes through the dry-run client (clients/dry_run.py), which makes no write: it
says what a run would do. Run again, the cleanup finds nothing left and writes nothing on the Nodes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.act.node_jobs import JOB_SELECTOR, NODE_LABEL, job_status
from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.device_taints import MANAGED_BY, DeviceTaints, node_of
from gpuhealth.remediator.clients.errors import Conflict, KubeError, NotFound
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.leader import LeaderElector
from gpuhealth.remediator.clock import Clock
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.nodestate import fmt_time
from gpuhealth.remediator.decide.undo import Undo, undo_conditions, undo_node
from gpuhealth.remediator.decide.vocabulary import JobStatus
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")

ATTEMPTS = 3  # a Node that changed between the read and the write (409) is read again, this many times
JOB_POLL_SECONDS = 5.0  # between two looks at the Jobs still running


class CleanupError(Exception):
    """The cleanup could not start (the remediators could not be stopped, the Jobs could not be listed):
    nothing was undone."""


@dataclass(frozen=True)
class CleanupOptions:
    wait: timedelta = timedelta(minutes=5)  # at most this long for gpuhealth's Jobs still running
    hold: timedelta = timedelta(minutes=2)  # the Lease stays held this long after the cleanup
    identity: str = "gpuhealth-remediator-cleanup"  # the Lease holder while it runs
    by: str = ""  # who runs it (the Events and the Lease's mark say so)


@dataclass
class CleanupReport:
    dry_run: bool
    cleaned: dict[str, list[str]] = field(default_factory=dict)  # node -> what was undone on it
    left: dict[str, str] = field(default_factory=dict)  # node -> why it is left as it is
    failed: dict[str, str] = field(default_factory=dict)  # node (or object) -> the error
    rules_deleted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Everything of gpuhealth's is gone (a dry run: would be, as far as it can tell without waiting)."""
        return not self.left and not self.failed

    def summary(self) -> str:
        verb = "would undo" if self.dry_run else "undone"
        head = (f"cleanup{' (dry run: nothing changed)' if self.dry_run else ''}: {verb} on {len(self.cleaned)} "
                f"node(s), {len(self.rules_deleted)} DeviceTaintRule(s) {'to delete' if self.dry_run else 'deleted'}")
        if not self.cleaned and not self.rules_deleted and self.ok:
            return f"{head}: nothing of gpuhealth's is left on the cluster"
        lines = [head]
        lines += [f"  left as it is: {node}: {why}" for node, why in sorted(self.left.items())]
        lines += [f"  not undone: {what}: {error}" for what, error in sorted(self.failed.items())]
        if not self.ok:
            lines.append("  run `gpuhealth-remediator cleanup` again once these are dealt with (it is idempotent)")
        return "\n".join(lines)


def run_cleanup(kube: Kube, policy: Policy, options: CleanupOptions, clock: Clock, sleep: Callable[[float], None],
                out: Callable[[str], None] = print) -> CleanupReport:
    """The whole cleanup (the module's docstring); what it did, left and failed to do. Raises CleanupError when
    it could not start."""
    report = CleanupReport(dry_run=kube.dry_run)
    elector = LeaderElector(kube.coordination, policy.leader.namespace, policy.leader.name, options.identity,
                            policy.leader.lease_duration, clock, kube.timeout)
    stop = threading.Event()
    renewer = _stop_remediators(elector, kube, options, clock, sleep, out, stop)
    try:
        running = _wait_for_jobs(kube, policy, options, clock, sleep, out)
        _undo_all(kube, policy, running, options, clock, out, report)
    finally:
        if renewer is not None:
            stop.set()
            renewer.join()
            try:
                elector.hold_for(options.hold)
                out(f"lease {policy.leader.namespace}/{policy.leader.name}: held {_human(options.hold)} more, so "
                    "that no remediator still going away acts again")
            except KubeError as exc:
                report.failed[f"lease {policy.leader.namespace}/{policy.leader.name}"] = f"not held on: {exc}"
        kube.events.flush(timeout=5.0)
    out(report.summary())
    audit(AuditKind.CLEANUP, dry_run=kube.dry_run, cleaned=sorted(report.cleaned), left=report.left,
          failed=report.failed, rules_deleted=report.rules_deleted)
    return report


def _stop_remediators(elector: LeaderElector, kube: Kube, options: CleanupOptions, clock: Clock,
                      sleep: Callable[[float], None], out: Callable[[str], None],
                      stop: threading.Event) -> threading.Thread | None:
    """Take the Lease (a dry run only says so); the thread that renews it while the cleanup runs."""
    where = f"lease {elector.namespace}/{elector.name}"
    if kube.dry_run:
        held = ((elector.peek() or {}).get("spec") or {}).get("holderIdentity")
        out(f"{where}: would take it from {held or 'nobody'} (no remediator acts or records alerts while the "
            "cleanup holds it)")
        return None
    mark = json.dumps({"by": options.by, "at": fmt_time(clock())}, sort_keys=True)
    try:
        taken = elector.take_over(mark)
    except NotFound:  # no Lease, and no namespace to make one in: no remediator runs there
        out(f"{where}: its namespace does not exist: no remediator runs there")
        return None
    except KubeError as exc:
        raise CleanupError(f"{where}: cannot take it, so the remediators cannot be stopped ({exc}); nothing was "
                           "undone") from exc
    audit(AuditKind.CLEANUP_LEASE, lease=where, previous=taken.previous, identity=options.identity)
    renewer = threading.Thread(target=elector.renew_loop, args=(stop,), name="cleanup-lease", daemon=True)
    renewer.start()
    out(f"{where}: taken from {taken.previous or 'nobody'}: no remediator starts a rung or records alerts now")
    if taken.lasts:
        out(f"{where}: waiting {_human(taken.lasts)} (its duration) until {taken.previous} can no "
            "longer count itself leader")
        sleep(taken.lasts.total_seconds())
    return renewer


def _running_jobs(kube: Kube, policy: Policy) -> dict[str, str]:
    """gpuhealth's reset and reboot Jobs that still run: node -> namespace/name."""
    namespace = policy.jobs.namespace
    try:
        jobs = kube.list_jobs(namespace, JOB_SELECTOR)
    except KubeError as exc:
        raise CleanupError(f"cannot list gpuhealth's Jobs in {namespace} ({exc}): a reset may be under way; nothing "
                           "was undone") from exc
    out = {}
    for job in jobs:
        node = api_objects.labels(job).get(NODE_LABEL)
        if node and job_status(job) == JobStatus.RUNNING:
            out[node] = f"{namespace}/{api_objects.meta(job).get('name')}"
    return out


def _wait_for_jobs(kube: Kube, policy: Policy, options: CleanupOptions, clock: Clock,
                   sleep: Callable[[float], None], out: Callable[[str], None]) -> dict[str, str]:
    """Wait (at most options.wait) for gpuhealth's Jobs still running; those that still run then, by node."""
    running = _running_jobs(kube, policy)
    if not running:
        return running
    names = ", ".join(f"{job} on {node}" for node, job in sorted(running.items()))
    if kube.dry_run:
        out(f"jobs: would wait up to {_human(options.wait)} for {names}")
        return running
    out(f"jobs: waiting up to {_human(options.wait)} for {names}")
    deadline = clock() + options.wait
    while running and clock() < deadline:
        sleep(min(JOB_POLL_SECONDS, (deadline - clock()).total_seconds()))
        running = _running_jobs(kube, policy)
    for node, job in sorted(running.items()):
        out(f"jobs: {job} on {node} still runs after {_human(options.wait)}: not stopped, its node is left as it is")
    return running


def _undo_all(kube: Kube, policy: Policy, running: dict[str, str], options: CleanupOptions, clock: Clock,
              out: Callable[[str], None], report: CleanupReport) -> None:
    taints = DeviceTaints(kube)
    version, rules = _our_rules(taints, policy, report)
    for node in sorted(kube.list_nodes(), key=api_objects.name):
        name = api_objects.name(node)
        try:
            changes, undo = _undo_one(kube, policy, node, running.get(name))
        except KubeError as exc:
            rules.pop(name, None)  # its GPUs stay quarantined with the rest of it
            report.failed[name] = str(exc)
            out(f"{name}: not undone: {exc}")
            continue
        if undo.left:
            rules.pop(name, None)  # left as it is: its device taints too
            report.left[name] = undo.left
            out(f"{name}: left as it is: {undo.left}")
            _event(kube, name, EventReason.CLEANUP_SKIPPED, f"gpuhealth-remediator cleanup{_by(options)}: {undo.left}",
                   clock, warning=True)
            continue
        changes += _delete_rules(kube, version, rules.pop(name, []), report)
        if changes:
            _report_node(kube, name, changes, undo, options, clock, out, report)
    for gone, names in sorted(rules.items()):  # rules of Nodes that no longer exist
        deleted = _delete_rules(kube, version, names, report)
        if deleted:
            out(f"{gone or '(no node named)'} (no such node): {'; '.join(deleted)}")


def _undo_one(kube: Kube, policy: Policy, node: RawNode, job: str | None) -> tuple[list[str], Undo]:
    """Undo on one Node (a 409 reads it again and computes again); what was undone, and the last computation."""
    name = api_objects.name(node)
    done: list[str] = []
    for _ in range(ATTEMPTS):
        undo = undo_node(node, policy, job)
        if undo.left:
            return done, undo
        try:
            if undo.body:
                written = kube.patch_node(name, undo.body, api_objects.resource_version(node))
                done += undo.changes
                if not kube.dry_run:
                    node = written  # the Node as it is now, for the conditions' write
            conditions, removed = undo_conditions(node, policy)
            if conditions is not None:
                kube.patch_node_status(name, {"status": {"conditions": conditions}},
                                       str(api_objects.resource_version(node)))
                done.append(f"removed condition {', '.join(removed)}")
            return done, undo
        except NotFound:  # the Node went away meanwhile: nothing of it is left
            return done, undo
        except Conflict:
            node = kube.get_node(name)  # changed since it was read: compute again from what it is now
    raise Conflict(409, f"node {name} kept changing ({ATTEMPTS} tries)")


def _our_rules(taints: DeviceTaints, policy: Policy, report: CleanupReport) -> tuple[str | None, dict[str, list[str]]]:
    """gpuhealth's DeviceTaintRules by node (none where DRA is off, or the cluster serves no DeviceTaintRule)."""
    if not policy.dra.enabled:
        return None, {}
    try:
        version = taints.served_version()
        if version is None:
            return None, {}
        by_node: dict[str, list[str]] = defaultdict(list)
        for rule in taints.kube.list_device_taint_rules(version, MANAGED_BY):
            by_node[node_of(rule) or ""].append(api_objects.name(rule))
        return version, dict(by_node)
    except KubeError as exc:
        report.failed["DeviceTaintRules"] = f"cannot be listed: {exc}"
        return None, {}


def _delete_rules(kube: Kube, version: str | None, names: list[str], report: CleanupReport) -> list[str]:
    done = []
    for name in names:
        assert version is not None
        try:
            kube.delete_device_taint_rule(version, name)
        except KubeError as exc:
            report.failed[f"DeviceTaintRule {name}"] = str(exc)
            continue
        report.rules_deleted.append(name)
        done.append(f"deleted DeviceTaintRule {name}")
    return done


def _report_node(kube: Kube, name: str, changes: list[str], undo: Undo, options: CleanupOptions, clock: Clock,
                 out: Callable[[str], None], report: CleanupReport) -> None:
    report.cleaned[name] = changes
    kept = f"; kept {', '.join(undo.kept)}" if undo.kept else ""
    episode = f" (it ends gpuhealth's {undo.episode})" if undo.episode else ""
    out(f"{name}: {'would: ' if kube.dry_run else ''}{'; '.join(changes)}{kept}{episode}")
    audit(AuditKind.CLEANUP_NODE, node=name, changes=changes, kept=list(undo.kept), episode=undo.episode,
          dry_run=kube.dry_run)
    _event(kube, name, EventReason.CLEANED_UP, f"gpuhealth-remediator cleanup{_by(options)}: {'; '.join(changes)}"
           f"{kept}{episode}", clock)


def _human(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m" if seconds and seconds % 60 == 0 else f"{seconds}s"


def _by(options: CleanupOptions) -> str:
    return f" (by {options.by})" if options.by else ""


def _event(kube: Kube, node: str, reason: EventReason, message: str, clock: Clock, warning: bool = False) -> None:
    """Events never stop the cleanup: the outbox keeps what the API does not take (clients/kube.py)."""
    try:
        kube.event(node, reason, message, clock(), warning=warning)
    except Exception as exc:
        log.warning("event %s on %s: %s", reason, node, exc)
