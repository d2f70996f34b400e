"""The remediator's own Prometheus metrics, in a registry per instance (tests run several)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.vocabulary import JOB_RUNGS, Action, Rung, Verdict

if TYPE_CHECKING:
    from gpuhealth.remediator.clients.event_outbox import EventOutbox

# The label values the remediator's error and timeout counters can take, as enums: the code passes members
# (the typed methods below take nothing else), and each series is created at 0 when the remediator starts, so
# increase() sees the first event and a dashboard shows 0, not "No data", while nothing has gone wrong.


class WebhookErrorReason(StrEnum):
    UNAUTHORIZED = "unauthorized"
    TOO_LARGE = "too_large"
    INVALID = "invalid"
    RECORD_FAILED = "record_failed"


class AlertIgnoredReason(StrEnum):
    NO_LABEL = "no"  # the alert lacks a label the remediator needs (no node label, no remediation label)
    UNUSABLE = "unusable"
    UNKNOWN_NODE = "unknown node"
    UNREADABLE_STATE = "unreadable state"
    CLEANUP = "cleanup"  # gpuhealth-remediator cleanup holds the Lease: nothing is recorded
    STATE_FULL = "state full"  # the node's state annotation is at its cap: the records it ranks lowest are forgotten


class ApiOperation(StrEnum):
    RECORD = "record"
    LIST_NODES = "list_nodes"
    LIST_JOBS = "list_jobs"
    EXECUTE = "execute"
    WORKLOADS = "workloads"
    LIST_DRA = "list_dra"  # ResourceSlices, ResourceClaims, DeviceTaintRule discovery (GPU scope)


class PassAbortReason(StrEnum):
    LOST_LEASE = "lost the Lease"
    DEADLINE = "pass ran past its deadline"


class SyncResult(StrEnum):
    """How a read of Alertmanager's active alerts ended (intake/alertmanager_sync.py)."""

    OK = "ok"
    ERROR = "error"


class ActionResult(StrEnum):
    EXECUTED = "executed"
    FAILED = "failed"
    DEFERRED = "deferred"
    SKIPPED = "skipped"
    DRY_RUN = "dry_run"
    NOT_STARTED = "not_started"  # reset_gpu, reboot: the node-action Job never ran its container (gpuhealth's breakage)
    NOT_NEEDED = "not_needed"  # reset_gpu: its alerts stopped asking for it before its Job began (no failure, no climb)


WEBHOOK_ERROR_REASONS = tuple(WebhookErrorReason)
ALERT_IGNORED_REASONS = tuple(AlertIgnoredReason)
API_OPERATIONS = tuple(ApiOperation)
PASS_ABORT_REASONS = tuple(PassAbortReason)
RUNGS = tuple(r for r in Rung if r is not Rung.CORDON)  # the rungs with a timeout
EVENT_DROP_REASONS = ("rejected", "outbox_full")
REPEAT_OFFENDER_RULES = ("episodes", "same_gpu")  # decide/offenders.py's RULES
HTTP_REJECT_REASONS = ("header_timeout", "body_timeout", "too_large", "headers_too_large", "bad_request",
                       "per_source_limit", "shed_slow_client", "over_capacity")


# The Events that say how a diagnostic Job ended, by the result label they count under.
DIAGNOSTIC_RESULTS = {EventReason.DIAGNOSTIC_PASSED: "passed", EventReason.DIAGNOSTIC_FAILED: "failed",
                      EventReason.DIAGNOSTIC_NOT_STARTED: "not_started",
                      EventReason.DIAGNOSTIC_CONTRADICTS_ALERT: "contradicts",
                      EventReason.DIAGNOSTIC_FOUND_CONFIGURATION: "configuration",
                      EventReason.DIAGNOSTIC_PROBATION_FAILED: "probation_failed"}
# The Events of an idle-node sweep (decide/sweep.py), by the result label they count under.
SWEEP_RESULTS = {EventReason.SWEEP_STARTED: "started", EventReason.SWEEP_PASSED: "passed",
                 EventReason.SWEEP_FAILED: "failed", EventReason.SWEEP_NOT_STARTED: "not_started",
                 EventReason.SWEEP_ABANDONED: "abandoned"}
