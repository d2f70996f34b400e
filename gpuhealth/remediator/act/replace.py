"""The last rung, pluggable: how a node is handed over for replacement.

- nodeclaim: delete the Karpenter NodeClaim whose status.nodeName is the node (Karpenter drains
  and replaces it);
- condition: set the Karpenter-watched condition (AcceleratedHardwareReady=False by default), so
  Karpenter's node repair replaces the node after its toleration (10 min for that type);
- hook: POST a JSON description to a configured URL (a ticketing or provider system).
`register` adds a method under a new name (and policy.replace.method may then name it).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpuhealth.remediator.clients.errors import NotFound, api_call
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.pager import list_pages
from gpuhealth.remediator.decide.nodestate import REPLACE_CONDITION_REASON
from gpuhealth.remediator.policy import Policy

Replacer = Callable[[Kube, str, Policy, datetime, str], str]
_REGISTRY: dict[str, Replacer] = {}


def register(name: str) -> Callable[[Replacer], Replacer]:
    def wrap(fn: Replacer) -> Replacer:
        _REGISTRY[name] = fn
        return fn
    return wrap


def replace_node(kube: Kube, node: str, policy: Policy, now: datetime, reason: str) -> str:
    """Hand the node over; returns what was done. Raises on failure (the rung then counts as failed)."""
    try:
        method = _REGISTRY[policy.replace.method]
    except KeyError:
        raise ValueError(f"unknown replace method {policy.replace.method!r}") from None
    return method(kube, node, policy, now, reason)


def _claim_of(claim: dict[str, Any]) -> tuple[str, str]:
    return str(claim["metadata"]["name"]), str((claim.get("status") or {}).get("nodeName") or "")


@register("nodeclaim")
def _delete_nodeclaim(kube: Kube, node: str, policy: Policy, now: datetime, reason: str) -> str:
    with api_call():  # every NodeClaim of the cluster, in pages, each kept as (its name, its node's)
        claims, _ = list_pages(kube.custom.list_cluster_custom_object, kube.page_size, _claim_of, group="karpenter.sh",
                               version="v1", plural="nodeclaims", _request_timeout=kube.timeout)
    names = [name for name, on in claims if on == node]
    if not names:
        raise LookupError(f"no Karpenter NodeClaim has status.nodeName={node}")
    for name in names:
        try:
            with api_call():
                kube.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name,
                                                         _request_timeout=kube.timeout)
        except NotFound:
            pass  # gone already: what was wanted
    return f"deleted NodeClaim {', '.join(names)}"


@register("condition")
def _set_condition(kube: Kube, node: str, policy: Policy, now: datetime, reason: str) -> str:
    kube.set_condition(node, policy.replace.condition_type, "False", REPLACE_CONDITION_REASON, reason, now)
    return f"set condition {policy.replace.condition_type}=False for Karpenter node repair"


@register("hook")
def _call_hook(kube: Kube, node: str, policy: Policy, now: datetime, reason: str) -> str:
    if not policy.replace.hook_url:
        raise ValueError("replace.hook_url is not set")
    data = json.dumps({"node": node, "reason": reason, "at": now.isoformat()}).encode()
    request = urllib.request.Request(policy.replace.hook_url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=kube.timeout) as response:
        return f"replace hook answered HTTP {response.status}"
