"""The state one node's plan is built on, shared by the ladder's steps (decide/ladder.py, decide/scope.py,
decide/climb.py): the node's views, the state so far, the plan's decisions and notes, and how a decision is said.

The steps are grouped by concern in those files as mixins of one planner (ladder._Planner): they all read and move
the same state, one node at a time, within one pure call of `decide`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from remediator.decide.budget import Ledger
from remediator.decide.decision import Decision, NodePlan, SilenceCheck
from remediator.decide.event_reasons import EventReason, Note
from remediator.decide.history import NOT_HARDWARE_COMPONENTS
from remediator.decide.nodestate import NodeState, rung_index
from remediator.decide.views import NodeView
from remediator.decide.vocabulary import RUNG_ORDER, Action, Rung, RungStatus, Scope, Severity, TaintEffect, Verdict
from remediator.policy import Policy


@dataclass(frozen=True)
class Ceiling:
    """The highest rung (its index) the firing alerts let a persisting fault climb to, and what sets it ("" for
    ladder.max_rung alone), for the decision that stops there."""

    index: int
    why: str


class PlannerBase:
    """One node's plan under way. `self.state` is the state so far; whatever it is when run() returns is written."""

    def __init__(self, v: NodeView, policy: Policy, now: datetime, ledger: Ledger,
                 silences: SilenceCheck | None) -> None:
        self.v, self.policy, self.now, self.ledger, self.silences = v, policy, now, ledger, silences
        self.full = v  # the whole node; at GPU scope, self.v holds only the quarantined GPU's pods
        self.state: NodeState = v.state
        self.seen: NodeState | None = None  # once the rung under way was observed (ladder.py): for the history
        self.scope_note = ""  # why a fault on one GPU takes the node (said in the first decision's reason)
        self.repair_warning = ""  # karpenter_repair.mode warn: what Karpenter's node repair may act on (every decision)
        self.ceiling = Ceiling(len(RUNG_ORDER) - 1, "")  # how far the firing alerts let the climb go (climb.py)
        self.plan = NodePlan(node=v.name, base_state=v.state, final_state=v.state,
                             resource_version=v.resource_version)

    def out(self, action: Action, decision: Verdict, reason: str, **kw: object) -> None:
        st = self.state
        if action == Action.UNCORDON and self.plan.base_state.scope == Scope.GPU:
            st = self.plan.base_state  # returning to service closes the episode: its scope was the GPU's
        if st.scope == Scope.GPU and action in (Action.CORDON, Action.DRAIN):
            # GPU scope: the node's cordon and drain are the GPU's device taints (kube-controller-manager evicts)
            effect = TaintEffect.NO_SCHEDULE if action == Action.CORDON else TaintEffect.NO_EXECUTE
            kw = {k: w for k, w in kw.items() if k not in ("force",)}
            kw.update(devices=st.devices, effect=effect, pods=self.full.holders(st.devices))
            action = Action.QUARANTINE_GPU
        elif st.scope == Scope.GPU and action == Action.UNCORDON:
            action, kw = Action.RELEASE_GPU, {**kw, "devices": st.devices}
        self.plan.decisions.append(Decision(self.v.name, action, decision, reason, self.v.pool,
                                            **kw))  # type: ignore[arg-type]

    def alert_ceiling(self, fps: list[str]) -> Ceiling:
        """How far the firing alerts let a persisting fault climb: the highest of their ceilings (each alert's
        max_rung label, ladder.max_rung where it has none; a correlated alert's own rung; on a Ready node, an alert
        about gpuhealth itself its own rung), never below their own."""
        best = Ceiling(-1, "")
        for fp in fps:
            alert = self.state.alerts[fp]
            own = rung_index(alert.remediation)
            if fp in self.state.correlated:
                index, why = own, f"{alert.name} is a correlated fault (it fires behind the same switch or rack " \
                    "on other nodes): it climbs no node past its own rung"
            elif alert.component in NOT_HARDWARE_COMPONENTS and self.full.ready:
                # gpuhealth's own breakage (its exporter down or gone, a probe failing or stale) on a node whose
                # kubelet still reports Ready: the node is alive, gpuhealth cannot see it. A host that is really down
                # turns NotReady (the kubelet's signal, Karpenter's too): then the alert's max_rung applies
                index, why = own, f"{alert.name} is about gpuhealth itself (component {alert.component}) and the " \
                    "node is Ready: it climbs no node past its own rung"
            elif alert.max_rung is not None:
                index, why = rung_index(alert.max_rung), f"{alert.name}'s max_rung is {alert.max_rung}"
            else:
                index, why = len(RUNG_ORDER) - 1, ""
            if max(own, index) > best.index:
                best = Ceiling(max(own, index), why)
        return best

    def note(self, note: Note) -> None:
        self.plan.notes.append(note)

    def _replace_pending(self) -> bool:
        """The replace rung started (the state's write) and its hand-over was not seen done (act/executor.py's
        pending): the remediator stopped in between."""
        st = self.state
        return st.rung == Rung.REPLACE and st.rung_status == RungStatus.RUNNING and Action.REPLACE in st.pending

    def _scope_view(self) -> None:
        """At GPU scope the rungs see only the pods that hold the quarantined devices (their claims say so)."""
        if self.state.scope != Scope.GPU:
            self.v = self.full
            return
        holders = set(self.full.holders(self.state.devices))
        self.v = replace(self.full, evictable=[p for p in self.full.evictable if f"{p.namespace}/{p.name}" in holders],
                         pods_known=self.full.pods_known and self.full.claims is not None)

    def _to_node_scope(self, why: str, floor: str | None) -> None:
        """The GPU-scoped steps are not enough: the node ladder from its start (cordon, drain), then `floor`."""
        st = self.state
        self.state = replace(st, scope=Scope.NODE, rung=None, rung_status=None, rung_started=None, rung_done=None,
                             timed_out=False, node_floor=floor, not_started=None)
        self.v = self.full
        self.plan.drain_only = None
        self.note(Note(EventReason.NODE_SCOPE, f"GPU {', '.join(st.devices)}: {why}; the node ladder takes over",
                       Severity.WARNING))
