"""A reset or reboot Job that never ran its container is gpuhealth's own breakage (an image that cannot be pulled, a
RuntimeClass the cluster lacks, a pod the kubelet refuses), not evidence about the GPU: reported as that (Event
NodeActionJobNotStarted, the actions metric's not_started, the audit line) and never climbed on. The fake API server
plays the Job controller and the kubelet: the Job's pod with the container status the kubelet reports."""

from __future__ import annotations

import json
import logging

import pytest

from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import Harness

NS = "gpuhealth"
NOT_STARTED = "NodeActionJobNotStarted"  # the Event's reason, as kubectl shows it


@pytest.fixture
def h(cluster: FakeCluster) -> Harness:
    return Harness(cluster, "evidence: {enabled: false}\n")


def _jobs(cluster: FakeCluster, kind: str) -> list[str]:
    return [name for (_, name) in cluster.jobs if f"gpuhealth-{kind}-" in name]


def _message(cluster: FakeCluster, node: str, reason: str) -> str:
    return next(e["message"] for e in cluster.events_for(node) if e["reason"] == reason)


def _reset_started(h: Harness, cluster: FakeCluster, node: str) -> str:
    h.fire(node, "reset_gpu", gpu="1")
    assert h.decisions(h.step())[-1] == (node, "reset_gpu", "execute")
    (job,) = _jobs(cluster, "reset")
    return job


