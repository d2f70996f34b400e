"""The `kube_api:` section: how hard the remediator may press the Kubernetes API server (its client-side rate
limit, as client-go's QPS and burst) and how many nodes' plans a pass writes at once. As in schema.py, each
field is one key (its name), read as its metadata says (keys.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from remediator.policy.keys import setting
from remediator.policy.readings import checked, integer

MAX_PARALLEL_WRITES = 64  # more threads only contend for the GIL with the webhook (docs/scaling.md)


@dataclass(frozen=True)
class KubeApiSettings:
    """The `kube_api:` section: the client's requests a second, its burst, and the pass's parallel writes."""

    qps: int = field(default=200, metadata=setting(
        integer(0), "Requests a second the remediator's client makes at most, on average (client-go's QPS; 0: no "
        "client-side limit, the API server's priority and fairness only). The Lease's renewals are never held "
        "back by it. 200, as Karpenter's client, not client-go's 5: a storm of 2,000 nodes is ~11,000 requests, "
        "which 200 a second writes in about a minute."))
    burst: int = field(default=400, metadata=setting(
        integer(1), "Requests the client may make at once above qps after a quiet spell (client-go's burst): the "
        "first cordons of a storm go out without waiting."))
    parallel_writes: int = field(default=16, metadata=setting(
        checked(integer(1), lambda n: n <= MAX_PARALLEL_WRITES, f"expected at most {MAX_PARALLEL_WRITES}"),
        "Nodes whose plans a pass executes at once (1: one after another). The budgets are decided for the whole "
        "pass before any is written, so this changes how fast, never how many; a node's own steps stay in order."))
