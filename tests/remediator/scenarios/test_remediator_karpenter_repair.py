"""One owner per fault: Karpenter's node repair and the EKS node monitoring agent (policy karpenter_repair,
docs/install.md "Living with Karpenter node repair and the EKS agent"). When another agent sets a Karpenter-watched
condition False on a node gpuhealth is working on, the remediator says so once per episode (an Event, a metric, an
audit line) and follows the mode: warn goes on with the ladder, handover starts no further rung. gpuhealth's own
replace step (replace.method: condition) is not a conflict. The EKS agent is played by the test at the API boundary:
it writes the Node condition, as the real agent does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.remediator.cli import main
from gpuhealth.remediator.policy import PolicyError, parse_policy
from tests.fakes.apiserver import FakeCluster, Obj
from tests.support.remediator_harness import Harness, webhook

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
budget: {max_disrupted: 2, max_cordoned: 4}
return_to_service: {healthy_delay: 10m}
"""
GPU = "00000000:9B:00.0"
CONFLICT = "KarpenterRepairConflict"
COUNTER = "gpuhealth_remediator_karpenter_repair_conflicts_total"


def _eks_agent_flags(cluster: FakeCluster, node: str, ctype: str = "AcceleratedHardwareReady",
                     reason: str = "NvidiaXID79Error") -> None:
    """What the EKS node monitoring agent writes on an Xid: its condition False, with a reason of its own."""
    def change(n: Obj) -> None:
        conditions = [c for c in n["status"]["conditions"] if c["type"] != ctype]
        conditions.append({"type": ctype, "status": "False", "reason": reason,
                           "message": "Xid 79: GPU has fallen off the bus",
                           "lastTransitionTime": "2026-12-02T10:01:00Z"})
        n["status"]["conditions"] = conditions
    cluster.update_node(node, change)


def _mid_reset(h: Harness, node: str = "gpu-3") -> None:
    """A node whose reset Job runs (no GPU Operator labels, no exporter: the Job starts in the first pass)."""
    h.fire(node, "reset_gpu", gpu=GPU)
    assert h.decisions(h.step()) == [(node, "cordon", "execute"), (node, "drain", "execute"),
                                     (node, "reset_gpu", "execute")]
    assert h.state(node).rung == "reset_gpu" and h.state(node).rung_status == "running"


def _fail_the_reset_job(cluster: FakeCluster) -> None:
    (job,) = [j for j in cluster.jobs if "reset" in j[1]]
    cluster.jobs[job]["status"] = {"failed": 1}


def _messages(cluster: FakeCluster, node: str, reason: str) -> list[str]:
    return [e["message"] for e in cluster.events_for(node) if e["reason"] == reason]


def test_the_eks_agent_flagging_a_node_mid_reset_is_said_once_with_an_event_and_a_count(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _mid_reset(h)
    assert h.metric(COUNTER, condition="AcceleratedHardwareReady", mode="warn") == 0  # exists before the first
    _eks_agent_flags(cluster, "gpu-3")
    h.advance(seconds=30)
    h.step()
    (message,) = _messages(cluster, "gpu-3", CONFLICT)
    assert "AcceleratedHardwareReady=False (reason NvidiaXID79Error" in message
    assert "not set by gpuhealth" in message and "karpenter_repair.mode warn" in message
    event = next(e for e in cluster.events_for("gpu-3") if e["reason"] == CONFLICT)
    assert event["type"] == "Warning"
    assert h.metric(COUNTER, condition="AcceleratedHardwareReady", mode="warn") == 1
    assert h.state("gpu-3").repair_reported == ("AcceleratedHardwareReady",)
    for _ in range(3):  # the condition stays False: nothing more is said
        h.advance(seconds=30)
        h.step()
    assert len(_messages(cluster, "gpu-3", CONFLICT)) == 1
    assert h.metric(COUNTER, condition="AcceleratedHardwareReady", mode="warn") == 1
    _eks_agent_flags(cluster, "gpu-3", "KernelReady", "KernelBug")  # another watched condition: said once too
    h.advance(seconds=30)
    h.step()
    assert len(_messages(cluster, "gpu-3", CONFLICT)) == 2 and "KernelReady=False" in \
        _messages(cluster, "gpu-3", CONFLICT)[1]
    assert h.metric(COUNTER, condition="KernelReady", mode="warn") == 1


def test_warn_goes_on_with_the_ladder_and_marks_its_decisions(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _mid_reset(h)
    _eks_agent_flags(cluster, "gpu-3")
    _fail_the_reset_job(cluster)
    h.advance(seconds=30)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("reboot", "execute")]
    assert decided[0].karpenter_repair.startswith("AcceleratedHardwareReady=False")
    assert [j for j in cluster.jobs if "reboot" in j[1]]
    assert "Reboot" in cluster.reasons("gpu-3")


def test_handover_starts_no_further_rung_and_the_episode_ends_with_the_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "karpenter_repair: {mode: handover}\n")
    _mid_reset(h)
    _eks_agent_flags(cluster, "gpu-3")
    _fail_the_reset_job(cluster)  # a failed reset would climb to a reboot: Karpenter has the node now
    h.advance(seconds=30)
    (skipped,) = h.decided(h.step())
    assert (skipped.action, skipped.decision) == ("none", "skipped")
    assert "handed over to Karpenter's node repair: AcceleratedHardwareReady=False" in skipped.reason
    assert not [j for j in cluster.jobs if "reboot" in j[1]]
    assert "karpenter_repair.mode handover" in _messages(cluster, "gpu-3", CONFLICT)[0]
    assert h.metric(COUNTER, condition="AcceleratedHardwareReady", mode="handover") == 1
    h.advance(minutes=45)  # past every rung's timeout and escalate_after: still nothing started, nothing undone
    h.fire("gpu-3", "reset_gpu", gpu=GPU)
    assert h.decisions(h.step()) == [("gpu-3", "none", "skipped")]
    assert not [j for j in cluster.jobs if "reboot" in j[1]]
    assert cluster.taints("gpu-3") and cluster.node("gpu-3")["spec"]["unschedulable"] is True
    assert len(_messages(cluster, "gpu-3", CONFLICT)) == 1

    cluster.delete_node("gpu-3")  # Karpenter's node repair replaced it
    h.advance(seconds=30)
    plans = h.step()
    assert plans is not None and "gpu-3" not in {p.node for p in plans} and h.decisions(plans) == []
    assert h.metric("gpuhealth_remediator_api_errors_total", operation="execute") == 0
    assert h.metric("gpuhealth_remediator_budget_in_use", pool="gpu", budget="disrupted") == 0
    assert len(cluster.jobs) == 1  # the reset Job it had started; nothing after


