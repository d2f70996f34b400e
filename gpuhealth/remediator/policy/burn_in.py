"""The `burn_in:` section: new nodes are diagnosed before they take work (decide/burn_in.py; docs/remediation.md,
"Burn-in of new nodes"). A node that registers with the burn-in taint (a Karpenter NodePool's startupTaints, or the
kubelet's --register-with-taints) runs the diagnostic Job; gpuhealth removes the taint when it passes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.policy.keys import setting
from gpuhealth.remediator.policy.readings import checked, duration, integer, string

# A taint key is a qualified name, as the API server validates it: an optional DNS-subdomain prefix and a slash, then
# a name of at most 63 characters (alphanumerics, '-', '_', '.', starting and ending with an alphanumeric)
_TAINT_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class BurnInSettings:
    """The `burn_in:` section. It acts only on nodes that carry the taint, so it costs nothing until a NodePool (or
    the kubelet) puts the taint on its new nodes; what it costs then is the diagnostic's time before a new node's
    first pod."""

    taint: str = field(default="gpuhealth.io/burn-in", metadata=setting(
        checked(string, lambda k: bool(_TAINT_KEY.match(k)) and len(k) <= 317, "expected a taint key (a qualified "
                "name: an optional DNS prefix and '/', then a name of at most 63 characters)"),
        "The key of the startup taint new nodes register with (any effect). gpuhealth diagnoses a node that carries "
        "it and removes it once the diagnostic passed; it never adds it."))
    level: int = field(default=1, metadata=setting(
        checked(integer(1), lambda v: v in (1, 2, 3), "expected 1, 2 or 3"),
        "The burn-in's dcgmi diag level (1: seconds; 2: about two minutes; 3: up to half an hour). The GPU and EFA "
        "counts and the all-reduce run at every level, and they catch what a new node most often brings: a GPU or "
        "an EFA device missing, a link below its bandwidth."))
    ready_within: timedelta = field(default=timedelta(minutes=20), metadata=setting(
        checked(duration, lambda d: d > timedelta(0), "expected a duration above 0"),
        "How long after the Node was created the burn-in waits for it to be Ready with its GPUs advertised (the "
        "driver and device plugin up) before it starts the diagnostic anyway, which then fails on what is missing."))
