"""reset_gpu and reboot as privileged Jobs pinned to the node, rendered from templates/*.yaml.j2.

Job names are deterministic per node, rung and episode, so creating one twice (a resent webhook, a
restart, a new leader) finds the existing Job (409) instead of starting a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediator.policy import Policy

TEMPLATES = Path(__file__).parent / "templates"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)


def render_job(rung: str, name: str, node: str, policy: Policy, gpu: str | None = None) -> dict[str, Any]:
    source = (TEMPLATES / f"{rung}.yaml.j2").read_text()
    timeout = policy.rung(rung).timeout
    text = _ENV.from_string(source).render(
        name=name, namespace=policy.jobs_namespace, node=node, gpu=gpu, image=policy.jobs_image,
        service_account=policy.jobs_service_account, ttl_seconds=policy.jobs_ttl_seconds,
        deadline_seconds=int(timeout.total_seconds()) if timeout else 3600)
    manifest: dict[str, Any] = yaml.safe_load(text)
    return manifest


def create_job(batch: client.BatchV1Api, manifest: dict[str, Any], timeout: float = 10.0) -> bool:
    """True if created, False if it already existed (idempotent)."""
    try:
        job = client.V1Job.from_dict(manifest)
        assert job is not None
        batch.create_namespaced_job(manifest["metadata"]["namespace"], job,
                                    _request_timeout=timeout)
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise


def job_status(batch: client.BatchV1Api, namespace: str, name: str, timeout: float = 10.0) -> str:
    """succeeded | failed | running | missing."""
    try:
        job = batch.read_namespaced_job(name, namespace, _request_timeout=timeout)
    except ApiException as exc:
        if exc.status == 404:
            return "missing"
        raise
    status = job.status
    if status is None:
        return "running"
    if status.succeeded:
        return "succeeded"
    if status.failed or any(c.type == "Failed" and c.status == "True" for c in status.conditions or []):
        return "failed"
    return "running"
