"""The chart's pre-delete hook (helm/gpuhealth/templates/cleanup-hook.yaml): `helm uninstall` runs
`gpuhealth-remediator cleanup` with the remediator's image and policy, as a ServiceAccount of its own that holds
exactly what the cleanup calls, made before the Job and removed with it; a bounded Job. That the cleanup works
under these grants: tests/remediator/act/test_remediator_cleanup.py (the fake API server enforces them)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuhealth.remediator import cli as remediator_cli
from gpuhealth.remediator.policy import parse_duration
from tests.support.chart_render import CHART, granted, render

NAME = "gpuhealth-cleanup"
HOOK = "pre-delete"
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())["cleanup"]


def _hook_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == HOOK]


def _job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == NAME]
    return job


def test_uninstall_runs_the_cleanup_first_with_the_remediators_image_and_policy() -> None:
    docs = render(None)
    job = _job(docs)
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == HOOK
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {"before-hook-creation", "hook-succeeded"}
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuhealth-remediator"]
    remediator = deployment["spec"]["template"]["spec"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == remediator["containers"][0]["image"]
    assert container["command"] == ["gpuhealth-remediator"] and container["args"][0] == "cleanup"
    assert pod["serviceAccountName"] == NAME and pod["restartPolicy"] == "Never"
    policy_volume = next(v for v in pod["volumes"] if v["name"] == "policy")
    assert policy_volume == next(v for v in remediator["volumes"] if v["name"] == "policy")
    # the arguments are the command's own (read from its parser, not from a copy here)
    args = remediator_cli.build_parser().parse_args(container["args"])
    assert args.func is remediator_cli.cmd_cleanup and not args.dry_run
    assert args.policy == "/etc/gpuhealth/policy.yaml" and args.wait == parse_duration(DEFAULTS["wait"])


def test_the_hook_job_is_bounded_and_its_bound_outlasts_its_wait() -> None:
    job = _job(render({"cleanup": {"wait": "10m", "activeDeadlineSeconds": 900}}))
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 900
    assert "--wait=10m" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    default = _job(render(None))["spec"]
    wait = parse_duration(DEFAULTS["wait"]).total_seconds()
    # the Job's bound leaves room for the wait, the Lease's (15 s) and a minute of writes; Helm's --timeout is 5m
    assert wait + 15 + 60 <= default["activeDeadlineSeconds"] == DEFAULTS["activeDeadlineSeconds"] < 300


def test_the_cleanup_account_holds_exactly_what_the_cleanup_calls() -> None:
    docs = render(None)
    assert granted(docs, NAME) == {
        ("*", "", "nodes"): {"get", "list", "patch"},
        ("*", "", "nodes/status"): {"patch"},
        ("*", "resource.k8s.io", "devicetaintrules"): {"list", "delete"},
        ("gpuhealth", "coordination.k8s.io", "leases"): {"create", "get", "update"},
        ("gpuhealth", "batch", "jobs"): {"list"},
        ("default", "", "events"): {"create"},
    }
    lease_role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{NAME}-lease")
    assert [r.get("resourceNames") for r in lease_role["rules"] if "get" in r["verbs"]] == [["gpuhealth-remediator"]]
    # its account and grants are hooks too, made before the Job and removed with it
    weights = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in _hook_docs(docs)}
    assert set(weights) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Job"}
    assert all(w < weights["Job"] for kind, w in weights.items() if kind != "Job")


def test_the_grants_follow_the_policys_namespaces_and_dra() -> None:
    docs = render({"remediator": {"policy": {"jobs": {"namespace": "gpuhealth-jobs"},
                                             "leader": {"namespace": "ops", "name": "gpuhealth-lease"},
                                             "dra": {"enabled": False}}}})
    grants = granted(docs, NAME)
    assert grants[("gpuhealth-jobs", "batch", "jobs")] == {"list"}
    assert grants[("ops", "coordination.k8s.io", "leases")] == {"create", "get", "update"}
    assert ("*", "resource.k8s.io", "devicetaintrules") not in grants


@pytest.mark.parametrize("values", [{"cleanup": {"enabled": False}}, {"remediator": {"enabled": False}}])
def test_no_hook_when_it_is_off_or_there_is_no_remediator(values: dict[str, Any]) -> None:
    assert not _hook_docs(render(values))


def test_a_wait_that_is_no_duration_is_refused_at_render_time() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match="wait"):
        render({"cleanup": {"wait": "five minutes"}})


def test_argo_cd_gets_its_own_pre_delete_hook_in_the_same_order_only_when_asked() -> None:
    hooks = _hook_docs(render())
    assert not any(k.startswith("argocd.argoproj.io/") for d in hooks for k in d["metadata"]["annotations"])
    hooks = _hook_docs(render({"cleanup": {"argocd": True}}))
    assert {d["metadata"]["annotations"]["argocd.argoproj.io/hook"] for d in hooks} == {"PreDelete"}
    waves = {d["kind"]: int(d["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for d in hooks}
    assert waves.pop("Job") > max(waves.values())  # the account and its grants exist before the Job
    for d in hooks:  # Helm's own order stays the same
        assert d["metadata"]["annotations"]["helm.sh/hook-weight"] == d["metadata"]["annotations"][
            "argocd.argoproj.io/sync-wave"]
