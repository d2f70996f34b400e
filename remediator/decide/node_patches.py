"""The Node patches a plan writes: the state annotation, our taint and cordon, their undoing, and Karpenter's
do-not-disrupt annotation. Pure functions of a Node as read and the states before and after the plan."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from remediator.decide.nodestate import (
    DO_NOT_DISRUPT_ANNOTATION,
    LAST_EPISODE_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_EFFECT,
    TAINT_KEY,
    NodeState,
    fmt_time,
    time_text,
)


def state_body(state: NodeState) -> dict[str, Any]:
    return {"metadata": {"annotations": {STATE_ANNOTATION: state.to_json()}}}


def cordon_body(node: dict[str, Any], state: NodeState) -> dict[str, Any]:
    """Our NoSchedule taint, unschedulable (when the state says we set it), and the state, in one patch."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    taints.append({"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT})
    body: dict[str, Any] = {**state_body(state), "spec": {"taints": taints}}
    if state.cordoned:
        body["spec"]["unschedulable"] = True
    return body


def uncordon_body(node: dict[str, Any], before: NodeState, after: NodeState, now: datetime) -> dict[str, Any]:
    """Undo only what we did: our taint, and unschedulable only if we set it; keep a summary."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    summary = {"episode": time_text(before.episode), "ended": fmt_time(now), "rung": before.rung,
               "rung_status": before.rung_status,
               "alerts": sorted({a.name for a in before.alerts.values() if a.name})}
    body: dict[str, Any] = {
        "metadata": {"annotations": {STATE_ANNOTATION: after.to_json(),
                                     LAST_EPISODE_ANNOTATION: json.dumps(summary, sort_keys=True)}},
        "spec": {"taints": taints or None}}
    if before.cordoned:
        body["spec"]["unschedulable"] = None
    return body


def claim_do_not_disrupt(node: dict[str, Any], before: NodeState, after: NodeState) -> NodeState:
    """`after`, owning karpenter.sh/do-not-disrupt only if gpuhealth is the one to set it: when the annotation
    is already on the Node as the plan starts wanting it (a person's, another tool's), it is theirs: left in
    place, never removed, and the state does not claim it."""
    if after.do_not_disrupt and not before.do_not_disrupt:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if DO_NOT_DISRUPT_ANNOTATION in annotations:
            return replace(after, do_not_disrupt=False)
    return after


def with_do_not_disrupt(body: dict[str, Any], before: NodeState, after: NodeState) -> tuple[dict[str, Any], str]:
    """The Node patch with karpenter.sh/do-not-disrupt set (gpuhealth takes it: drain starts) or removed
    (gpuhealth gives it up: return to service, replace, the episode closed), in the same write as the state;
    and a note for the audit ("" when nothing changes)."""
    if after.do_not_disrupt == before.do_not_disrupt:
        return body, ""
    value, note = ("true", f"set {DO_NOT_DISRUPT_ANNOTATION}") if after.do_not_disrupt else \
        (None, f"removed {DO_NOT_DISRUPT_ANNOTATION} (set by gpuhealth)")
    meta = body.get("metadata") or {}
    annotations = {**(meta.get("annotations") or {}), DO_NOT_DISRUPT_ANNOTATION: value}
    return {**body, "metadata": {**meta, "annotations": annotations}}, note


def with_gpu_clients(body: dict[str, Any], node: dict[str, Any], before: NodeState,
                     after: NodeState) -> tuple[dict[str, Any], str]:
    """The Node patch with the reset's GPU clients stopped (operand labels set to `pause_value`, the exporter's
    gpuhealth.io/gpu-reset-request annotation) or restored, in the same write as the state; and a note for the
    audit ("" when nothing changes). A label is restored only while it still holds the pause value: one a person
    changed since is theirs."""
    labels_now = (node.get("metadata") or {}).get("labels") or {}
    labels: dict[str, str | None] = {key: after.pause_value for key in after.paused if key not in before.paused}
    labels.update({key: "true" for key in before.paused
                   if key not in after.paused and labels_now.get(key) == before.pause_value})
    annotations: dict[str, str | None] = {}
    if after.reset_request is not None and before.reset_request != after.reset_request:
        annotations[RESET_REQUEST_ANNOTATION] = after.reset_request
    elif after.reset_phase is None and before.reset_phase is not None:
        annotations[RESET_REQUEST_ANNOTATION] = None
    if not labels and not annotations:
        return body, ""
    meta = dict(body.get("metadata") or {})
    if labels:
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    changes = [f"{k}={v}" for k, v in sorted(labels.items())]
    changes += [f"{'set' if v else 'removed'} {k}" for k, v in annotations.items()]
    return {**body, "metadata": meta}, "; ".join(changes)
