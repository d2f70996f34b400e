"""The ladder as a state table: `decide()` on node views, no cluster and no HTTP. Each row is one node in one
state; the decision it gets and the state it leaves are the ladder's contract (docs/remediation.md). A wrong rung
shows up here as one row, not as a trace through the fake API server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.ladder import decide
from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState
from gpuhealth.remediator.decide.views import NodeView, PodRef
from gpuhealth.remediator.decide.vocabulary import Rung, RungStatus
from gpuhealth.remediator.policy import Policy, parse_policy

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
POLICY = parse_policy("""
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
ladder:
  cordon: {escalate_after: 20m}
return_to_service: {healthy_delay: 15m}
""")
POOL_SIZE = 20  # one node under test and idle ones: a budget of 10% leaves room for two


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def alert(remediation: str, gpu: str | None = "0", status: str = "firing", seen: float = 1) -> AlertRecord:
    return AlertRecord("GPUFault", remediation, status, starts_at=ago(5), last_seen=ago(seen), gpu=gpu)


def state(remediation: str = "drain", rung: Rung | None = None, status: RungStatus | None = None,
          **kw: Any) -> NodeState:
    """An episode of one alert; with a rung, as gpuhealth's own writes left it (cordoned)."""
    alerts = {"fp": kw.pop("record", None) or alert(remediation)}
    return NodeState(alerts=alerts, episode=ago(10), rung=rung, rung_status=status, cordoned=rung is not None, **kw)


def view(st: NodeState | None = None, **kw: Any) -> NodeView:
    """A node; with a rung, it carries gpuhealth's taint and cordon, as the executor left it."""
    st = st or NodeState()
    ours = st.rung is not None
    fields: dict[str, Any] = dict(name="gpu-1", pool="gpu", labels={}, unschedulable=ours, our_taint=ours, state=st,
                                  hold=None, excluded=False, ready=True, boot_id="boot-1", resource_version="7")
    return NodeView(**{**fields, **kw})


def plan(v: NodeView, policy: Policy = POLICY, others: list[NodeView] | None = None) -> NodePlan:
    idle = [view(name=f"idle-{i}") for i in range(POOL_SIZE - 1 - len(others or []))]
    views = [v, *(others or []), *idle]
    plans = decide(views, policy, NOW, Ledger.from_views(views, policy, NOW))
    return next(p for p in plans if p.node == v.name)


DONE, RUNNING, FAILED = RungStatus.DONE, RungStatus.RUNNING, RungStatus.FAILED
EXPORTER_DOWN = AlertRecord("GpuhealthExporterDown", "cordon", "firing", starts_at=ago(25), last_seen=ago(1),
                            component="probe", max_rung="replace")  # as rules/alerts/probe.yaml labels it
POD = PodRef("ml", "train-0", uses_gpu=True)

