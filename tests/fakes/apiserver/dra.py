"""Dynamic Resource Allocation on the fake API server: ResourceSlices, ResourceClaims and DeviceTaintRules
(resource.k8s.io), as strict as the API server, and NoExecute applied as kube-controller-manager applies it.

- Served versions: DeviceTaintRule is GA in resource.k8s.io/v1 (Kubernetes 1.37); before, it sits behind a feature
  gate in an older version (v1beta2 in 1.36, v1alpha3 in 1.33-1.35). `served` says which versions serve it (an
  empty tuple: a cluster without the gate); `core` says which serve ResourceSlice and ResourceClaim (v1 from 1.34;
  v1beta2 and v1beta1 in 1.33, where v1beta1's devices wrap their fields in `basic`). Discovery
  (`/apis/resource.k8s.io`, `/apis/resource.k8s.io/<v>`) lists exactly those, and a request to a version that does
  not serve the resource is a 404, as on the API server. Lists take `limit` and `continue`
  (tests/fakes/apiserver/paging.py).
- Validation: a DeviceTaintRule needs a name, a device selector naming a driver, and a taint whose key is a
  qualified name and whose effect is NoSchedule, NoExecute or None; anything else is 422 Invalid. Names are
  unique (409 AlreadyExists).
- NoExecute: when a rule with effect NoExecute is created, every ResourceClaim allocated one of the devices it
  selects (status.allocation.devices.results: driver, pool, device) and not tolerating the taint (the result's
  tolerations) has the pods it is reserved for (status.reservedFor) deleted, as the device taint eviction
  controller does. NoSchedule and None evict nothing (the scheduler is not modelled: nothing new is placed).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from tests.fakes.apiserver.selectors import selected
from tests.support import paths

if TYPE_CHECKING:
    from tests.fakes.apiserver.state import ClusterState

Obj = dict[str, Any]
RECORDED_SLICES = paths.FIXTURES / "dra" / "resourceslices_eks_2x8_h100_v1.yaml"
RECORDED_MIG_SLICE = RECORDED_SLICES.parent / "resourceslice_kind_a100_80gb_mig_v1alpha3_excerpt.yaml"
MIG_FIXTURES = paths.FIXTURES / "mig"
GROUP = "resource.k8s.io"
EFFECTS = ("NoSchedule", "NoExecute", "None")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a recorded H100 layout: its GPU instance (one compute instance, 0), profile, placement and
    UUID, as `nvidia-smi mig -lgi` and `nvidia-smi -L` printed them."""

    gpu_instance: int
    profile: str  # 1g.10gb
    profile_id: int
    start: int
    size: int
    uuid: str
    compute_instance: int = 0

    def device_name(self, gpu: str) -> str:
        """The DRA device name NVIDIA's driver gives it (gpu-0-mig-1g12gb-19-0: profile, profile id, placement)."""
        return f"{gpu}-mig-{self.profile.replace('.', '')}-{self.profile_id}-{self.start}"


def recorded_mig_layout() -> list[MigInstance]:
    """The H100's MIG devices in tests/fixtures/mig/scaleway_h100-pcie_{mig-lgi,nvidia-smi-L}.txt (3 x 1g.10gb, GI
    7-9, and 1 x 3g.40gb, GI 2). `-L` lists MIG devices in GPU instance order (the ssup2 recording's MIG devices
    table shows it), so its UUIDs pair with `-lgi`'s instances sorted by id."""
    rows = re.findall(r"^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$",
                      (MIG_FIXTURES / "scaleway_h100-pcie_mig-lgi.txt").read_text(), re.M)
    uuids = re.findall(r"^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[0-9a-f-]+)\)$",
                       (MIG_FIXTURES / "scaleway_h100-pcie_nvidia-smi-L.txt").read_text(), re.M)
    instances = sorted((int(gi), profile, int(pid), int(start), int(size)) for profile, pid, gi, start, size in rows)
    assert len(instances) == len(uuids) == 4 and [i[1] for i in instances] == [p for p, _ in uuids]
    return [MigInstance(gi, profile, pid, start, size, uuid)
            for (gi, profile, pid, start, size), (_, uuid) in zip(instances, uuids, strict=True)]


