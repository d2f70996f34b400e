"""`helm upgrade` from the previous release, for the remediator: it reads every state annotation the previous one
wrote (made by the previous release's own code, run from its commit: tests/release/previous_release.py), finishes the
episodes it left on the Nodes, and a new state format is named in the upgrade notes (a rollback fails closed on it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhealth.remediator.decide.nodestate import parse_time
from tests.fakes.apiserver import FakeCluster
from tests.release import previous_release
from tests.support import paths
from tests.support.remediator_harness import Harness  # module-level: make clock-shift runs these a year each way

ROOT = paths.REPO
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def previous() -> Path:
    return previous_release.tree(previous_release.previous().commit)


def _release_notes() -> str:
    version = yaml.safe_load((ROOT / "helm" / "gpuhealth" / "Chart.yaml").read_text())["version"]
    return previous_release.section(version)


# What the previous release leaves on Nodes, made by its own remediator (its code, its tests' harness and fake API
# server): an episode at each stage, as a `helm upgrade` finds them.
PREVIOUS_EPISODES = r'''
import json
import re
from fake_cluster import FakeCluster
from remediator_harness import Harness

POLICY = """
alertmanager: {url: none}
return_to_service: {healthy_delay: 1m}
ladder:
  reset_gpu: {timeout: 10m}
"""
GPU = "00000000:86:00.0"
OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")

with FakeCluster() as c:
    for node in ("cordoned", "held", "returned"):  # a pool each: every one within its pool's budget
        c.add_node(node, pool=node)
    c.add_node("stopping", pool="stopping", labels={f"nvidia.com/gpu.deploy.{op}": "true" for op in OPERANDS})
    c.add_pod("stopping", "nvidia-device-plugin-stopping", namespace="gpu-operator",
              labels={"app": "nvidia-device-plugin-daemonset"}, owner_kind="DaemonSet")
    h = Harness(c, POLICY)
    for node in ("cordoned", "held", "returned"):
        h.fire(node, "cordon")
    h.fire("stopping", "reset_gpu", gpu=GPU)
    h.step()
    h.kube.set_hold("held", "on-call investigating INC-1", "alice", h.now)
    h.resolve("returned", "cordon")
    h.advance(minutes=2)  # past the healthy delay, within the reset's timeout
    h.step()
    print(json.dumps({"nodes": {name: c.node(name) for name in c.nodes},
                      "alerts": {"cordoned": "cordon", "held": "cordon", "stopping": "reset_gpu"}}))
'''


def _previous_episodes(previous: Path) -> Obj:
    out: Obj = json.loads(previous_release.run_python(previous, PREVIOUS_EPISODES))
    return out


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")  # RFC 3339 as the state writes times


def _kept(written: Any, read: Any, where: str) -> list[str]:
    """Where `read` lost or changed what was `written` (a mapping may have gained keys)."""
    if isinstance(written, dict) and isinstance(read, dict):
        return [p for k, v in written.items()
                for p in (_kept(v, read[k], f"{where}.{k}") if k in read else [f"{where}.{k}: dropped"])]
    if isinstance(written, str) and isinstance(read, str) and _TIME.fullmatch(written):  # a time: the same instant
        same = parse_time(written) == parse_time(read)
    else:
        same = written == read
    return [] if same else [f"{where}: read as {read!r}, written {written!r}"]


def test_this_remediator_reads_every_state_the_previous_one_wrote(previous: Path) -> None:
    from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION, STATE_ANNOTATION, NodeState, hold_of

    nodes = _previous_episodes(previous)["nodes"]
    versions = set()
    for name, node in nodes.items():
        raw = node["metadata"]["annotations"].get(STATE_ANNOTATION)
        if raw is None:
            continue
        written = json.loads(raw)
        versions.add(written.pop("v"))
        read = json.loads(NodeState.from_json(raw).to_json())
        assert _kept(written, read, name) == []  # every field kept, as it was written (new ones beside them)
    assert versions == {1, 3}  # node scope, and a reset that stopped the GPU's clients
    assert hold_of(nodes["held"]["metadata"]["annotations"])["by"] == "alice"
    assert HOLD_ANNOTATION in nodes["held"]["metadata"]["annotations"]


def test_a_new_state_format_is_named_in_the_upgrade_notes(previous: Path) -> None:
    """A rollback runs the previous remediator on this one's states: it fails closed on a version it does not know
    (the node counts as disrupted and is left alone), which the person rolling back must be told."""
    from gpuhealth.remediator.decide.nodestate import STATE_VERSION

    was = int(previous_release.run_python(
        previous, "from remediator.decide.nodestate import STATE_VERSION; print(STATE_VERSION)"))  # 0.1.0: no namespace
    assert was <= STATE_VERSION
    if was < STATE_VERSION:
        assert f"version {STATE_VERSION}" in _release_notes()


def test_this_remediator_finishes_the_episodes_the_previous_one_left(previous: Path) -> None:
    """After the upgrade the alerts resolve: this remediator returns the nodes the previous one cordoned, restores the
    GPU Operator operands it paused mid-reset, and leaves the held node to its person."""
    from gpuhealth.remediator.decide.nodestate import (
        HOLD_ANNOTATION,
        RESET_REQUEST_ANNOTATION,
        STATE_ANNOTATION,
        TAINT_KEY,
    )

    episodes = _previous_episodes(previous)
    policy = "alertmanager: {url: none}\nreturn_to_service: {healthy_delay: 1m}\nladder:\n  reset_gpu: {timeout: 10m}\n"
    with FakeCluster() as cluster:
        for name, node in episodes["nodes"].items():
            cluster.add_node(name)

            def restore(n: Obj, was: Obj = node) -> None:
                n["metadata"]["labels"] = was["metadata"].get("labels") or {}
                n["metadata"]["annotations"] = was["metadata"].get("annotations") or {}
                n["spec"] = was.get("spec") or {}
                n["status"] = was.get("status") or {}
            cluster.update_node(name, restore)
        stopping = cluster.node("stopping")
        assert {v for k, v in stopping["metadata"]["labels"].items() if k.startswith("nvidia.com/gpu.deploy.")} == {
            "paused-for-gpu-reset"}
        assert RESET_REQUEST_ANNOTATION in stopping["metadata"]["annotations"]
        h = Harness(cluster, policy)
        for name, remediation in episodes["alerts"].items():
            gpu = {"gpu": "00000000:86:00.0"} if remediation == "reset_gpu" else {}
            h.resolve(name, remediation, **gpu)
        h.step()
        h.advance(minutes=2)
        h.step()
        h.step()
        for name in ("cordoned", "stopping", "returned"):
            node = cluster.node(name)
            assert not node["spec"].get("unschedulable"), name
            assert not [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT_KEY], name
        labels = cluster.node("stopping")["metadata"]["labels"]
        assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu.deploy.")} == {
            f"nvidia.com/gpu.deploy.{op}": "true" for op in ("device-plugin", "gpu-feature-discovery",
                                                             "dcgm-exporter", "dcgm")}
        assert RESET_REQUEST_ANNOTATION not in cluster.annotations("stopping")
        held = cluster.node("held")
        assert held["spec"].get("unschedulable") and HOLD_ANNOTATION in cluster.annotations("held")
        assert STATE_ANNOTATION in cluster.annotations("held")
