"""The audit log: one structured (JSON) line per decision, action or recording, its kind an AuditKind."""

from __future__ import annotations

import json
import logging
from enum import StrEnum
from typing import Any

log = logging.getLogger("gpuhealth.remediator")


class AuditKind(StrEnum):
    """What an audit line records: its "event" (a log query selects on these words: they never change)."""

    ACTION = "action"
    ALERT_IGNORED = "alert_ignored"
    ALERTMANAGER_SYNC = "alertmanager_sync"
    ALERTS_FORGOTTEN = "alerts_forgotten"
    ANNOTATION = "annotation"
    BREAKER_OPEN = "breaker_open"
    BURN_IN_KEPT = "burn_in_kept"
    CLEANUP = "cleanup"
    CLEANUP_LEASE = "cleanup_lease"
    CLEANUP_NODE = "cleanup_node"
    CORRELATED_FAULT = "correlated_fault"
    CORRELATED_FAULT_OVER = "correlated_fault_over"
    DECISION = "decision"
    DEVICE_TAINTS_SWEPT = "device_taints_swept"
    EVIDENCE = "evidence"
    GPU_CLIENTS = "gpu_clients"
    LEASE_RELEASED = "lease_released"
    MONITORING_FAULT = "monitoring_fault"
    MONITORING_FAULT_OVER = "monitoring_fault_over"
    NODE_READABLE_AGAIN = "node_readable_again"
    NODE_UNREADABLE = "node_unreadable"
    PASS_ABORTED = "pass_aborted"
    PROGRESS = "progress"
    RECORD_DROPPED = "record_dropped"
    RECORDED = "recorded"
    RESTART_LOOP = "restart_loop"
    WEBHOOK_REJECTED = "webhook_rejected"
    WEBHOOK_TOKEN_RELOADED = "webhook_token_reloaded"
    WORKLOAD_ENDED = "workload_ended"
    WORKLOAD_FAILURE = "workload_failure"


def audit(event: AuditKind, **fields: Any) -> None:
    log.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))
