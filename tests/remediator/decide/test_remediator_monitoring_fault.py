"""Monitoring faults: gpuhealth's own alerts on many nodes of a pool at once start no node action (policy
monitoring_fault, gpuhealth/remediator/decide/monitoring_fault.py); on one node they fail closed as before."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.remediator.cli import main
from gpuhealth.remediator.decide.nodestate import TAINT_KEY
from gpuhealth.remediator.policy import PolicyError, parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.fakes.gpu_operator import PAUSED, deploy_labels, operator_node
from tests.support.remediator_harness import T0, Harness, webhook

FAILING = "GpuhealthProbeFailing"
NVML_MISSING = {"component": "probe", "probe": "nvml", "reason": "missing_tool"}
GAUGE = "gpuhealth_remediator_monitoring_fault_nodes"


def probe_failing(h: Harness, node: str, reason: str = "missing_tool", **kw: Any) -> None:
    h.fire(node, "cordon", alertname=FAILING, gpu=None,
           labels={**NVML_MISSING, "reason": reason, "severity": "warning"}, **kw)


def tainted(cluster: FakeCluster) -> list[str]:
    return sorted(n for n in cluster.nodes if any(t["key"] == TAINT_KEY for t in cluster.taints(n)))


def reasons(cluster: FakeCluster, reason: str) -> list[str]:
    return sorted(e["involvedObject"]["name"] for e in cluster.events if e["reason"] == reason)


def test_the_same_probe_failure_on_four_of_ten_nodes_cordons_none_and_says_so(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    bad = ["gpu-1", "gpu-3", "gpu-5", "gpu-7"]
    for node in bad:
        probe_failing(h, node)
    plans = h.step()
    assert tainted(cluster) == []
    assert not any(n["spec"].get("unschedulable") for n in cluster.nodes.values())
    assert reasons(cluster, "MonitoringFault") == bad
    event = next(e for e in cluster.events if e["reason"] == "MonitoringFault")
    assert event["type"] == "Warning"
    assert "GpuhealthProbeFailing probe=nvml reason=missing_tool fires on 4 of 10 nodes of pool gpu" in event["message"]
    assert h.decisions(plans) == [(n, "none", "skipped") for n in bad]
    assert all("monitoring fault, not this node's" in d.reason for d in h.decided(plans))
    assert h.metric(GAUGE, pool="gpu", alert=FAILING, probe="nvml", reason="missing_tool") == 4
    assert h.metric("gpuhealth_remediator_breaker_open", pool="gpu") == 0  # 40% firing, but none of it the nodes'
    for _ in range(3):  # said once per node, not once per pass
        h.advance(seconds=30)
        h.step()
    assert reasons(cluster, "MonitoringFault") == bad
    assert tainted(cluster) == []


def test_one_node_of_ten_with_a_failing_probe_is_cordoned_as_before(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    probe_failing(h, "gpu-1")
    assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute")]
    assert tainted(cluster) == ["gpu-1"]
    assert reasons(cluster, "MonitoringFault") == []
    assert h.metric(GAUGE, pool="gpu", alert=FAILING, probe="nvml", reason="missing_tool") == 0


def test_the_same_probe_failing_for_different_reasons_is_each_nodes_own_fault(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    for node, reason in (("gpu-1", "missing_tool"), ("gpu-2", "timeout"), ("gpu-3", "permission_denied")):
        probe_failing(h, node, reason)
    decisions = h.decisions(h.step())
    assert reasons(cluster, "MonitoringFault") == []
    assert tainted(cluster) == ["gpu-1", "gpu-2"]  # the cordon budget: 20% of 10
    assert ("gpu-3", "cordon", "deferred") in decisions


def test_a_share_of_exactly_the_threshold_or_too_few_nodes_is_no_monitoring_fault() -> None:
    with FakeCluster() as cluster:
        for i in range(15):
            cluster.add_node(f"big-{i}", pool="big")
        for i in range(2):
            cluster.add_node(f"small-{i}", pool="small")
        h = Harness(cluster, "evidence: {enabled: false}\nbudget: {max_cordoned: 100%}")
        for node in ("big-0", "big-1", "big-2", "small-0", "small-1"):  # 3 of 15 is 20%, not more; 2 of 2: 2 nodes
            probe_failing(h, node)
        h.step()
        assert reasons(cluster, "MonitoringFault") == []
        assert tainted(cluster) == ["big-0", "big-1", "big-2", "small-0", "small-1"]
        probe_failing(h, "big-3")  # 4 of 15: more than 20%, and at least 3 nodes
        h.step()
        assert reasons(cluster, "MonitoringFault") == ["big-0", "big-1", "big-2", "big-3"]
        assert tainted(cluster) == ["big-0", "big-1", "big-2", "small-0", "small-1"]


def test_a_hardware_alert_beside_the_monitoring_fault_is_remediated_as_usual(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    for node in ("gpu-1", "gpu-2", "gpu-3", "gpu-4"):
        probe_failing(h, node)
    h.fire("gpu-1", "reboot", alertname="GPUFallenOffBus")
    assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute"), ("gpu-1", "drain", "execute"),
                                     ("gpu-1", "reboot", "execute"),
                                     *[(n, "none", "skipped") for n in ("gpu-2", "gpu-3", "gpu-4")]]
    assert [job["spec"]["template"]["spec"]["nodeName"] for job in cluster.jobs.values()] == ["gpu-1"]
    assert tainted(cluster) == ["gpu-1"]
    assert h.metric("gpuhealth_remediator_breaker_open", pool="gpu") == 0  # the monitoring fault opens no breaker
    event = next(e for e in cluster.events if e["reason"] == "MonitoringFault" and
                 e["involvedObject"]["name"] == "gpu-1")
    assert "its other alerts (GPUFallenOffBus) are handled as usual" in event["message"]


def test_a_node_cordoned_before_the_share_was_crossed_stays_cordoned_and_climbs_no_further(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\nladder: {cordon: {escalate_after: 10m}}\n"
                "return_to_service: {healthy_delay: 10m}\n")
    probe_failing(h, "gpu-1")
    assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute")]
    for node in ("gpu-2", "gpu-3", "gpu-4"):
        probe_failing(h, node)
    h.advance(minutes=1)
    plans = h.step()
    assert h.decisions(plans)[0] == ("gpu-1", "none", "skipped")
    assert "the node stays at cordon" in h.decided(plans)[0].reason
    h.advance(minutes=30)  # past the cordon's escalate_after: a node fault would climb to drain
    h.step()
    assert h.state("gpu-1").rung == "cordon"
    assert tainted(cluster) == ["gpu-1"] and cluster.node("gpu-1")["spec"]["unschedulable"] is True
    assert reasons(cluster, "MonitoringFault") == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    for node in ("gpu-1", "gpu-2", "gpu-3", "gpu-4"):  # fixed: the one node gpuhealth took out returns the usual way
        h.resolve(node, alertname=FAILING, gpu=None, labels=NVML_MISSING)
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-1", "uncordon", "execute")]
    assert tainted(cluster) == []


def test_a_monitoring_fault_holds_while_min_nodes_still_fire_and_fewer_fail_closed() -> None:
    with FakeCluster() as cluster:
        for i in range(20):
            cluster.add_node(f"gpu-{i:02d}")
        h = Harness(cluster, "evidence: {enabled: false}\n")
        bad = [f"gpu-{i:02d}" for i in range(5)]  # 5 of 20: 25%
        for node in bad:
            probe_failing(h, node)
        h.step()
        assert h.metric(GAUGE, pool="gpu", alert=FAILING, probe="nvml", reason="missing_tool") == 5
        for node in bad[:2]:  # a fix rolls out: 3 of 20 still fail (15%), still at least 3 nodes
            h.resolve(node, alertname=FAILING, gpu=None, labels=NVML_MISSING)
        h.advance(seconds=30)
        h.step()
        assert tainted(cluster) == []
        assert h.metric(GAUGE, pool="gpu", alert=FAILING, probe="nvml", reason="missing_tool") == 3
        h.resolve(bad[2], alertname=FAILING, gpu=None, labels=NVML_MISSING)
        h.advance(seconds=30)
        h.step()  # 2 left: fewer than min_nodes, each node's own fault again
        assert tainted(cluster) == bad[3:]
        assert h.metric(GAUGE, pool="gpu", alert=FAILING, probe="nvml", reason="missing_tool") == 0


def test_a_monitoring_fault_is_logged_when_it_begins_and_ends(cluster: FakeCluster,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    caplog.set_level(logging.INFO, logger="gpuhealth.remediator")
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        probe_failing(h, node)
    h.step()
    h.advance(seconds=30)
    h.step()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    began = [x for x in lines if x["event"] == "monitoring_fault"]
    assert began == [{"event": "monitoring_fault", "pool": "gpu", "alert": FAILING, "probe": "nvml",
                      "reason": "missing_tool", "nodes": ["gpu-1", "gpu-2", "gpu-3"], "pool_size": 10,
                      "dry_run": False}]
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        h.resolve(node, alertname=FAILING, gpu=None, labels=NVML_MISSING)
    h.step()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert [x["event"] for x in lines if x["event"].startswith("monitoring_fault")] == [
        "monitoring_fault", "monitoring_fault_over"]


def test_plan_shows_a_monitoring_fault(tmp_path: Path, cluster: FakeCluster,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": list(cluster.nodes.values())}))
    bodies = []
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        body = tmp_path / f"{node}.json"
        body.write_text(json.dumps(webhook(node, "cordon", alertname=FAILING, gpu=None, labels=NVML_MISSING)))
        bodies.append(str(body))
    now = (T0 + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert main(["plan", "--nodes", str(nodes), "--alerts", *bodies, "--now", now]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["node"], x["action"], x["decision"]) for x in lines] == [
        (n, "none", "skipped") for n in ("gpu-1", "gpu-2", "gpu-3")]
    assert "GpuhealthProbeFailing probe=nvml reason=missing_tool fires on 3 of 10 nodes" in lines[0]["reason"]


def test_the_policy_names_the_share_the_node_count_and_the_alerts() -> None:
    from gpuhealth.remediator.policy import MonitoringFaultSettings

    assert parse_policy("").monitoring_fault == MonitoringFaultSettings(
        20.0, 3, (FAILING, "GpuhealthProbeStale", "GpuhealthExporterDown", "GpuhealthExporterTargetMissing"))
    p = parse_policy("monitoring_fault: {threshold: 50%, min_nodes: 5, alerts: []}")
    assert (p.monitoring_fault.threshold, p.monitoring_fault.min_nodes, p.monitoring_fault.alerts) == (50.0, 5, ())
    for text, key in (("monitoring_fault:\n  threshold: 120%\n", "monitoring_fault.threshold"),
                      ("monitoring_fault:\n  min_nodes: 0\n", "monitoring_fault.min_nodes"),
                      ("monitoring_fault:\n  alerts: GpuhealthProbeFailing\n", "monitoring_fault.alerts"),
                      ("monitoring_fault:\n  alert: []\n", "monitoring_fault.alert")):
        with pytest.raises(PolicyError) as err:
            parse_policy(text, "p.yaml")
        assert err.value.key == key and err.value.line == 2


def test_no_alert_counted_means_no_monitoring_fault(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\nmonitoring_fault: {alerts: []}\nbudget: {max_cordoned: 100%}\n")
    for node in ("gpu-1", "gpu-2", "gpu-3", "gpu-4"):
        probe_failing(h, node)
    h.step()
    assert tainted(cluster) == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]


def test_the_share_is_of_the_nodes_gpuhealths_exporter_runs_on_not_the_cpu_nodes_of_a_mixed_pool() -> None:
    # One pool of 10 GPU nodes (the exporter's condition on each) and 20 CPU nodes (no exporter): the same probe
    # failing on 3 GPU nodes is 30% of what gpuhealth watches, as the rules count it (exporter targets), not 10%.
    with FakeCluster() as cluster:
        for i in range(10):
            cluster.add_node(f"gpu-{i}")
            cluster.update_node(f"gpu-{i}", lambda n: n["status"]["conditions"].append(
                {"type": "GpuhealthProbesHealthy", "status": "True", "reason": "ProbesHealthy"}))
        for i in range(20):
            cluster.add_node(f"cpu-{i}")
        h = Harness(cluster, "evidence: {enabled: false}\n")
        for node in ("gpu-1", "gpu-2", "gpu-3"):
            probe_failing(h, node)
        h.step()
        assert tainted(cluster) == []
        assert reasons(cluster, "MonitoringFault") == ["gpu-1", "gpu-2", "gpu-3"]
        event = next(e for e in cluster.events if e["reason"] == "MonitoringFault")
        assert "fires on 3 of 10 nodes of pool gpu" in event["message"]


def test_a_reset_still_stopping_when_only_a_monitoring_faults_alerts_are_left_is_cancelled_and_its_clients_restored(
        ) -> None:
    # Mid-reset (the GPU Operator's operands paused, the device plugin off) the hardware alert resolves while the
    # node's exporter fails the same way as on 3 other nodes: holding the node "as it is" would keep its GPUs
    # unallocatable for as long as the monitoring fault lasts.
    with FakeCluster() as cluster:
        operator_node(cluster, "gpu-0")
        for i in range(1, 10):
            cluster.add_node(f"gpu-{i}")
        h = Harness(cluster, "evidence: {enabled: false}\nalertmanager: {url: none}")
        h.fire("gpu-0", "reset_gpu", gpu="00000000:86:00.0")
        decided = [(d.action, d.decision) for d in h.decided(h.step())]
        assert ("stop_gpu_clients", "execute") in decided
        assert set(deploy_labels(cluster, "gpu-0").values()) == {PAUSED, "true"}  # the driver's stays
        for node in ("gpu-0", "gpu-1", "gpu-2", "gpu-3"):
            probe_failing(h, node)
        h.resolve("gpu-0", "reset_gpu", gpu="00000000:86:00.0")
        decided = [(d.action, d.decision) for d in h.decided(h.step())]
        assert ("restore_gpu_clients", "execute") in decided
        assert all(v == "true" for v in deploy_labels(cluster, "gpu-0").values()) and not cluster.jobs
        assert "GPUResetNotNeeded" in cluster.reasons("gpu-0")
        state = h.state("gpu-0")  # ended as not needed: back at the drain, so nothing climbs for it
        assert (state.rung, state.rung_status) == ("drain", "done")
