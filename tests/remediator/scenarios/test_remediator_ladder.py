"""The ladder end to end: webhooks into the Flask app, the official client against FakeCluster."""

from __future__ import annotations

import pytest

from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION, LAST_EPISODE_ANNOTATION, TAINT_KEY
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
    assert cluster.evictions() == ["default/train-0"]  # not the DaemonSet pod, not the mirror pod
    assert cluster.terminating("gpu-2") == ["train-0"]
    h.advance(seconds=10)  # still terminating: the reboot waits for it to be gone
    assert h.decisions(h.step()) == [("gpu-2", "drain", "deferred")]
    assert cluster.jobs == {}
    h.advance(seconds=20)
    assert h.decisions(h.step()) == [("gpu-2", "reboot", "execute")]
    assert [p["metadata"]["name"] for p in cluster.pods_on("gpu-2")] == ["dcgm-exporter-x", "kube-proxy-gpu-2"]
    (ns, _name), job = next(iter(cluster.jobs.items()))
    assert ns == "gpuhealth" and job["spec"]["template"]["spec"]["nodeName"] == "gpu-2"
    assert job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] is True
    # the node comes back with a new boot id: reboot done; resolved alerts then return it to service
    cluster.update_node("gpu-2", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
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
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "00000000:9B:00.0"  # reset_gpu.sh's $1
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
    assert len(h.slept) == len(h.policy.drain.eviction_backoff)  # 429 retried with backoff, then left for later


def test_fault_persisting_after_a_successful_reset_climbs_to_reboot(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    job = next(iter(cluster.jobs.values()))
    job["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    assert h.state("gpu-4").rung_status == "done"
    h.fire("gpu-4", "reset_gpu", gpu="1")  # Alertmanager repeats: still firing
    h.advance(minutes=16)  # event alerts clear within ~10-15 min of a fix: not yet a reason to reboot
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "deferred")]
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.advance(minutes=15)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "execute")]


def test_failed_reset_job_climbs_to_reboot(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    next(iter(cluster.jobs.values()))["status"] = {"failed": 1}
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "execute")]
    assert "GPUResetFailed" in cluster.reasons("gpu-4")


@pytest.mark.parametrize("label", ["all", "unknown"])
def test_reset_of_all_or_unknown_gpu_resets_every_gpu_after_the_drain(h: Harness, cluster: FakeCluster,
                                                                        label: str) -> None:
    cluster.add_pod("gpu-5", "train-0", gpus=8)
    h.fire("gpu-5", "reset_gpu", gpu=label)
    assert h.decisions(h.step()) == [("gpu-5", "cordon", "execute"), ("gpu-5", "drain", "execute")]
    assert cluster.jobs == {}  # not before the node is drained
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-5", "reset_gpu", "execute")]
    job = next(iter(cluster.jobs.values()))
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == ""  # reset_gpu.sh: every GPU
    assert "GPUResetSkipped" not in cluster.reasons("gpu-5")


