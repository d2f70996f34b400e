"""The pass's last line of defence (issue 35, item 4): a node whose objects raise while its view is built, or while
the ladder decides it, is that node's trouble alone. Its view says why (it fails closed: counted as disrupted, left
alone) and every other node is still decided. The checks on read (decide/state_schema.py) keep such objects out of
the API's path; these hold for what they do not foresee: `plan`'s files, a state built in memory."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState, record_alerts
from gpuhealth.remediator.decide.plan import evaluate
from gpuhealth.remediator.decide.views import build_views
from gpuhealth.remediator.decide.vocabulary import Action, Verdict
from gpuhealth.remediator.policy import Policy

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _node(name: str, status: Any = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {}, "annotations": {}, "resourceVersion": "1"}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]} if status is None else status}


def _firing(remediation: str, **fields: Any) -> NodeState:
    alert = AlertRecord("GPUFault", remediation, "firing", NOW - timedelta(minutes=5), NOW, gpu="0")
    return record_alerts(NodeState(), [("fp", replace(alert, **fields))], NOW)


def test_a_node_whose_view_cannot_be_built_is_left_alone_and_the_others_are_decided(
        caplog: pytest.LogCaptureFixture) -> None:
    """A `kubectl get nodes -o json` file with a Node whose status is a list: the API never sends one, a file may."""
    states = {"gpu-1": _firing("cordon")}
    with caplog.at_level(logging.ERROR, "gpuhealth.remediator"):
        views = build_views([_node("gpu-0", status=["not", "an", "object"]), _node("gpu-1")], Policy(), None,
                            states=states, now=NOW)
    by_name = {v.name: v for v in views}
    assert by_name["gpu-0"].damaged is not None and "AttributeError" in by_name["gpu-0"].damaged
    assert any("gpu-0" in r.getMessage() and r.exc_info for r in caplog.records)  # logged with its traceback
    _, plans = evaluate(views, Policy(), NOW)
    decided = {(d.node, d.action, d.decision) for p in plans for d in p.decisions}
    assert ("gpu-1", Action.CORDON, Verdict.EXECUTE) in decided
    assert ("gpu-0", Action.NONE, Verdict.SKIPPED) in decided


def test_a_node_the_ladder_cannot_decide_is_left_alone_as_it_was_and_the_others_are_decided() -> None:
    """A state built in memory with a number where the GPU's name is text (the reader refuses it from a Node)."""
    states = {"gpu-0": _firing("reset_gpu", gpu=5), "gpu-1": _firing("cordon")}
    views = build_views([_node("gpu-0"), _node("gpu-1")], Policy(), lambda name: [], states=states, now=NOW)
    _, plans = evaluate(views, Policy(), NOW)
    by_node = {p.node: p for p in plans}
    assert [(d.action, d.decision) for d in by_node["gpu-1"].decisions] == [(Action.CORDON, Verdict.EXECUTE)]
    (held,) = by_node["gpu-0"].decisions
    assert (held.action, held.decision) == (Action.NONE, Verdict.SKIPPED) and "cannot be decided" in held.reason
    assert not by_node["gpu-0"].changed  # nothing written: held as it was
    assert next(v for v in views if v.name == "gpu-0").damaged is not None  # reported (act/unreadable.py)
