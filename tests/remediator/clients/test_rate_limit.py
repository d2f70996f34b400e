"""The client-side rate limit (policy kube_api.qps and burst), as client-go's token bucket: under the limit no request
waits, over it they are spread to qps a second after a burst; the Lease's renewals never wait. The bucket runs on an
injected clock (its waits advance it), so no test times real sleeps; the client is the official one against the
fake API server."""

from __future__ import annotations

import pytest
from kubernetes import client

from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.limited_client import is_lease, rate_limited
from gpuhealth.remediator.clients.rate_limit import TokenBucket
from gpuhealth.remediator.policy import PolicyError, parse_policy
from tests.fakes.apiserver import FakeCluster


class FakeTime:
    """A clock that only the test and the bucket's waits move."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def starts(bucket: TokenBucket, t: FakeTime, requests: int, every: float) -> list[float]:
    """When each of `requests` requests, asked for `every` seconds apart, may go."""
    out = []
    for _ in range(requests):
        bucket.take()
        out.append(t.now)
        t.now += every
    return out


def test_requests_under_the_limit_never_wait() -> None:
    t = FakeTime()
    bucket = TokenBucket(10, 5, clock=t, sleep=t.sleep)
    starts(bucket, t, 200, every=0.1)  # exactly 10 a second, for 20 s
    assert t.slept == []
    starts(bucket, t, 200, every=0.11)
    assert t.slept == []


def test_a_burst_goes_at_once_then_requests_are_spread_to_qps() -> None:
    t = FakeTime()
    bucket = TokenBucket(10, 5, clock=t, sleep=t.sleep)
    at = starts(bucket, t, 25, every=0.0)  # 25 asked for at once
    assert at[:5] == [1000.0] * 5  # the burst: no wait
    assert at[5] == pytest.approx(1000.1)  # then one every 1/qps
    assert at[-1] == pytest.approx(1000.0 + 20 * 0.1)
    assert sum(t.slept) == pytest.approx(2.0)


@pytest.mark.parametrize("every", [0.05, 0.09])  # asked for faster than 10 a second, by 2x and by a little
def test_over_the_limit_no_window_holds_more_than_burst_plus_qps_times_its_length(every: float) -> None:
    t = FakeTime()
    bucket = TokenBucket(10, 5, clock=t, sleep=t.sleep)
    at = starts(bucket, t, 300, every=every)
    assert t.slept, "the requests never waited: nothing was tested"
    for i, first in enumerate(at):  # every window that starts at a request
        for seconds in (0.5, 1.0, 5.0):
            within = sum(1 for s in at[i:] if s < first + seconds)
            assert within <= 5 + 10 * seconds + 1e-9
    rate = (len(at) - 5) / (at[-1] - at[0])  # past the burst, the long-run rate is qps
    assert rate == pytest.approx(10, rel=0.02)


def test_a_quiet_spell_saves_up_burst_tokens_and_no_more() -> None:
    t = FakeTime()
    bucket = TokenBucket(10, 5, clock=t, sleep=t.sleep)
    starts(bucket, t, 5, every=0.0)  # the burst spent
    t.now += 3600  # an hour at rest
    at = starts(bucket, t, 7, every=0.0)
    assert at[:5] == [at[0]] * 5 and at[5] == pytest.approx(at[0] + 0.1)


def test_a_bucket_needs_a_positive_rate_and_burst() -> None:
    with pytest.raises(ValueError, match="qps > 0"):
        TokenBucket(0, 5)
    with pytest.raises(ValueError, match="burst >= 1"):
        TokenBucket(5, 0)


def limited_kube(cluster: FakeCluster, t: FakeTime, qps: int, burst: int) -> Kube:
    api = rate_limited(client.ApiClient(client.Configuration(host=cluster.url)), qps, burst, 4)
    assert api.bucket is not None
    api.bucket = TokenBucket(qps, burst, clock=t, sleep=t.sleep)
    return Kube(api)


def test_the_client_waits_for_tokens_but_the_lease_goes_around_them(cluster: FakeCluster) -> None:
    t = FakeTime()
    kube = limited_kube(cluster, t, 10, 3)
    for _ in range(5):
        kube.get_node("gpu-1")
    assert len(t.slept) == 2  # two over the burst of 3, each waited its 1/qps
    assert t.slept == [pytest.approx(0.1)] * 2
    kube.coordination.create_namespaced_lease("gpuhealth", client.V1Lease(metadata=client.V1ObjectMeta(
        name="gpuhealth-remediator")))
    for _ in range(5):
        kube.coordination.read_namespaced_lease("gpuhealth-remediator", "gpuhealth")
    assert len(t.slept) == 2  # the Lease's requests took no token and waited for none
    kube.get_node("gpu-1")
    assert len(t.slept) == 3  # and the bucket is as the nodes' requests left it
    assert cluster.calls[("get", "nodes")] == 6 and cluster.calls[("get", "leases")] == 5


def test_qps_0_turns_the_client_side_limit_off(cluster: FakeCluster) -> None:
    api = rate_limited(client.ApiClient(client.Configuration(host=cluster.url)), 0, 1, 4)
    assert api.bucket is None
    for _ in range(20):
        Kube(api).get_node("gpu-1")
    assert cluster.calls[("get", "nodes")] == 20


def test_the_connection_pool_holds_every_parallel_write() -> None:
    api = rate_limited(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), 200, 400, 48)
    assert api.configuration.connection_pool_maxsize >= 48  # else urllib3 drops (and reopens) connections


def test_the_policy_keys_and_their_limits() -> None:
    policy = parse_policy("kube_api: {qps: 50, burst: 100, parallel_writes: 4}\n")
    assert (policy.kube_api.qps, policy.kube_api.burst, policy.kube_api.parallel_writes) == (50, 100, 4)
    with pytest.raises(PolicyError, match=r"parallel_writes.*at most 64"):
        parse_policy("kube_api:\n  parallel_writes: 65\n")
    with pytest.raises(PolicyError, match="parallel_writes"):
        parse_policy("kube_api:\n  parallel_writes: 0\n")
    with pytest.raises(PolicyError, match=r"kube_api.burst \(line 2\)"):
        parse_policy("kube_api:\n  burst: 0\n")


@pytest.mark.parametrize(("url", "lease"), [
    ("https://10.0.0.1/apis/coordination.k8s.io/v1/namespaces/gpuhealth/leases/gpuhealth-remediator", True),
    ("https://10.0.0.1/apis/coordination.k8s.io/v1/namespaces/gpuhealth/leases", True),  # its creation
    ("https://rancher.example/k8s/clusters/c-1/apis/coordination.k8s.io/v1/namespaces/g/leases/r?x=1", True),
    ("https://10.0.0.1/api/v1/nodes/gpu-1", False),
    ("https://10.0.0.1/api/v1/namespaces/default/events", False),
    ("https://10.0.0.1/apis/coordination.k8s.io/v1/namespaces/g/leases/r/status", False),
    ("https://10.0.0.1/api/v1/namespaces/leases/pods", False),
])
def test_only_the_leases_requests_go_around_the_bucket(url: str, lease: bool) -> None:
    assert is_lease(url) is lease
