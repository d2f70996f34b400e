"""DRA device taints: which API version serves DeviceTaintRule, and the rules gpuhealth makes and removes.

DeviceTaintRule is GA in resource.k8s.io/v1 (Kubernetes 1.37); before that it is served only behind a feature gate,
in an older version (v1beta2 in 1.36, v1alpha3 in 1.33-1.35: clients/dra_api.py). `served_version` asks discovery
which version serves it (None: none does, and the remediator stays at node scope, saying so in the audit).
Every rule gpuhealth makes carries the label `app.kubernetes.io/managed-by: gpuhealth` and its node's, so
that return to service removes only ours, never a rule a person or the DRA driver made.

The rules are written through the client (clients/kube.py), with its generic object calls (they work for any API
group, so one code path serves every version); a dry run's client records them instead.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from gpuhealth.remediator.clients.dra_api import DEVICE_TAINT_RULES
from gpuhealth.remediator.clients.dra_api import GROUP as DRA_GROUP
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.dra_objects import RawDeviceTaintRule

log = logging.getLogger("gpuhealth.remediator")

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuhealth"}
NODE_LABEL = "gpuhealth.io/node-hash"  # a node name can outgrow a label value (63 characters): its hash
NODE_ANNOTATION = "gpuhealth.io/node"


def node_hash(node: str) -> str:
    return hashlib.sha1(node.encode()).hexdigest()[:16]


def rule_name(node: str, device: str, effect: str) -> str:
    """Deterministic (creating twice finds the first: 409), a DNS subdomain, within 253 characters."""
    base = f"gpuhealth-{node}-{device}-{effect}".lower()
    digest = hashlib.sha1(base.encode()).hexdigest()[:8]
    return f"{base[:240].rstrip('-.')}-{digest}"


def rule_body(version: str, node: str, driver: str, pool: str, device: str, key: str, effect: str,
              reason: str) -> RawDeviceTaintRule:
    return {"apiVersion": f"{DRA_GROUP}/{version}", "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(node, device, effect), "labels": {**MANAGED_BY, NODE_LABEL: node_hash(node)},
                         "annotations": {NODE_ANNOTATION: node, "gpuhealth.io/reason": reason[:1024]}},
            "spec": {"deviceSelector": {"driver": driver, "pool": pool, "device": device},
                     "taint": {"key": key, "value": "true", "effect": effect}}}


class DeviceTaints:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def served_version(self) -> str | None:
        """The preferred version that serves DeviceTaintRule, from discovery (kept dra_api.DISCOVERY_TTL seconds)."""
        return self.kube.dra_api.version(DEVICE_TAINT_RULES)

    def taint(self, version: str, node: str, driver: str, pool: str, devices: Iterable[str], key: str, effect: str,
              reason: str) -> list[str]:
        """One rule per device (idempotent: one that exists is left as it is). Returns the rules' names."""
        names = []
        for device in devices:
            body = rule_body(version, node, driver, pool, device, key, effect, reason)
            self.kube.create_device_taint_rule(version, body)  # False: made by an earlier pass or replica
            names.append(api_objects.name(body))
        return names

    def ours(self, version: str, node: str) -> list[str]:
        """The rules gpuhealth made for this node."""
        return [api_objects.name(item) for item in self.kube.list_device_taint_rules(
                    version, {**MANAGED_BY, NODE_LABEL: node_hash(node)}) if node_of(item) == node]

    def nodes_with_rules(self, version: str) -> set[str]:
        """The nodes gpuhealth's rules are for (one LIST of ours, by label)."""
        return {node for item in self.kube.list_device_taint_rules(version, MANAGED_BY) if (node := node_of(item))}

    def release(self, version: str, node: str) -> list[str]:
        """Remove the rules gpuhealth made for this node; returns their names."""
        names = self.ours(version, node)
        for name in names:
            self.kube.delete_device_taint_rule(version, name)
        return names


def node_of(rule: RawDeviceTaintRule) -> str | None:
    return api_objects.annotations(rule).get(NODE_ANNOTATION)
