"""The `kube_api:` section: how hard the remediator may press the Kubernetes API server (its client-side rate
limit, as client-go's QPS and burst) and how many nodes' plans a pass writes at once. As in schema.py, each
field is one key (its name), read as its metadata says (keys.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuhealth.remediator.policy.keys import setting
from gpuhealth.remediator.policy.readings import checked, integer

MAX_PARALLEL_WRITES = 64  # more threads only contend for the GIL with the webhook (docs/scaling.md)


@dataclass(frozen=True)
class KubeApiSettings:
    """The `kube_api:` section: the client's requests a second, its burst, and the pass's parallel writes."""

    qps: int = field(default=300, metadata=setting(
        integer(0), "Requests a second the remediator's client makes at most, on average (client-go's QPS; 0: no "
        "client-side limit, the API server's priority and fairness only). The Lease's renewals are never held "
        "back by it. 300, not client-go's 5 (a command line's) nor Karpenter's 200: a storm of 2,000 nodes is "
        "~11,000 requests, which 300 a second writes in ~37 s, inside the minute a storm is to be decided in; at "
        "rest the remediator makes under 1 a second (docs/scaling.md)."))
    burst: int = field(default=600, metadata=setting(
        integer(1), "Requests the client may make at once above qps after a quiet spell (client-go's burst; twice "
        "qps, client-go's ratio): the first cordons of a storm go out without waiting."))
    parallel_writes: int = field(default=8, metadata=setting(
        checked(integer(1), lambda n: n <= MAX_PARALLEL_WRITES, f"expected at most {MAX_PARALLEL_WRITES}"),
        "Nodes whose plans a pass executes at once (1: one after another). The budgets are decided for the whole "
        "pass before any is written, so this changes how fast, never how many; a node's own steps stay in order. "
        "8 keeps 300 requests a second going up to ~25 ms a request; more threads only contend for the GIL."))
