"""GPU scope (docs/remediation.md, "Node scope and GPU scope"): a fault on one GPU of a node whose GPUs a DRA
driver publishes costs that GPU and the pods on it, not the node. The fake API server publishes the GPUs as
NVIDIA's driver did on a real EKS H100 node and evicts for NoExecute as kube-controller-manager does."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from gpuhealth.remediator.decide.nodestate import TAINT_KEY
from gpuhealth.remediator.decide.state_records import GpuScope
from gpuhealth.remediator.decide.vocabulary import Deferral
from tests.fakes.apiserver import FakeCluster
from tests.remediator.dra_gpus import DRIVER, alert_gpu, dra_node
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
return_to_service: {healthy_delay: 10m}
ladder:
  reset_gpu: {timeout: 10m}
"""


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


def _rules(c: FakeCluster) -> list[tuple[str, str]]:
    return sorted((r["spec"]["deviceSelector"]["device"], r["spec"]["taint"]["effect"]) for r in c.dra.rules.values())


def test_a_cordon_alert_on_one_gpu_quarantines_that_gpu_and_leaves_the_node_schedulable(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[3]))
    (decision,) = h.decided(h.step())
    assert (decision.action, decision.decision, decision.effect) == ("quarantine_gpu", "execute", "NoSchedule")
    assert decision.devices == ("gpu-3",) and decision.pods == ("default/train-gpu-1-gpu-3",)
    assert _rules(cluster) == [("gpu-3", "NoSchedule")]
    assert not cluster.taints("gpu-1") and not cluster.node("gpu-1")["spec"].get("unschedulable")
    assert cluster.evictions() == []
    assert "GPUQuarantined" in cluster.reasons("gpu-1")


def test_a_drain_alert_evicts_the_pod_on_that_gpu_and_the_other_seven_keep_running(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "drain", gpu=alert_gpu(devices[5]))
    decided = h.decided(h.step())
    assert [(d.action, d.effect) for d in decided] == [("quarantine_gpu", "NoSchedule"),
                                                       ("quarantine_gpu", "NoExecute")]
    assert cluster.evictions() == ["default/train-gpu-1-gpu-5"]  # by the device taint, as kube-controller-manager does
    assert len(cluster.pods_on("gpu-1")) == 8  # the evicted one is still terminating
    h.advance(seconds=60)
    h.step()  # the pod is gone: the GPU's drain is done
    assert h.state("gpu-1").rung == "drain" and h.state("gpu-1").rung_status == "done"
    assert {p["metadata"]["name"] for p in cluster.pods_on("gpu-1")} == {f"train-gpu-1-gpu-{i}" for i in range(8)} - {
        "train-gpu-1-gpu-5"}
    assert not cluster.taints("gpu-1")


def test_return_to_service_removes_only_our_device_taints_after_the_healthy_delay(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    cluster.dra.rules["a-persons-rule"] = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                                           "metadata": {"name": "a-persons-rule"},
                                           "spec": {"deviceSelector": {"driver": DRIVER, "pool": "gpu-1",
                                                                       "device": "gpu-0"},
                                                    "taint": {"key": "example.com/x", "effect": "NoSchedule"}}}
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[2]))
    h.step()
    h.resolve("gpu-1", "cordon", gpu=alert_gpu(devices[2]))
    assert h.decisions(h.step()) == [("gpu-1", "release_gpu", "deferred")]
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-1", "release_gpu", "execute")]
    assert set(cluster.dra.rules) == {"a-persons-rule"}
    assert not h.state("gpu-1").active
    assert "GPUReturnedToService" in cluster.reasons("gpu-1")


