"""What a pass decides for a node: each Decision (an action, its verdict and why) and the NodePlan that carries
them with the state to write; and the answer of the silence check the ladder asks before a disruptive step.
The ladder (ladder.py) makes them; the executor, the reconciler, `plan` and the simulator read them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuhealth.remediator.decide.event_reasons import Note
from gpuhealth.remediator.decide.history import Episode
from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.decide.views import GpuPods
from gpuhealth.remediator.decide.vocabulary import Action, Deferral, TaintEffect, Verdict


@dataclass(frozen=True)
class SilenceAnswer:
    silenced_by: tuple[str, ...] = ()  # silences and inhibiting alerts: a person (or a bigger fault) took over
    error: str | None = None


SilenceCheck = Callable[[str, list[str]], SilenceAnswer]


@dataclass(frozen=True)
class Decision:
    node: str
    action: Action
    decision: Verdict
    reason: str
    pool: str = ""
    new: bool = True  # starts a rung (False: more work on one under way, e.g. drain retries, a Job re-created)
    force: bool = False  # drain: delete instead of evict (policy drain.on_timeout: force)
    gpu: str | None = None
    job: str | None = None
    devices: tuple[str, ...] = ()  # quarantine_gpu, release_gpu: the DRA devices (a GPU and its MIG devices)
    effect: TaintEffect | None = None  # quarantine_gpu: NoSchedule (cordon) or NoExecute (drain)
    pods: tuple[str, ...] = ()  # quarantine_gpu: namespace/name of the pods whose claims use the devices
    # karpenter_repair.mode warn: the Karpenter-watched conditions another agent set False on the node (its node
    # repair may replace it under this step)
    karpenter_repair: str = ""
    deferral: Deferral | None = None  # deferred by the budget: which of its limits (decide/budget.py)

    def line(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "action": self.action, "decision": self.decision,
                               "reason": self.reason}
        if self.devices:
            out["devices"] = list(self.devices)
        if self.effect is not None:
            out.update(effect=self.effect, pods=list(self.pods))
        if self.karpenter_repair:
            out["karpenter_repair"] = self.karpenter_repair
        return out


NOT_STARTED = "the node-action Job did not start"  # how its Event, audit line and decisions begin

@dataclass
class NodePlan:
    node: str
    base_state: NodeState  # the state as read (the view's)
    final_state: NodeState  # the state to write, once, before any side effect
    resource_version: str | None = None  # the Node's resourceVersion the plan was computed from
    decisions: list[Decision] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)  # for Events and audit lines
    # node scope, a fault on one GPU whose pods the node agent knows (alerts' gpu_pods): the drain evicts only these
    drain_only: GpuPods | None = None
    # the node's history of hardware episodes to write with the state (decide/history.py); None: as it is
    history: tuple[Episode, ...] | None = None
    # an idle-node sweep starts: its time, written on the Node with the cordon (gpuhealth.io/last-sweep)
    swept: datetime | None = None

    @property
    def changed(self) -> bool:
        return self.final_state != self.base_state

    def executes(self, *actions: Action) -> list[Decision]:
        return [d for d in self.decisions if d.decision == Verdict.EXECUTE and (not actions or d.action in actions)]