# (row, view, the decisions as (action, verdict), the rung and its status the state is left at)
TABLE: list[tuple[str, NodeView, list[tuple[str, str]], tuple[Rung | None, RungStatus | None]]] = [
    ("no episode: nothing to decide", view(), [], (None, None)),
    ("an alert asking for cordon: cordoned, done at once",
     view(state("cordon")), [("cordon", "execute")], (Rung.CORDON, DONE)),
    ("drain on an empty node: cordon, then the drain is done at once",
     view(state("drain")), [("cordon", "execute"), ("drain", "execute")], (Rung.DRAIN, DONE)),
    ("drain with a pod on the node: the drain runs",
     view(state("drain"), evictable=[POD]), [("cordon", "execute"), ("drain", "execute")], (Rung.DRAIN, RUNNING)),
    ("pods unknown (plan without --pods): cordon, and the drain waits",
     view(state("drain"), pods_known=False), [("cordon", "execute"), ("drain", "deferred")], (Rung.CORDON, DONE)),
    ("held by a person: skipped, nothing moves",
     view(state("cordon", Rung.CORDON, DONE, rung_done=ago(9)), hold={"reason": "rma", "by": "ops"}),
     [("none", "skipped")], (Rung.CORDON, DONE)),
    ("excluded by the policy: skipped", view(state("cordon"), excluded=True), [("none", "skipped")], (None, None)),
    ("cordoned by a person: left alone", view(state("cordon"), unschedulable=True), [("none", "skipped")],
     (None, None)),
    ("an unreadable state: fail closed", view(damaged="not JSON"), [("none", "skipped")], (None, None)),
    ("gpuhealth's taint removed mid-episode: a person took over",
     view(state("drain", Rung.CORDON, DONE, rung_done=ago(9)), our_taint=False), [("none", "skipped")],
     (Rung.CORDON, DONE)),
    ("the fault persists, escalate_after not yet passed: the next rung waits",
     view(state("cordon", Rung.CORDON, DONE, rung_done=ago(19))), [("drain", "deferred")], (Rung.CORDON, DONE)),
    ("the fault persisted past escalate_after: the next rung starts",
     view(state("cordon", Rung.CORDON, DONE, rung_done=ago(21))), [("drain", "execute")], (Rung.DRAIN, DONE)),
    ("gpuhealth's own alert (its exporter down) past escalate_after on a Ready node: it stays at cordon",
     view(state(record=EXPORTER_DOWN, rung=Rung.CORDON, status=DONE, rung_done=ago(21))), [("none", "skipped")],
     (Rung.CORDON, DONE)),
    ("the same on a NotReady node (the host is down): it climbs as its max_rung lets it",
     view(state(record=EXPORTER_DOWN, rung=Rung.CORDON, status=DONE, rung_done=ago(21)), ready=False),
     [("drain", "execute")], (Rung.DRAIN, DONE)),
    ("a reset after the drain: the reset Job, on the GPU the alert names",
     view(state("reset_gpu", Rung.DRAIN, DONE, rung_done=ago(1))), [("reset_gpu", "execute")],
     (Rung.RESET_GPU, RUNNING)),
    ("a reset no alert names a GPU for: failed at once, the reboot takes over",
     view(state(record=alert("reset_gpu", gpu=None), rung=Rung.DRAIN, status=DONE, rung_done=ago(1))),
     [("reboot", "execute")], (Rung.REBOOT, RUNNING)),
    ("a reboot whose Job runs: waits for it",
     view(state("reboot", Rung.REBOOT, RUNNING, rung_started=ago(3), job="j"), job_status="running"),
     [("reboot", "deferred")], (Rung.REBOOT, RUNNING)),
    ("the drain failed and the alert asks no more: needs a person",
     view(state("drain", Rung.DRAIN, FAILED, rung_done=ago(1), drain_failed=True)), [("none", "skipped")],
     (Rung.DRAIN, FAILED)),
    ("alerts quiet past episode.quiet_timeout: escalation stops",
     view(state(record=alert("drain", seen=7 * 60), rung=Rung.DRAIN, status=DONE, rung_done=ago(7 * 60))),
     [("none", "skipped")], (Rung.DRAIN, DONE)),
    ("resolved, healthy for less than healthy_delay: return to service waits",
     view(state(record=alert("drain", status="resolved"), rung=Rung.DRAIN, status=DONE, rung_done=ago(50),
                healthy_since=ago(5))), [("uncordon", "deferred")], (Rung.DRAIN, DONE)),
    ("resolved, healthy past healthy_delay: returned to service, the episode closes",
     view(state(record=alert("drain", status="resolved"), rung=Rung.DRAIN, status=DONE, rung_done=ago(50),
                healthy_since=ago(20))), [("uncordon", "execute")], (None, None)),
]


@pytest.mark.parametrize(("v", "decisions", "left_at"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_the_ladder_decides_each_node_state_as_its_table_row_says(
        v: NodeView, decisions: list[tuple[str, str]], left_at: tuple[Rung | None, RungStatus | None]) -> None:
    p = plan(v)
    assert [(str(d.action), str(d.decision)) for d in p.decisions] == decisions
    assert (p.final_state.rung, p.final_state.rung_status) == left_at


def test_a_pool_at_its_disruption_budget_defers_the_drain_with_a_typed_deferral() -> None:
    """Two nodes of the pool (10% of 20) already drained: a third drain waits, and says which limit held it."""
    busy = [view(state("drain", Rung.DRAIN, DONE, rung_done=ago(1)), name=f"busy-{i}") for i in range(2)]
    p = plan(view(state("drain", Rung.CORDON, DONE, rung_done=ago(1))), others=busy)
    [d] = p.decisions
    assert (str(d.action), str(d.decision), str(d.deferral)) == ("drain", "deferred", "disruption_budget")
    assert p.final_state.rung == Rung.CORDON


def test_the_oldest_episode_takes_the_last_budget_first() -> None:
    """decide() orders nodes by episode start: with room for one more drain, the older episode gets it."""
    one_busy = [view(state("drain", Rung.DRAIN, DONE, rung_done=ago(1)), name="busy-0")]
    older = view(replace(state("drain", Rung.CORDON, DONE, rung_done=ago(1)), episode=ago(30)), name="gpu-old")
    newer = view(state("drain", Rung.CORDON, DONE, rung_done=ago(1)), name="gpu-new")
    views = [newer, older, *one_busy, *[view(name=f"idle-{i}") for i in range(POOL_SIZE - 3)]]
    plans = {p.node: p for p in decide(views, POLICY, NOW, Ledger.from_views(views, POLICY, NOW))}
    assert [str(d.decision) for d in plans["gpu-old"].decisions] == ["execute"]
    assert [str(d.decision) for d in plans["gpu-new"].decisions] == ["deferred"]