def test_alerts_naming_different_gpus_reset_all_of_them(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-5", "reset_gpu", gpu="1", alertname="A")
    h.fire("gpu-5", "reset_gpu", gpu="3", alertname="B")
    h.step()
    job = next(iter(cluster.jobs.values()))
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == ""  # reset_gpu.sh: every GPU


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
    h = Harness(cluster, "evidence: {enabled: false}\nreplace: {method: condition}")
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


def test_replace_that_never_completes_times_out_reports_and_stays_out_of_service(cluster: FakeCluster) -> None:
    # Karpenter never acts on the condition
    h = Harness(cluster, "evidence: {enabled: false}\nreplace: {method: condition}")
    h.fire("gpu-6", "replace")
    h.step()
    for _ in range(3):
        h.fire("gpu-6", "replace")
        h.advance(minutes=25)
        h.step()
    assert cluster.reasons("gpu-6").count("ReplaceTimedOut") == 1
    assert h.metric("gpuhealth_remediator_rung_timeouts_total", rung="replace") == 1
    assert h.state("gpu-6").rung_status == "failed" and cluster.taints("gpu-6")
    h.advance(minutes=5)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-6", "none", "skipped")] and "needs a person" in h.decided(plans)[0].reason
    assert cluster.reasons("gpu-6").count("ReplaceTimedOut") == 1  # reported once, not every pass


def test_human_cordoned_node_is_left_alone_and_never_uncordoned(h: Harness, cluster: FakeCluster) -> None:
    cluster.update_node("gpu-7", lambda n: n["spec"].update(unschedulable=True))
    h.fire("gpu-7", "reboot")
    plans = h.step()
    assert h.decisions(plans) == [("gpu-7", "none", "skipped")]
    h.resolve("gpu-7", "reboot")
    h.advance(hours=1)
    h.step()
    node = cluster.node("gpu-7")
    assert node["spec"]["unschedulable"] is True and not node["spec"].get("taints")


def test_node_already_unschedulable_under_our_taint_is_never_uncordoned_by_us(h: Harness,
                                                                              cluster: FakeCluster) -> None:
    cluster.update_node("gpu-8", lambda n: n["spec"].update(  # a person first
        unschedulable=True, taints=[{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]))
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
    cluster.add_pod("gpu-1", "train-0", gpus=8)
    h.resolve("gpu-1", "reboot")
    h.step()
    h.advance(minutes=30)
    h.step()
    node_writes = [(m, p) for m, p in cluster.writes() if "/nodes" in p]
    assert node_writes == [("PATCH", "/api/v1/nodes/gpu-1")]  # the resolved alert recorded, nothing else
    node = cluster.node("gpu-1")
    assert not node["spec"].get("taints") and not node["spec"].get("unschedulable")
    assert cluster.evictions() == [] and cluster.jobs == {} and cluster.events == []
    assert not h.state("gpu-1").active


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


def test_person_who_cordons_after_us_holds_the_node_and_it_stays_cordoned(h: Harness, cluster: FakeCluster) -> None:
    """A `kubectl cordon` after ours cannot be told apart from ours: a person who wants the node kept out
    uses `hold` (docs/remediation.md), and a held node is not returned to service."""
    h.fire("gpu-1", "cordon")
    h.step()
    cluster.update_node("gpu-1", lambda n: n["spec"].update(unschedulable=True))  # kubectl cordon: already so
    cluster.update_node("gpu-1", lambda n: n["metadata"]["annotations"].update(
        {HOLD_ANNOTATION: '{"reason": "keep it", "by": "bob"}'}))
    h.resolve("gpu-1", "cordon")
    h.advance(hours=1)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-1", "none", "skipped")] and "bob" in h.decided(plans)[0].reason
    node = cluster.node("gpu-1")
    assert node["spec"]["unschedulable"] is True and cluster.taints("gpu-1")


def test_reboot_job_failure_is_ignored_the_boot_id_decides(h: Harness, cluster: FakeCluster) -> None:
    cluster.nodeclaims["nc"] = {"metadata": {"name": "nc"}, "status": {"nodeName": "gpu-3"}}
    h.fire("gpu-3", "reboot")
    h.step()
    # systemd kills the Job's pod during shutdown: the Job fails; the node comes back not yet Ready
    next(iter(cluster.jobs.values()))["status"] = {"failed": 1}
    cluster.update_node("gpu-3", lambda n: n["status"].update(
        nodeInfo={"bootID": "boot-2"}, conditions=[{"type": "Ready", "status": "False"}]))
    h.fire("gpu-3", "reboot")
    h.advance(minutes=3)
    assert h.decisions(h.step()) == [("gpu-3", "reboot", "deferred")]
    assert cluster.nodeclaims and "RebootFailed" not in cluster.reasons("gpu-3")
    cluster.update_node("gpu-3", lambda n: n["status"].update(conditions=[{"type": "Ready", "status": "True"}]))
    h.advance(minutes=1)
    h.step()
    assert h.state("gpu-3").rung_status == "done" and "RebootSucceeded" in cluster.reasons("gpu-3")
    assert cluster.nodeclaims


def test_reboot_job_failing_before_the_node_goes_down_does_not_replace(h: Harness, cluster: FakeCluster) -> None:
    cluster.nodeclaims["nc"] = {"metadata": {"name": "nc"}, "status": {"nodeName": "gpu-3"}}
    h.fire("gpu-3", "reboot")
    h.step()
    next(iter(cluster.jobs.values()))["status"] = {"failed": 1}  # graceful shutdown marked the pod Failed
    h.advance(seconds=30)
    assert ("gpu-3", "replace", "execute") not in h.decisions(h.step())
    assert cluster.nodeclaims
    h.fire("gpu-3", "reboot")
    h.advance(minutes=31)  # never came back with a new boot id: the rung's timeout decides
    h.step()
    assert "RebootTimedOut" in cluster.reasons("gpu-3")


def test_return_to_service_waits_for_a_running_reset_to_finish(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\nreturn_to_service: {healthy_delay: 5m}\n"
                "ladder: {reset_gpu: {timeout: 1h}}")
    h.fire("gpu-1", "reset_gpu", gpu="1")
    h.step()
    assert h.state("gpu-1").rung_status == "running"
    h.resolve("gpu-1", "reset_gpu", gpu="1")  # e.g. the exporter is down during the reset
    h.step()
    h.advance(minutes=6)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-1", "uncordon", "deferred")] and "under way" in h.decided(plans)[0].reason
    assert cluster.taints("gpu-1")
    next(iter(cluster.jobs.values()))["status"] = {"succeeded": 1}
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "execute")]


