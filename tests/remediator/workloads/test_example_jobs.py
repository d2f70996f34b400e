"""examples/jobs: the example training Job validates against Kubernetes' schemas (kubernetes-validate, strict,
as tests/chart/test_helm.py does for the chart), and its podFailurePolicy agrees with the remediator's classifier:
what the platform took away is not counted, the configured app exit codes fail the Job, the rest counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuhealth.remediator.policy import Policy
from gpuhealth.remediator.workloads.classify import APP, INFRA, classify
from tests.remediator.workloads.test_workload_classification import FIXTURES, failed_pod
from tests.support import paths

ROOT = paths.REPO
EXAMPLES = sorted((ROOT / "examples" / "jobs").glob("*.yaml"))
KUBE_VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0"]


def _job(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_job_validates_strictly(path: Path, version: str) -> None:
    kubernetes_validate.validate(_job(path), version, strict=True)


def test_there_is_an_example_job() -> None:
    assert [p.name for p in EXAMPLES] == ["training-job.yaml"]


def _judge(job: dict[str, Any], pod: dict[str, Any]) -> str:
    """The Job controller's podFailurePolicy as documented (batch/v1): the first rule that matches the failed pod
    decides; onPodConditions matches a condition of that type and status; onExitCodes matches a container (the
    named one) that terminated with a non-zero code In / NotIn the values. No rule: Count."""
    status = pod["status"]
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        for want in rule.get("onPodConditions") or []:
            if any(c["type"] == want["type"] and c["status"] == want.get("status", "True")
                   for c in status.get("conditions") or []):
                return str(rule["action"])
        codes = rule.get("onExitCodes")
        if codes:
            for cs in status.get("containerStatuses") or []:
                code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode", 0)
                if codes.get("containerName") not in (None, cs["name"]) or code == 0:
                    continue
                if (code in codes["values"]) == (codes["operator"] == "In"):
                    return str(rule["action"])
    return "Count"


def _as_trainer(pod: dict[str, Any]) -> dict[str, Any]:
    for cs in pod["status"].get("containerStatuses") or []:
        cs["name"] = "trainer"
    return pod


def test_the_pod_failure_policy_keeps_restart_policy_never_and_names_a_real_container() -> None:
    job = _job(ROOT / "examples" / "jobs" / "training-job.yaml")
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"  # the API server rejects a podFailurePolicy otherwise
    names = {c["name"] for c in spec["containers"]}
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        assert rule["action"] in ("Ignore", "FailJob", "Count", "FailIndex")
        if rule.get("onExitCodes"):
            assert rule["onExitCodes"]["containerName"] in names
            assert rule["onExitCodes"]["operator"] != "In" or 0 not in rule["onExitCodes"]["values"]
    assert job["spec"].get("podReplacementPolicy") == "Failed"  # the only value allowed with a podFailurePolicy
    assert any("nvidia.com/gpu" in (c.get("resources") or {}).get("limits", {}) for c in spec["containers"])


def test_its_app_exit_codes_are_the_remediators() -> None:
    job = _job(ROOT / "examples" / "jobs" / "training-job.yaml")
    fail = [r for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    assert [tuple(r["onExitCodes"]["values"]) for r in fail] == [Policy().workloads.app_exit_codes]


def test_a_pod_gpuhealths_drain_evicted_is_retried_without_counting() -> None:
    job = _job(ROOT / "examples" / "jobs" / "training-job.yaml")
    pod = _as_trainer(json.loads((FIXTURES / "pod_evicted_by_drain.json").read_text()))
    assert classify(pod, []).cls == INFRA
    assert _judge(job, pod) == "Ignore"


@pytest.mark.parametrize("code", Policy().workloads.app_exit_codes)
def test_an_app_exit_code_fails_the_job_as_the_classifier_calls_it_app(code: int) -> None:
    job = _job(ROOT / "examples" / "jobs" / "training-job.yaml")
    pod = _as_trainer(failed_pod(exit_code=code))
    assert classify(pod, []).cls == APP
    assert _judge(job, pod) == "FailJob"


def test_a_gpu_fault_that_ends_the_process_at_once_counts_it_is_not_visible_to_the_job_controller() -> None:
    """The documented gap: the pod fails with exit 1 before any remediator verdict; the classifier calls it
    infra (a fatal Xid alert), the Job controller counts it."""
    from datetime import timedelta

    from tests.remediator.workloads.test_workload_classification import FAILED_AT, alert

    job = _job(ROOT / "examples" / "jobs" / "training-job.yaml")
    pod = _as_trainer(failed_pod(exit_code=1))
    assert classify(pod, [alert("GPUFallenOffBus", "reboot", FAILED_AT - timedelta(seconds=10))]).cls == INFRA
    assert _judge(job, pod) == "Count"
