"""`gpuhealth-remediator cleanup` (docs/install.md, "Uninstalling"): on a cluster the real remediator left mid-reset,
mid-drain and mid-quarantine, it stops the remediators, waits for gpuhealth's Jobs, and takes off exactly what
gpuhealth did, never what a person did. It runs as the chart's cleanup hook ServiceAccount, under the chart's
RBAC (tests/support/chart_rbac.py); the GPU Operator's DaemonSets and gpuhealth's exporter are played at the API
boundary (tests/fakes/gpu_operator.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from gpuhealth.remediator import cli
from gpuhealth.remediator.act.cleanup import CleanupOptions, CleanupReport, run_cleanup
from gpuhealth.remediator.clients.dry_run import DryRunKube
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.leader import CLEANUP_ANNOTATION
from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION
from gpuhealth.remediator.decide.node_patches import cordon_body
from gpuhealth.remediator.decide.nodestate import (
    DO_NOT_DISRUPT_ANNOTATION,
    HOLD_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_KEY,
    AlertRecord,
    NodeState,
    fmt_time,
)
from tests.fakes.apiserver import FakeCluster, merge_patch
from tests.fakes.gpu_operator import (
    OPERAND_PODS,
    PAUSED,
    deploy_labels,
    exporter_says,
    label,
    operator_node,
    release_for_reset,
    start_operand_pods,
)
from tests.remediator.dra_gpus import DRIVER, alert_gpu, dra_node
from tests.support import chart_rbac
from tests.support.chart_render import render
from tests.support.remediator_harness import T0, Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
return_to_service: {healthy_delay: 10m}
budget: {max_actions_per_hour: 100}
ladder:
  reset_gpu: {timeout: 10m}
replace: {method: condition}
"""
GPU = "00000000:86:00.0"
A_PERSONS_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


# --- the cluster as the GPU Operator, the exporter and people keep it ------------------------------------------

def _operator_node(c: FakeCluster, name: str, **labels: str) -> None:
    """A GPU Operator node with both of gpuhealth's exporter's conditions; its own pool, so that each node's episode
    has its budget."""
    operator_node(c, name, pool=name, **labels)
    exporter_says(c, name, "GPUHealthy", "no fault", ctype="GpuhealthGPUHealthy")


def _condition_types(c: FakeCluster, node: str) -> set[str]:
    return {x["type"] for x in c.node(node)["status"]["conditions"]}


def _reset_jobs(c: FakeCluster) -> list[tuple[str, str]]:
    return [j for j in c.jobs if "-reset-" in j[1]]


# --- driving the real remediator mid-episode ----------------------------------------------------------------

def _mid_reset(h: Harness, c: FakeCluster, node: str) -> None:
    """reset_gpu: the operands paused, the exporter released the GPU, the reset Job running."""
    h.fire(node, "reset_gpu", gpu=GPU)
    h.step()
    release_for_reset(c, node)
    h.step()
    state = h.state(node)
    assert (state.rung, state.reset.phase) == ("reset_gpu", "resetting") and _reset_jobs(c)


def _mid_drain(h: Harness, c: FakeCluster, node: str) -> None:
    """drain: a PodDisruptionBudget keeps a pod on the node, so the drain rung is under way."""
    c.add_node(node, pool=node)
    c.add_pod(node, f"db-{node}", labels={"app": f"db-{node}"})
    c.add_pdb("default", {"app": f"db-{node}"}, 0)
    exporter_says(c, node)
    h.sync()  # the watch cache knows the new node before its alert comes
    h.fire(node, "reboot", gpu=None)
    h.step()
    state = h.state(node)
    assert (state.rung, state.rung_status, state.cordoned, state.do_not_disrupt) == ("drain", "running", True, True)


def _mid_quarantine(h: Harness, c: FakeCluster, node: str) -> None:
    """GPU scope: one GPU quarantined by a DeviceTaintRule, the node in service (no taint, no cordon)."""
    devices = dra_node(c, node, pool=node)
    h.sync()
    h.fire(node, "cordon", gpu=alert_gpu(devices[2]))
    h.step()
    assert h.state(node).scope == "gpu" and c.dra.rules and not c.taints(node)


def _a_persons_device_taint_rule(c: FakeCluster, node: str) -> None:
    c.dra.rules["a-persons-rule"] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "a-persons-rule"},
        "spec": {"deviceSelector": {"driver": DRIVER, "pool": node, "device": "gpu-0"},
                 "taint": {"key": "example.com/x", "effect": "NoSchedule"}}}


# --- running the cleanup -------------------------------------------------------------------------------------