def test_a_reset_runs_on_the_quarantined_gpu_and_a_failed_one_takes_the_node_ladder(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    gpu = alert_gpu(devices[1])
    h.fire("gpu-1", "reset_gpu", gpu=gpu)
    h.step()
    h.advance(seconds=60)
    decided = h.decided(h.step())  # the GPU's pod is gone: its reset
    assert [(d.action, d.gpu) for d in decided] == [("reset_gpu", gpu)]
    assert not cluster.taints("gpu-1")  # the node is still in service
    (job,) = cluster.jobs
    cluster.jobs[job]["status"] = {"failed": 1}
    plans = h.step()
    assert "NodeScope" in cluster.reasons("gpu-1")
    assert [d.action for d in h.decided(plans)][:2] == ["cordon", "drain"]  # the node ladder, from its start
    assert any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    state = h.state("gpu-1")
    assert state.scope == "node" and state.gpu_scope.node_floor == "reboot"  # above the reset that failed


@pytest.mark.parametrize(("remediation", "gpu", "why"), [
    ("reboot", "pci", "the alerts ask for reboot, which takes the node"),
    ("cordon", "all", "the alerts name no single GPU"),
    ("cordon", "00000000:FF:00.0", "GPU 00000000:FF:00.0 is not among the node's DRA devices"),
])
def test_a_fault_beyond_one_gpu_takes_the_node_and_the_audit_says_why(cluster: FakeCluster, remediation: str,
                                                                      gpu: str, why: str) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", remediation, gpu=alert_gpu(devices[0]) if gpu == "pci" else gpu)
    first = h.decided(h.step())[0]
    assert first.action == "cordon" and f"node scope: {why}" in first.reason
    assert not cluster.dra.rules and any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))


def test_a_cluster_that_serves_no_device_taint_rule_gets_node_scope_and_is_told(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    cluster.dra.served = ()
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[0]))
    first = h.decided(h.step())[0]
    assert first.action == "cordon" and "the cluster serves no DeviceTaintRule" in first.reason


def test_an_older_cluster_serving_it_behind_the_feature_gate_gets_its_version(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    cluster.dra.served = ("v1alpha3",)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[0]))
    assert h.decided(h.step())[0].action == "quarantine_gpu"
    assert {r["apiVersion"] for r in cluster.dra.rules.values()} == {"resource.k8s.io/v1alpha3"}


def test_the_gpu_budget_counts_quarantined_gpus_of_the_pool(cluster: FakeCluster) -> None:
    one = dra_node(cluster, "gpu-1")
    two = dra_node(cluster, "gpu-2")
    h = Harness(cluster, POLICY + "budget: {max_quarantined_gpus: 1}\n")
    h.fire("gpu-1", "cordon", gpu=alert_gpu(one[0]))
    h.fire("gpu-2", "cordon", gpu=alert_gpu(two[0]))
    decided = {(d.node, d.decision, d.deferral) for d in h.decided(h.step())}
    assert ("gpu-1", "execute", None) in decided
    assert ("gpu-2", "deferred", Deferral.GPU_BUDGET) in decided
    assert h.metric("gpuhealth_remediator_actions_total", action="quarantine_gpu", result="deferred") == 1


def test_without_dra_the_node_ladder_is_unchanged(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-1")
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu="00000000:64:00.0")
    first = h.decided(h.step())[0]
    assert first.action == "cordon" and "node scope" not in first.reason


# --- the edges a review found ---------------------------------------------------------------------------

def _to_reset_done(h: Harness, cluster: FakeCluster, gpu: str) -> None:
    h.fire("gpu-1", "reset_gpu", gpu=gpu)
    h.step()
    h.advance(seconds=60)
    h.step()  # the reset Job
    (job,) = cluster.jobs
    cluster.jobs[job]["status"] = {"succeeded": 1}
    h.step()
    assert h.state("gpu-1").rung == "reset_gpu" and h.state("gpu-1").rung_status == "done"


def test_a_reset_that_was_not_enough_reboots_only_after_the_nodes_cordon_and_drain(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)  # ladder.reset_gpu.escalate_after: 30m, the default
    gpu = alert_gpu(devices[1])
    _to_reset_done(h, cluster, gpu)
    h.advance(minutes=31)
    h.fire("gpu-1", "reset_gpu", gpu=gpu)  # still firing: the fault survived the reset
    decided = [d.action for d in h.decided(h.step())]
    assert decided[:2] == ["cordon", "drain"] and "reboot" not in decided  # the node's pods first
    assert any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    assert not [j for j in cluster.jobs if "reboot" in j[1]]
    assert h.state("gpu-1").scope == "node" and h.state("gpu-1").gpu_scope.node_floor == "reboot"


