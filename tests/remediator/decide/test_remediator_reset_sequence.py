"""The reset sequence (docs/remediation.md, "The reset sequence"): before the reset Job, the GPU's clients stop (the
GPU Operator's operands through their nvidia.com/gpu.deploy.* labels, gpuhealth's exporter through the reset-request
annotation); whatever ends the rung restores exactly what it paused. The GPU Operator's DaemonSet controller and the
exporter are played at the API boundary (tests/fakes/gpu_operator.py): the operand pods go when their label is not
"true", and the exporter's answer is the condition it writes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpuhealth.remediator.decide.nodestate import RESET_REQUEST_ANNOTATION, NodeState
from gpuhealth.remediator.decide.state_records import Reset
from gpuhealth.remediator.policy import PolicyError, parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.fakes.gpu_operator import (
    OPERAND_PODS,
    OPERATOR_NS,
    PAUSED,
    daemonset_controller,
    deploy_labels,
    exporter_says,
    label,
    operator_node,
    release_for_reset,
)
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
return_to_service: {healthy_delay: 10m}
ladder:
  reset_gpu: {timeout: 10m}
"""
GPU = "00000000:86:00.0"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


def _to_stopping(h: Harness, node: str = "gpu-1") -> NodeState:
    h.fire(node, "reset_gpu", gpu=GPU)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("cordon", "execute"), ("drain", "execute"),
                                                         ("stop_gpu_clients", "execute")]
    return h.state(node)


def _finish(c: FakeCluster, outcome: str) -> None:
    (job,) = [j for j in c.jobs if "reset" in j[1]]
    c.jobs[job]["status"] = {outcome: 1}


