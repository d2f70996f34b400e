"""Which resource.k8s.io version serves each DRA resource the remediator uses, from discovery.

DRA's objects have moved between versions with Kubernetes (docs/remediation.md, "Node scope and GPU scope"):

- ResourceSlice, ResourceClaim: v1beta1 in 1.32; v1beta2 (and v1beta1) in 1.33; v1 from 1.34.
- DeviceTaintRule: v1alpha3 in 1.33-1.35 (alpha: the DRADeviceTaints feature gate, and the API enabled with
  `--runtime-config=resource.k8s.io/v1alpha3=true`); v1beta2 in 1.36 (beta, behind the DRADeviceTaintRules feature
  gate, off by default); v1 from 1.37.

So the remediator asks discovery (`/apis/resource.k8s.io`, then each version's resource list, as `kubectl
api-resources` does) which version serves each resource, prefers the newest, and reads and writes that one. What it
reads and writes has one shape in all of them (decide/devices.py reads v1beta1's `basic` device too). A resource no
version serves is None: GPU scope is off, and the remediator says why (node scope). The answer is kept
DISCOVERY_TTL seconds, so a cluster upgraded under a running remediator is seen within minutes.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kubernetes import client

from gpuhealth.remediator.clients.errors import NotFound, api_call

GROUP = "resource.k8s.io"
RESOURCE_SLICES = "resourceslices"
RESOURCE_CLAIMS = "resourceclaims"
DEVICE_TAINT_RULES = "devicetaintrules"
PREFERRED: dict[str, tuple[str, ...]] = {  # newest first
    RESOURCE_SLICES: ("v1", "v1beta2", "v1beta1"),
    RESOURCE_CLAIMS: ("v1", "v1beta2", "v1beta1"),
    DEVICE_TAINT_RULES: ("v1", "v1beta2", "v1alpha3"),  # never in v1beta1
}
DISCOVERY_TTL = 600.0  # seconds a discovery answer is trusted


class DraApi:
    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.api_client, self.timeout = api_client, request_timeout
        self._found: tuple[float, dict[str, str | None]] | None = None
        self._lock = threading.Lock()

    def version(self, resource: str) -> str | None:
        """The newest resource.k8s.io version that serves `resource` (None: none does). Errors other than 404
        come out typed (clients/errors.py) and are not kept."""
        with self._lock:
            if self._found is not None and time.monotonic() - self._found[0] < DISCOVERY_TTL:
                return self._found[1].get(resource)
        found = self._discover()
        with self._lock:
            self._found = (time.monotonic(), found)
        return found.get(resource)

    def _group(self) -> dict[str, Any] | None:
        """/apis/resource.k8s.io (None: 404, no DRA at all)."""
        try:
            with api_call():
                answer: Any = client.ResourceApi(self.api_client).get_api_group(
                    _preload_content=False, _request_timeout=self.timeout)
        except NotFound:
            return None
        body: dict[str, Any] = json.loads(answer.data)
        return body

    def _resources(self, version: str) -> set[str]:
        """The resources /apis/resource.k8s.io/<version> lists (none: 404)."""
        try:
            with api_call():
                answer: Any = client.CustomObjectsApi(self.api_client).get_api_resources(
                    GROUP, version, _preload_content=False, _request_timeout=self.timeout)
        except NotFound:
            return set()
        return {r.get("name") for r in json.loads(answer.data).get("resources") or []}

    def _discover(self) -> dict[str, str | None]:
        offered = {v.get("version") for v in (self._group() or {}).get("versions") or []}
        wanted = {v for versions in PREFERRED.values() for v in versions}
        served = {version: self._resources(version) for version in sorted(wanted & offered)}
        return {resource: next((v for v in versions if resource in served.get(v, ())), None)
                for resource, versions in PREFERRED.items()}
