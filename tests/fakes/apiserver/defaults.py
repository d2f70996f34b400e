"""The API server's defaulting of a batch/v1 Job, for the fake API server (tests/fakes/apiserver/).

A real API server defaults an object before admission sees it (pkg/apis/batch/v1/defaults.go SetDefaults_Job,
pkg/apis/core/v1/defaults.go SetDefaults_PodSpec, SetDefaults_Container, SetDefaults_HostPathVolumeSource; the
v1 conversion copies serviceAccountName into the deprecated serviceAccount), so an admission policy must admit the
defaulted object, not only what the client sent. Pod-only defaults (SetDefaults_Pod: enableServiceLinks, requests
from limits) are not applied to a Job's pod template, as on the API server.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]


def _container(container: Obj) -> None:
    image = str(container.get("image") or "")
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    latest = image.endswith(":latest") or not tagged
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")


def _pod_spec(spec: Obj) -> None:
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            _container(container)
    for volume in spec.get("volumes") or []:
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")


def default_job(body: Obj) -> Obj:
    """The Job as the API server stores it and admission sees it: `body` with the API server's defaults."""
    job = copy.deepcopy(body)
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if not spec.get("podFailurePolicy"):
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    labels = (template.get("metadata") or {}).get("labels")
    meta = job.setdefault("metadata", {})
    if labels and not meta.get("labels"):
        meta["labels"] = dict(labels)
    _pod_spec(template.setdefault("spec", {}))
    return job
