"""When the ladder next needs to decide, with nothing else happening: the earliest of the times its own rules turn
on (a rung's timeout, an escalation, a diagnostic's probation, the healthy delay before return to service, an episode
going quiet, a breaker's cool-down, and, when the rate cap held something back, the oldest action of the last hour
ageing out).

It lives beside the ladder so that a new timed transition in decide/ is added here in the same change. The fleet
simulator (gpuhealth/simulator/remediation.py), which jumps from event to event, sleeps until it instead of keeping
timing rules of its own; `serve` passes every --interval, on each webhook's write, and at this time when it falls sooner
(act/reconciler.py `wait_s`). tests/remediator/decide/test_decide_wake.py checks that the ladder's decision changes
at the time given and not before."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from gpuhealth.remediator.decide.nodestate import NodeState, parse_time
from gpuhealth.remediator.decide.vocabulary import AlertStatus, RungStatus
from gpuhealth.remediator.policy import Policy

HOUR = timedelta(hours=1)  # the action rate cap's window (budget.max_actions_per_hour)


def next_decision(states: Iterable[NodeState], policy: Policy, breaker_trips: dict[str, str], after: datetime,
                  rate_capped: bool = False) -> datetime | None:
    """The earliest time after `after` at which a decision on these nodes could change by time alone; None: never."""
    when: list[datetime] = []
    for st in states:
        if st.rung and st.rung_status == RungStatus.RUNNING and st.rung_started:
            timeout = policy.rung(st.rung).timeout
            if timeout is not None:
                when.append(st.rung_started + timeout)
        if st.rung and st.rung_status == RungStatus.DONE and st.rung_done:
            escalate = policy.rung(st.rung).escalate_after
            if escalate is not None:
                when.append(st.rung_done + escalate)
        evidence = st.evidence_run
        if evidence.job and evidence.outcome is None and evidence.started:  # the evidence's wait ends
            when.append(evidence.started + policy.evidence.max_wait)
        if st.probation:  # a diagnostic's pass outweighs the alerts until then (decide/diagnose_step.py)
            when.append(st.probation + policy.diagnose.probation)
        if st.active and st.healthy_since:
            when.append(st.healthy_since + policy.return_to_service.healthy_delay)
        for alert in st.alerts.values():
            if alert.status == AlertStatus.FIRING:
                when.append(alert.last_seen + policy.episode.quiet_timeout)
        if rate_capped:
            when.extend(t + HOUR for t in st.actions)
    for tripped in breaker_trips.values():
        when.append(parse_time(tripped) + policy.breaker.cooldown)
    later = [w for w in when if w > after + timedelta(microseconds=1)]
    return min(later) if later else None
