"""The reset sequence at its edges, each found by a review: a reboot after a one-GPU drain, a person taking over,
alerts resolving as the clients let go, a second GPU, GPU scope handing over mid-stop, a policy changed mid-reset,
and the policy values a label cannot hold."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuhealth.remediator.decide.nodestate import RESET_REQUEST_ANNOTATION
from gpuhealth.remediator.policy import PolicyError, parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.fakes.gpu_operator import (
    OPERAND_PODS,
    OPERATOR_NS,
    daemonset_controller,
    deploy_labels,
    exporter_says,
    operator_node,
    release_for_reset,
)
from tests.remediator.decide.test_remediator_reset_sequence import GPU, POLICY, _finish, _to_stopping
from tests.support.remediator_harness import Harness, webhook


def _labels(c: FakeCluster) -> dict[str, str]:
    return deploy_labels(c, "gpu-1")


OTHER_GPU = "00000000:87:00.0"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


def _reset_jobs(c: FakeCluster) -> list[tuple[str, str]]:
    return [j for j in c.jobs if "reset" in j[1]]


def _reboot_jobs(c: FakeCluster) -> list[tuple[str, str]]:
    return [j for j in c.jobs if "reboot" in j[1]]


def _running(c: FakeCluster, node: str = "gpu-1") -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in c.pods_on(node)
            if not p["metadata"].get("deletionTimestamp") and (p["metadata"].get("ownerReferences") or [{}])[0].get(
                "kind") != "DaemonSet"}


# --- 1. drain_only (gpu_pods) survives the climb above reset_gpu: a reboot over undrained pods ----------------------
@pytest.mark.parametrize("outcome", ["failed", "persisted"])
def test_a_reboot_after_a_one_gpu_drain_waits_for_the_whole_node_to_drain(cluster: FakeCluster, outcome: str) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("gpu-1", "train-a", namespace="ml", gpus=1)  # on the faulty GPU
    cluster.add_pod("gpu-1", "train-b", namespace="ml", gpus=1)  # another GPU
    cluster.add_pod("gpu-1", "web", namespace="default")
    h = Harness(cluster, POLICY)
    body = webhook("gpu-1", "reset_gpu", gpu=GPU)
    body["alerts"][0]["annotations"]["gpu_pods"] = "ml/train-a"
    assert h.post(body).status_code == 202
    h.step()
    h.advance(seconds=60)
    h.step()  # the reset Job on the GPU (train-a gone)
    assert _reset_jobs(cluster)
    if outcome == "failed":
        _finish(cluster, "failed")
    else:
        _finish(cluster, "succeeded")
        h.step()
        h.advance(minutes=31)  # reset_gpu.escalate_after 30m: the fault survived the reset
        assert h.post(body).status_code == 202  # Alertmanager repeats it
    h.step()
    # a reboot kills every pod on the node: it must only start once the node is drained (docs, "Drained first")
    assert not _reboot_jobs(cluster) or not _running(cluster), \
        f"reboot Job created while {sorted(_running(cluster))} still run on the node"


# --- 2. a person removing gpuhealth's taint while the alert still fires -------------------------------------------
def test_a_person_removing_the_taint_mid_reset_gets_the_operands_back_while_it_fires(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    cluster.update_node("gpu-1", lambda n: n["spec"].update(taints=[]))  # a person takes the node over
    h.step()
    h.advance(hours=2)
    h.fire("gpu-1", "reset_gpu", gpu=GPU)  # still firing (Alertmanager repeats)
    h.step()
    assert all(v == "true" for v in _labels(cluster).values()), _labels(cluster)
    assert RESET_REQUEST_ANNOTATION not in cluster.annotations("gpu-1")


# --- 3. alerts resolve in the pass where the clients have just let go ---------------------------------------------
def test_alerts_resolving_just_as_the_clients_let_go_cancel_the_reset_and_restore(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    release_for_reset(cluster, "gpu-1")  # operands gone, exporter answered...
    h.resolve("gpu-1", "reset_gpu", gpu=GPU)  # ...and the alert resolved before the next pass
    decided = [(d.action, d.decision, d.reason) for d in h.decided(h.step())]
    assert not _reset_jobs(cluster)
    assert all(v == "true" for v in _labels(cluster).values()), (decided, _labels(cluster), h.state("gpu-1"))


# --- 4. ladder.reset_gpu.timeout: null would keep clients that never stop paused forever ---------------------------
def test_a_reset_rung_without_a_timeout_is_refused() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(POLICY.replace("reset_gpu: {timeout: 10m}", "reset_gpu: {timeout: null}"), "policy.yaml")
    assert err.value.key == "ladder.reset_gpu.timeout" and "brings them back" in str(err.value)


# --- 5. a second alert on another GPU while the first GPU's clients stop ------------------------------------------
def test_a_second_gpu_alerting_before_the_job_starts_resets_both(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    h.fire("gpu-1", "reset_gpu", gpu=OTHER_GPU, alertname="OtherGPUFault")
    release_for_reset(cluster, "gpu-1")
    h.step()
    (job,) = _reset_jobs(cluster)
    target = cluster.jobs[job]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert target == "", f"reset job targets only {target!r} though GPU {OTHER_GPU} is also faulty"


# --- 6. GPU scope handing over to node scope mid-stop, on a node with nothing to evict -----------------------------
def test_gpu_scope_handing_over_mid_stop_never_resets_with_the_operands_back(cluster: FakeCluster) -> None:
    operator_node(cluster)
    devices = cluster.dra.publish_gpus("gpu-1")  # no workload pods: nothing to evict
    pci = [f"0000{d['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper() for d in devices]
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "reset_gpu", gpu=pci[1])
    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert ("stop_gpu_clients", "execute") in decided, decided
    assert h.state("gpu-1").scope == "gpu"
    h.fire("gpu-1", "reset_gpu", gpu=pci[2], alertname="OtherGPUFault")  # the node ladder takes over
    h.step()
    daemonset_controller(cluster, "gpu-1")  # whatever the labels now say, the Operator's pods follow
    request = cluster.annotations("gpu-1").get(RESET_REQUEST_ANNOTATION)
    if request:
        _exporter_released(cluster, request)
    for _ in range(3):
        h.step()
        if _reset_jobs(cluster):
            break
    operands_running = [a for a in OPERAND_PODS.values() if (OPERATOR_NS, f"{a}-gpu-1") in cluster.pods]
    assert not (_reset_jobs(cluster) and operands_running), \
        f"reset Job started with {operands_running} running; labels {_labels(cluster)}, state {h.state('gpu-1')}"


def _exporter_released(c: FakeCluster, request: str) -> None:
    exporter_says(c, "gpu-1", "ReleasedForGPUReset", f"released NVML and paused DCGM for GPU reset request {request}")


# --- 7. reset.pause_value changed (policy rollout / new leader) while operands are paused --------------------------
def test_a_pause_value_changed_mid_reset_still_finds_the_labels_it_paused(cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    _to_stopping(h)
    release_for_reset(cluster, "gpu-1")
    h.step()  # the reset Job runs
    # a restart with the new policy
    h2 = Harness(cluster, POLICY + "reset: {pause_value: paused-by-gpuhealth}\n", identity="replica-a")
    h2.now = h.now
    _finish(cluster, "succeeded")
    h2.step()
    assert h2.state("gpu-1").reset.paused == ()
    assert all(v == "true" for v in _labels(cluster).values()), _labels(cluster)


# --- 8. policy parsing -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "key"), [
    ('reset: {pause_value: "paused\\n"}', "reset.pause_value"),  # `$` matches before a trailing newline
    ('reset:\n  operands:\n    - {name: "dcgm\\n"}', "reset.operands[0].name"),
    ("reset:\n  operands:\n    - {name: dcgm, pods: []}", "reset.operands[0].pods"),  # silently: not waited for
    ("reset:\n  operands:\n    - {name: dcgm, pods: ''}", "reset.operands[0].pods"),
])
def test_reset_values_a_label_cannot_hold_are_refused(text: str, key: str) -> None:
    try:
        policy = parse_policy(text, "policy.yaml")
    except PolicyError as err:
        assert err.key == key
        return
    pytest.fail(f"accepted: {policy.reset!r}")

