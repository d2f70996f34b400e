"""The Node patches a plan writes (NodePatch): the state annotation, our taint and cordon, their undoing, and
Karpenter's do-not-disrupt annotation. Pure functions of a Node as read and the states before and after the plan."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import NodePatch, NodeSpecPatch, PatchMeta, RawNode
from gpuhealth.remediator.decide.nodestate import (
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


def state_body(state: NodeState) -> NodePatch:
    return {"metadata": {"annotations": {STATE_ANNOTATION: state.to_json()}}}


def cordon_body(node: RawNode, state: NodeState) -> NodePatch:
    """Our NoSchedule taint, unschedulable (when the state says we set it), and the state, in one patch."""
    taints = [t for t in api_objects.taints(node) if t.get("key") != TAINT_KEY]
    taints.append({"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT})
    spec: NodeSpecPatch = {"taints": taints}
    if state.cordoned:
        spec["unschedulable"] = True
    return {**state_body(state), "spec": spec}


def uncordon_body(node: RawNode, before: NodeState, after: NodeState, now: datetime) -> NodePatch:
    """Undo only what we did: our taint, and unschedulable only if we set it; keep a summary."""
    taints = [t for t in api_objects.taints(node) if t.get("key") != TAINT_KEY]
    summary = {"episode": time_text(before.episode), "ended": fmt_time(now), "rung": before.rung,
               "rung_status": before.rung_status,
               "alerts": sorted({a.name for a in before.alerts.values() if a.name})}
    spec: NodeSpecPatch = {"taints": taints or None}
    if before.cordoned:
        spec["unschedulable"] = None
    return {"metadata": {"annotations": {STATE_ANNOTATION: after.to_json(),
                                         LAST_EPISODE_ANNOTATION: json.dumps(summary, sort_keys=True)}},
            "spec": spec}


def without_taint(body: NodePatch, node: RawNode, key: str) -> NodePatch:
    """`body` with the taint `key` taken off the Node's taints (as `body` already sets them, else as read): a new
    node's burn-in taint, removed when its burn-in passed (decide/burn_in.py)."""
    spec: NodeSpecPatch = {**(body.get("spec") or {})}
    taints = spec["taints"] if "taints" in spec else api_objects.taints(node)
    spec["taints"] = [t for t in taints or () if t.get("key") != key] or None
    return {**body, "spec": spec}


def claim_do_not_disrupt(node: RawNode, before: NodeState, after: NodeState) -> NodeState:
    """`after`, owning karpenter.sh/do-not-disrupt only if gpuhealth is the one to set it: when the annotation
    is already on the Node as the plan starts wanting it (a person's, another tool's), it is theirs: left in
    place, never removed, and the state does not claim it."""
    taking = after.do_not_disrupt and not before.do_not_disrupt
    if taking and DO_NOT_DISRUPT_ANNOTATION in api_objects.annotations(node):
        return replace(after, do_not_disrupt=False)
    return after


def with_do_not_disrupt(body: NodePatch, before: NodeState, after: NodeState) -> tuple[NodePatch, str]:
    """The Node patch with karpenter.sh/do-not-disrupt set (gpuhealth takes it: drain starts) or removed
    (gpuhealth gives it up: return to service, replace, the episode closed), in the same write as the state;
    and a note for the audit ("" when nothing changes)."""
    if after.do_not_disrupt == before.do_not_disrupt:
        return body, ""
    value, note = ("true", f"set {DO_NOT_DISRUPT_ANNOTATION}") if after.do_not_disrupt else \
        (None, f"removed {DO_NOT_DISRUPT_ANNOTATION} (set by gpuhealth)")
    return with_meta(body, annotations={DO_NOT_DISRUPT_ANNOTATION: value}), note


def with_gpu_clients(body: NodePatch, node: RawNode, before: NodeState, after: NodeState) -> tuple[NodePatch, str]:
    """The Node patch with the reset's GPU clients stopped (operand labels set to `pause_value`, the exporter's
    gpuhealth.io/gpu-reset-request annotation) or restored, in the same write as the state; and a note for the
    audit ("" when nothing changes). A label is restored only while it still holds the pause value: one a person
    changed since is theirs."""
    labels_now = api_objects.labels(node)
    labels: dict[str, str | None] = {key: after.reset.pause_value for key in after.reset.paused
                                     if key not in before.reset.paused}
    labels.update({key: "true" for key in before.reset.paused
                   if key not in after.reset.paused and labels_now.get(key) == before.reset.pause_value})
    annotations: dict[str, str | None] = {}
    if after.reset_request is not None and before.reset_request != after.reset_request:
        annotations[RESET_REQUEST_ANNOTATION] = after.reset_request
    elif after.reset.phase is None and before.reset.phase is not None:
        annotations[RESET_REQUEST_ANNOTATION] = None
    if not labels and not annotations:
        return body, ""
    changes = [f"{k}={v}" for k, v in sorted(labels.items())]
    changes += [f"{'set' if v else 'removed'} {k}" for k, v in annotations.items()]
    return with_meta(body, labels=labels, annotations=annotations), "; ".join(changes)


def with_meta(body: NodePatch, *, labels: Mapping[str, str | None] | None = None,
              annotations: Mapping[str, str | None] | None = None) -> NodePatch:
    """`body` with these labels and annotations added to its metadata (None removes one), as a new patch."""
    meta: PatchMeta = {**(body.get("metadata") or {})}
    if labels:
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {**body, "metadata": meta}