def _status(code: int, reason: str, message: str = "") -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeDra:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.served: tuple[str, ...] = ("v1",)  # the versions serving DeviceTaintRule
        self.core: tuple[str, ...] = ("v1",)  # the versions serving ResourceSlice and ResourceClaim
        self.slices: dict[str, Obj] = {}
        self.claims: dict[tuple[str, str], Obj] = {}
        self.rules: dict[str, Obj] = {}
        self._selector: str | None = None  # the request's labelSelector (routes run under the cluster's lock)

    # --- test setup ------------------------------------------------------------------------------
    def publish_gpus(self, node: str) -> list[Obj]:
        """The node's eight GPUs as NVIDIA's DRA driver published them on a real EKS H100 node
        (tests/fixtures/dra/resourceslices_eks_2x8_h100_v1.yaml), with this node's name as node and pool.
        Returns the devices (name, attributes: uuid, resource.kubernetes.io/pciBusID ...)."""
        obj = _recorded_gpu_slice(node)
        self.add_slice(obj)
        devices: list[Obj] = sorted(obj["spec"]["devices"], key=lambda d: d["name"])
        return devices

    def publish_mig_gpus(self, node: str, gpu: str = "gpu-1") -> tuple[list[Obj], list[Obj]]:
        """As publish_gpus, with MIG on one of the GPUs: besides the GPU itself (NVIDIA's driver publishes it too,
        dra-driver-nvidia-gpu issue #719), a device per MIG instance of the recorded H100 layout
        (recorded_mig_layout), each shaped as the recorded kind MIG device (tests/fixtures/dra/
        resourceslice_kind_a100_80gb_mig_v1alpha3_excerpt.yaml: type mig, uuid, parentUUID, parentIndex, index,
        profile, ...) in resource.k8s.io/v1's form (no `basic:`, capacity as {value}: the recorded 1g.10gb's, which
        nothing here reads). Returns (the GPUs, the MIG devices, in the layout's order)."""
        obj = _recorded_gpu_slice(node)
        template = yaml.safe_load(RECORDED_MIG_SLICE.read_text())["items"][0]["spec"]["devices"][0]["basic"]
        parent = next(d for d in obj["spec"]["devices"] if d["name"] == gpu)
        index = int(gpu.removeprefix("gpu-"))
        migs = []
        for i, m in enumerate(recorded_mig_layout()):
            attributes = copy.deepcopy(template["attributes"])
            for key in ("architecture", "brand", "cudaComputeCapability", "cudaDriverVersion", "driverVersion",
                        "productName"):
                attributes[key] = copy.deepcopy(parent["attributes"][key])
            attributes.update(uuid={"string": m.uuid}, parentUUID=copy.deepcopy(parent["attributes"]["uuid"]),
                              parentIndex={"int": index}, index={"int": len(obj["spec"]["devices"]) + i},
                              profile={"string": m.profile})
            capacity = {k: {"value": str(v)} for k, v in template["capacity"].items()}
            migs.append({"name": m.device_name(gpu), "attributes": attributes, "capacity": capacity})
        obj["spec"]["devices"] += migs
        self.add_slice(obj)
        gpus = sorted((d for d in obj["spec"]["devices"] if d["attributes"]["type"]["string"] == "gpu"),
                      key=lambda d: d["name"])
        return gpus, migs

    def add_slice(self, obj: Obj) -> Obj:
        with self.cluster.lock:
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = self.cluster._next_rv()
            self.slices[obj["metadata"]["name"]] = obj
            return obj

    def add_claim(self, namespace: str, name: str, devices: list[tuple[str, str, str]], pods: list[str],
                  tolerations: list[Obj] | None = None) -> Obj:
        """A claim allocated (driver, pool, device) each, reserved for these pods of its namespace."""
        with self.cluster.lock:
            results = [{"request": "gpu", "driver": d, "pool": p, "device": n,
                        **({"tolerations": tolerations} if tolerations else {})} for d, p, n in devices]
            reserved = [{"resource": "pods", "name": pod,
                         "uid": (self.cluster.pods.get((namespace, pod)) or {}).get("metadata", {}).get("uid", pod)}
                        for pod in pods]
            claim: Obj = {"apiVersion": f"{GROUP}/v1", "kind": "ResourceClaim",
                          "metadata": {"name": name, "namespace": namespace, "uid": f"uid-claim-{name}",
                                       "resourceVersion": self.cluster._next_rv()},
                          "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                              "deviceClassName": "gpu.nvidia.com", "count": len(devices)}}]}},
                          "status": {"allocation": {"devices": {"results": results}}, "reservedFor": reserved}}
            self.claims[(namespace, name)] = claim
            return claim

    # --- routes ----------------------------------------------------------------------------------
    def route(self, method: str, parts: list[str], body: Any, label_selector: str | None = None) -> tuple[int, Obj]:
        """parts: the path after /apis/resource.k8s.io."""
        self._selector = label_selector
        if not parts:
            return 200, self._group()
        version, rest = parts[0], parts[1:]
        if version not in ("v1", "v1beta2", "v1beta1", "v1alpha3"):
            return 404, _status(404, "NotFound", f"the server could not find resource.k8s.io/{version}")
        if not rest:
            return 200, self._resources(version)
        core = version in self.core
        if rest == ["resourceslices"] and method == "GET" and core:
            return 200, self._list("ResourceSliceList", (_as_version(o, version) for o in self.slices.values()),
                                   version)
        if rest == ["resourceclaims"] and method == "GET" and core:
            return 200, self._list("ResourceClaimList", (_as_version(o, version) for o in self.claims.values()),
                                   version)
        if rest[:1] == ["namespaces"] and rest[2:] == ["resourceclaims"] and method == "GET" and core:
            return 200, self._list("ResourceClaimList", (_as_version(c, version) for (ns, _), c in self.claims.items()
                                                         if ns == rest[1]), version)
        if rest[:1] == ["devicetaintrules"]:
            if version not in self.served:
                return 404, _status(404, "NotFound", "the server could not find the requested resource")
            return self._rules(method, version, rest[1:], body)
        return 404, _status(404, "NotFound", f"no route for {method} /apis/resource.k8s.io/{'/'.join(parts)}")

    def _group(self) -> Obj:
        versions = sorted({*self.core, *self.served}, key=("v1", "v1beta2", "v1beta1", "v1alpha3").index)
        return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
                "versions": [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{GROUP}/{versions[0]}", "version": versions[0]}}

    def _resources(self, version: str) -> Obj:
        names = ["resourceslices", "resourceclaims", "deviceclasses"] if version in self.core else []
        if version in self.served:
            names.append("devicetaintrules")
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{version}",
                "resources": [{"name": n, "namespaced": n == "resourceclaims", "kind": n, "verbs": ["list"]}
                              for n in names]}

    def _list(self, kind: str, items: Any, version: str = "v1") -> Obj:
        return {"apiVersion": f"{GROUP}/{version}", "kind": kind,
                "metadata": {"resourceVersion": str(self.cluster.rv)},
                "items": [copy.deepcopy(o) for o in items if selected(o, None, self._selector)]}

    def _rules(self, method: str, version: str, rest: list[str], body: Any) -> tuple[int, Obj]:
        if method == "GET" and not rest:
            return 200, self._list("DeviceTaintRuleList", self.rules.values()) | {"apiVersion": f"{GROUP}/{version}"}
        if method == "POST" and not rest:
            error = _invalid(body)
            if error:
                return 422, _status(422, "Invalid", f"DeviceTaintRule.resource.k8s.io is invalid: {error}")
            name = body["metadata"]["name"]
            if name in self.rules:
                return 409, _status(409, "AlreadyExists", f'devicetaintrules.resource.k8s.io "{name}" already exists')
            rule = copy.deepcopy(body)
            rule["apiVersion"] = f"{GROUP}/{version}"
            rule["metadata"].update(resourceVersion=self.cluster._next_rv(), uid=f"uid-dtr-{name}")
            self.rules[name] = rule
            if rule["spec"]["taint"]["effect"] == "NoExecute":
                self._evict(rule)
            return 201, copy.deepcopy(rule)
        if len(rest) != 1:
            return 405, _status(405, "MethodNotAllowed")
        rule = self.rules.get(rest[0])
        if rule is None:
            return 404, _status(404, "NotFound", f'devicetaintrules.resource.k8s.io "{rest[0]}" not found')
        if method == "GET":
            return 200, copy.deepcopy(rule)
        if method == "DELETE":
            del self.rules[rest[0]]
            return 200, copy.deepcopy(rule)
        return 405, _status(405, "MethodNotAllowed")

    def tainted(self, driver: str, pool: str, device: str) -> list[Obj]:
        """The taints the rules put on this device now."""
        return [r["spec"]["taint"] for r in self.rules.values() if _selects(r, driver, pool, device)]

    def _evict(self, rule: Obj) -> None:
        taint = rule["spec"]["taint"]
        for (ns, _), claim in list(self.claims.items()):
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
            hit = [r for r in results if _selects(rule, r["driver"], r["pool"], r["device"])]
            if not hit or all(_tolerates(r.get("tolerations") or [], taint) for r in hit):
                continue
            for consumer in (claim.get("status") or {}).get("reservedFor") or []:
                key = (ns, consumer["name"])
                if consumer.get("resource") == "pods" and key in self.cluster.pods:
                    self.cluster._terminate(key)