def _cleanup(h: Harness, *, dry_run: bool = False, wait: timedelta = timedelta(minutes=5),
             on_sleep: Callable[[], None] | None = None) -> tuple[CleanupReport, list[str]]:
    """The cleanup as the chart's hook runs it: the cleanup ServiceAccount's token, under the chart's RBAC; its
    sleep moves the test's clock (and lets the test change the cluster meanwhile)."""
    api = client.ApiClient(chart_rbac.configuration(h.cluster, chart_rbac.CLEANUP_TOKEN))
    kube = DryRunKube(api, request_timeout=2.0) if dry_run else Kube(api, request_timeout=2.0)
    lines: list[str] = []

    def sleep(seconds: float) -> None:
        h.advance(seconds=seconds)
        h.rem.elector.try_acquire()  # the replica's renew loop, as it runs every third of the Lease's duration
        if on_sleep is not None:
            on_sleep()

    report = run_cleanup(kube, h.policy, CleanupOptions(wait=wait, identity="cleanup-pod", by="alice"),
                         lambda: h.now, sleep, lines.append)
    return report, lines


def _node_writes(c: FakeCluster) -> list[tuple[str, str]]:
    """Every write but the Lease's: Nodes, their status, DeviceTaintRules, Events, Jobs."""
    return [w for w in c.writes() if "/leases" not in w[1]]


def test_cleanup_takes_off_only_what_gpuhealth_did_mid_reset_mid_drain_and_mid_quarantine(
        cluster: FakeCluster) -> None:
    # A person set DCGM off on the reset node before gpuhealth came (it is not paused, and stays "false").
    _operator_node(cluster, "gpu-reset", **{label("dcgm"): "false"})
    _a_persons_device_taint_rule(cluster, "gpu-quarantine")
    cluster.add_node("gpu-person", pool="gpu-person", unschedulable=True,
                     annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})  # a person's cordon and do-not-disrupt
    exporter_says(cluster, "gpu-person")
    h = Harness(cluster, POLICY)
    _mid_reset(h, cluster, "gpu-reset")
    _mid_drain(h, cluster, "gpu-drain")
    cluster.update_node("gpu-drain", lambda n: n["spec"]["taints"].append(A_PERSONS_TAINT))  # a person's, meanwhile
    _mid_quarantine(h, cluster, "gpu-quarantine")
    assert deploy_labels(cluster, "gpu-reset")[label("device-plugin")] == PAUSED
    assert cluster.annotations("gpu-reset")[RESET_REQUEST_ANNOTATION]

    (job,) = _reset_jobs(cluster)
    slept = []

    def the_reset_ends() -> None:  # the reset Job ends while the cleanup waits for it (its first sleep: the Lease's)
        slept.append(h.now)
        if len(slept) == 3:
            cluster.jobs[job]["status"] = {"succeeded": 1}

    report, lines = _cleanup(h, on_sleep=the_reset_ends)

    assert report.ok and not report.left and not report.failed, report.summary()
    assert not cluster.forbidden  # the chart's cleanup RBAC grants every call it makes
    for node in ("gpu-reset", "gpu-drain", "gpu-quarantine"):
        annotations = cluster.annotations(node)
        assert not {STATE_ANNOTATION, RESET_REQUEST_ANNOTATION, "gpuhealth.io/last-episode",
                    DO_NOT_DISRUPT_ANNOTATION} & set(annotations), (node, annotations)
        assert not any(t["key"] == TAINT_KEY for t in cluster.taints(node))
        assert not cluster.node(node)["spec"].get("unschedulable")
        assert not {t for t in _condition_types(cluster, node) if t.startswith("Gpuhealth")}
        assert "Ready" in _condition_types(cluster, node)  # the kubelet's stay
        assert "CleanedUp" in cluster.reasons(node)
    assert deploy_labels(cluster, "gpu-reset") == {label("device-plugin"): "true",
                                                   label("gpu-feature-discovery"): "true",
                                                   label("dcgm-exporter"): "true", label("dcgm"): "false",
                                                   label("driver"): "true"}
    assert cluster.taints("gpu-drain") == [A_PERSONS_TAINT]
    assert set(cluster.dra.rules) == {"a-persons-rule"}
    person = cluster.node("gpu-person")
    assert person["spec"]["unschedulable"] is True
    assert person["metadata"]["annotations"][DO_NOT_DISRUPT_ANNOTATION] == "true"
    assert _condition_types(cluster, "gpu-person") == {"Ready"}
    assert cluster.jobs[job]["status"] == {"succeeded": 1}  # waited for, never stopped
    said = "\n".join(lines)
    assert f"waiting up to 5m for gpuhealth/{job[1]} on gpu-reset" in said
    assert "gpu-drain: removed taint gpuhealth.io/unhealthy; uncordoned (gpuhealth cordoned it)" in said
    assert "kept taint example.com/maintenance" in said
    assert "deleted DeviceTaintRule gpuhealth-gpu-quarantine-gpu-2-noschedule" in said

    # The remediator stops: it no longer leads, and records no alert while the cleanup holds its Lease.
    lease = cluster.leases[("gpuhealth", "gpuhealth-remediator")]
    assert lease["spec"]["holderIdentity"] == "cleanup-pod" and CLEANUP_ANNOTATION in lease["metadata"]["annotations"]
    writes = len(_node_writes(cluster))
    assert h.rem.elector.stopped_by and not h.rem.is_leader()
    h.fire("gpu-drain", "reboot", gpu=None, alertname="StillFiring")
    assert h.step() is None and len(_node_writes(cluster)) == writes
    assert STATE_ANNOTATION not in cluster.annotations("gpu-drain")
    assert h.metric("gpuhealth_remediator_alerts_ignored_total", reason="cleanup") == 1

    # Run again: nothing of gpuhealth's is left, nothing is written.
    again, lines = _cleanup(h)
    assert again.ok and not again.cleaned and not again.rules_deleted
    assert len(_node_writes(cluster)) == writes
    assert "nothing of gpuhealth's is left on the cluster" in lines[-1]