def test_handover_ends_when_the_condition_clears_and_the_ladder_resumes(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "karpenter_repair: {mode: handover}\n")
    _mid_reset(h)
    _eks_agent_flags(cluster, "gpu-3")
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-3", "none", "skipped")]
    cluster.update_node("gpu-3", lambda n: n["status"]["conditions"][-1].update(status="True", reason="Healthy"))
    _fail_the_reset_job(cluster)
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-3", "reboot", "execute")]


def test_gpuhealths_own_replace_condition_is_not_a_conflict(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "replace: {method: condition}\nkarpenter_repair: {mode: handover}\n")
    h.fire("gpu-6", "replace")
    h.step()
    conditions = {c["type"]: c for c in cluster.node("gpu-6")["status"]["conditions"]}
    assert conditions["AcceleratedHardwareReady"]["status"] == "False"
    for _ in range(2):
        h.advance(seconds=30)
        h.fire("gpu-6", "replace")
        assert h.decisions(h.step()) == [("gpu-6", "replace", "skipped")]  # "replacement under way", not handed over
    assert CONFLICT not in cluster.reasons("gpu-6")
    assert h.metric(COUNTER, condition="AcceleratedHardwareReady", mode="handover") == 0


def test_a_node_outside_an_episode_is_not_a_conflict(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _eks_agent_flags(cluster, "gpu-1")
    h.step()
    assert CONFLICT not in cluster.reasons("gpu-1")


def test_plan_shows_the_conflict_in_both_modes_and_writes_nothing(cluster: FakeCluster, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    h = Harness(cluster, POLICY)
    _mid_reset(h)
    _eks_agent_flags(cluster, "gpu-3")
    _fail_the_reset_job(cluster)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": list(cluster.nodes.values())}))
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": list(cluster.pods.values())}))
    body = tmp_path / "alert.json"
    body.write_text(json.dumps(webhook("gpu-3", "reset_gpu", gpu=GPU)))
    policy = tmp_path / "policy.yaml"
    for mode in ("handover", "warn"):
        policy.write_text(POLICY + f"karpenter_repair: {{mode: {mode}}}\n")
        assert main(["plan", "--nodes", str(nodes), "--pods", str(pods), "--alerts", str(body), "--policy",
                     str(policy), "--now", "2026-12-02T10:05:00Z"]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        if mode == "handover":
            assert [(x["action"], x["decision"]) for x in lines] == [("none", "skipped")]
            assert "handed over to Karpenter's node repair" in lines[0]["reason"]
        else:
            assert lines and all(x["karpenter_repair"].startswith("AcceleratedHardwareReady=False") for x in lines)
    assert CONFLICT not in cluster.reasons("gpu-3")  # plan writes nothing


@pytest.mark.parametrize(("text", "key"), [
    ("karpenter_repair: {mode: replace}\n", "karpenter_repair.mode"),
    ("karpenter_repair: {conditions: AcceleratedHardwareReady}\n", "karpenter_repair.conditions"),
    ("karpenter_repair: {conditions: ['not a type']}\n", "karpenter_repair.conditions"),
    ("karpenter_repair: {owner: karpenter}\n", "karpenter_repair.owner"),
])
def test_a_bad_karpenter_repair_section_is_refused_with_its_key(text: str, key: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.yaml")
    assert err.value.key == key and err.value.line == 1


def test_the_watched_conditions_are_karpenters_aws_repair_policies_but_ready() -> None:
    policy = parse_policy("")
    assert policy.karpenter_repair.mode == "warn"
    assert set(policy.karpenter_repair.conditions) == {"AcceleratedHardwareReady", "StorageReady", "NetworkingReady",
                                                       "KernelReady", "ContainerRuntimeReady"}
    narrowed = parse_policy("karpenter_repair: {conditions: [AcceleratedHardwareReady]}\n")
    assert narrowed.karpenter_repair.conditions == ("AcceleratedHardwareReady",)
