"""The failure classifier (gpuhealth/remediator/workloads/classify.py) on realistic failed pods, and
`gpuhealth-remediator classify`, which prints its verdict for on-call."""

from __future__ import annotations

import copy
import csv
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhealth.remediator.cli import main
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, AlertRecord, NodeState
from gpuhealth.remediator.workloads.classify import (
    APP,
    INFRA,
    REASONS,
    UNKNOWN,
    NodeSignal,
    Settings,
    classify,
    pod_gpus,
)
from gpuhealth.remediator.workloads.evidence import signals_from_events, signals_from_node
from tests.support import paths
from tests.support.remediator_harness import T0, webhook

FIXTURES = paths.FIXTURES / "workloads"
ROOT = paths.REPO
FAILED_AT = T0
NODE = "gpu-node-7"


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def failed_pod(exit_code: int = 1, reason: str = "Error", message: str = "", node: str = NODE,
               finished: datetime = FAILED_AT, conditions: list[dict[str, Any]] | None = None,
               gpus: int = 8, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job's pod as the API server shows it once it failed."""
    fixture: dict[str, Any] = json.loads((FIXTURES / "pod_nccl_timeout.json").read_text())
    pod = copy.deepcopy(fixture)
    pod["metadata"]["annotations"] = dict(annotations or {})
    pod["spec"]["nodeName"] = node
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    terminated = {"exitCode": exit_code, "reason": reason,
                  "startedAt": _stamp(FAILED_AT - timedelta(hours=4)), "finishedAt": _stamp(finished)}
    if message:
        terminated["message"] = message
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": terminated}
    pod["status"]["conditions"] = [*(conditions or []),
                                   {"type": "Ready", "status": "False", "reason": "PodFailed",
                                    "lastTransitionTime": _stamp(finished)}]
    return pod


def alert(name: str, remediation: str, start: datetime, end: datetime | None = None, component: str = "gpu",
          gpu: str | None = "0", node: str = NODE) -> NodeSignal:
    return NodeSignal("alert", name, node, start, end, remediation, component, gpu)


def disruption(reason: str, message: str) -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": _stamp(FAILED_AT - timedelta(seconds=30))}


# --- the order of evidence ------------------------------------------------------------------------

def test_a_pod_evicted_by_the_drain_is_infra() -> None:
    pod = json.loads((FIXTURES / "pod_evicted_by_drain.json").read_text())
    v = classify(pod, [])
    assert (v.cls, v.reason) == (INFRA, "eviction")
    assert any("EvictionByEvictionAPI" in e for e in v.evidence)


@pytest.mark.parametrize(("condition", "reason"), [
    ("PreemptionByScheduler", "preemption"),
    ("DeletionByTaintManager", "node_taint"),
    ("DeletionByPodGC", "node_gone"),
    ("TerminationByKubelet", "kubelet"),
])
def test_disruption_target_is_infra_whatever_the_exit_code(condition: str, reason: str) -> None:
    pod = failed_pod(exit_code=2, conditions=[disruption(condition, "the platform took it")])
    v = classify(pod, [])
    assert (v.cls, v.reason) == (INFRA, reason)


def test_a_preempted_pod_is_infra_even_with_an_app_xid_on_its_gpu() -> None:
    pod = failed_pod(conditions=[disruption("PreemptionByScheduler", "Preempted by a higher priority pod")])
    v = classify(pod, [alert("GPUXidApplication", "none", FAILED_AT - timedelta(minutes=1))])
    assert (v.cls, v.reason) == (INFRA, "preemption")


def test_a_fatal_xid_alert_3_minutes_before_makes_an_exit_1_infra() -> None:
    v = classify(failed_pod(exit_code=1), [alert("GPUXidFatal", "reset_gpu", FAILED_AT - timedelta(minutes=3))])
    assert (v.cls, v.reason) == (INFRA, "node_fault")
    assert any("GPUXidFatal" in e and "3m00s before the failure" in e for e in v.evidence)


def test_an_alert_that_ended_20_minutes_before_is_not_evidence() -> None:
    old = alert("GPUXidFatal", "reset_gpu", FAILED_AT - timedelta(minutes=30), FAILED_AT - timedelta(minutes=20))
    v = classify(failed_pod(exit_code=1), [old])
    assert (v.cls, v.reason) == (UNKNOWN, "unexplained")
    assert not any("GPUXidFatal" in e for e in v.evidence)


def test_an_alert_that_ended_9_minutes_before_is_evidence_and_11_is_not() -> None:
    def ended(minutes: int) -> NodeSignal:
        start, end = FAILED_AT - timedelta(minutes=15), FAILED_AT - timedelta(minutes=minutes)
        return alert("GPUXidFatal", "reset_gpu", start, end)

    assert classify(failed_pod(exit_code=1), [ended(9)]).cls == INFRA
    assert classify(failed_pod(exit_code=1), [ended(11)]).cls == UNKNOWN


def test_an_alert_still_firing_from_20_minutes_before_is_evidence() -> None:
    v = classify(failed_pod(exit_code=1), [alert("GPULost", "reboot", FAILED_AT - timedelta(minutes=20))])
    assert (v.cls, v.reason) == (INFRA, "node_fault")


def test_an_alert_up_to_5_minutes_after_the_failure_counts_and_later_does_not() -> None:
    soon = alert("GPUFallenOffBus", "reboot", FAILED_AT + timedelta(minutes=4))
    late = alert("GPUFallenOffBus", "reboot", FAILED_AT + timedelta(minutes=6))
    assert classify(failed_pod(), [soon]).cls == INFRA
    assert classify(failed_pod(), [late]).cls == UNKNOWN


def test_alerts_of_other_nodes_and_remediation_none_are_not_hardware_evidence() -> None:
    signals = [alert("GPUXidFatal", "reset_gpu", FAILED_AT, node="gpu-node-8"),
               alert("GPUTemperatureHigh", "none", FAILED_AT - timedelta(minutes=1))]
    assert classify(failed_pod(exit_code=1), signals).cls == UNKNOWN


def test_a_job_component_alert_is_not_evidence_against_the_node() -> None:
    """WorkloadsFailingOnNode is made from workload failures: counting it would let one bad job make the next
    failure on the node look like the node's."""
    signal = alert("WorkloadsFailingOnNode", "cordon", FAILED_AT - timedelta(minutes=1), component="job", gpu=None)
    assert classify(failed_pod(exit_code=1), [signal]).cls == UNKNOWN


@pytest.mark.parametrize(("name", "remediation", "component"), [
    ("GpuhealthProbeFailing", "cordon", "probe"),
    ("NVLinkDown", "reset_gpu", "nvlink"),
    ("EFADevicesMissing", "reboot", "network"),
])
def test_nvlink_efa_and_failed_probe_alerts_are_hardware_evidence(name: str, remediation: str,
                                                                  component: str) -> None:
    v = classify(failed_pod(exit_code=2), [alert(name, remediation, FAILED_AT - timedelta(minutes=2),
                                                  component=component)])
    assert (v.cls, v.reason) == (INFRA, "node_fault")


def test_a_contained_memory_error_on_the_pods_gpu_is_infra_without_node_action() -> None:
    v = classify(failed_pod(exit_code=1), [alert("GPUContainedMemoryError", "none", FAILED_AT - timedelta(seconds=20),
                                                 component="memory")])
    assert (v.cls, v.reason) == (INFRA, "gpu_memory_error")


def test_oomkilled_is_app() -> None:
    v = classify(failed_pod(exit_code=137, reason="OOMKilled"), [])
    assert (v.cls, v.reason) == (APP, "oom_killed")


def test_a_pod_past_its_own_active_deadline_is_app() -> None:
    pod = failed_pod(exit_code=137)
    pod["status"].update(reason="DeadlineExceeded", message="Pod was active on the node longer than the specified "
                         "deadline")
    assert (classify(pod, []).cls, classify(pod, []).reason) == (APP, "deadline_exceeded")


def test_a_hardware_alert_wins_over_oomkilled() -> None:
    v = classify(failed_pod(exit_code=137, reason="OOMKilled"),
                 [alert("GPUXidFatal", "reset_gpu", FAILED_AT - timedelta(minutes=1))])
    assert v.cls == INFRA


@pytest.mark.parametrize(("code", "cls"), [(2, APP), (127, APP), (1, UNKNOWN), (139, UNKNOWN)])
def test_exit_codes_against_the_configured_app_codes(code: int, cls: str) -> None:
    v = classify(failed_pod(exit_code=code), [])
    assert v.cls == cls
    if cls == APP:
        assert v.reason == "app_exit_code" and v.cause == f"app_exit_code:{code}"


def test_configured_app_codes_replace_the_defaults() -> None:
    settings = Settings(app_exit_codes=(42,))
    assert classify(failed_pod(exit_code=42), [], settings).cls == APP
    assert classify(failed_pod(exit_code=2), [], settings).cls == UNKNOWN


def test_an_app_xid_13_on_the_pods_gpu_is_app() -> None:
    v = classify(failed_pod(exit_code=1), [alert("GPUXidApplication", "none", FAILED_AT - timedelta(seconds=5))])
    assert (v.cls, v.reason) == (APP, "app_xid")


def test_an_app_xid_on_another_pods_gpu_is_not_this_pods() -> None:
    pod = failed_pod(exit_code=1, gpus=1, annotations={"gpuhealth.io/gpus": "3"})
    signal = alert("GPUXidApplication", "none", FAILED_AT - timedelta(seconds=5), gpu="5")
    v = classify(pod, [signal], pod_gpus=pod_gpus(pod, 8))
    assert v.cls == UNKNOWN
    assert any("not on the pod's GPU" in e for e in v.evidence)
    assert classify(pod, [alert("GPUXidApplication", "none", FAILED_AT, gpu="3")],
                    pod_gpus=pod_gpus(pod, 8)).cls == APP


def test_an_xid_on_one_mig_instance_is_the_pods_only_if_the_pod_held_that_instance() -> None:
    """A pod annotated with its MIG device (NVIDIA_VISIBLE_DEVICES holds MIG-<uuid> on a MIG instance): a contained
    memory error on another instance of the same GPU is not its failure; one on its own instance, or on the GPU
    without MIG attribution where the pod names the GPU, is."""
    mine, other = "MIG-8aa1fc52-9818-58ec-bc64-8f0cae121bb4", "MIG-42fa9c93-1430-5ccc-b623-c02fb93b7f5a"
    bus = "00000000:64:00.0"

    def xid94(mig: str | None) -> NodeSignal:
        return NodeSignal("alert", "GPUContainedMemoryError", NODE, FAILED_AT - timedelta(seconds=5), None, "none",
                          "memory", bus, mig)

    pod = failed_pod(gpus=0, annotations={"gpuhealth.io/gpus": mine})
    assert classify(pod, [xid94(other)], pod_gpus=pod_gpus(pod, None)).cls == UNKNOWN
    v = classify(pod, [xid94(mine)], pod_gpus=pod_gpus(pod, None))
    assert (v.cls, v.reason) == (INFRA, "gpu_memory_error") and any(mine in e for e in v.evidence)
    claimed = frozenset({mine, "0000:64:00.0"})  # as the watcher reads the pod's DRA claims: its MIG device, its GPU
    assert classify(failed_pod(), [xid94(other)], pod_gpus=claimed).cls == UNKNOWN
    assert classify(failed_pod(), [xid94(None)], pod_gpus=claimed).cls == INFRA  # the whole GPU's, bus id any width


def test_a_pod_with_some_of_a_nodes_gpus_and_no_annotation_owns_no_xid() -> None:
    pod = failed_pod(gpus=2)
    assert pod_gpus(pod, 8) == frozenset()
    assert pod_gpus(failed_pod(gpus=8), 8) is None


def test_an_nccl_timeout_alone_is_unknown_even_with_an_app_exit_code() -> None:
    pod = json.loads((FIXTURES / "pod_nccl_timeout.json").read_text())
    v = classify(pod, [], Settings(app_exit_codes=(1,)))
    assert (v.cls, v.reason) == (UNKNOWN, "nccl_timeout")
    assert any("Watchdog caught collective operation timeout" in e for e in v.evidence)


def test_an_nccl_timeout_with_a_node_fault_is_infra() -> None:
    pod = json.loads((FIXTURES / "pod_nccl_timeout.json").read_text())
    # the recorded pod failed at its own (real) time; the node fault is 27 minutes before it
    signal = alert("NVLinkDown", "reset_gpu", datetime(2026, 12, 2, 9, 33, tzinfo=UTC), component="nvlink",
                   node="gpu-node-7")
    assert classify(pod, [signal]).cls == INFRA


def test_every_reason_the_classifier_gives_is_a_known_label_value() -> None:
    """The failures metric is labelled with the reason, initialised at 0 from REASONS: no drift."""
    from gpuhealth.remediator.workloads import classify as c

    source = (ROOT / "gpuhealth" / "remediator" / "workloads" / "classify.py").read_text()
    given = {(cls, reason) for cls, reason in re.findall(r'verdict\((INFRA|APP|UNKNOWN), "(\w+)"', source)}
    given |= {("INFRA", r) for r in (*c.DISRUPTION_REASONS.values(), *c.STATUS_REASONS.values())}
    assert given and all(reason in REASONS[getattr(c, cls)] for cls, reason in given), given
    known = {r for rs in REASONS.values() for r in rs}
    assert not c.NODE_SUSPECT_REASONS - known


# --- the look-ahead -------------------------------------------------------------------------------

def test_app_and_unknown_verdicts_are_final_only_after_the_look_ahead() -> None:
    pod = failed_pod(exit_code=2)
    assert not classify(pod, [], now=FAILED_AT + timedelta(minutes=4)).final
    assert classify(pod, [], now=FAILED_AT + timedelta(minutes=5)).final
    evicted = failed_pod(conditions=[disruption("EvictionByEvictionAPI", "Eviction API: evicting")])
    assert classify(evicted, [], now=FAILED_AT).final  # infra: final at once


# --- the evidence sources -------------------------------------------------------------------------

def test_signals_come_from_the_nodes_state_annotation() -> None:
    record = AlertRecord(name="GPUXidFatal", remediation="reset_gpu", status="firing",
                         starts_at=FAILED_AT - timedelta(minutes=2), last_seen=FAILED_AT,
                         gpu="0", component="gpu")
    node = {"metadata": {"name": NODE, "annotations": {STATE_ANNOTATION: NodeState(alerts={"fp": record}).to_json()}}}
    v = classify(failed_pod(), signals_from_node(node))
    assert (v.cls, v.reason) == (INFRA, "node_fault")


def test_remediation_events_count_from_drain_up_and_cordons_do_not() -> None:
    def event(reason: str) -> dict[str, Any]:
        return {"involvedObject": {"kind": "Node", "name": NODE}, "reason": reason,
                "source": {"component": "gpuhealth-remediator"}, "lastTimestamp": _stamp(FAILED_AT)}

    assert classify(failed_pod(), signals_from_events([event("Cordoned")])).cls == UNKNOWN
    v = classify(failed_pod(), signals_from_events([event("Reboot")]))
    assert (v.cls, v.reason) == (INFRA, "node_remediation")
    other = event("Reboot") | {"source": {"component": "kubelet"}}
    assert not signals_from_events([other])


# --- facts: the fleet data agrees with the classes -------------------------------------------------

def _csv(name: str) -> list[dict[str, str]]:
    lines = [line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def test_the_xids_fleet_data_blames_on_the_app_are_the_app_xid_alerts() -> None:
    rules = yaml.safe_load((ROOT / "rules" / "alerts" / "gpu.yaml").read_text())
    expr = next(r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GPUXidApplication")
    app_xids = set(re.search(r'xid=~"([\d|]+)"', expr).group(1).split("|"))  # type: ignore[union-attr]
    rows = _csv("xid_blame.csv")
    assert {r["xid"] for r in rows if r["suggested_blame"] == "app-likely"} <= app_xids
    assert "94" not in app_xids and next(r for r in rows if r["xid"] == "94")["suggested_blame"].startswith("infra")


def test_the_fleet_data_calls_an_nccl_watchdog_timeout_ambiguous() -> None:
    row = next(r for r in _csv("llama3_interruptions.csv") if r["component"] == "NCCL Watchdog Timeouts")
    assert row["suggested_blame_class"] == "ambiguous"
    assert "nccl_timeout" in REASONS[UNKNOWN]


# --- the CLI --------------------------------------------------------------------------------------

def _write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_cli_prints_one_json_object_with_the_class_and_evidence(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    pod = _write(tmp_path, "pod.json", failed_pod(exit_code=1))
    body = webhook(NODE, "reset_gpu", alertname="GPUXidFatal", starts=FAILED_AT - timedelta(minutes=3))
    alerts = _write(tmp_path, "alerts.json", body)
    assert main(["classify", "--pod", pod, "--node-alerts", alerts]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    verdict = json.loads(out[0])
    assert set(verdict) == {"class", "reason", "evidence"}
    assert (verdict["class"], verdict["reason"]) == ("infra", "node_fault")
    assert any("GPUXidFatal" in e for e in verdict["evidence"])


def test_cli_reads_gpuhealth_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _write(tmp_path, "pod.json", failed_pod(exit_code=1))
    events = {"apiVersion": "v1", "kind": "List", "items": [
        {"involvedObject": {"kind": "Node", "name": NODE}, "reason": "Draining",
         "source": {"component": "gpuhealth-remediator"}, "lastTimestamp": _stamp(FAILED_AT - timedelta(minutes=1))}]}
    assert main(["classify", "--pod", pod, "--events", _write(tmp_path, "events.json", events)]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "node_remediation"


def test_cli_uses_the_policys_app_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _write(tmp_path, "pod.json", failed_pod(exit_code=42))
    policy = _write(tmp_path, "policy.yaml", "workloads:\n  app_exit_codes: [42]\n")
    assert main(["classify", "--policy", policy, "--pod", pod]) == 0
    assert json.loads(capsys.readouterr().out)["class"] == "app"


@pytest.mark.parametrize(("make", "why"), [
    (lambda d: d / "missing.json", "cannot read"),
    (lambda d: (d / "bad.json").write_text("{not json") and d / "bad.json", "not JSON"),
    (lambda d: (d / "running.json").write_text(json.dumps({**failed_pod(), "status": {"phase": "Running"}}))
     and d / "running.json", "not 'Failed'"),
    (lambda d: (d / "list.json").write_text('{"kind": "List", "items": []}') and d / "list.json", "expected one pod"),
])
def test_cli_bad_pod_file_exits_2_with_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          make: Any, why: str) -> None:
    path = str(make(tmp_path))
    assert main(["classify", "--pod", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and why in lines[0]


def test_cli_bad_alert_payload_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _write(tmp_path, "pod.json", failed_pod())
    bad = _write(tmp_path, "alerts.json", {"version": "3", "status": "firing", "alerts": []})
    assert main(["classify", "--pod", pod, "--node-alerts", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert bad in err and "Alertmanager v4" in err and "version" in err


def test_cli_bad_events_file_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _write(tmp_path, "pod.json", failed_pod())
    bad = _write(tmp_path, "events.json", {"kind": "EventList"})
    assert main(["classify", "--pod", pod, "--events", bad]) == 2
    assert bad in capsys.readouterr().err


def test_cli_help_explains_the_classes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["classify", "--help"])
    text = capsys.readouterr().out
    for word in ("infra", "app", "unknown", "--pod", "--node-alerts", "--events", "look_ahead"):
        assert word in text
