"""Properties of reading Alertmanager's listed alerts (issue 35, item 10): whatever JSON a member lists, the sync's
reading never raises, an alert that is not well-formed is refused alone (said with why), and a well-formed one beside
it is still read. Deterministic and bounded, as the folder's other suites."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.intake.alert_sync import active_alerts, sync_batch
from gpuhealth.remediator.policy import Policy
from tests.remediator.properties.objects import NOW, listed_alerts

LISTS = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])
CONTROL = {"labels": {"alertname": "ControlFault", "node": "gpu-9", "remediation": "cordon", "severity": "critical",
                      "component": "gpu"}, "annotations": {}, "fingerprint": "fp-control",
           "startsAt": "2026-12-02T09:00:00Z", "status": {"state": "active", "silencedBy": [], "inhibitedBy": []}}


@LISTS
@given(st.lists(listed_alerts(), max_size=6), st.integers(0, 6))
def test_a_listed_alert_that_is_not_well_formed_is_refused_alone(listed: list[dict[str, Any]], at: int) -> None:
    items = [*listed[:at], CONTROL, *listed[at:]]
    active, ignored, skipped = active_alerts(items, Policy())
    assert [a.record.name for a in active if a.fingerprint == "fp-control"] == ["ControlFault"]
    assert all(why for _, why in [*ignored, *skipped])  # each refusal says why
    plan = sync_batch({"gpu-9": NodeState()}, active, NOW, NOW, Policy(), resolve=not any(not fp for fp, _ in skipped),
                      unreadable={fp for fp, _ in skipped})
    assert [a.record.name for a in plan.batch.alerts if a.fingerprint == "fp-control"] == ["ControlFault"]
