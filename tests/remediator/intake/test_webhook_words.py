"""An alert's words are read once, where the webhook's body is parsed (intake/webhook.py): its status, remediation and
max_rung reach the record as the vocabulary's enums, and the state annotation holds the same words as before."""

from __future__ import annotations

import json

from gpuhealth.remediator.decide.nodestate import NodeState, record_alerts
from gpuhealth.remediator.decide.vocabulary import AlertStatus, Remediation, Rung
from gpuhealth.remediator.intake.webhook import parse_webhook
from gpuhealth.remediator.policy import parse_policy
from tests.support.remediator_harness import T0, webhook


def test_a_webhooks_alert_is_recorded_with_its_status_remediation_and_max_rung_as_enums() -> None:
    body = webhook("gpu-1", "reboot", status="resolved", labels={"max_rung": "replace"})
    (alert,) = parse_webhook(json.dumps(body), parse_policy("")).alerts
    record = alert.record
    assert (type(record.status), type(record.remediation), type(record.max_rung)) == (AlertStatus, Remediation, Rung)
    assert (record.status, record.remediation, record.max_rung) == (
        AlertStatus.RESOLVED, Remediation.REBOOT, Rung.REPLACE)
    written = json.loads(record_alerts(NodeState(), [(alert.fingerprint, record)], T0).to_json())
    assert {k: written["alerts"][alert.fingerprint][k] for k in ("status", "remediation", "max_rung")} == {
        "status": "resolved", "remediation": "reboot", "max_rung": "replace"}