def test_a_reset_job_still_running_after_the_wait_is_never_stopped_and_its_node_is_left_as_it_is(
        cluster: FakeCluster) -> None:
    devices = dra_node(cluster, "gpu-1", pool="gpu-1", labels={label(op): "true" for op in OPERAND_PODS})
    start_operand_pods(cluster, "gpu-1")
    exporter_says(cluster, "gpu-1")
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "reset_gpu", gpu=alert_gpu(devices[1]))  # GPU scope: quarantine, its pod evicted, then the reset
    h.step()
    h.advance(seconds=60)
    h.step()
    release_for_reset(cluster, "gpu-1")
    h.step()
    assert h.state("gpu-1").scope == "gpu" and _reset_jobs(cluster) and cluster.dra.rules
    before = cluster.node("gpu-1")
    rules = set(cluster.dra.rules)

    report, lines = _cleanup(h, wait=timedelta(minutes=2))

    assert not report.ok and set(report.left) == {"gpu-1"} and "still runs" in report.left["gpu-1"]
    after = cluster.node("gpu-1")
    assert after["metadata"]["labels"] == before["metadata"]["labels"]  # still paused: the reset is not disturbed
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert set(cluster.dra.rules) == rules and all(j["status"] == {"active": 1} for j in cluster.jobs.values())
    assert "CleanupSkipped" in cluster.reasons("gpu-1")
    assert "left as it is: gpu-1" in lines[-1] and "run `gpuhealth-remediator cleanup` again" in lines[-1]

    (job,) = _reset_jobs(cluster)
    cluster.jobs[job]["status"] = {"failed": 1}
    report, _ = _cleanup(h)  # once it has ended, a second run takes the rest off
    assert report.ok and report.cleaned["gpu-1"]
    assert all(v == "true" for v in deploy_labels(cluster, "gpu-1").values()) and not cluster.dra.rules
    assert not {STATE_ANNOTATION, RESET_REQUEST_ANNOTATION} & set(cluster.annotations("gpu-1"))