def test_a_reset_job_whose_image_cannot_be_pulled_did_not_start_and_the_ladder_does_not_reboot(
        h: Harness, cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuhealth.remediator")
    cluster.nodeclaims["nc-4"] = {"metadata": {"name": "nc-4"}, "status": {"nodeName": "gpu-4"}}
    job = _reset_started(h, cluster, "gpu-4")
    pulling = 'Back-off pulling image "registry.example/cuda:12.4.1-base-ubuntu22.04": not found'
    cluster.job_pod(NS, job, waiting="ImagePullBackOff", message=pulling)
    h.advance(minutes=2)  # the kubelet retries pulls: not yet a verdict
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert h.state("gpu-4").rung_status == "running"
    assert NOT_STARTED not in cluster.reasons("gpu-4")

    h.advance(minutes=3)  # jobs.start_timeout (5m) after the Job was made
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    state = h.state("gpu-4")
    assert state.rung == "reset_gpu" and state.rung_status == "failed"
    assert state.not_started is not None and state.not_started.startswith("ImagePullBackOff: Back-off pulling")
    message = _message(cluster, "gpu-4", NOT_STARTED)
    assert message.startswith(f"the node-action Job did not start: job {NS}/{job}: ImagePullBackOff")
    assert "GPUResetFailed" not in cluster.reasons("gpu-4") and "GPUResetTimedOut" not in cluster.reasons("gpu-4")
    assert h.metric("gpuhealth_remediator_actions_total", action="reset_gpu", result="not_started") == 1
    audit = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert any(a.get("reason") == NOT_STARTED and a["message"] == message for a in audit)

    for _ in range(4):  # the fault keeps firing past reset_gpu's escalate_after (30m) and reboot's timeout
        h.advance(minutes=15)
        h.fire("gpu-4", "reset_gpu", gpu="1")
        decisions = h.decided(h.step())
        assert [(d.action, d.decision) for d in decisions] == [("none", "skipped")]
        assert "did not start" in decisions[0].reason and "needs a person" in decisions[0].reason
    assert _jobs(cluster, "reboot") == [] and "nc-4" in cluster.nodeclaims
    assert h.metric("gpuhealth_remediator_actions_total", action="reset_gpu", result="not_started") == 1  # once


def test_a_reset_job_stuck_creating_its_container_is_the_nodes_fault_and_climbs_at_the_timeout(
        h: Harness, cluster: FakeCluster) -> None:
    """ContainerCreating, CreateContainerError, RunContainerError: a GPU that fell off the bus fails the NVIDIA
    runtime's hook that way too. Not gpuhealth's breakage: the rung times out and the ladder climbs, as before."""
    job = _reset_started(h, cluster, "gpu-4")
    cluster.job_pod(NS, job, waiting="RunContainerError", message="nvidia-container-cli: initialization error")
    h.advance(minutes=10)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert "GPUResetTimedOut" in cluster.reasons("gpu-4")
    assert NOT_STARTED not in cluster.reasons("gpu-4")
    for _ in range(3):  # the reboot drains the node first: the reset's own stuck pod included
        h.fire("gpu-4", "reset_gpu", gpu="1")
        if ("gpu-4", "reboot", "execute") in h.decisions(h.step()):
            break
        h.advance(seconds=31)
    assert len(_jobs(cluster, "reboot")) == 1


def test_a_pod_the_kubelet_refused_did_not_start_at_once(h: Harness, cluster: FakeCluster) -> None:
    """A nodeName pod skips the scheduler: one that does not fit is refused by the kubelet (OutOfcpu) and its Job
    fails (backoffLimit 0). That is the Job's resources or priority class, not a GPU that did not reset."""
    job = _reset_started(h, cluster, "gpu-4")
    cluster.job_pod(NS, job, refused="OutOfcpu", message="Node didn't have enough resource: cpu, requested: 100")
    h.advance(seconds=30)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert "GPUResetFailed" not in cluster.reasons("gpu-4") and NOT_STARTED in cluster.reasons("gpu-4")
    assert h.state("gpu-4").not_started == ("the kubelet refused its pod (OutOfcpu: Node didn't have enough resource: "
                                            "cpu, requested: 100; jobs.resources, jobs.priority_class_name)")
    h.advance(minutes=31)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert _jobs(cluster, "reboot") == []


def test_a_reset_job_that_ran_and_failed_is_still_the_gpus_failure(h: Harness, cluster: FakeCluster) -> None:
    job = _reset_started(h, cluster, "gpu-4")
    cluster.job_pod(NS, job, exit_code=3)  # reset_gpu.sh: nvidia-smi --gpu-reset failed
    h.advance(seconds=30)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    assert ("gpu-4", "reboot", "execute") in h.decisions(h.step())
    assert "GPUResetFailed" in cluster.reasons("gpu-4")
    assert NOT_STARTED not in cluster.reasons("gpu-4")


def test_a_reboot_job_that_makes_no_pod_did_not_start_and_the_node_is_not_replaced(
        h: Harness, cluster: FakeCluster) -> None:
    """No pod at all: the RuntimeClass (jobs.runtime_class_name) does not exist, or the namespace's Pod Security
    level refuses a privileged pod. The Job controller's FailedCreate says which; the node stays for a person."""
    cluster.nodeclaims["nc-6"] = {"metadata": {"name": "nc-6"}, "status": {"nodeName": "gpu-6"}}
    h.fire("gpu-6", "reboot", gpu=None)
    assert h.decisions(h.step())[-1] == ("gpu-6", "reboot", "execute")
    (job,) = _jobs(cluster, "reboot")
    cluster.job_makes_no_pod(NS, job)
    h.advance(minutes=5)
    h.fire("gpu-6", "reboot", gpu=None)
    h.step()
    state = h.state("gpu-6")
    assert state.rung == "reboot" and state.rung_status == "failed"
    assert state.not_started is not None and state.not_started.startswith("the Job made no pod")
    assert f"kubectl -n {NS} describe job {job}" in state.not_started
    assert h.metric("gpuhealth_remediator_actions_total", action="reboot", result="not_started") == 1
    h.advance(minutes=45)
    h.fire("gpu-6", "reboot", gpu=None)
    h.step()
    assert "nc-6" in cluster.nodeclaims and "Replace" not in cluster.reasons("gpu-6")
    assert "RebootTimedOut" not in cluster.reasons("gpu-6")


def test_a_job_the_api_server_refuses_did_not_start_and_the_ladder_does_not_climb(cluster: FakeCluster) -> None:
    """The Jobs' admission policy admits the chart's jobs.image only: a remediator whose policy names another (a chart
    and a policy of different releases, an override the chart does not know) gets 403 for its reset Job. That is
    gpuhealth's breakage, not a GPU that did not reset."""
    chart_rbac.enforce(cluster)  # the chart as installed: it admits nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
    h = Harness(cluster, "evidence: {enabled: false}\njobs: {image: registry.example.com/cuda:12.4.1-base-ubuntu22.04}")
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert cluster.jobs == {}
    state = h.state("gpu-4")
    assert state.rung == "reset_gpu" and state.rung_status == "failed"
    assert state.not_started is not None and "ValidatingAdmissionPolicy" in state.not_started
    assert NOT_STARTED in cluster.reasons("gpu-4") and "GPUResetFailed" not in cluster.reasons("gpu-4")
    assert h.metric("gpuhealth_remediator_actions_total", action="reset_gpu", result="not_started") == 1
    h.advance(minutes=45)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    assert h.decisions(h.step()) == [("gpu-4", "none", "skipped")]
    assert cluster.jobs == {}


def test_a_job_create_answered_401_is_a_failed_try_retried_next_pass_not_a_refusal(
        h: Harness, cluster: FakeCluster) -> None:
    """401 is the API server not knowing who asks (a token rotated under the remediator, an API server restarting),
    not a refusal of the Job: the try failed as any API trouble does and the next pass creates the Job. Taking it for
    a refusal would mark the rung not started for good, with a person needed for a token that works a second later."""
    cluster.fail("POST", f"^/apis/batch/v1/namespaces/{NS}/jobs$", 401, reason="Unauthorized")
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert cluster.jobs == {}
    state = h.state("gpu-4")
    assert state.rung == "reset_gpu" and state.rung_status != "failed" and state.not_started is None
    assert NOT_STARTED not in cluster.reasons("gpu-4")
    assert h.metric("gpuhealth_remediator_actions_total", action="reset_gpu", result="failed") == 1
    assert h.metric("gpuhealth_remediator_actions_total", action="reset_gpu", result="not_started") == 0
    h.advance(minutes=1)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert len(_jobs(cluster, "reset")) == 1  # the token works again: the Job is made
    assert h.state("gpu-4").not_started is None and NOT_STARTED not in cluster.reasons("gpu-4")


def test_a_reset_job_the_api_server_never_creates_did_not_start_and_the_ladder_does_not_climb(
        h: Harness, cluster: FakeCluster) -> None:
    """Every create of the Job fails for the rung's whole timeout (a mutating webhook of the cluster's that is down: 500
    "failed calling webhook"; the Jobs' namespace gone: 404): no Job, no container, no GPU touched. At the rung's
    timeout that is gpuhealth's breakage, reported as that, not a GPU that did not reset: no reboot, no replace."""
    cluster.nodeclaims["nc-4"] = {"metadata": {"name": "nc-4"}, "status": {"nodeName": "gpu-4"}}
    cluster.fail("POST", f"^/apis/batch/v1/namespaces/{NS}/jobs$", 500, times=10_000,
                 reason='Internal error occurred: failed calling webhook "jobs.policy.example.com"')
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert h.state("gpu-4").rung == "reset_gpu" and cluster.jobs == {}
    for _ in range(4):  # past reset_gpu's timeout (10m), its escalate_after (30m) and reboot's timeout (30m)
        h.advance(minutes=15)
        h.fire("gpu-4", "reset_gpu", gpu="1")
        h.step()
    state = h.state("gpu-4")
    assert state.rung == "reset_gpu" and state.rung_status == "failed"
    assert state.not_started is not None and "never created" in state.not_started
    assert NOT_STARTED in cluster.reasons("gpu-4") and "GPUResetTimedOut" not in cluster.reasons("gpu-4")
    assert h.metric("gpuhealth_remediator_actions_total", action="reset_gpu", result="not_started") == 1
    assert cluster.jobs == {} and "nc-4" in cluster.nodeclaims