def test_one_failed_read_of_the_dra_objects_keeps_the_gpu_scope_and_waits(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[0]))
    h.step()
    cluster.fail("GET", "/apis/resource.k8s.io/v1/resourceslices", 503)
    assert h.decisions(h.step()) == [("gpu-1", "none", "deferred")]
    assert h.state("gpu-1").scope == "gpu" and not cluster.taints("gpu-1")
    assert h.metric("gpuhealth_remediator_api_errors_total", operation="list_dra") == 1
    h.step()
    assert h.state("gpu-1").scope == "gpu" and _rules(cluster) == [("gpu-0", "NoSchedule")]


def test_a_quarantine_the_api_refused_fails_its_rung_and_no_reset_runs_without_it(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    cluster.fail("POST", "/apis/resource.k8s.io/v1/devicetaintrules", 503, times=100)
    h.fire("gpu-1", "reset_gpu", gpu=alert_gpu(devices[1]))
    h.step()
    assert h.state("gpu-1").rung_status == "failed" and not cluster.dra.rules
    assert "GPUQuarantinedFailed" in cluster.reasons("gpu-1")
    h.step()
    assert h.state("gpu-1").scope == "node" and any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    assert not cluster.jobs  # the node's drain comes first


def test_a_device_taint_rule_left_with_no_episode_behind_it_is_swept(cluster: FakeCluster) -> None:
    devices = dra_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[0]))
    h.step()
    cluster.update_node("gpu-1", lambda n: n["metadata"]["annotations"].pop("gpuhealth.io/state"))  # state lost
    h.step()
    assert not cluster.dra.rules


def test_a_gpu_scoped_reset_is_not_held_by_the_nodes_disruption_budget(cluster: FakeCluster) -> None:
    devices = dra_node(cluster, "gpu-1")
    cluster.add_node("gpu-2")
    cluster.add_pod("gpu-2", "other")
    h = Harness(cluster, POLICY + "budget: {max_disrupted: 1}\n")
    h.fire("gpu-2", "drain", gpu=None)  # takes the pool's one disruption
    h.fire("gpu-1", "reset_gpu", gpu=alert_gpu(devices[1]))
    h.step()
    h.advance(seconds=60)
    decided = {(d.node, d.action, d.decision) for d in h.decided(h.step())}
    assert ("gpu-1", "reset_gpu", "execute") in decided


def test_a_gpu_scope_state_is_version_2_and_an_unknown_scope_fails_closed() -> None:
    import json
    from datetime import UTC, datetime

    from gpuhealth.remediator.decide.nodestate import NodeState

    episode = datetime(2026, 12, 2, 10, tzinfo=UTC)
    gpu = NodeState(episode=episode, scope="gpu", gpu_scope=GpuScope(("gpu-1",)))
    assert json.loads(gpu.to_json())["v"] == 2 and NodeState.from_json(gpu.to_json()) == gpu
    assert json.loads(NodeState(episode=episode).to_json())["v"] == 1  # what an older remediator reads
    with pytest.raises(ValueError, match="scope"):
        NodeState.from_json('{"v": 2, "scope": "rack"}')


# --- MIG: one instance of a GPU (docs/remediation.md, "MIG") ----------------------------------------------------