def test_the_dry_run_writes_nothing_and_says_what_a_run_would_undo(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _mid_drain(h, cluster, "gpu-drain")
    _mid_quarantine(h, cluster, "gpu-quarantine")
    before = {name: cluster.node(name) for name in ("gpu-drain", "gpu-quarantine")}
    writes = len(cluster.writes())

    report, lines = _cleanup(h, dry_run=True)

    assert cluster.writes()[writes:] == []  # not even the Lease
    assert {name: cluster.node(name) for name in before} == before and cluster.dra.rules
    said = "\n".join(lines)
    assert "would take it from replica-a" in said
    assert ("gpu-drain: would: removed taint gpuhealth.io/unhealthy; uncordoned (gpuhealth cordoned it); "
            f"removed {DO_NOT_DISRUPT_ANNOTATION}; removed {STATE_ANNOTATION}; removed {HISTORY_ANNOTATION}; "
            "removed condition GpuhealthProbesHealthy") in said
    assert ("gpu-quarantine: would: removed gpuhealth.io/state; removed gpuhealth.io/history; deleted DeviceTaintRule "
            "gpuhealth-gpu-quarantine") in said
    assert "(dry run: nothing changed): would undo on 2 node(s), 1 DeviceTaintRule(s) to delete" in lines[-1]
    assert set(report.cleaned) == {"gpu-drain", "gpu-quarantine"}
    assert h.step() is not None  # the remediator still leads: a dry run takes no Lease


def test_a_remediator_still_running_after_the_hold_takes_its_lease_back_and_drops_the_mark(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _mid_drain(h, cluster, "gpu-1")
    _cleanup(h)
    assert h.step() is None and h.rem.elector.stopped_by  # held: it sees the mark
    h.advance(seconds=119)
    assert h.step() is None  # the cleanup's hold (2m) is not over on the replica's own clock yet
    h.advance(seconds=2)
    assert h.step() is not None and h.rem.is_leader() and h.rem.elector.stopped_by is None
    lease = cluster.leases[("gpuhealth", "gpuhealth-remediator")]
    assert lease["spec"]["holderIdentity"] == "replica-a"
    assert CLEANUP_ANNOTATION not in (lease["metadata"].get("annotations") or {})
    h.fire("gpu-1", "cordon", alertname="AfterTheCleanup")  # it records (and acts) again
    assert h.state("gpu-1").active


def test_the_replace_condition_goes_only_where_gpuhealth_set_it(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-r", pool="gpu-r")
    cluster.add_node("gpu-eks", pool="gpu-eks")
    eks_agent = {"type": "AcceleratedHardwareReady", "status": "False", "reason": "NvidiaXID79Error",
                 "message": "the EKS node monitoring agent saw Xid 79"}
    cluster.update_node("gpu-eks", lambda n: n["status"]["conditions"].append(eks_agent))
    h = Harness(cluster, POLICY)
    h.fire("gpu-r", "replace", gpu=None)
    h.step()
    replaced = {x["type"]: x for x in cluster.node("gpu-r")["status"]["conditions"]}["AcceleratedHardwareReady"]
    assert replaced["reason"] == "GpuhealthReplace"

    report, lines = _cleanup(h)

    assert report.ok
    assert _condition_types(cluster, "gpu-r") == {"Ready"}
    assert eks_agent in cluster.node("gpu-eks")["status"]["conditions"]
    assert "gpu-eks" not in report.cleaned
    assert any("episode since" in line and "firing: GPUFault" in line for line in lines if line.startswith("gpu-r:"))


def test_a_node_a_person_took_over_keeps_its_cordon_and_loses_gpuhealths_bookkeeping(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _mid_drain(h, cluster, "gpu-1")
    cluster.update_node("gpu-1", lambda n: n["spec"].pop("taints"))  # a person removed gpuhealth's taint
    report, _ = _cleanup(h)
    assert report.ok
    node = cluster.node("gpu-1")
    assert node["spec"]["unschedulable"] is True  # the person's now
    assert not {STATE_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION} & set(node["metadata"]["annotations"])


def test_a_write_that_conflicts_is_computed_again_from_the_node_as_it_is_now(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _mid_drain(h, cluster, "gpu-1")
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", 409)  # a person's kubectl got there first
    report, _ = _cleanup(h)
    assert report.ok, report.summary()
    assert not any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))
    assert not cluster.node("gpu-1")["spec"].get("unschedulable")


# --- the command --------------------------------------------------------------------------------------------

def _as_gpuhealth_cordoned_it(c: FakeCluster, node: str) -> None:
    """The Node as the remediator's cordon left it (decide/node_patches.py cordon_body), for the command's tests,
    which run with no remediator holding the Lease."""
    state = NodeState(alerts={"fp-1": AlertRecord("GPUFault", "cordon", "firing", T0, T0)},
                      episode=T0, rung="cordon", rung_status="done", cordoned=True)
    body = cordon_body(c.node(node), state)
    c.update_node(node, lambda n: n.update(merge_patch(n, body)))


def _kubeconfig(tmp_path: Path, cluster: FakeCluster, token: str) -> str:
    path = tmp_path / f"kubeconfig-{token}"
    path.write_text(yaml.safe_dump(chart_rbac.kubeconfig(cluster, token)))
    return str(path)


def _hook_args(tmp_path: Path) -> list[str]:
    """The arguments the chart's pre-delete hook passes, with the policy the chart renders written to a file."""
    docs = render(None)
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "gpuhealth-cleanup"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuhealth-remediator"]
    policy = tmp_path / "policy.yaml"
    policy.write_text(config["data"]["policy.yaml"])
    assert container["command"] == ["gpuhealth-remediator"]
    return [a if not a.startswith("--policy=") else f"--policy={policy}" for a in container["args"]]


def test_the_hooks_command_leaves_held_and_unreadable_nodes_and_exits_1_with_a_summary(
        cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart_rbac.enforce(cluster)
    admin = _kubeconfig(tmp_path, cluster, chart_rbac.ADMIN_TOKEN)
    cluster.add_node("gpu-held")
    _as_gpuhealth_cordoned_it(cluster, "gpu-held")
    assert cli.main(["hold", "gpu-held", "--reason", "INC-1: debugging Xid 79", "--by", "bob",
                     "--kubeconfig", admin]) == 0
    cluster.add_node("gpu-damaged", annotations={STATE_ANNOTATION: "{not json"})
    cluster.add_node("gpu-clean")
    exporter_says(cluster, "gpu-clean")
    capsys.readouterr()
    args = _hook_args(tmp_path)

    code = cli.main([*args, "--kubeconfig", _kubeconfig(tmp_path, cluster, chart_rbac.CLEANUP_TOKEN)])

    out = capsys.readouterr().out
    assert code == 1, out
    assert "left as it is: gpu-held: held by bob (INC-1: debugging Xid 79)" in out
    assert "left as it is: gpu-damaged: its gpuhealth.io/state annotation cannot be read" in out
    assert "gpu-clean: removed condition GpuhealthProbesHealthy" in out
    assert HOLD_ANNOTATION in cluster.annotations("gpu-held") and cluster.taints("gpu-held")
    assert cluster.annotations("gpu-damaged")[STATE_ANNOTATION] == "{not json"
    assert not cluster.forbidden
    lease = cluster.leases[("gpuhealth", "gpuhealth-remediator")]
    assert lease["spec"]["leaseDurationSeconds"] == 120  # held on for the hook's --hold after it ends
    assert json.loads(lease["metadata"]["annotations"][CLEANUP_ANNOTATION])["by"] == "helm uninstall gpuhealth"


def test_the_command_dry_run_prints_the_plan_and_a_second_run_is_a_no_op(
        cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart_rbac.enforce(cluster)
    cluster.add_node("gpu-1")
    _as_gpuhealth_cordoned_it(cluster, "gpu-1")
    kubeconfig = _kubeconfig(tmp_path, cluster, chart_rbac.CLEANUP_TOKEN)
    writes = len(cluster.writes())
    assert cli.main(["cleanup", "--dry-run", "--kubeconfig", kubeconfig]) == 0
    out = capsys.readouterr().out
    assert "gpu-1: would: removed taint gpuhealth.io/unhealthy; uncordoned (gpuhealth cordoned it)" in out
    assert cluster.writes()[writes:] == []

    assert cli.main(["cleanup", "--kubeconfig", kubeconfig, "--wait", "0s"]) == 0
    assert not cluster.taints("gpu-1") and not cluster.node("gpu-1")["spec"].get("unschedulable")
    writes = len(_node_writes(cluster))
    capsys.readouterr()
    assert cli.main(["cleanup", "--kubeconfig", kubeconfig]) == 0  # the Lease is a cleanup's: no wait for it
    assert "nothing of gpuhealth's is left on the cluster" in capsys.readouterr().out
    assert len(_node_writes(cluster)) == writes


def test_a_bad_wait_is_refused_before_anything_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["cleanup", "--wait", "five minutes"])
    assert exited.value.code == 2
    assert "expected a duration like 30s" in capsys.readouterr().err


def test_a_new_node_mid_burn_in_loses_the_burn_in_taint_and_keeps_a_persons(cluster: FakeCluster) -> None:
    burn_in = {"key": "gpuhealth.io/burn-in", "effect": "NoSchedule"}
    cluster.add_node("gpu-new", taints=[burn_in, A_PERSONS_TAINT], created=fmt_time(T0), ready=False)
    h = Harness(cluster, POLICY.replace("replace: {method: condition}", "replace: {method: condition}\n"
                                        'diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}'))
    assert h.decisions(h.step()) == [("gpu-new", "diagnose", "deferred")]  # waiting for Ready: no Job on it yet
    report, lines = _cleanup(h)
    assert report.ok
    assert cluster.node("gpu-new")["spec"]["taints"] == [A_PERSONS_TAINT]
    assert any("removed taint gpuhealth.io/burn-in" in line for line in lines if line.startswith("gpu-new:"))