def test_progress_notes_are_reported_once_while_the_next_rung_is_deferred(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\nbudget: {max_actions_per_hour: 2}")
    h.fire("gpu-1", "reset_gpu", gpu=None)
    for _ in range(5):
        h.step()
        h.advance(seconds=30)
    assert cluster.reasons("gpu-1").count("GPUResetSkipped") == 1
    assert cluster.jobs == {}  # the reboot is deferred by the rate cap


def test_person_who_removed_our_taint_took_over_nothing_more_happens(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-1", "drain", alertname="A")
    h.step()
    # the person decides the node is fine: taint removed, uncordoned
    cluster.update_node("gpu-1", lambda n: [n["spec"].pop(k, None) for k in ("taints", "unschedulable")])
    cluster.add_pod("gpu-1", "new-work", gpus=8)  # work lands on it again
    h.fire("gpu-1", "reboot", alertname="B")
    h.advance(seconds=30)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-1", "none", "skipped")] and "took over" in h.decided(plans)[0].reason
    assert cluster.jobs == {} and cluster.evictions() == []
    assert not cluster.taints("gpu-1") and not cluster.node("gpu-1")["spec"].get("unschedulable")
    h.resolve("gpu-1", "drain", alertname="A")
    h.resolve("gpu-1", "reboot", alertname="B")
    h.advance(hours=1)
    h.step()  # the episode closes without touching what the person set
    assert not h.state("gpu-1").active and [p["metadata"]["name"] for p in cluster.pods_on("gpu-1")] == ["new-work"]


def test_reboot_intent_is_on_the_node_before_the_job_exists(h: Harness, cluster: FakeCluster) -> None:
    """A failed Job creation after the intent was written: the next pass re-creates the same Job; the
    boot id recorded is the one from before the reboot (never one read after it)."""
    cluster.nodeclaims["nc"] = {"metadata": {"name": "nc"}, "status": {"nodeName": "gpu-3"}}
    h.fire("gpu-3", "reboot")
    cluster.fail("POST", "/apis/batch/v1/namespaces/gpuhealth/jobs$", 500)
    h.step()
    assert cluster.jobs == {} and h.state("gpu-3").rung == "reboot" and h.state("gpu-3").boot_id == "boot-1"
    h.advance(seconds=30)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-3", "reboot", "execute")] and len(cluster.jobs) == 1
    cluster.update_node("gpu-3", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    h.advance(minutes=5)
    h.step()
    assert h.state("gpu-3").rung_status == "done" and cluster.nodeclaims


def test_reset_and_reboot_never_start_while_pods_are_back_on_the_node(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    next(iter(cluster.jobs.values()))["status"] = {"failed": 1}
    cluster.add_pod("gpu-4", "tolerates-all")  # landed despite our taint (tolerates everything)
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "drain", "execute")]  # evicted first, no reboot Job
    assert len(cluster.jobs) == 1 and cluster.evictions() == ["default/tolerates-all"]
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "execute")]


