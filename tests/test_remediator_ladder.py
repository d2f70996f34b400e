"""The ladder end to end: webhooks into the Flask app, the official client against FakeCluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_cluster import FakeCluster
from remediator_harness import Harness

from remediator.nodestate import LAST_EPISODE_ANNOTATION, TAINT_KEY

POLICY = """
budget: {max_disrupted: 2, max_cordoned: 4}
return_to_service: {healthy_delay: 10m}
"""


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for i in range(10):
            c.add_node(f"gpu-{i}")
        yield c


@pytest.fixture
def h(cluster: FakeCluster) -> Harness:
    return Harness(cluster, POLICY)


def test_cordon_alert_taints_and_cordons_without_touching_running_pods(h: Harness, cluster: FakeCluster) -> None:
    cluster.add_pod("gpu-1", "train-0", gpus=8)
    h.fire("gpu-1", "cordon")
    plans = h.step()
    assert h.decisions(plans) == [("gpu-1", "cordon", "execute")]
    node = cluster.node("gpu-1")
    assert node["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert len(cluster.pods_on("gpu-1")) == 1  # running work continues
    assert h.state("gpu-1").rung == "cordon" and h.state("gpu-1").cordoned
    assert "Cordoned" in cluster.reasons("gpu-1")
    assert h.metric("gpuhealth_remediator_actions_total", action="cordon", result="executed") == 1


def test_reboot_alert_passes_through_cordon_and_drain_then_reboots_once_drained(h: Harness,
                                                                                 cluster: FakeCluster) -> None:
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    cluster.add_pod("gpu-2", "dcgm-exporter-x", owner_kind="DaemonSet")
    cluster.add_pod("gpu-2", "kube-proxy-gpu-2", owner_kind="Node", mirror=True)
    h.fire("gpu-2", "reboot")
    assert h.decisions(h.step()) == [("gpu-2", "cordon", "execute"), ("gpu-2", "drain", "execute")]
    assert [p["metadata"]["name"] for p in cluster.pods_on("gpu-2")] == ["dcgm-exporter-x", "kube-proxy-gpu-2"]
    assert cluster.jobs == {}
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-2", "reboot", "execute")]
    (ns, _name), job = next(iter(cluster.jobs.items()))
    assert ns == "gpuhealth" and job["spec"]["template"]["spec"]["nodeName"] == "gpu-2"
    assert job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] is True
    # the node comes back with a new boot id: reboot done; resolved alerts then return it to service
    cluster.nodes["gpu-2"]["status"]["nodeInfo"]["bootID"] = "boot-2"
    h.advance(minutes=2)
    h.step()
    assert h.state("gpu-2").rung_status == "done"
    assert "RebootSucceeded" in cluster.reasons("gpu-2")
    h.resolve("gpu-2", "reboot")
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-2", "uncordon", "execute")]
    node = cluster.node("gpu-2")
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    assert LAST_EPISODE_ANNOTATION in node["metadata"]["annotations"]
    assert not h.state("gpu-2").active


def test_reset_gpu_job_targets_only_the_named_gpu_by_index_or_pci_bus_id(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-3", "reset_gpu", gpu="00000000:9B:00.0")
    assert h.decisions(h.step()) == [("gpu-3", "cordon", "execute"), ("gpu-3", "drain", "execute"),
                                     ("gpu-3", "reset_gpu", "execute")]
    job = next(iter(cluster.jobs.values()))
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "nvidia-smi", "--gpu-reset", "-i", "00000000:9B:00.0"]
    # resent webhook: the same Job, not a second one
    h.fire("gpu-3", "reset_gpu", gpu="00000000:9B:00.0")
    h.step()
    assert len(cluster.jobs) == 1


def test_reset_waits_for_pods_that_use_the_gpu_to_be_gone(h: Harness, cluster: FakeCluster) -> None:
    cluster.add_pod("gpu-3", "train-0", gpus=1, labels={"app": "train"})
    cluster.add_pdb("default", {"app": "train"}, 0)
    h.fire("gpu-3", "reset_gpu", gpu="3")
    h.step()
    assert cluster.jobs == {}
    assert len(h.slept) == len(h.policy.eviction_backoff)  # 429 retried with backoff, then left for later


def test_fault_persisting_after_a_successful_reset_climbs_to_reboot(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    job = next(iter(cluster.jobs.values()))
    job["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    assert h.state("gpu-4").rung_status == "done"
    h.fire("gpu-4", "reset_gpu", gpu="1")  # Alertmanager repeats: still firing
    h.advance(minutes=10)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "deferred")]
    h.advance(minutes=6)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "execute")]


def test_failed_reset_job_climbs_to_reboot(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    next(iter(cluster.jobs.values()))["status"] = {"failed": 1}
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "execute")]
    assert "GPUResetFailed" in cluster.reasons("gpu-4")


def test_reset_without_a_gpu_label_goes_to_reboot(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-5", "reset_gpu", gpu=None)
    assert h.decisions(h.step())[-1] == ("gpu-5", "reboot", "execute")
    assert "GPUResetSkipped" in cluster.reasons("gpu-5")


def test_replace_deletes_the_karpenter_nodeclaim(h: Harness, cluster: FakeCluster) -> None:
    cluster.nodeclaims["gpu-pool-abcde"] = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                            "metadata": {"name": "gpu-pool-abcde"}, "status": {"nodeName": "gpu-6"}}
    h.fire("gpu-6", "replace")
    assert h.decisions(h.step())[-1] == ("gpu-6", "replace", "execute")
    assert cluster.nodeclaims == {}
    h.advance(minutes=1)
    assert h.decisions(h.step()) == [("gpu-6", "replace", "skipped")]


def test_replace_by_condition_sets_the_karpenter_watched_condition(cluster: FakeCluster) -> None:
    h = Harness(cluster, "replace: {method: condition}")
    h.fire("gpu-6", "replace")
    h.step()
    conditions = {c["type"]: c for c in cluster.node("gpu-6")["status"]["conditions"]}
    assert conditions["AcceleratedHardwareReady"]["status"] == "False"
    assert conditions["Ready"]["status"] == "True"


def test_failed_replace_stops_the_ladder_and_asks_for_a_person(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-6", "replace")  # no NodeClaim for this node
    h.step()
    assert "ReplaceFailed" in cluster.reasons("gpu-6")
    h.advance(seconds=30)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-6", "none", "skipped")]
    assert "needs a person" in h.decided(plans)[0].reason


def test_return_to_service_waits_for_the_healthy_delay(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-1", "cordon")
    h.step()
    h.resolve("gpu-1", "cordon")
    h.advance(minutes=5)
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "deferred")]
    h.advance(minutes=6)
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "execute")]
    assert "ReturnedToService" in cluster.reasons("gpu-1")


def test_human_cordoned_node_is_left_alone_and_never_uncordoned(h: Harness, cluster: FakeCluster) -> None:
    cluster.nodes["gpu-7"]["spec"]["unschedulable"] = True
    h.fire("gpu-7", "reboot")
    plans = h.step()
    assert h.decisions(plans) == [("gpu-7", "none", "skipped")]
    h.resolve("gpu-7", "reboot")
    h.advance(hours=1)
    h.step()
    node = cluster.node("gpu-7")
    assert node["spec"]["unschedulable"] is True and not node["spec"].get("taints")


def test_person_cordoning_after_us_keeps_the_node_cordoned_when_we_leave(h: Harness, cluster: FakeCluster) -> None:
    cluster.nodes["gpu-8"]["spec"]["unschedulable"] = True  # a person first
    cluster.nodes["gpu-8"]["spec"]["taints"] = [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    h.fire("gpu-8", "cordon")
    h.step()
    h.resolve("gpu-8", "cordon")
    h.advance(hours=1)
    h.step()
    assert cluster.node("gpu-8")["spec"]["unschedulable"] is True  # we never set it, so never unset it


def test_duplicate_and_reordered_webhooks_act_once(h: Harness, cluster: FakeCluster) -> None:
    for _ in range(3):  # HA pair + repeat
        h.fire("gpu-1", "cordon")
    h.step()
    h.fire("gpu-1", "cordon")
    h.step()
    assert cluster.reasons("gpu-1").count("Cordoned") == 1
    # a resolved body, then the older firing copy arriving late: still resolved
    h.resolve("gpu-1", "cordon")
    h.fire("gpu-1", "cordon")
    h.step()
    assert h.state("gpu-1").alerts["fp-gpu-1-GPUFault"].status == "resolved"


def test_resolved_then_refired_reopens_the_episode(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-1", "cordon")
    h.step()
    h.resolve("gpu-1", "cordon")
    h.advance(minutes=5)
    h.step()
    assert h.state("gpu-1").healthy_since is not None
    h.fire("gpu-1", "drain", starts=h.now)  # a new startsAt: the fault is back, and worse
    h.advance(minutes=6)
    assert h.decisions(h.step()) == [("gpu-1", "drain", "execute")]
    assert h.state("gpu-1").healthy_since is None


def test_only_firing_alerts_start_anything(h: Harness, cluster: FakeCluster) -> None:
    h.resolve("gpu-1", "reboot")
    h.step()
    assert cluster.writes() == [("PUT", "/apis/coordination.k8s.io/v1/namespaces/gpuhealth/leases/"
                                 "gpuhealth-remediator")] or all("nodes" not in p or m == "PATCH"
                                                                  for m, p in cluster.writes())
    assert not cluster.taints("gpu-1")


def test_remediation_none_is_recorded_but_never_acted_on(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-1", "none")
    assert h.decisions(h.step()) == [("gpu-1", "none", "skipped")]
    assert not cluster.taints("gpu-1")


def test_dry_run_decides_and_reports_but_changes_nothing(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY, dry_run=True)
    cluster.add_pod("gpu-2", "train-0")
    h.fire("gpu-2", "reboot")
    plans = h.step()
    assert h.decisions(plans) == [("gpu-2", "cordon", "execute"), ("gpu-2", "drain", "execute")]
    writes = [w for w in cluster.writes() if "leases" not in w[1]]
    assert writes == []
    assert h.metric("gpuhealth_remediator_actions_total", action="cordon", result="dry_run") == 1


def test_quiet_episode_stops_escalating_and_release_hands_it_back(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-1", "cordon")
    h.step()
    h.advance(hours=7)  # no repeat for longer than episode.quiet_timeout: e.g. silenced
    plans = h.step()
    assert h.decisions(plans) == [("gpu-1", "none", "skipped")]
    assert "EpisodeQuiet" in cluster.reasons("gpu-1")
    assert cluster.taints("gpu-1")  # left as is for a person
