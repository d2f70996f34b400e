"""What gpuhealth left on a Node, and the patches that take it off again (`gpuhealth-remediator cleanup`,
gpuhealth/remediator/act/cleanup.py). Pure functions of the Node as read and the policy.

Only what gpuhealth did goes, as its state annotation records it: its taint (gpuhealth.io/unhealthy), and the burn-in
taint (policy burn_in.taint: only gpuhealth removes it, so a node left with it would never take work); the cordon
only where the state says gpuhealth set it; karpenter.sh/do-not-disrupt only where the state says gpuhealth set it;
the operand labels it paused, back to "true" while they still hold its pause value; its annotations (the state, the
last episode, the history of past episodes, the GPU reset request); the exporter's Gpuhealth* conditions, and the
replace condition only where gpuhealth set it (its reason). A person's cordon, taints, labels and do-not-disrupt
stay. A node is left as it is, whole, where gpuhealth cannot tell what is its own (the state unreadable), where a
person holds it, and where one of gpuhealth's reset or reboot Jobs still runs on it (its taint and paused operands
keep the reset undisturbed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import NodePatch, RawCondition, RawNode
from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION
from gpuhealth.remediator.decide.node_patches import with_gpu_clients, with_meta
from gpuhealth.remediator.decide.nodestate import (
    DO_NOT_DISRUPT_ANNOTATION,
    LAST_EPISODE_ANNOTATION,
    LAST_SWEEP_ANNOTATION,
    REPLACE_CONDITION_REASON,
    RESET_REQUEST_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_KEY,
    NodeState,
    hold_of,
    time_text,
)
from gpuhealth.remediator.decide.vocabulary import Scope
from gpuhealth.remediator.policy import OPERAND_LABEL_PREFIX, Policy

# The exporter's node conditions are all gpuhealth's by their type's prefix (gpuhealth/exporter/condition_types.py).
EXPORTER_CONDITION_PREFIX = "Gpuhealth"
# gpuhealth's annotations on a Node, each removed (the hold is left with the node: a held node is left as it is).
OUR_ANNOTATIONS = (STATE_ANNOTATION, LAST_EPISODE_ANNOTATION, RESET_REQUEST_ANNOTATION, HISTORY_ANNOTATION,
                   LAST_SWEEP_ANNOTATION)


@dataclass(frozen=True)
class Undo:
    """One Node's cleanup: the merge patch of its metadata and spec (with what it changes, said for a person),
    what of a person's was seen and kept, or why the node is left as it is."""

    node: str
    left: str | None = None  # why nothing is undone on this node; None: `body` undoes what is gpuhealth's
    body: NodePatch = field(default_factory=lambda: NodePatch())  # {}: nothing in metadata or spec is gpuhealth's
    changes: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # a person's marks, seen and left in place
    episode: str = ""  # the open episode this cleanup ends ("" for none): its alerts and rung, for the report


def undo_node(node: RawNode, policy: Policy, job_running: str | None = None) -> Undo:
    """The patch that takes gpuhealth's marks off this Node's metadata and spec (conditions: `undo_conditions`).
    `job_running`: one of gpuhealth's node-action Jobs on this node still runs (its namespace/name)."""
    name = api_objects.name(node)
    annotations = api_objects.annotations(node)
    labels = api_objects.labels(node)
    try:
        state = NodeState.from_json(annotations.get(STATE_ANNOTATION))
    except ValueError as exc:
        return Undo(name, left=f"its {STATE_ANNOTATION} annotation cannot be read ({exc}): gpuhealth cannot tell "
                    "its own marks from a person's; remove them by hand")
    left = _left_for_now(hold_of(annotations), job_running)
    if left:
        return Undo(name, left=left)
    changes: list[str] = []
    kept: list[str] = []
    body = _taint_and_cordon(node, state, changes, kept, policy.burn_in.taint)
    drop: dict[str, None] = {}
    if DO_NOT_DISRUPT_ANNOTATION in annotations:
        if state.do_not_disrupt:
            drop[DO_NOT_DISRUPT_ANNOTATION] = None
        else:
            kept.append(f"{DO_NOT_DISRUPT_ANNOTATION} (not gpuhealth's)")
    drop.update({key: None for key in OUR_ANNOTATIONS if key in annotations})
    body, restored = with_gpu_clients(body, node, state, NodeState())
    if restored:
        changes += [c for c in restored.split("; ") if not c.startswith("removed ")]
    body = _restore_stray_pauses(body, labels, state, policy, changes)
    kept += [f"{key}={labels[key]} (changed by a person since gpuhealth paused it)" for key in state.reset.paused
             if key in labels and labels[key] != state.reset.pause_value]
    if drop:
        body = with_meta(body, annotations=drop)
        changes += [f"removed {key}" for key in drop]
    return Undo(name, body=body, changes=tuple(changes), kept=tuple(kept), episode=_episode(state))


