"""Karpenter's karpenter.sh/do-not-disrupt on a node mid-ladder: set by gpuhealth in the write that starts the
drain, removed on return to service and before replacement, and only when gpuhealth set it."""

from __future__ import annotations

import pytest

from gpuhealth.remediator.decide.nodestate import DO_NOT_DISRUPT_ANNOTATION, TAINT_KEY
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
budget: {max_disrupted: 2, max_cordoned: 4}
return_to_service: {healthy_delay: 10m}
"""


@pytest.fixture
def h(cluster: FakeCluster) -> Harness:
    return Harness(cluster, POLICY)


def _messages(cluster: FakeCluster, node: str, reason: str) -> list[str]:
    return [e["message"] for e in cluster.events_for(node) if e["reason"] == reason]


def _drain_and_return(h: Harness, node: str) -> None:
    h.fire(node, "drain")
    h.step()
    h.advance(seconds=31)  # the evicted pod is gone
    h.step()
    h.resolve(node, "drain")
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [(node, "uncordon", "execute")]


def test_drain_sets_do_not_disrupt_in_the_write_that_starts_it_before_any_eviction(
        h: Harness, cluster: FakeCluster) -> None:
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    h.fire("gpu-2", "reboot")
    assert h.decisions(h.step()) == [("gpu-2", "cordon", "execute"), ("gpu-2", "drain", "execute")]
    assert cluster.annotations("gpu-2")[DO_NOT_DISRUPT_ANNOTATION] == "true"
    assert h.state("gpu-2").do_not_disrupt
    writes = cluster.writes()
    first_patch = next(i for i, (m, p) in enumerate(writes) if m == "PATCH" and p.endswith("/nodes/gpu-2"))
    first_eviction = next(i for i, (m, p) in enumerate(writes) if "eviction" in p)
    assert first_patch < first_eviction  # one write: taint, state and annotation, then the evictions
    assert any(DO_NOT_DISRUPT_ANNOTATION in m for m in _messages(cluster, "gpu-2", "Draining"))


def test_return_to_service_removes_the_do_not_disrupt_gpuhealth_set(h: Harness, cluster: FakeCluster) -> None:
    cluster.add_pod("gpu-3", "train-0", gpus=8)
    _drain_and_return(h, "gpu-3")
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-3")
    assert not h.state("gpu-3").do_not_disrupt and not cluster.taints("gpu-3")
    assert any("removed " + DO_NOT_DISRUPT_ANNOTATION in m
               for m in _messages(cluster, "gpu-3", "ReturnedToService"))


def test_a_do_not_disrupt_set_before_gpuhealth_survives_return_to_service(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-4", annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})  # a person's, or another tool's
    h = Harness(cluster, POLICY)
    cluster.add_pod("gpu-4", "train-0", gpus=8)
    h.fire("gpu-4", "drain")
    h.step()
    assert not h.state("gpu-4").do_not_disrupt  # not ours: gpuhealth never claims it
    assert not any(DO_NOT_DISRUPT_ANNOTATION in m for m in _messages(cluster, "gpu-4", "Draining"))
    h.advance(seconds=31)
    h.step()
    h.resolve("gpu-4", "drain")
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-4", "uncordon", "execute")]
    assert cluster.annotations("gpu-4")[DO_NOT_DISRUPT_ANNOTATION] == "true"
    assert not any(DO_NOT_DISRUPT_ANNOTATION in m for m in _messages(cluster, "gpu-4", "ReturnedToService"))


def test_replace_removes_our_do_not_disrupt_before_the_nodeclaim_is_deleted(h: Harness,
                                                                            cluster: FakeCluster) -> None:
    cluster.nodeclaims["gpu-pool-abcde"] = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                            "metadata": {"name": "gpu-pool-abcde"}, "status": {"nodeName": "gpu-6"}}
    cluster.add_pod("gpu-6", "train-0", gpus=8)
    h.fire("gpu-6", "replace")
    h.step()
    assert cluster.annotations("gpu-6")[DO_NOT_DISRUPT_ANNOTATION] == "true"  # draining: held off
    h.advance(seconds=31)
    before = len(cluster.writes())
    assert h.decisions(h.step())[-1] == ("gpu-6", "replace", "execute")
    assert cluster.nodeclaims == {}
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-6")
    assert not h.state("gpu-6").do_not_disrupt and h.state("gpu-6").rung == "replace"
    writes = cluster.writes()
    # the pass's state write, which removed it (a second write after the hand-over clears the state's `pending`)
    removed = next(i for i, (m, p) in enumerate(writes) if i >= before and m == "PATCH" and p.endswith("/nodes/gpu-6"))
    deleted = next(i for i, (m, p) in enumerate(writes) if m == "DELETE" and "nodeclaims" in p)
    assert removed < deleted
    assert any(DO_NOT_DISRUPT_ANNOTATION in m for m in _messages(cluster, "gpu-6", "Replace"))


def test_replace_by_condition_leaves_karpenter_free_to_repair(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "replace: {method: condition}\n")
    h.fire("gpu-6", "replace")
    h.step()
    conditions = {c["type"]: c for c in cluster.node("gpu-6")["status"]["conditions"]}
    assert conditions["AcceleratedHardwareReady"]["status"] == "False"
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-6")


def test_cordon_only_alerts_never_set_do_not_disrupt(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-1", "cordon")
    assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute")]
    assert cluster.taints("gpu-1")[0]["key"] == TAINT_KEY
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-1")
    assert not h.state("gpu-1").do_not_disrupt


def test_dry_run_sets_no_do_not_disrupt(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY, dry_run=True)
    cluster.add_pod("gpu-2", "train-0")
    h.fire("gpu-2", "reboot")
    assert h.decisions(h.step()) == [("gpu-2", "cordon", "execute"), ("gpu-2", "drain", "execute")]
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-2")
    assert [w for w in cluster.writes() if "leases" not in w[1]] == []


def test_policy_can_turn_do_not_disrupt_off(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "drain: {karpenter_do_not_disrupt: false}\n")
    cluster.add_pod("gpu-2", "train-0")
    h.fire("gpu-2", "drain")
    assert h.decisions(h.step()) == [("gpu-2", "cordon", "execute"), ("gpu-2", "drain", "execute")]
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-2")
    assert not h.state("gpu-2").do_not_disrupt


def test_an_episode_closed_after_a_person_took_over_removes_only_our_do_not_disrupt(
        h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-5", "drain")
    h.step()
    assert cluster.annotations("gpu-5")[DO_NOT_DISRUPT_ANNOTATION] == "true"
    cluster.update_node("gpu-5", lambda n: n["spec"].update(taints=None))  # a person removed our taint
    h.resolve("gpu-5", "drain")
    h.step()
    assert not h.state("gpu-5").active
    assert DO_NOT_DISRUPT_ANNOTATION not in cluster.annotations("gpu-5")