def _as_version(obj: Obj, version: str) -> Obj:
    """A stored (v1) ResourceSlice or ResourceClaim as `version` serves it: v1beta2 has v1's shape; v1beta1 wraps a
    device's fields in `basic` and has no `exactly` in a claim's requests."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{GROUP}/{version}"
    if version != "v1beta1":
        return out
    if out.get("kind") == "ResourceSlice":
        out["spec"]["devices"] = [{"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                                  for d in out["spec"].get("devices") or []]
        return out
    for request in ((out.get("spec") or {}).get("devices") or {}).get("requests") or []:
        request.update(request.pop("exactly", {}))
    return out


def _recorded_gpu_slice(node: str) -> Obj:
    """The recorded EKS node's gpu.nvidia.com slice, as this node's (its name as node and pool)."""
    recorded = yaml.safe_load(RECORDED_SLICES.read_text())["items"]
    obj: Obj = copy.deepcopy(next(s for s in recorded if s["spec"]["driver"] == "gpu.nvidia.com"))
    obj["metadata"] = {"name": f"{node}-gpu.nvidia.com-x", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": node, "controller": True}]}
    obj["spec"].update(nodeName=node, pool={"name": node, "generation": 1, "resourceSliceCount": 1})
    return obj


def _invalid(body: Any) -> str:
    if not isinstance(body, dict) or body.get("kind") != "DeviceTaintRule":
        return "expected a DeviceTaintRule"
    if not (body.get("metadata") or {}).get("name"):
        return "metadata.name: Required value"
    spec = body.get("spec") or {}
    selector = spec.get("deviceSelector") or {}
    if not selector.get("driver"):
        return "spec.deviceSelector.driver: Required value"
    taint = spec.get("taint") or {}
    if not _QUALIFIED.match(str(taint.get("key") or "")):
        return f"spec.taint.key: Invalid value: {taint.get('key')!r}: must be a qualified name"
    if taint.get("effect") not in EFFECTS:
        return f"spec.taint.effect: Unsupported value: {taint.get('effect')!r}: supported values: {', '.join(EFFECTS)}"
    return ""


def _selects(rule: Obj, driver: str, pool: str, device: str) -> bool:
    selector = rule["spec"].get("deviceSelector") or {}
    return (selector.get("driver") == driver and selector.get("pool") in (None, pool)
            and selector.get("device") in (None, device))


def _tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False