def _mig_node(c: FakeCluster, name: str = "gpu-1") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A node with its 8 GPUs published and MIG on gpu-1 (the recorded H100 layout: 3g.40gb, 3 x 1g.10gb): a pod on
    each MIG device and on each other GPU, each claim allocated its device."""
    c.add_node(name)
    gpus, migs = c.dra.publish_mig_gpus(name, "gpu-1")
    for d in [*(g for g in gpus if g["name"] != "gpu-1"), *migs]:
        pod = f"train-{d['name']}"
        c.add_pod(name, pod, labels={"app": "train"})
        c.dra.add_claim("default", f"claim-{name}-{d['name']}", [(DRIVER, name, d["name"])], [pod])
    return gpus, migs


def _mig_alert(gpus: list[dict[str, Any]], mig: dict[str, Any] | str) -> dict[str, Any]:
    """An Xid alert's GPU labels on a MIG instance, as rules/alerts/gpu.yaml sets them: gpu and pci_bus_id the GPU's
    bus id, gpu_instance as the kernel printed it, mig_uuid the instance's MIG device; max_rung drain, as the shipped
    rules' alerts that ask for no reset (GPUXidUnknown) stop short of one: a fault that may climb to a reset takes the
    whole GPU from the start."""
    uuid = mig if isinstance(mig, str) else mig["attributes"]["uuid"]["string"]
    gpu = alert_gpu(next(g for g in gpus if g["name"] == "gpu-1"))
    return {"gpu": gpu, "labels": {"pci_bus_id": gpu, "gpu_instance": "07", "mig_uuid": uuid, "max_rung": "drain"}}


def test_a_drain_alert_on_one_mig_instance_quarantines_that_instance_and_evicts_only_its_pod(
        cluster: FakeCluster) -> None:
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "drain", **_mig_alert(gpus, migs[1]))
    decided = h.decided(h.step())
    assert [(d.action, d.effect, d.devices, d.pods) for d in decided] == [
        ("quarantine_gpu", "NoSchedule", (migs[1]["name"],), (f"default/train-{migs[1]['name']}",)),
        ("quarantine_gpu", "NoExecute", (migs[1]["name"],), (f"default/train-{migs[1]['name']}",))]
    assert _rules(cluster) == [(migs[1]["name"], "NoExecute"), (migs[1]["name"], "NoSchedule")]
    assert cluster.evictions() == [f"default/train-{migs[1]['name']}"]  # the other instances' and GPUs' pods stay
    h.advance(seconds=60)
    h.step()
    assert h.state("gpu-1").rung == "drain" and h.state("gpu-1").rung_status == "done"
    assert len(cluster.pods_on("gpu-1")) == 7 + 4 - 1
    assert not cluster.taints("gpu-1") and not cluster.node("gpu-1")["spec"].get("unschedulable")


def test_a_reset_alert_on_one_mig_instance_quarantines_the_whole_gpu_and_names_every_instances_pods(
        cluster: FakeCluster) -> None:
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    alert = _mig_alert(gpus, migs[1])
    h.fire("gpu-1", "reset_gpu", **alert)
    decided = h.decided(h.step())
    family = ("gpu-1", *sorted(m["name"] for m in migs))
    on_it = tuple(f"default/train-{m['name']}" for m in migs)
    assert [(d.action, d.effect) for d in decided] == [("quarantine_gpu", "NoSchedule"),
                                                       ("quarantine_gpu", "NoExecute")]
    assert all(d.devices == family and sorted(d.pods) == sorted(on_it) for d in decided)
    assert sorted(cluster.evictions()) == sorted(on_it)  # a reset takes every instance: all their pods go first
    assert "GPUQuarantined" in cluster.reasons("gpu-1")
    h.advance(seconds=60)
    decided = h.decided(h.step())
    assert [(d.action, d.gpu) for d in decided if d.action == "reset_gpu"] == [("reset_gpu", alert["gpu"])]
    assert not cluster.taints("gpu-1")


def test_a_mig_instance_that_grows_to_its_gpu_widens_the_quarantine_and_keeps_the_node_in_service(
        cluster: FakeCluster) -> None:
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    alert = _mig_alert(gpus, migs[1])
    h.fire("gpu-1", "cordon", alertname="GPUXidUnknown", **alert)
    h.step()
    assert h.state("gpu-1").gpu_scope.devices == (migs[1]["name"],) and cluster.evictions() == []
    h.fire("gpu-1", "reset_gpu", alertname="GPUXidFatal", **alert)
    decided = h.decided(h.step())
    assert decided[0].action == "quarantine_gpu" and "grew from MIG device" in decided[0].reason
    assert h.state("gpu-1").scope == "gpu" and set(h.state("gpu-1").gpu_scope.devices) == {
        "gpu-1", *(m["name"] for m in migs)}
    assert "NodeScope" not in cluster.reasons("gpu-1") and not cluster.taints("gpu-1")
    assert sorted(cluster.evictions()) == sorted(f"default/train-{m['name']}" for m in migs)


def test_another_instance_of_the_same_gpu_widens_to_the_gpu_and_never_takes_the_node(cluster: FakeCluster) -> None:
    # mig1 quarantined alone; its alert resolves and, during the healthy delay, an Xid on mig2 of the same GPU fires.
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", alertname="XidA", **_mig_alert(gpus, migs[1]))
    h.step()
    assert h.state("gpu-1").gpu_scope.devices == (migs[1]["name"],)
    h.resolve("gpu-1", "cordon", alertname="XidA", **_mig_alert(gpus, migs[1]))
    h.advance(seconds=120)
    h.step()
    h.fire("gpu-1", "drain", alertname="XidB", **_mig_alert(gpus, migs[2]))
    h.advance(seconds=30)
    decided = h.decided(h.step())
    assert decided[0].action == "quarantine_gpu" and "grew from MIG device" in decided[0].reason
    assert h.state("gpu-1").scope == "gpu" and set(h.state("gpu-1").gpu_scope.devices) == {
        "gpu-1", *(m["name"] for m in migs)}
    assert "NodeScope" not in cluster.reasons("gpu-1")
    assert not any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    assert sorted(cluster.evictions()) == sorted(f"default/train-{m['name']}" for m in migs)  # the GPU's, no more


def test_a_refused_instance_quarantine_hands_over_to_the_node_ladder_even_when_the_fault_grows(
        cluster: FakeCluster) -> None:
    # The widen to the GPU must not erase the failed rung: a quarantine the API refused is the node ladder's.
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    cluster.fail("POST", "/apis/resource.k8s.io/v1/devicetaintrules", 503, times=1)
    alert = _mig_alert(gpus, migs[1])
    h.fire("gpu-1", "cordon", alertname="XidA", **alert)
    h.step()
    assert h.state("gpu-1").rung_status == "failed"
    h.fire("gpu-1", "reset_gpu", alertname="XidFatal", **alert)
    h.step()
    assert h.state("gpu-1").scope == "node" and any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    (handover,) = [e["message"] for e in cluster.events_for("gpu-1") if e["reason"] == "NodeScope"]
    assert "cordon failed; the node ladder takes over" in handover


def _unpublish_migs(c: FakeCluster) -> None:
    """What a GPU reset does to a MIG GPU: its instances are gone until the MIG manager makes them again (with new
    UUIDs), and the DRA driver republishes the slice without them."""
    for obj in list(c.dra.slices.values()):
        obj = copy.deepcopy(obj)
        obj["spec"]["devices"] = [d for d in obj["spec"]["devices"] if d["attributes"]["type"]["string"] != "mig"]
        c.dra.add_slice(obj)


def _reset_a_mig_gpu(cluster: FakeCluster) -> tuple[Harness, dict[str, Any]]:
    """An Xid asking for reset_gpu on one MIG instance of gpu-1, up to its reset Job succeeding; the alert fires on."""
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    alert = _mig_alert(gpus, migs[1])
    h.fire("gpu-1", "reset_gpu", alertname="GPUXidFatal", **alert)
    h.step()
    h.advance(seconds=60)
    assert [d.action for d in h.decided(h.step()) if d.action == "reset_gpu"] == ["reset_gpu"]
    (job,) = cluster.jobs
    cluster.jobs[job]["status"] = {"succeeded": 1}
    return h, alert


def test_after_a_successful_family_reset_the_instances_alert_keeps_the_gpu_scope(cluster: FakeCluster) -> None:
    # The Xid alert keeps firing minutes after the reset (increase over 5m, keep_firing_for), naming a MIG device
    # the republished slice no longer has: still the quarantined GPU's fault, not the node's.
    h, _ = _reset_a_mig_gpu(cluster)
    _unpublish_migs(cluster)
    for _ in range(3):
        h.advance(seconds=30)
        h.step()
    assert "GPUResetSucceeded" in cluster.reasons("gpu-1") and "NodeScope" not in cluster.reasons("gpu-1")
    assert h.state("gpu-1").scope == "gpu" and "gpu-1" in h.state("gpu-1").gpu_scope.devices
    assert not any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    assert len(cluster.jobs) == 1  # no second reset, no reboot


def _remake_migs(c: FakeCluster) -> list[str]:
    """The MIG manager makes the reset GPU's instances again, in another layout: other device names and UUIDs."""
    made = []
    for obj in list(c.dra.slices.values()):
        obj = copy.deepcopy(obj)
        for d in obj["spec"]["devices"]:
            if d["attributes"]["type"]["string"] == "mig":
                d["name"] += "-b"
                d["attributes"]["uuid"]["string"] = d["attributes"]["uuid"]["string"][:-4] + "beef"
                made.append(d["name"])
        c.dra.add_slice(obj)
    return made