def test_the_reset_job_waits_until_the_operands_pods_are_gone_and_the_exporter_released_nvml(
        cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    state = _to_stopping(h)
    assert state.reset.phase == "stopping" and set(state.reset.paused) == {label(op) for op in OPERAND_PODS}
    assert deploy_labels(cluster, "gpu-1") == {**{label(op): PAUSED for op in OPERAND_PODS}, label("driver"): "true"}
    assert cluster.annotations("gpu-1")[RESET_REQUEST_ANNOTATION] == state.reset_request
    assert state.reset_request is not None and state.reset_request.startswith(f"{state.job}.")
    assert not cluster.jobs  # nothing may reset a GPU that is held open
    assert "GPUClientsStopping" in cluster.reasons("gpu-1")

    (waiting,) = h.decided(h.step())
    assert (waiting.action, waiting.decision) == ("reset_gpu", "deferred")
    assert f"pod {OPERATOR_NS}/nvidia-dcgm-exporter-gpu-1" in waiting.reason and "exporter" in waiting.reason
    daemonset_controller(cluster, "gpu-1")
    (waiting,) = h.decided(h.step())
    assert waiting.decision == "deferred" and "pod " not in waiting.reason and "exporter" in waiting.reason
    for other in ("some-other-job", state.job, f"{state.reset_request}0"):  # an answer to another request is no answer
        exporter_says(cluster, "gpu-1", "ReleasedForGPUReset", f"released NVML for GPU reset request {other}")
        assert h.decided(h.step())[0].decision == "deferred"

    release_for_reset(cluster, "gpu-1")
    (start,) = h.decided(h.step())
    assert (start.action, start.decision, start.gpu) == ("reset_gpu", "execute", GPU)
    assert [j for j in cluster.jobs if "reset" in j[1]] and "GPUClientsStopped" in cluster.reasons("gpu-1")
    assert h.state("gpu-1").reset.phase == "resetting"
    assert cluster.annotations("gpu-1")[RESET_REQUEST_ANNOTATION] == state.reset_request  # released while it runs

    _finish(cluster, "succeeded")
    decided = h.decided(h.step())
    assert ("restore_gpu_clients", "execute") in [(d.action, d.decision) for d in decided]
    assert deploy_labels(cluster, "gpu-1") == {**{label(op): "true" for op in OPERAND_PODS}, label("driver"): "true"}
    assert RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")
    after = h.state("gpu-1")
    assert (after.rung, after.rung_status, after.reset.phase, after.reset.paused) == ("reset_gpu", "done", None, ())
    assert {"GPUResetSucceeded", "GPUClientsRestored"} <= set(cluster.reasons("gpu-1"))


def test_a_failed_reset_restores_the_operands_in_the_same_write_as_the_climb(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    release_for_reset(cluster, "gpu-1")
    h.step()
    _finish(cluster, "failed")
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert ("reboot", "execute") in decided and ("restore_gpu_clients", "execute") in decided
    assert all(v == "true" for v in deploy_labels(cluster, "gpu-1").values())
    assert RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")
    assert "GPUResetFailed" in cluster.reasons("gpu-1")


def test_clients_that_never_stop_time_the_rung_out_and_everything_paused_comes_back(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    h.advance(minutes=9)
    assert h.decided(h.step())[0].decision == "deferred"
    h.advance(minutes=2)  # past reset_gpu's 10m timeout, still held open
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert ("restore_gpu_clients", "execute") in decided and ("reboot", "execute") in decided
    assert not [j for j in cluster.jobs if "reset" in j[1]]  # never started on a GPU held open
    assert all(v == "true" for v in deploy_labels(cluster, "gpu-1").values())
    assert "GPUResetTimedOut" in cluster.reasons("gpu-1")


def test_only_labels_that_were_true_are_paused_and_one_a_person_changed_meanwhile_stays_theirs(
        cluster: FakeCluster) -> None:
    operator_node(cluster, **{label("dcgm"): "false"})  # DCGM is not deployed on this node
    h = Harness(cluster, POLICY)
    state = _to_stopping(h)
    assert label("dcgm") not in state.reset.paused and deploy_labels(cluster, "gpu-1")[label("dcgm")] == "false"
    cluster.update_node("gpu-1", lambda n: n["metadata"]["labels"].update({label("gpu-feature-discovery"): "false"}))
    release_for_reset(cluster, "gpu-1")
    h.step()
    _finish(cluster, "succeeded")
    h.step()
    assert deploy_labels(cluster, "gpu-1") == {label("device-plugin"): "true", label("dcgm-exporter"): "true",
                                label("dcgm"): "false", label("gpu-feature-discovery"): "false",
                                label("driver"): "true"}


def test_alerts_resolving_while_the_clients_stop_cancel_the_reset_and_restore_them(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    h.resolve("gpu-1", "reset_gpu", gpu=GPU)
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert ("restore_gpu_clients", "execute") in decided and ("uncordon", "deferred") in decided
    assert all(v == "true" for v in deploy_labels(cluster, "gpu-1").values()) and not cluster.jobs
    assert "GPUResetNotNeeded" in cluster.reasons("gpu-1")  # not needed, never failed (test_remediator_reset_flap)
    h.advance(minutes=11)
    assert ("uncordon", "execute") in [(d.action, d.decision) for d in h.decided(h.step())]


def test_a_node_without_the_gpu_operator_or_the_exporter_resets_at_once(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-1")
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "reset_gpu", gpu=GPU)
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert decided == [("cordon", "execute"), ("drain", "execute"), ("reset_gpu", "execute")]
    assert h.state("gpu-1").reset.phase is None and RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")


def test_a_person_taking_the_node_over_mid_reset_gets_the_operands_back(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    cluster.update_node("gpu-1", lambda n: n["spec"].update(taints=[]))  # a person removed gpuhealth's taint
    h.resolve("gpu-1", "reset_gpu", gpu=GPU)
    h.step()
    assert all(v == "true" for v in deploy_labels(cluster, "gpu-1").values())
    assert RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")


def test_the_dry_run_reports_the_pause_and_changes_no_label(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY, dry_run=True)
    h.fire("gpu-1", "reset_gpu", gpu=GPU)
    decided = h.decided(h.step())
    stop = next(d for d in decided if d.action == "stop_gpu_clients")
    assert "pausing nvidia.com/gpu.deploy.device-plugin" in stop.reason
    assert all(v == "true" for v in deploy_labels(cluster, "gpu-1").values())
    assert RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")


@pytest.mark.parametrize(("product", "scope", "resets"), [
    ("NVIDIA-A100-SXM4-80GB", "auto", "all"),  # HGX A100: one GPU alone only while Fabric Manager runs
    ("Tesla-V100-SXM2-32GB", "auto", "all"),  # pre-Ampere NVLink peers reset together
    ("NVIDIA-H100-80GB-HBM3", "auto", GPU),  # Hopper: each GPU alone
    ("NVIDIA-A100-SXM4-80GB", "gpu", GPU),  # the policy knows better (Fabric Manager runs there)
    ("NVIDIA-H100-80GB-HBM3", "node", "all"),
])
def test_which_gpus_one_reset_takes_follows_the_product_and_the_policy(cluster: FakeCluster, product: str, scope: str,
                                                                      resets: str) -> None:
    cluster.add_node("gpu-1", labels={"nvidia.com/gpu.product": product})
    h = Harness(cluster, POLICY + f"reset: {{scope: {scope}}}\n")
    h.fire("gpu-1", "reset_gpu", gpu=GPU)
    reset = next(d for d in h.decided(h.step()) if d.action == "reset_gpu")
    assert reset.gpu == resets and h.state("gpu-1").gpu == resets
    (job,) = cluster.jobs.values()
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-1] == ("" if resets == "all" else GPU)  # the script's argument: the GPU, or every GPU


def test_a_gpu_scoped_fault_on_a_node_whose_gpus_reset_together_takes_the_node(cluster: FakeCluster) -> None:
    cluster.add_node("gpu-1", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    devices = cluster.dra.publish_gpus("gpu-1")
    h = Harness(cluster, POLICY)
    bus = devices[2]["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    h.fire("gpu-1", "reset_gpu", gpu=f"0000{bus}".upper())
    first = h.decided(h.step())[0]
    assert first.action == "cordon" and "takes every GPU of it (reset.scope auto)" in first.reason
    assert not cluster.dra.rules


@pytest.mark.parametrize(("text", "key", "why"), [
    ("reset: {pause_value: 'true'}", "reset.pause_value", "other than \"true\""),
    ("reset: {scope: rack}", "reset.scope", "expected one of auto, gpu, node"),
    ("reset:\n  operands:\n    - {name: device-plugin, pod: {app: x}}", "reset.operands[0].pod", "unknown key"),
    ("reset:\n  operands:\n    - {name: 'device plugin'}", "reset.operands[0].name", "does not make a label key"),
    ("reset: {node_products: ['A100(']}", "reset.node_products", "not a regular expression"),
])
def test_a_bad_reset_section_is_refused_with_its_key_and_line(text: str, key: str, why: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.yaml")
    assert err.value.key == key and why in str(err.value) and err.value.line is not None


def test_a_state_mid_reset_is_version_3_and_an_unknown_phase_fails_closed() -> None:
    state = NodeState(rung="reset_gpu", rung_status="running", reset=Reset("stopping", (label("dcgm"),)))
    assert json.loads(state.to_json())["v"] == 3
    assert NodeState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="reset_phase"):
        NodeState.from_json('{"v":3,"reset_phase":"halfway"}')
