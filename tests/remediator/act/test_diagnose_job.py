"""The diagnostic Job: rendered from its template with the policy's settings (deadline, node pinning, tolerations,
images, the judge's arguments), created through the official client on the fake API server under the chart's RBAC,
and its verdict read back from its pod the way the remediator lists it (the API's list and the watch cache's slim
copy): a pass, a fail with its verdict, a Job failed with no verdict (tool_error: fails closed), one still running.

The chart's RBAC and its ValidatingAdmissionPolicy for node-action Jobs are on, rendered for this policy: the Job is
created as the remediator renders it, and admitted (tests/chart/test_node_action_jobs_policy.py refuses its
forgeries)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from gpuhealth.remediator.act.diagnose_job import attach_diagnosis, render_diagnose_job
from gpuhealth.remediator.act.node_jobs import job_records
from gpuhealth.remediator.clients.fleet_cache import slim_pod
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide.diagnosis import Diagnosis, Provisioned, diagnosis_job_name, provisioned
from gpuhealth.remediator.decide.job_start import MISSING
from gpuhealth.remediator.decide.views import node_view
from gpuhealth.remediator.decide.vocabulary import Purpose
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import T0

NS = "gpuhealth"
POLICY = parse_policy("""
jobs: {namespace: gpuhealth, runtime_class_name: nvidia, priority_class_name: system-node-critical,
       image_pull_secrets: [mirror-pull]}
