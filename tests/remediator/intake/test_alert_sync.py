"""The sync's pure part (gpuhealth/remediator/intake/alert_sync.py): what it writes, and what it leaves alone, for a
given list."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState, record_alerts
from gpuhealth.remediator.intake import alert_sync
from gpuhealth.remediator.intake.alert_sync import ActiveAlert, refresh_after, sync_batch
from gpuhealth.remediator.policy import Policy
from tests.support.remediator_harness import T0

POLICY = Policy()


def record(name: str, status: str = "firing", seen_ago: timedelta = timedelta(0), remediation: str = "cordon",
           **kw: str) -> AlertRecord:
    return AlertRecord(name=name, remediation=remediation, status=status, starts_at=T0 - timedelta(hours=1),
                       last_seen=T0 - seen_ago, **kw)


def listed(node: str, fp: str, rec: AlertRecord, suppressed: bool = False) -> ActiveAlert:
    return ActiveAlert(node, fp, replace(rec, status="firing", last_seen=rec.starts_at), suppressed, True)


def state(**alerts: AlertRecord) -> NodeState:
    return NodeState(alerts=dict(alerts), episode=T0 - timedelta(hours=1))


def test_a_firing_alert_still_listed_is_rewritten_only_once_its_last_seen_is_old() -> None:
    fresh = record("A", seen_ago=refresh_after(POLICY) - timedelta(seconds=1))
    old = record("B", seen_ago=refresh_after(POLICY))
    states = {"n1": state(a=fresh), "n2": state(b=old)}
    plan = sync_batch(states, [listed("n1", "a", fresh), listed("n2", "b", old)], T0, T0, POLICY)
    assert plan.changes() == {"recorded": 0, "resolved": 0, "refreshed": 1}
    assert [(a.node, a.fingerprint) for a in plan.batch.alerts] == [("n2", "b")]


def test_informational_alerts_are_not_refreshed_and_refreshes_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alert_sync, "MAX_REFRESHES", 3)
    old = timedelta(hours=1)
    states = {f"n{i}": state(a=record("A", seen_ago=old)) for i in range(5)}
    states["info"] = state(i=record("Info", seen_ago=old, remediation="none"))
    active = [listed(n, "a", s.alerts["a"]) for n, s in states.items() if n != "info"]
    active.append(listed("info", "i", states["info"].alerts["i"]))
    plan = sync_batch(states, active, T0, T0, POLICY)
    assert plan.refreshed == 3 and all(a.node != "info" for a in plan.batch.alerts)


def test_an_alert_recorded_after_the_list_was_asked_for_is_not_resolved_by_it() -> None:
    raced = record("A", seen_ago=-timedelta(milliseconds=5))  # a webhook recorded it just after the list was read
    plan = sync_batch({"n1": state(a=raced)}, [], T0, T0, POLICY)
    assert plan.resolved == 0


def test_a_resolution_inferred_from_an_old_list_never_overwrites_a_newer_firing_record() -> None:
    """The sync read the list at T0 and computed its resolution from the state it had; meanwhile a webhook
    recorded the alert firing again (last_seen after T0). The write merges onto the fresh state: the firing
    record wins."""
    inferred = replace(record("A"), status="resolved", ends_at=T0, resolved_by="sync")
    fresh = state(a=record("A", seen_ago=-timedelta(seconds=1)))
    assert record_alerts(fresh, [("a", inferred)], T0 + timedelta(seconds=2)).alerts["a"].status == "firing"
    older = state(a=record("A", seen_ago=timedelta(seconds=1)))
    assert record_alerts(older, [("a", inferred)], T0 + timedelta(seconds=2)).alerts["a"].status == "resolved"


def test_alertmanagers_own_resolution_is_never_reopened_by_the_same_alert_listed() -> None:
    """A resolution Alertmanager sent (webhook) beats a firing copy with the same start (out-of-order
    delivery); only a resolution the sync inferred is reopened by a listing."""
    sent = replace(record("A", seen_ago=timedelta(minutes=5)), status="resolved", ends_at=T0)
    inferred = replace(sent, resolved_by="sync")
    for resolution, recorded in ((sent, 0), (inferred, 1)):
        plan = sync_batch({"n1": state(a=resolution)}, [listed("n1", "a", resolution)], T0, T0, POLICY)
        assert plan.recorded == recorded


def test_a_silenced_or_unrouted_alert_is_never_recorded_from_the_list() -> None:
    rec = record("A")
    unrouted = ActiveAlert("n1", "b", rec, False, False)
    plan = sync_batch({"n1": NodeState()}, [listed("n1", "a", rec, suppressed=True), unrouted], T0, T0, POLICY)
    assert plan.recorded == 0 and not plan.batch.alerts


def test_no_resolution_is_inferred_from_an_untrusted_list() -> None:
    plan = sync_batch({"n1": state(a=record("A", seen_ago=timedelta(hours=1)))}, [], T0, T0, POLICY, resolve=False)
    assert plan.resolved == 0