def _left_for_now(hold: dict[str, Any] | None, job_running: str | None) -> str:
    """Why cleanup leaves a node with a readable state as it is this time ("": it does not)."""
    if job_running:
        return (f"gpuhealth's job {job_running} still runs on it: left as it is, so that the reset or reboot is not "
                "disturbed; run cleanup again once the job has ended")
    if hold is not None:
        who = f" by {hold['by']}" if hold.get("by") else ""
        return (f"held{who} ({hold.get('reason', '')}): a person has it; release it (gpuhealth-remediator release) "
                "and run cleanup again, or remove gpuhealth's marks by hand")
    return ""


def _taint_and_cordon(node: RawNode, state: NodeState, changes: list[str], kept: list[str],
                      burn_in: str) -> NodePatch:
    """The spec part of the patch: gpuhealth's taint off, the burn-in taint too (only gpuhealth removes it: a new
    node would otherwise never take work), and gpuhealth's cordon unless a person took the node over."""
    body: NodePatch = {}
    taints = api_objects.taints(node)
    keys = (TAINT_KEY, burn_in)
    ours = [t for t in taints if t.get("key") == TAINT_KEY]
    if any(t.get("key") in keys for t in taints):
        rest = [t for t in taints if t.get("key") not in keys]
        body.setdefault("spec", {})["taints"] = rest or None
        changes += [f"removed taint {key}" for key in keys if any(t.get("key") == key for t in taints)]
    kept += [f"taint {t.get('key')}" for t in taints if t.get("key") not in keys]
    taken_over = state.scope == Scope.NODE and state.active and state.rung is not None and not ours
    if api_objects.unschedulable(node):
        if state.cordoned and not taken_over:
            body.setdefault("spec", {})["unschedulable"] = None
            changes.append("uncordoned (gpuhealth cordoned it)")
        elif state.cordoned:
            kept.append("the cordon (a person removed gpuhealth's taint: the node is theirs)")
        else:
            kept.append("the cordon (not gpuhealth's)")
    return body


def _restore_stray_pauses(body: NodePatch, labels: dict[str, str], state: NodeState, policy: Policy,
                          changes: list[str]) -> NodePatch:
    """Operand labels holding gpuhealth's pause value that the state does not list (a state removed by hand
    mid-reset): the value is gpuhealth's alone, so they go back to "true" too."""
    values = {policy.reset.pause_value, *([state.reset.pause_value] if state.reset.pause_value else [])}
    already = (body.get("metadata") or {}).get("labels") or {}
    stray = {key: "true" for key, value in labels.items()
             if key.startswith(OPERAND_LABEL_PREFIX) and value in values and key not in already}
    if not stray:
        return body
    changes += [f"{key}=true (it held gpuhealth's pause value)" for key in sorted(stray)]
    return with_meta(body, labels=stray)


def undo_conditions(node: RawNode, policy: Policy) -> tuple[list[RawCondition] | None, tuple[str, ...]]:
    """The Node's conditions without gpuhealth's (the exporter's Gpuhealth* types; the replace condition where
    gpuhealth set it, by its reason), and the types removed; (None, ()) when there is none of gpuhealth's. A merge
    patch replaces the list whole, so it is written with the resourceVersion it was read at."""
    conditions = api_objects.node_conditions(node)

    def ours(c: RawCondition) -> bool:
        ctype = str(c.get("type") or "")
        if ctype.startswith(EXPORTER_CONDITION_PREFIX):
            return True
        return ctype == policy.replace.condition_type and c.get("reason") == REPLACE_CONDITION_REASON

    removed = tuple(str(c.get("type")) for c in conditions if ours(c))
    if not removed:
        return None, ()
    return [c for c in conditions if not ours(c)], removed


def _episode(state: NodeState) -> str:
    """The open episode, for the report: a node gpuhealth took out for a fault still firing goes back into service."""
    if not state.active:
        return ""
    firing = sorted({a.name for a in state.alerts.values() if a.asks_action})
    rung = f"{state.rung} {state.rung_status}" if state.rung else "no rung"
    return f"episode since {time_text(state.episode)}, {rung}, firing: {', '.join(firing) or 'none'}"