def test_instances_made_anew_after_the_reset_are_quarantined_with_their_gpu_until_it_returns(
        cluster: FakeCluster) -> None:
    h, alert = _reset_a_mig_gpu(cluster)
    h.advance(seconds=30)
    h.step()
    made = _remake_migs(cluster)
    h.advance(seconds=30)
    decided = h.decided(h.step())
    assert [(d.action, d.effect, d.devices) for d in decided] == [
        ("quarantine_gpu", "NoSchedule", tuple(sorted(made))), ("quarantine_gpu", "NoExecute", tuple(sorted(made)))]
    assert "made anew after its reset" in decided[0].reason
    assert {(d, e) for d in made for e in ("NoSchedule", "NoExecute")} <= set(_rules(cluster))
    assert set(made) <= set(h.state("gpu-1").gpu_scope.devices) and h.state("gpu-1").scope == "gpu"
    h.advance(seconds=30)
    assert not [d for d in h.decided(h.step()) if d.action == "quarantine_gpu"]  # once
    h.resolve("gpu-1", "reset_gpu", alertname="GPUXidFatal", **alert)
    h.step()
    h.advance(minutes=11)
    assert ("gpu-1", "release_gpu", "execute") in h.decisions(h.step())
    assert not cluster.dra.rules and not h.state("gpu-1").active


