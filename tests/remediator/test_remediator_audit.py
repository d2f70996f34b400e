"""The audit log's kinds and outcomes are enums (gpuhealth/remediator/audit.py AuditKind, metrics.ActionResult,
SyncResult), and a line carries the same words a log query selects on as when they were strings."""

from __future__ import annotations

import json
import logging

import pytest

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.decide.vocabulary import Action, Verdict
from gpuhealth.remediator.metrics import ActionResult, SyncResult


def test_an_audit_line_holds_its_kind_and_outcome_as_plain_words(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpuhealth.remediator"):
        audit(AuditKind.ACTION, action=Action.REBOOT, result=ActionResult.NOT_STARTED)
        audit(AuditKind.DECISION, decision=Verdict.SKIPPED)
        audit(AuditKind.ALERTMANAGER_SYNC, result=SyncResult.ERROR)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ['{"action": "reboot", "event": "action", "result": "not_started"}',
                     '{"decision": "skipped", "event": "decision"}',
                     '{"event": "alertmanager_sync", "result": "error"}']
    assert [json.loads(line)["event"] for line in lines] == ["action", "decision", "alertmanager_sync"]


def test_every_audit_kind_is_its_own_name_in_lower_case() -> None:
    """The words are an interface (log queries, dashboards): a member renamed must not rename its word."""
    assert all(kind.value == kind.name.lower() for kind in AuditKind)