def test_a_pod_appearing_between_the_list_and_the_job_stops_the_job(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reboot")
    real_pods_on = h.kube.pods_on
    calls: list[str] = []

    def pods_on(node: str) -> list[dict[str, object]]:
        calls.append(node)
        if len(calls) == 1:  # the pass read the (empty) node from its cache; now, before the reboot Job
            cluster.add_pod("gpu-4", "late-arrival")
        return real_pods_on(node)

    h.kube.pods_on = pods_on  # type: ignore[method-assign]
    h.step()  # cordon, drain (nothing to evict) and reboot in one plan: dropped whole, decided again
    assert cluster.jobs == {} and h.state("gpu-4").rung is None
    h.advance(seconds=10)
    assert h.decisions(h.step()) == [("gpu-4", "cordon", "execute"), ("gpu-4", "drain", "execute")]
    assert cluster.jobs == {} and cluster.evictions() == ["default/late-arrival"]


def test_a_dry_run_keeps_what_it_would_have_written_and_reads_its_own_records_back(cluster: FakeCluster) -> None:
    """The dry run's client (clients/dry_run.py) makes no write: it keeps each one, and the states it recorded
    are what its next pass reads (the webhook's alerts are on the node as far as the dry run is concerned)."""
    from gpuhealth.remediator.clients.dry_run import DryRunKube

    h = Harness(cluster, POLICY, dry_run=True)
    kube = h.rem.kube
    assert isinstance(kube, DryRunKube) and kube.dry_run
    h.fire("gpu-2", "reboot")
    assert [(w.what, w.target) for w in kube.would] == [("write_state", "gpu-2")]
    assert not cluster.node("gpu-2")["metadata"].get("annotations", {}).get("gpuhealth.io/state")
    assert kube.recorded_overlay()["gpu-2"].active
    assert h.decisions(h.step())[0] == ("gpu-2", "cordon", "execute")  # decided from its own record
    h.fire("gpu-2", "reboot")  # seen again: nothing new to write (and no conflict with its own record)
    assert h.metric("gpuhealth_remediator_api_errors_total", operation="record") == 0
    assert [w for w in cluster.writes() if "leases" not in w[1]] == []


def test_a_dry_runs_records_are_guarded_by_their_own_resource_versions() -> None:
    """Two writers of one Node's record in a dry run (the intake's workers, the loop's sync) conflict as on the
    API server: the second, computed from the same read, gets a 409 and reads again."""
    from datetime import UTC, datetime

    from kubernetes import client

    from gpuhealth.remediator.clients.dry_run import DryRunKube
    from gpuhealth.remediator.clients.errors import Conflict
    from gpuhealth.remediator.decide.nodestate import NodeState

    a, b = datetime(2026, 12, 2, 10, tzinfo=UTC), datetime(2026, 12, 2, 11, tzinfo=UTC)  # two episodes
    kube = DryRunKube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    written = kube.write_state("gpu-1", NodeState(episode=a), "41")  # the cluster's resourceVersion, as read
    with pytest.raises(Conflict):
        kube.write_state("gpu-1", NodeState(episode=b), "41")  # computed from the same read: lost update refused
    kube.write_state("gpu-1", NodeState(episode=b), written["metadata"]["resourceVersion"])
    assert kube.recorded_overlay()["gpu-1"].episode == b


def test_serve_waits_for_the_ladders_next_time_when_it_falls_before_the_interval(cluster: FakeCluster) -> None:
    """`serve` passes every --interval, and sooner when the ladder's own timing (decide/wake.py) falls due first: a
    cordon that escalates after 20 s is acted on then, not up to a whole interval later; never sooner than 1 s."""
    from datetime import timedelta

    h = Harness(cluster, "evidence: {enabled: false}\nladder: {cordon: {escalate_after: 20s}}")
    loop = h.rem.loop
    assert loop.wait_s(60) == 60  # nothing under way: the interval
    h.fire("gpu-1", "drain")
    h.step()
    h.fire("gpu-3", "cordon")
    h.step()
    assert loop.wait_s(60) == 20  # gpu-3's escalation to drain is due in 20 s
    assert loop.wait_s(5) == 5  # never longer than the interval
    h.now += timedelta(seconds=19.5)
    assert loop.wait_s(60) == 1  # due in half a second: at least a second between passes
    h.now += timedelta(minutes=5)
    assert loop.wait_s(60) == 60  # past and no pass since (lost Lease, API down): the interval, never a 1 s loop
