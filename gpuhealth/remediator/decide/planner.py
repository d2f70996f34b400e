"""What one node's pass is built on: the read-only context of the pass (Pass: the policy, the time, the ledger with
the pass's budget and fault counts, the silence check) and the node's draft (Draft: its views, the state so far, the
plan's decisions and notes), with how a decision and a note are said and the few moves of the draft's view that
several steps share.

The steps themselves are plain functions over (draft, context), one module per concern (decide/guards.py,
fault_steps.py, scope.py, offenders.py, sweep.py, burn_in.py, validation.py, diagnose_step.py, evidence.py,
climb.py, settle.py); ladder.decide_node calls them in order, one node at a time, within one pure call of `decide`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import Decision, NodePlan, SilenceCheck
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.history import NOT_HARDWARE_COMPONENTS
from gpuhealth.remediator.decide.nodestate import NodeState, rung_index
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import (
    RUNG_ORDER,
    Action,
    Rung,
    RungStatus,
    Scope,
    Severity,
    TaintEffect,
    Verdict,
)
from gpuhealth.remediator.policy import Policy


@dataclass(frozen=True)
class Ceiling:
    """The highest rung (its index) the firing alerts let a persisting fault climb to, and what sets it ("" for
    ladder.max_rung alone), for the decision that stops there."""

    index: int
    why: str


NO_CEILING = Ceiling(len(RUNG_ORDER) - 1, "")  # as far as ladder.max_rung lets any fault climb


@dataclass(frozen=True)
class Pass:
    """What every node's steps read and none changes: the policy, the pass's time, the silence check, and the
    ledger (the budget each start takes from, and the pass's counts of monitoring and correlated faults)."""

    policy: Policy
    now: datetime
    ledger: Ledger
    silences: SilenceCheck | None = None


@dataclass
class Draft:
    """One node's plan under way. `state` is the state so far; whatever it is when decide_node returns is written."""

    full: NodeView  # the whole node
    plan: NodePlan
    view: NodeView = field(init=False)  # what the rungs see: at GPU scope, only the quarantined GPU's pods
    state: NodeState = field(init=False)
    seen: NodeState | None = None  # once the rung under way was observed (ladder.py): for the history
    scope_note: str = ""  # why a fault on one GPU takes the node (said in the first decision's reason)
    repair_warning: str = ""  # karpenter_repair.mode warn: what Karpenter's node repair may act on (every decision)
    ceiling: Ceiling = NO_CEILING  # how far the firing alerts let the climb go (climb.py)

    def __post_init__(self) -> None:
        self.view, self.state = self.full, self.full.state

    @classmethod
    def of(cls, v: NodeView) -> Draft:
        return cls(v, NodePlan(node=v.name, base_state=v.state, final_state=v.state,
                               resource_version=v.resource_version))


def out(d: Draft, action: Action, decision: Verdict, reason: str, **kw: object) -> None:
    """A decision in the plan; at GPU scope the node's cordon, drain and uncordon are said as the GPU's."""
    st = d.state
    if action == Action.UNCORDON and d.plan.base_state.scope == Scope.GPU:
        st = d.plan.base_state  # returning to service closes the episode: its scope was the GPU's
    if st.scope == Scope.GPU and action in (Action.CORDON, Action.DRAIN):
        # GPU scope: the node's cordon and drain are the GPU's device taints (kube-controller-manager evicts)
        effect = TaintEffect.NO_SCHEDULE if action == Action.CORDON else TaintEffect.NO_EXECUTE
        kw = {k: w for k, w in kw.items() if k not in ("force",)}
        kw.update(devices=st.gpu_scope.devices, effect=effect, pods=d.full.holders(st.gpu_scope.devices))
        action = Action.QUARANTINE_GPU
    elif st.scope == Scope.GPU and action == Action.UNCORDON:
        action, kw = Action.RELEASE_GPU, {**kw, "devices": st.gpu_scope.devices}
    d.plan.decisions.append(Decision(d.view.name, action, decision, reason, d.view.pool,
                                     **kw))  # type: ignore[arg-type]


def note(d: Draft, note: Note) -> None:
    d.plan.notes.append(note)


def alert_ceiling(d: Draft, fps: list[str]) -> Ceiling:
    """How far the firing alerts let a persisting fault climb: the highest of their ceilings (each alert's max_rung
    label, ladder.max_rung where it has none; a correlated alert's own rung; on a Ready node, an alert about gpuhealth
    itself its own rung), never below their own. A failed sweep's episode has its own (sweep.ceiling)."""
    best = Ceiling(-1, "")
    for fp in fps:
        alert = d.state.alerts[fp]
        own = rung_index(alert.remediation)
        if fp in d.state.correlated:
            index, why = own, f"{alert.name} is a correlated fault (it fires behind the same switch or rack " \
                "on other nodes): it climbs no node past its own rung"
        elif alert.component in NOT_HARDWARE_COMPONENTS and d.full.ready:
            # gpuhealth's own breakage (its exporter down or gone, a probe failing or stale) on a node whose
            # kubelet still reports Ready: the node is alive, gpuhealth cannot see it. A host that is really down
            # turns NotReady (the kubelet's signal, Karpenter's too): then the alert's max_rung applies
            index, why = own, f"{alert.name} is about gpuhealth itself (component {alert.component}) and the " \
                "node is Ready: it climbs no node past its own rung"
        elif alert.max_rung is not None:
            index, why = rung_index(alert.max_rung), f"{alert.name}'s max_rung is {alert.max_rung}"
        else:
            index, why = NO_CEILING.index, ""
        if max(own, index) > best.index:
            best = Ceiling(max(own, index), why)
    return best


def replace_pending(d: Draft) -> bool:
    """The replace rung started (the state's write) and its hand-over was not seen done (act/executor.py's
    pending): the remediator stopped in between."""
    st = d.state
    return st.rung == Rung.REPLACE and st.rung_status == RungStatus.RUNNING and Action.REPLACE in st.pending


def scope_view(d: Draft) -> None:
    """At GPU scope the rungs see only the pods that hold the quarantined devices (their claims say so)."""
    if d.state.scope != Scope.GPU:
        d.view = d.full
        return
    holders = set(d.full.holders(d.state.gpu_scope.devices))
    d.view = replace(d.full, evictable=[p for p in d.full.evictable if f"{p.namespace}/{p.name}" in holders],
                     pods_known=d.full.pods_known and d.full.claims is not None)


def to_node_scope(d: Draft, why: str, floor: str | None) -> None:
    """The GPU-scoped steps are not enough: the node ladder from its start (cordon, drain), then `floor`."""
    st = d.state
    node_floor = None if floor is None else Rung(floor)
    d.state = replace(st, scope=Scope.NODE, rung=None, rung_status=None, rung_started=None, rung_done=None,
                      timed_out=False, gpu_scope=replace(st.gpu_scope, node_floor=node_floor), not_started=None)
    d.view = d.full
    d.plan.drain_only = None
    note(d, Note(EventReason.NODE_SCOPE, f"GPU {', '.join(st.gpu_scope.devices)}: {why}; the node ladder takes over",
                 Severity.WARNING))