diagnose: {judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}
""")
P5 = Provisioned(gpus=8, efa=32, instance_type="p5.48xlarge")


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node("gpu-0")
        docs = chart_rbac.enforce(c, chart_rbac.policy_values(POLICY))
        assert any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs)
        yield c


def _spec(purpose: Purpose = Purpose.DIAGNOSE, text: str = "") -> dict[str, Any]:
    policy = parse_policy(text) if text else POLICY
    job = render_diagnose_job("gpuhealth-diagnose-gpu-0-1a2b3c4d", "gpu-0", purpose, P5, policy)
    assert job["spec"]["backoffLimit"] == 0
    return job


def test_the_job_is_pinned_to_its_node_bounded_and_runs_both_images() -> None:
    job = _spec()
    assert job["metadata"]["labels"]["gpuhealth.io/node"] == "gpu-0"
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "diagnose"
    assert job["spec"]["activeDeadlineSeconds"] == 1200  # level 2: 20 minutes
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-0" and pod["restartPolicy"] == "Never"
    assert pod["tolerations"] == [{"operator": "Exists"}]  # it runs on the node gpuhealth tainted
    assert (pod["runtimeClassName"], pod["priorityClassName"]) == ("nvidia", "system-node-critical")
    assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}]
    (collect,), (judge,) = pod["initContainers"], pod["containers"]
    assert collect["image"] == "nvcr.io/nvidia/cloud-native/dcgm:4.4.2-1-ubuntu22.04"
    assert collect["command"][:2] == ["bash", "-c"] and collect["command"][4] == "2"  # the level
    assert int(collect["command"][5]) + int(collect["command"][6]) == 1200 - 60  # the tools' time, the judge's 60 s
    assert judge["image"] == "ghcr.io/gpuhealth/gpuhealth:0.2.0"
    assert judge["command"] == ["gpuhealth-diagnose", "--dir", "/diag", "--level", "2", "--sysfs-root", "/host",
                                "--instance-type", "p5.48xlarge", "--gpus-expected", "8", "--efa-expected", "32"]
    assert {v["name"]: v for v in pod["volumes"]}["host-sys"] == {"name": "host-sys", "hostPath": {"path": "/sys"}}
    assert all(m.get("readOnly") for m in judge["volumeMounts"])


def test_validation_runs_the_shorter_level_with_its_deadline_and_the_policy_floor_reaches_the_judge() -> None:
    job = _spec(Purpose.VALIDATE, 'diagnose: {judge_image: "img", nccl_floor_gbps: 350, timeout: 7m}')
    assert job["spec"]["activeDeadlineSeconds"] == 420
    (judge,) = job["spec"]["template"]["spec"]["containers"]
    assert judge["command"][judge["command"].index("--level") + 1] == "1"
    assert judge["command"][-2:] == ["--nccl-floor", "350"]


def test_without_a_judge_image_no_job_is_made() -> None:
    with pytest.raises(ValueError, match=r"diagnose\.judge_image"):
        render_diagnose_job("j", "gpu-0", Purpose.DIAGNOSE, P5, parse_policy(""))


def test_a_node_says_what_it_was_provisioned_with() -> None:
    node = {"metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.count": "8",
                                                     "node.kubernetes.io/instance-type": "p5.48xlarge"}},
            "status": {"capacity": {"nvidia.com/gpu": "7", "vpc.amazonaws.com/efa": "32"}}}
    assert provisioned(node) == Provisioned(8, 32, "p5.48xlarge")  # the larger GPU count: a lost GPU lowers one
    node["metadata"]["labels"]["gpuhealth.io/efa-expected"] = "16"  # the label wins over capacity
    assert provisioned(node).efa == 16
    assert provisioned({"metadata": {"name": "cpu"}}) == Provisioned(None, None, "")


def test_the_name_is_the_same_for_the_same_node_purpose_and_episode() -> None:
    a = diagnosis_job_name("gpu-0", Purpose.DIAGNOSE, T0)
    assert a == diagnosis_job_name("gpu-0", Purpose.DIAGNOSE, T0) and a.startswith("gpuhealth-diagnose-gpu-0-")
    assert a != diagnosis_job_name("gpu-0", Purpose.VALIDATE, T0) and len(
        diagnosis_job_name("n" * 80, Purpose.SWEEP, T0)) <= 63


def _started(cluster: FakeCluster) -> tuple[Kube, str]:
    kube = Kube(client.ApiClient(chart_rbac.configuration(cluster)), request_timeout=2.0)
    name = diagnosis_job_name("gpu-0", Purpose.DIAGNOSE, T0)
    assert kube.create_job(render_diagnose_job(name, "gpu-0", Purpose.DIAGNOSE, P5, POLICY))
    assert not kube.create_job(render_diagnose_job(name, "gpu-0", Purpose.DIAGNOSE, P5, POLICY))  # 409: the same
    return kube, name


def _judge_ended(cluster: FakeCluster, job: str, exit_code: int, message: str | None) -> None:
    pod = cluster.job_pod(NS, job, exit_code=exit_code)
    if message is not None:
        def verdict(p: dict[str, Any]) -> None:
            p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
        cluster.update_pod(NS, pod["metadata"]["name"], verdict)


def _read(cluster: FakeCluster, kube: Kube, job: str, slim: bool) -> tuple[Diagnosis | None, Any]:
    view = node_view(cluster.nodes["gpu-0"], POLICY)
    pods = kube.pods_on("gpu-0")
    record = job_records(kube, NS).get(job, MISSING)
    attach_diagnosis(view, job, record, [slim_pod(p) for p in pods] if slim else pods, POLICY)
    return view.diagnosis, view.diagnosis_start


@pytest.mark.parametrize("slim", [False, True])
def test_a_passing_verdict_is_read_back(cluster: FakeCluster, slim: bool) -> None:
    kube, job = _started(cluster)
    _judge_ended(cluster, job, 0, DiagnosticReport(skipped=("nccl_bandwidth: all_reduce_perf is not in the image",),
                                          level=2).to_json())
    diagnosis, start = _read(cluster, kube, job, slim)
    assert diagnosis is not None and diagnosis.passed and diagnosis.level == 2
    assert start is not None and not start.not_started(T0, POLICY.jobs.start_timeout, True)


@pytest.mark.parametrize("slim", [False, True])
def test_a_failing_verdict_names_its_categories_and_gpus(cluster: FakeCluster, slim: bool) -> None:
    kube, job = _started(cluster)
    verdict = DiagnosticReport((Failure(Check.GPU_DIAG, "dcgmi diag: memory failed on GPU 3: DBE", ("3",)),
                       Failure(Check.EFA_COUNT, "31 of 32 EFA devices in sysfs")), level=2)
    _judge_ended(cluster, job, 1, verdict.to_json())
    diagnosis, _ = _read(cluster, kube, job, slim)
    assert diagnosis == Diagnosis(False, ("gpu_diag", "efa_count"), ("3",),
                                  "dcgmi diag: memory failed on GPU 3: DBE; 31 of 32 EFA devices in sysfs", 2)


@pytest.mark.parametrize("slim", [False, True])
def test_a_job_that_failed_without_a_verdict_is_a_failed_diagnosis_of_tool_error(cluster: FakeCluster,
                                                                                   slim: bool) -> None:
    kube, job = _started(cluster)
    _judge_ended(cluster, job, 137, None)  # killed: OOM, or the deadline
    diagnosis, _ = _read(cluster, kube, job, slim)
    assert diagnosis is not None and not diagnosis.passed and diagnosis.categories == ("tool_error",)
    assert "without a verdict" in diagnosis.detail and "exit 137" in diagnosis.detail


def test_a_job_past_its_deadline_whose_pod_is_gone_fails_closed(cluster: FakeCluster) -> None:
    kube, job = _started(cluster)
    cluster.jobs[(NS, job)]["status"] = {"failed": 1, "conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}
    diagnosis, _ = _read(cluster, kube, job, False)
    assert diagnosis is not None and diagnosis.categories == ("tool_error",) and "no pod left" in diagnosis.detail


def test_a_verdict_that_contradicts_the_jobs_outcome_fails_closed(cluster: FakeCluster) -> None:
    kube, job = _started(cluster)
    _judge_ended(cluster, job, 1, DiagnosticReport(level=2).to_json())  # exit 1 with a pass
    diagnosis, _ = _read(cluster, kube, job, False)
    assert diagnosis is not None and diagnosis.categories == ("tool_error",)


def test_a_running_or_missing_job_has_no_diagnosis_yet(cluster: FakeCluster) -> None:
    kube, job = _started(cluster)
    cluster.job_pod(NS, job)  # ContainerCreating
    assert _read(cluster, kube, job, True)[0] is None
    diagnosis, start = _read(cluster, kube, diagnosis_job_name("gpu-0", Purpose.VALIDATE, T0), False)
    assert diagnosis is None and start is None


def test_a_collect_image_that_cannot_be_pulled_is_gpuhealths_breakage_not_a_diagnosis(cluster: FakeCluster) -> None:
    kube, job = _started(cluster)
    pod = cluster.job_pod(NS, job, waiting="PodInitializing")

    def pulling(p: dict[str, Any]) -> None:
        p["status"]["initContainerStatuses"] = [{"name": "collect", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off pulling image "nvcr.io/nvidia/cloud-native/dcgm:x"'}}}]
    cluster.update_pod(NS, pod["metadata"]["name"], pulling)
    diagnosis, start = _read(cluster, kube, job, True)
    assert diagnosis is None and start is not None
    assert start.not_started(T0, POLICY.jobs.start_timeout, True).startswith("ImagePullBackOff")