# The Events of a new node's burn-in (decide/burn_in.py), by the result label they count under.
BURN_IN_RESULTS = {EventReason.BURN_IN_STARTED: "started", EventReason.BURN_IN_PASSED: "passed",
                   EventReason.BURN_IN_FAILED: "failed", EventReason.BURN_IN_NOT_STARTED: "not_started",
                   EventReason.BURN_IN_SKIPPED: "skipped"}


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._ladder_and_webhooks()
        self._loop()
        self._events_and_http()
        self._alertmanager()
        self._workloads()
        self._zero_label_values()

    def _ladder_and_webhooks(self) -> None:
        """The ladder's decisions and the webhook's requests."""
        r = self.registry
        self.actions = Counter("gpuhealth_remediator_actions", "Ladder decisions, by action and result "
                               "(executed, failed, deferred, skipped, dry_run; not_started: a reset or reboot Job "
                               "that never ran its container; not_needed: a reset its alerts stopped asking for "
                               "before its Job began)", ["action", "result"], registry=r)
        for job_rung in JOB_RUNGS:  # at 0 from the start: increase() sees the first Job that does not start
            self.actions.labels(job_rung, ActionResult.NOT_STARTED)
        self.actions.labels(Rung.RESET_GPU, ActionResult.NOT_NEEDED)
        self.diagnostics = Counter("gpuhealth_remediator_diagnostics", "Diagnostic Jobs' outcomes as the ladder "
                                   "read them (passed; failed: the node climbs or is replaced; not_started: "
                                   "gpuhealth's own breakage; contradicts: passed while the alerts fire, the node "
                                   "on probation; probation_failed: they still fired after it, replaced; "
                                   "configuration: failed for the node's software only, the node kept for a "
                                   "person)", ["result"], registry=r)
        for result in DIAGNOSTIC_RESULTS.values():  # at 0 from the start: increase() sees the first
            self.diagnostics.labels(result)
        self.sweeps = Counter("gpuhealth_remediator_sweeps", "Idle-node sweeps (started; passed: returned; failed: "
                              "the node climbs; not_started: gpuhealth's own breakage, returned unswept; abandoned: "
                              "GPU work came to the node)", ["result"], registry=r)
        for result in SWEEP_RESULTS.values():
            self.sweeps.labels(result)
        self.burn_ins = Counter("gpuhealth_remediator_burn_ins", "New nodes' burn-ins (started; passed: the burn-in "
                                "taint removed; failed: the node climbs; not_started: gpuhealth's own breakage, the "
                                "taint removed untested; skipped: no diagnostic configured, the taint removed "
                                "untested)", ["result"], registry=r)
        for result in BURN_IN_RESULTS.values():
            self.burn_ins.labels(result)
        self.webhooks = Counter("gpuhealth_remediator_webhook_requests", "Webhook requests by result",
                                ["result"], registry=r)
        self.webhook_errors = Counter("gpuhealth_remediator_webhook_errors",
                                      "Rejected webhook requests by reason", ["reason"], registry=r)
        self.alerts_ignored = Counter("gpuhealth_remediator_alerts_ignored",
                                      "Alerts in valid webhooks that could not be acted on", ["reason"], registry=r)

    def _loop(self) -> None:
        """The leader's loop: budgets, the breaker, monitoring faults, the Lease, API errors, passes."""
        r = self.registry
        self.budget_in_use = Gauge("gpuhealth_remediator_budget_in_use", "Nodes counted against a budget",
                                   ["pool", "budget"], registry=r)
        self.budget_limit = Gauge("gpuhealth_remediator_budget_limit", "Budget limits", ["pool", "budget"], registry=r)
        self.breaker_open = Gauge("gpuhealth_remediator_breaker_open", "1 while a pool's circuit breaker is open",
                                  ["pool"], registry=r)
        self.monitoring_fault = Gauge("gpuhealth_remediator_monitoring_fault_nodes", "Nodes of a pool firing one of "
                                      "gpuhealth's own alerts (by alert, probe and reason) while it counts as a "
                                      "monitoring fault, which starts no node action (0: not one now)",
                                      ["pool", "alert", "probe", "reason"], registry=r)
        self.correlated_fault = Gauge("gpuhealth_remediator_correlated_fault_nodes", "Nodes that share a value of a "
                                      "topology label (policy correlation.labels) firing the same alert at once, while "
                                      "it counts as one correlated fault that climbs no node (0: not one now)",
                                      ["alert", "label", "value"], registry=r)
        self.unreadable_nodes = Gauge("gpuhealth_remediator_unreadable_nodes", "Nodes the last pass could not read "
                                      "(a damaged state annotation, an object it could not read or decide): each "
                                      "counts as disrupted and is left alone until a person fixes it", registry=r)
        self.leader = Gauge("gpuhealth_remediator_leader", "1 while this replica holds the Lease", registry=r)
        self.api_errors = Counter("gpuhealth_remediator_api_errors", "Kubernetes API errors by operation",
                                  ["operation"], registry=r)
        self.passes_aborted = Counter("gpuhealth_remediator_passes_aborted", "Passes stopped before their end "
                                      "(lost the Lease, ran past the deadline)", ["reason"], registry=r)
        self.rung_timeouts = Counter("gpuhealth_remediator_rung_timeouts", "Rungs that passed their timeout",
                                     ["rung"], registry=r)
        self.passes = Counter("gpuhealth_remediator_reconcile_passes", "Reconcile passes run as leader", registry=r)

    def _events_and_http(self) -> None:
        """The audit trail's Events, and the requests the HTTP server answered itself."""
        r = self.registry
        # The audit trail (clients/event_outbox.py): Events the API could not take yet, sent late, or lost.
        self.events_pending = Gauge("gpuhealth_remediator_events_pending", "Kubernetes Events kept to send again "
                                    "after the API failed to take them", registry=r)
        self.events_sent_late = Counter("gpuhealth_remediator_events_sent_late", "Kept Events sent once the API "
                                        "took them again", registry=r)
        self.api_throttled = Counter("gpuhealth_remediator_api_throttled_seconds", "Seconds the client's requests "
                                     "waited for its rate limit (policy kube_api.qps and burst)", registry=r)
        self.http_rejected = Counter("gpuhealth_remediator_http_rejected", "Requests the server answered itself "
                                     "before the app (header_timeout, body_timeout: 408; too_large: 413; "
                                     "headers_too_large: 431; bad_request: 400; per_source_limit: closed "
                                     "unanswered; shed_slow_client, over_capacity: closed by the full probes' port "
                                     "to take a new connection, or with every slot answering)", ["reason"], registry=r)
        self.events_dropped = Counter("gpuhealth_remediator_events_dropped", "Events never sent: refused by the API "
                                      "(a 4xx) or pushed out of a full outbox", ["reason"], registry=r)

    def _alertmanager(self) -> None:
        """The sync with Alertmanager, and the Lease let go."""
        r = self.registry
        # Level-triggered reconciliation against Alertmanager's active alerts
        # (gpuhealth/remediator/intake/alert_sync.py).
        self.am_syncs = Counter("gpuhealth_remediator_alertmanager_syncs", "Reads of Alertmanager's active alerts "
                                "to reconcile the Nodes' records, by result (ok, error)", ["result"], registry=r)
        self.am_sync_changes = Counter("gpuhealth_remediator_alertmanager_sync_changes", "Alert records the "
                                       "Alertmanager sync wrote: recorded (a webhook was lost), resolved (a resolution "
                                       "was lost), refreshed (still active)", ["change"], registry=r)
        self.am_up = Gauge("gpuhealth_remediator_alertmanager_up", "1 if the last sync read Alertmanager's active "
                           "alerts, 0 if no member answered (webhooks and the quiet timeout only)", registry=r)
        self.am_last_sync = Gauge("gpuhealth_remediator_alertmanager_last_sync_timestamp_seconds",
                                  "When the Nodes' records last agreed with Alertmanager (Unix time)", registry=r)
        self.am_calls_cut = Counter("gpuhealth_remediator_alertmanager_calls_cut", "Calls to Alertmanager cut short: "
                                    "deadline (no full answer within alertmanager.timeout or the pass's deadline), "
                                    "too_large (an answer over alertmanager.max_answer_bytes)", ["reason"], registry=r)
        self.am_member_addresses = Gauge("gpuhealth_remediator_alertmanager_member_addresses", "Addresses each "
                                         "Alertmanager URL's host name resolves to at the last sync (more than 1: one "
                                         "URL stands for several Alertmanagers; list them)", ["member"], registry=r)
        self.lease_releases = Counter("gpuhealth_remediator_lease_releases", "Times this replica let the Lease go "
                                      "because its pass did not end by its deadline (a standby takes over)",
                                      registry=r)

    def _workloads(self) -> None:
        """Workload failures, and Karpenter's node repair watching a node gpuhealth works on."""
        r = self.registry
        # Workload failures (gpuhealth/remediator/workloads/watcher.py; names fixed: the job-reliability dashboard reads
        # them).
        self.workload_failures = Counter("gpuhealth_workload_failures", "Failed workload pods by class "
                                         "(infra, app, unknown) and reason", ["class", "reason", "namespace"],
                                         registry=r)
        self.workload_pods_ended = Counter("gpuhealth_workload_pods_ended", "Workload pods that ended, by phase "
                                           "(Succeeded, Failed)", ["namespace", "phase"], registry=r)
        self.workload_lost_seconds = Counter("gpuhealth_workload_lost_seconds", "Run time of failed workload pods "
                                             "(start to failure), by class", ["class", "namespace"], registry=r)
        self.workload_restart_loop = Gauge("gpuhealth_workload_restart_loop", "1 while a workload is in a restart "
                                           "loop (the same app cause N times in a row, no progress)",
                                           ["namespace", "workload"], registry=r)
        # Karpenter's node repair watching a node gpuhealth works on (policy karpenter_repair; docs/install.md)
        self.karpenter_repair_conflicts = Counter("gpuhealth_remediator_karpenter_repair_conflicts", "Karpenter-"
                                                  "watched conditions another agent set False on a node in an "
                                                  "episode, once per episode and condition, by the policy's mode "
                                                  "(warn, handover)", ["condition", "mode"], registry=r)
        # Repeat offenders (policy repeat_offenders, decide/offenders.py)
        self.repeat_offender_escalations = Counter("gpuhealth_remediator_repeat_offender_escalations", "Episodes "
                                                   "a node's past hardware episodes escalated to replace (or to a "
                                                   "person where ladder.max_rung is below it), by the rule: "
                                                   "episodes (N in the window), same_gpu (a GPU reset before fails "
                                                   "again)", ["reason"], registry=r)
        self.repeat_offender_episodes = Gauge("gpuhealth_remediator_repeat_offender_episodes", "Hardware episodes "
                                              "of the node that started within repeat_offenders.window (the one "
                                              "under way included; nodes with none have no series)",
                                              ["node", "pool"], registry=r)
        self.workload_node_suspect = Gauge("gpuhealth_workload_node_suspect_workloads", "Workloads whose pods failed "
                                           "on the node, with the node as a suspect (a node fault, unknown), in "
                                           "workloads.node_suspect_window", ["node", "pool"], registry=r)

    def _zero_label_values(self) -> None:
        """Every known label value at 0 from the start: increase() sees the first one."""
        for counter, values in ((self.webhook_errors, WEBHOOK_ERROR_REASONS),
                                (self.alerts_ignored, ALERT_IGNORED_REASONS),
                                (self.api_errors, API_OPERATIONS),
                                (self.passes_aborted, PASS_ABORT_REASONS),
                                (self.rung_timeouts, RUNGS),
                                (self.events_dropped, EVENT_DROP_REASONS),
                                (self.http_rejected, HTTP_REJECT_REASONS),
                                (self.am_syncs, tuple(SyncResult)),
                                (self.am_calls_cut, ("deadline", "too_large")),
                                (self.am_sync_changes, ("recorded", "resolved", "refreshed")),
                                (self.repeat_offender_escalations, REPEAT_OFFENDER_RULES)):
            for value in values:
                counter.labels(value)

    # --- typed counting: the label values are the enums' members, nothing else ----------------------------
    def webhook_error(self, reason: WebhookErrorReason) -> None:
        self.webhook_errors.labels(reason).inc()

    def alert_ignored(self, reason: AlertIgnoredReason, alerts: int = 1) -> None:
        self.alerts_ignored.labels(reason).inc(alerts)

    def api_error(self, operation: ApiOperation) -> None:
        self.api_errors.labels(operation).inc()

    def pass_aborted(self, reason: PassAbortReason) -> None:
        self.passes_aborted.labels(reason).inc()

    def rung_timed_out(self, rung: Rung) -> None:
        self.rung_timeouts.labels(rung).inc()

    def karpenter_repair_conflict(self, condition: str, mode: str) -> None:
        self.karpenter_repair_conflicts.labels(condition, mode).inc()

    def repeat_offender_escalation(self, rule: str) -> None:
        self.repeat_offender_escalations.labels(rule).inc()

    def init_karpenter_repair(self, conditions: tuple[str, ...], mode: str) -> None:
        """The conflict counter at 0 for every watched condition under the policy's mode."""
        for condition in conditions:
            self.karpenter_repair_conflicts.labels(condition, mode)

    def action(self, action: Action, result: ActionResult | Verdict) -> None:
        """A decision's outcome: executed, failed, dry_run, or the verdict itself (deferred, skipped)."""
        self.actions.labels(action, result).inc()

    def watch_events(self, outbox: EventOutbox) -> None:
        """Report a Kube's Event outbox (pending, sent late, dropped) in these metrics."""
        self.events_pending.set_function(lambda: len(outbox))
        outbox.on_drop = lambda reason: self.events_dropped.labels(reason).inc()
        outbox.on_sent_late = self.events_sent_late.inc

    def init_workloads(self, namespaces: tuple[str, ...]) -> None:
        """The workload counters at 0 for every label value they can take (namespaces from the policy)."""
        from gpuhealth.remediator.workloads.classify import REASONS

        for ns in namespaces:
            for cls, reasons in REASONS.items():
                self.workload_lost_seconds.labels(cls, ns)
                for reason in reasons:
                    self.workload_failures.labels(cls, reason, ns)
            for phase in ("Succeeded", "Failed"):
                self.workload_pods_ended.labels(ns, phase)
