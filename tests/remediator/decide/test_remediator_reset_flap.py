"""An alert that flaps while the reset sequence stops the GPU's clients (docs/remediation.md, "The reset sequence"):
its resolution ends the reset rung as no longer needed (what it paused restored, the ladder back at the drain it had
reached), never as a failure that climbs; a re-fire starts the reset afresh under the usual rules. Played with the real
remediator against the fake API server, the GPU Operator's DaemonSet controller and gpuhealth's exporter at the API
boundary (tests/fakes/gpu_operator.py), at node scope and at GPU scope (tests/remediator/dra_gpus.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuhealth.remediator.decide.nodestate import RESET_REQUEST_ANNOTATION, TAINT_KEY
from gpuhealth.remediator.decide.vocabulary import Scope
from tests.fakes.apiserver import FakeCluster
from tests.fakes.gpu_operator import OPERAND_PODS, PAUSED, deploy_labels, label, operator_node, start_operand_pods
from tests.remediator.dra_gpus import alert_gpu, dra_node
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
return_to_service: {healthy_delay: 10m}
ladder:
  reset_gpu: {timeout: 10m}
"""
GPU = "00000000:86:00.0"
NOT_NEEDED = ("gpuhealth_remediator_actions_total", {"action": "reset_gpu", "result": "not_needed"})


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


def _jobs(c: FakeCluster, kind: str) -> list[tuple[str, str]]:
    return [j for j in c.jobs if kind in j[1]]


def _all_true(c: FakeCluster) -> bool:
    return all(v == "true" for v in deploy_labels(c, "gpu-1").values())


def _stopping(h: Harness, gpu: str) -> None:
    """The alert fires and the reset sequence stops the GPU's clients (the operands paused, the exporter asked)."""
    h.fire("gpu-1", "reset_gpu", gpu=gpu)
    for _ in range(3):  # GPU scope: the GPU's pod is evicted by the device taint first
        h.step()
        if h.state("gpu-1").reset.phase == "stopping":
            break
        h.advance(seconds=60)
    state = h.state("gpu-1")
    assert (state.rung, state.rung_status, state.reset.phase) == ("reset_gpu", "running", "stopping"), state
    assert set(deploy_labels(h.cluster, "gpu-1").values()) == {PAUSED, "true"}  # the driver's label stays "true"


def _assert_not_needed(h: Harness, cluster: FakeCluster, scope: str) -> None:
    state = h.state("gpu-1")
    # the recorded outcome: the ladder is back at the drain it had reached, the reset neither failed nor done
    assert (state.scope, state.rung, state.rung_status) == (scope, "drain", "done"), state
    assert (state.reset.phase, state.reset.paused, state.gpu_scope.node_floor) == (None, (), None), state
    assert _all_true(cluster) and RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")
    assert "GPUResetNotNeeded" in cluster.reasons("gpu-1") and "GPUResetFailed" not in cluster.reasons("gpu-1")
    assert h.metric(NOT_NEEDED[0], **NOT_NEEDED[1]) == 1
    assert not _jobs(cluster, "reset") and not _jobs(cluster, "reboot")


def test_a_node_scope_reset_whose_alert_flaps_mid_stop_is_not_needed_and_never_reboots(cluster: FakeCluster) -> None:
    operator_node(cluster)
    cluster.add_pod("gpu-1", "train", namespace="ml", gpus=1)
    h = Harness(cluster, POLICY)
    _stopping(h, GPU)
    assert h.metric(NOT_NEEDED[0], **NOT_NEEDED[1]) == 0  # counted from 0: increase() sees the first one
    evicted = list(cluster.evictions())

    h.resolve("gpu-1", "reset_gpu", gpu=GPU)
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert ("restore_gpu_clients", "execute") in decided and ("uncordon", "deferred") in decided
    _assert_not_needed(h, cluster, Scope.NODE)

    h.advance(minutes=2)
    h.fire("gpu-1", "reset_gpu", gpu=GPU, starts=h.now)  # it fires again: a fresh reset, not a climb
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert decided == [("stop_gpu_clients", "execute")], decided
    state = h.state("gpu-1")
    assert (state.rung, state.rung_status, state.reset.phase, state.scope) == ("reset_gpu", "running", "stopping",
                                                                               "node")
    assert not _jobs(cluster, "reboot") and cluster.evictions() == evicted  # no reboot, nothing more evicted

    h.resolve("gpu-1", "reset_gpu", gpu=GPU, starts=h.now)  # and resolves for good: returned after the delay
    h.step()
    h.advance(minutes=11)
    assert ("uncordon", "execute") in [(d.action, d.decision) for d in h.decided(h.step())]
    assert not any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1")) and _all_true(cluster)
    assert not _jobs(cluster, "reboot") and h.metric(NOT_NEEDED[0], **NOT_NEEDED[1]) == 2


def test_a_gpu_scope_reset_whose_alert_flaps_mid_stop_keeps_the_other_gpus_pods(cluster: FakeCluster) -> None:
    devices = dra_node(cluster, labels={**{label(op): "true" for op in OPERAND_PODS}, label("driver"): "true"})
    start_operand_pods(cluster, "gpu-1")
    gpu = alert_gpu(devices[1])
    h = Harness(cluster, POLICY)
    _stopping(h, gpu)
    assert cluster.evictions() == ["default/train-gpu-1-gpu-1"]  # the faulty GPU's pod only

    h.resolve("gpu-1", "reset_gpu", gpu=gpu)
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert ("restore_gpu_clients", "execute") in decided and ("release_gpu", "deferred") in decided
    _assert_not_needed(h, cluster, Scope.GPU)

    h.advance(minutes=2)
    h.fire("gpu-1", "reset_gpu", gpu=gpu, starts=h.now)  # it fires again: the GPU's reset afresh, at GPU scope
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert decided == [("stop_gpu_clients", "execute")], decided
    assert h.state("gpu-1").scope == "gpu" and "NodeScope" not in cluster.reasons("gpu-1")
    assert not any(t["key"] == TAINT_KEY for t in cluster.taints("gpu-1"))  # the node stays in service
    assert cluster.evictions() == ["default/train-gpu-1-gpu-1"]  # the other seven GPUs' pods keep running
    assert not _jobs(cluster, "reboot")



def test_a_flap_that_no_pass_saw_leaves_the_sequence_going(cluster: FakeCluster) -> None:
    """Resolved and fired again (a later startsAt) before the next pass: no pass saw the alerts stop asking for the
    reset, so its sequence goes on, with what it paused still paused, and nothing is counted as not needed."""
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _stopping(h, GPU)
    request = cluster.annotations("gpu-1")[RESET_REQUEST_ANNOTATION]
    h.resolve("gpu-1", "reset_gpu", gpu=GPU)
    h.advance(seconds=30)
    h.fire("gpu-1", "reset_gpu", gpu=GPU, starts=h.now)
    (waiting,) = h.decided(h.step())
    assert (waiting.action, waiting.decision) == ("reset_gpu", "deferred")
    state = h.state("gpu-1")
    assert (state.rung, state.rung_status, state.reset.phase) == ("reset_gpu", "running", "stopping")
    assert set(deploy_labels(cluster, "gpu-1").values()) == {PAUSED, "true"}
    assert cluster.annotations("gpu-1")[RESET_REQUEST_ANNOTATION] == request
    assert "GPUResetNotNeeded" not in cluster.reasons("gpu-1") and h.metric(NOT_NEEDED[0], **NOT_NEEDED[1]) == 0
