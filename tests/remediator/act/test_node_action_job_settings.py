"""The reset and reboot Jobs fit the cluster: jobs.runtime_class_name, .priority_class_name, .image_pull_secrets and
.resources reach both Job templates, each checked when the policy is loaded (file, key, line, why), and the chart
passes its remediator.jobs values into the policy it renders."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gpuhealth.remediator.act.node_jobs import render_job
from gpuhealth.remediator.policy import PolicyError, load_policy, parse_policy
from tests.support.chart_render import render

JOBS = """
jobs:
  runtime_class_name: nvidia
  priority_class_name: system-node-critical
  image_pull_secrets: [mirror-pull, other-pull]
  resources:
    requests: {cpu: 10m, memory: 64Mi}
    limits: {memory: 1Gi, cpu: 0.5}
  start_timeout: 2m
"""


@pytest.mark.parametrize(("rung", "gpu"), [("reset_gpu", "3"), ("reboot", None)])
def test_the_jobs_settings_reach_both_job_templates(rung: str, gpu: str | None) -> None:
    spec = render_job(rung, "j", "gpu-0", parse_policy(JOBS), gpu)["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["imagePullSecrets"] == [{"name": "mirror-pull"}, {"name": "other-pull"}]
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"},
                                                  "limits": {"memory": "1Gi", "cpu": "0.5"}}
    assert parse_policy(JOBS).jobs.start_timeout == timedelta(minutes=2)


@pytest.mark.parametrize("rung", ["reset_gpu", "reboot"])
def test_without_the_settings_the_jobs_say_nothing_of_them(rung: str) -> None:
    spec = render_job(rung, "j", "gpu-0", parse_policy(""), "1")["spec"]["template"]["spec"]
    assert not {"runtimeClassName", "priorityClassName", "imagePullSecrets"} & set(spec)
    assert "resources" not in spec["containers"][0]


@pytest.mark.parametrize(("text", "key", "line", "why"), [
    ("jobs:\n  runtime_class_name: Nvidia_GPU\n", "jobs.runtime_class_name", 2, "is not a Kubernetes object name"),
    ("jobs:\n  priority_class_name: ''\n", "jobs.priority_class_name", 2, "expected a non-empty string"),
    ("jobs:\n  image_pull_secrets: regcred\n", "jobs.image_pull_secrets", 2, "expected a list of Secret names"),
    ("jobs:\n  image_pull_secrets: [{name: regcred}]\n", "jobs.image_pull_secrets", 2, "expected a non-empty string"),
    ("jobs:\n  resources: {requests: {cpu: lots}}\n", "jobs.resources.requests.cpu", 2, "expected a quantity"),
    ("jobs:\n  resources:\n    requests:\n      cpu: 1 core\n", "jobs.resources.requests.cpu", 4,
     "expected a quantity like 100m"),
    ("jobs:\n  resources:\n    request: {cpu: 1}\n", "jobs.resources.request", 3, "unknown key"),
    ("jobs:\n  resources: {limits: [memory]}\n", "jobs.resources.limits", 2, "expected a mapping"),
    ("jobs:\n  start_timeout: 0s\n", "jobs.start_timeout", 2, "above 0"),
    ("jobs:\n  start_timeout: soon\n", "jobs.start_timeout", 2, "expected a duration"),
    ("jobs:\n  runtime_class: nvidia\n", "jobs.runtime_class", 2, "unknown key"),
])
def test_a_wrong_jobs_setting_is_refused_with_file_key_line_and_why(tmp_path: Path, text: str, key: str,
                                                                     line: int | None, why: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert (err.value.key, err.value.line) == (key, line)
    assert str(err.value).startswith(f"{path}: {key}") and why in err.value.reason


def _rendered_policy(values: dict[str, object] | None = None) -> str:
    config = next(d for d in render(values) if d["kind"] == "ConfigMap" and d["metadata"]["name"] ==
                  "gpuhealth-remediator")
    text: str = config["data"]["policy.yaml"]
    return text


def test_the_chart_runs_the_jobs_with_the_nvidia_runtime_class_and_a_critical_priority_by_default() -> None:
    jobs = parse_policy(_rendered_policy()).jobs
    assert jobs.runtime_class_name == "nvidia" and jobs.priority_class_name == "system-node-critical"
    assert jobs.resources == {"requests": {"cpu": "10m", "memory": "64Mi"}}
    assert jobs.image == "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def test_the_charts_jobs_values_pass_through_and_the_policy_overrides_win() -> None:
    values = {"remediator": {"jobs": {"runtimeClassName": "", "priorityClassName": "gpu-ops",
                                      "imagePullSecrets": [{"name": "regcred"}],
                                      "resources": {"limits": {"memory": "512Mi"}}},
                             "policy": {"jobs": {"priority_class_name": "system-cluster-critical"}}}}
    jobs = parse_policy(_rendered_policy(values)).jobs
    assert jobs.runtime_class_name is None  # "": the node's default runtime
    assert jobs.priority_class_name == "system-cluster-critical"
    assert jobs.image_pull_secrets == ("regcred",)
    assert jobs.resources == {"limits": {"memory": "512Mi"}, "requests": {"cpu": "10m", "memory": "64Mi"}}
