"""The diagnosis before a replacement, when it passes while the GPU alerts still fire (decide/diagnose_step.py): the
node is not replaced and not held for a person either; it is on probation (diagnose.probation). It returns to service
once its alerts resolve, and the alerts still firing when the probation ends replace it without a second diagnosis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.diagnose_step import CONTRADICTS, PROBATION_FAILED
from gpuhealth.remediator.decide.diagnosis import Diagnosis, diagnosis_job_name
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.ladder import decide
from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState
from gpuhealth.remediator.decide.state_records import DiagnosticRun
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import AlertStatus, Purpose, Rung, RungStatus
from gpuhealth.remediator.decide.wake import next_decision
from gpuhealth.remediator.policy import Policy, parse_policy

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
POLICY = parse_policy("alertmanager: {url: none}\nevidence: {enabled: false}\nreplace: {method: condition}\n"
                      "diagnose: {judge_image: gpuhealth}\n")
PROBATION = POLICY.diagnose.probation
EPISODE = NOW - timedelta(hours=3)
REBOOTED = NOW - timedelta(minutes=45)  # the reboot was done; the fault persisted past its escalate_after (30m)
NODE = "gpu-1"
JOB = diagnosis_job_name(NODE, Purpose.DIAGNOSE, REBOOTED)  # the diagnosis before the replacement, of this rung


def alert(status: str = AlertStatus.FIRING) -> AlertRecord:
    return AlertRecord("GPUThermalViolation", "cordon", status, starts_at=EPISODE, last_seen=NOW - timedelta(minutes=1),
                       ends_at=None if status == AlertStatus.FIRING else NOW - timedelta(minutes=20),
                       component="thermal", max_rung=Rung.REPLACE)


def rebooted(**kw: Any) -> NodeState:
    """Drained, rebooted, the fault still there: at the diagnosis before the replacement."""
    fields: dict[str, Any] = dict(alerts={"fp": alert()}, episode=EPISODE, rung=Rung.REBOOT,
                                  rung_status=RungStatus.DONE, rung_started=REBOOTED - timedelta(minutes=5),
                                  rung_done=REBOOTED, cordoned=True,
                                  diagnostic=DiagnosticRun(JOB, Purpose.DIAGNOSE, NOW - timedelta(minutes=5)))
    return NodeState(**{**fields, **kw})


def view(st: NodeState, **kw: Any) -> NodeView:
    fields: dict[str, Any] = dict(name=NODE, pool="gpu", labels={}, unschedulable=True, our_taint=True, state=st,
                                  hold=None, excluded=False, ready=True, boot_id="boot-2", resource_version="7")
    return NodeView(**{**fields, **kw})


def plan(v: NodeView, policy: Policy = POLICY, now: datetime = NOW) -> NodePlan:
    idle = [view(NodeState(), name=f"idle-{i}", unschedulable=False, our_taint=False) for i in range(19)]
    views = [v, *idle]
    return next(p for p in decide(views, policy, now, Ledger.from_views(views, policy, now)) if p.node == v.name)


def steps(p: NodePlan) -> list[tuple[str, str]]:
    return [(d.action, d.decision) for d in p.decisions]


def test_a_diagnostic_that_passes_while_the_alert_fires_puts_the_node_on_probation_not_in_a_persons_queue() -> None:
    p = plan(view(rebooted(validation_failed="reboot: gpu_diag"), diagnosis=Diagnosis(True, detail="all passed")))
    assert steps(p) == [("none", "skipped")]  # not replaced
    assert "on probation" in p.decisions[0].reason
    st = p.final_state
    assert st.diagnostic.result == CONTRADICTS and st.probation == NOW
    assert st.validation_failed is None  # the later, deeper pass ends a failed validation's hold: no release needed
    (said,) = [n for n in p.notes if n.reason == EventReason.DIAGNOSTIC_CONTRADICTS_ALERT]
    assert "on probation for 1h (diagnose.probation)" in said.message
    # the ladder wakes when the probation ends, with nothing else happening
    assert next_decision([st], POLICY, {}, NOW) == NOW + PROBATION


def test_a_node_on_probation_returns_to_service_once_its_alerts_resolve() -> None:
    # the validation failed before, the diagnostic then passed: the alert resolves (the fault cleared, or a person
    # repaired it) and the node goes back after the healthy delay, with no person's release
    st = rebooted(alerts={"fp": alert(AlertStatus.RESOLVED)}, rung_status=RungStatus.FAILED,
                  diagnostic=DiagnosticRun(JOB, Purpose.DIAGNOSE, NOW - timedelta(minutes=30), CONTRADICTS),
                  probation=NOW - timedelta(minutes=25), healthy_since=NOW - timedelta(minutes=20))
    p = plan(view(st))
    assert ("uncordon", "execute") in steps(p)
    assert p.final_state.rung is None and p.final_state.probation is None  # the episode closed


def test_a_node_on_probation_is_not_replaced_while_its_probation_lasts() -> None:
    st = rebooted(diagnostic=DiagnosticRun(JOB, Purpose.DIAGNOSE, NOW - timedelta(minutes=30), CONTRADICTS),
                  probation=NOW - PROBATION + timedelta(minutes=1))
    p = plan(view(st))
    assert steps(p) == [("none", "skipped")] and not p.notes
    assert "replaced if they still fire at" in p.decisions[0].reason


def test_the_alert_still_firing_when_the_probation_ends_replaces_the_node_without_a_second_diagnosis() -> None:
    st = rebooted(diagnostic=DiagnosticRun(JOB, Purpose.DIAGNOSE, NOW - timedelta(minutes=70), CONTRADICTS),
                  probation=NOW - PROBATION)
    p = plan(view(st))
    assert steps(p) == [("replace", "execute")]  # no diagnose step: the alert outweighs the pass now
    (said,) = [n for n in p.notes if n.reason == EventReason.DIAGNOSTIC_PROBATION_FAILED]
    assert "GPUThermalViolation still fire 1h after it" in said.message
    assert p.final_state.rung == Rung.REPLACE


def test_a_validation_that_fails_during_the_probation_replaces_the_node_without_a_second_diagnosis() -> None:
    # on probation, the alert resolved and the reboot's validation ran and failed: the fault recurred
    st = rebooted(alerts={"fp": alert(AlertStatus.RESOLVED)}, rung_status=RungStatus.FAILED, rung_done=NOW,
                  validation_failed="reboot: gpu_diag", probation=NOW - timedelta(minutes=20),
                  diagnostic=DiagnosticRun("validation-job", Purpose.VALIDATE, NOW - timedelta(minutes=5),
                                           "failed: gpu_diag"))
    p = plan(view(st))
    assert steps(p) == [("replace", "execute")]
    assert [n.reason for n in p.notes].count(EventReason.DIAGNOSTIC_PROBATION_FAILED) == 1


def test_a_replacement_held_back_after_the_probation_says_the_recurrence_once() -> None:
    # the recurrence was said on a pass whose replacement did not start (a budget, a hold): not said again
    st = rebooted(diagnostic=DiagnosticRun(JOB, Purpose.DIAGNOSE, NOW - timedelta(minutes=70), PROBATION_FAILED),
                  probation=NOW - PROBATION - timedelta(minutes=5))
    p = plan(view(st))
    assert steps(p) == [("replace", "execute")] and not p.notes
