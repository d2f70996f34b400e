"""The official client's ApiClient with client-go's client-side rate limit (clients/rate_limit.py) in front of
every request, and a connection pool as large as the pass's parallel writes.

Every request takes a token first (reads, writes, Events, the start of a watch), except the Lease's: a storm
that spends the tokens must never delay the renewal that keeps this replica leading (a Lease not renewed in
time hands the fleet to the standby mid-storm), so the Lease's few requests (about one a second) go around
the bucket, as controllers give their leader election a client of its own for the same reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client

from gpuhealth.remediator.clients.rate_limit import TokenBucket

# a Lease's path, after any prefix of the server's URL (a proxy's /k8s/clusters/<id>)
LEASES = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/[^/]+/leases(/[^/]+)?$")
POOL_HEADROOM = 8  # beyond the parallel writes: 2 watches, the intake's workers, the Lease, the workload watcher


class RateLimitedApiClient(client.ApiClient):
    """An ApiClient whose requests wait for the bucket's token (the Lease's excepted)."""

    bucket: TokenBucket | None = None
    on_wait: Callable[[float], None] | None = None  # told the seconds a request waited (a metric)

    def call_api(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
        bucket = self.bucket
        if bucket is not None and not is_lease(str(url)):
            waited = bucket.take()
            if waited and self.on_wait is not None:
                self.on_wait(waited)
        return super().call_api(method, url, *args, **kwargs)


def is_lease(url: str) -> bool:
    """Whether a request (its full URL) is to a Lease: those go around the bucket."""
    return LEASES.search(urlsplit(url).path) is not None


def rate_limited(api: client.ApiClient, qps: float, burst: int, connections: int) -> RateLimitedApiClient:
    """A client of the same configuration (server, credentials) as `api`: its requests limited to `qps` a second
    with bursts of `burst` (qps 0: no limit), its connection pool at least `connections` + POOL_HEADROOM."""
    configuration = api.configuration
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                connections + POOL_HEADROOM)
    limited = RateLimitedApiClient(configuration)
    limited.bucket = TokenBucket(qps, burst) if qps > 0 else None
    return limited
