"""One bad object costs that object, never the fleet (issue 35, item 4): a Node whose gpuhealth annotations cannot be
read fails closed alone (counted as disrupted, left alone, a Warning Event on it, the gauge
gpuhealth_remediator_unreadable_nodes), and the same pass acts on every other node."""

from __future__ import annotations

import json

import pytest

from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION
from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION, STATE_ANNOTATION
from tests.fakes.apiserver import FakeCluster, Obj
from tests.support.remediator_harness import Harness

POLICY = "evidence: {enabled: false}\n"


def _set_annotation(cluster: FakeCluster, node: str, key: str, value: str) -> None:
    def change(n: Obj) -> None:
        n["metadata"].setdefault("annotations", {})[key] = value
    cluster.update_node(node, change)


def _with_alert_field(cluster: FakeCluster, node: str, key: str, value: object) -> None:
    """The node's state annotation with one field of its one alert record changed to `value`."""
    state = json.loads(cluster.annotations(node)[STATE_ANNOTATION])
    (record,) = state["alerts"].values()
    record[key] = value
    _set_annotation(cluster, node, STATE_ANNOTATION, json.dumps(state))


def test_a_state_with_one_field_of_the_wrong_json_type_holds_its_node_alone_and_the_pass_goes_on(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.fire("gpu-2", "drain")
    h.step()
    _with_alert_field(cluster, "gpu-2", "gpu", 5)  # a number where the GPU's name is text: read, then raised
    h.fire("gpu-3", "cordon")
    plans = h.step()
    decided = {(d.node, d.action, d.decision): d.reason for d in h.decided(plans)}
    assert ("gpu-3", "cordon", "execute") in decided
    (reason,) = [r for (node, action, verdict), r in decided.items() if node == "gpu-2"]
    assert "gpu is 5, not text or null" in reason and "left alone" in reason
    (event,) = [e for e in cluster.events_for("gpu-2") if e["reason"] == "UnreadableState"]
    assert event["type"] == "Warning" and "gpu is 5" in event["message"]
    assert h.metric("gpuhealth_remediator_unreadable_nodes") == 1
    assert cluster.taints("gpu-2")  # nothing undone: held as it was
    h.step()
    assert len([e for e in cluster.events_for("gpu-2") if e["reason"] == "UnreadableState"]) == 1  # said once


@pytest.mark.parametrize("key", [STATE_ANNOTATION, HOLD_ANNOTATION, HISTORY_ANNOTATION])
def test_json_nested_past_the_recursion_limit_in_an_annotation_costs_only_its_node(cluster: FakeCluster,
                                                                                  key: str) -> None:
    """json.loads raises RecursionError, which no `except ValueError` caught: one such annotation stopped every pass."""
    h = Harness(cluster, POLICY)
    h.fire("gpu-2", "cordon")
    h.step()
    _set_annotation(cluster, "gpu-2", key, "[" * 100_000)
    h.fire("gpu-3", "cordon")
    assert ("gpu-3", "cordon", "execute") in h.decisions(h.step())


def test_a_node_read_again_once_fixed_is_acted_on_and_leaves_the_gauge(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.fire("gpu-2", "cordon")
    h.step()
    _with_alert_field(cluster, "gpu-2", "status", "up")  # neither firing nor resolved
    h.step()
    assert h.metric("gpuhealth_remediator_unreadable_nodes") == 1
    _set_annotation(cluster, "gpu-2", STATE_ANNOTATION, "")  # a person removes it
    h.sync()  # the receiver records on what its watch has seen: the damaged state until the removal reaches it
    h.fire("gpu-2", "cordon")
    h.step()
    assert h.metric("gpuhealth_remediator_unreadable_nodes") == 0
    assert h.state("gpu-2").alerts