def test_a_mig_instance_is_quarantined_with_its_whole_gpu_where_the_drain_may_climb_to_a_reset(
        cluster: FakeCluster) -> None:
    gpus, migs = _mig_node(cluster)
    h = Harness(cluster, POLICY + "  drain: {timeout: 1h, escalate_after: 30m}\n")
    alert = _mig_alert(gpus, migs[1])
    del alert["labels"]["max_rung"]  # the alert may climb as far as the ladder goes
    h.fire("gpu-1", "cordon", **alert)
    (decision,) = h.decided(h.step())
    assert decision.devices == ("gpu-1", *sorted(m["name"] for m in migs))


def test_an_alert_naming_a_mig_device_the_node_does_not_publish_takes_the_node_and_says_why(
        cluster: FakeCluster) -> None:
    gpus, _ = _mig_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", **_mig_alert(gpus, "MIG-00000000-0000-0000-0000-000000000000"))
    first = h.decided(h.step())[0]
    assert first.action == "cordon" and "node scope: MIG device MIG-00000000-0000-0000-0000-000000000000" in \
        first.reason
    assert not cluster.dra.rules and any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))


def test_an_alert_records_its_mig_device_and_a_state_from_before_mig_still_reads() -> None:
    import dataclasses
    import json

    from gpuhealth.remediator.decide.nodestate import NodeState
    from gpuhealth.remediator.intake.webhook import parse_webhook
    from gpuhealth.remediator.policy import Policy
    from tests.support.remediator_harness import webhook

    uuid = "MIG-8aa1fc52-9818-58ec-bc64-8f0cae121bb4"
    batch = parse_webhook(json.dumps(webhook("gpu-1", "drain", gpu="00000000:64:00.0", labels={"mig_uuid": uuid})),
                          Policy())
    assert batch.alerts[0].record.mig_uuid == uuid
    for junk in ("", "MIG-; rm -rf /", "GPU-8aa1fc52-9818-58ec-bc64-8f0cae121bb4"):  # not a MIG device: the GPU's
        body = webhook("gpu-1", "drain", gpu="00000000:64:00.0", labels={"mig_uuid": junk})
        assert parse_webhook(json.dumps(body), Policy()).alerts[0].record.mig_uuid is None
    old = ('{"v": 2, "episode": "2026-12-02T10:00:00Z", "scope": "gpu", "devices": ["gpu-1"], "alerts": {"fp": '
           '{"name": "GPUXidFatal", "remediation": "reset_gpu", "status": "firing", "starts_at": '
           '"2026-12-02T10:00:00Z", "last_seen": "2026-12-02T10:00:00Z", "gpu": "00000000:64:00.0"}}}')
    state = NodeState.from_json(old)
    assert state.alerts["fp"].mig_uuid is None
    state = dataclasses.replace(state, alerts={"fp": dataclasses.replace(state.alerts["fp"], mig_uuid=uuid)})
    assert NodeState.from_json(state.to_json()) == state
