"""How the remediator reads DRA's objects: in pages (limit and continue, as client-go's pager), only while a node is
in an episode (a fleet at rest reads none), and in whichever resource.k8s.io version the cluster serves them
(Kubernetes 1.32 to 1.37: clients/dra_api.py). The fake API server pages as the API server does: every page of one
list comes from the first page's revision, and a token whose revision was compacted is 410 Gone."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.clients.kube import Kube
from tests.fakes.apiserver import FakeCluster
from tests.remediator.dra_gpus import DRIVER, alert_gpu, dra_node
from tests.support.remediator_harness import Harness

POLICY = "alertmanager: {url: none}\n"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


def _kube(c: FakeCluster, page_size: int = 100) -> Kube:
    kube = Kube(client.ApiClient(client.Configuration(host=c.url)))
    kube.page_size = page_size
    return kube


def _claims(c: FakeCluster, n: int) -> None:
    c.add_node("gpu-1")
    for i in range(n):
        c.dra.add_claim(f"ns-{i % 7}", f"claim-{i:04d}", [(DRIVER, "gpu-1", f"gpu-{i % 8}")], [f"pod-{i}"])


def _list_requests(c: FakeCluster, resource: str) -> list[dict[str, str]]:
    return [q for method, path, q in c.queries if method == "GET" and path.endswith(f"/{resource}")]


def test_a_large_list_arrives_in_pages_and_nothing_is_lost(cluster: FakeCluster) -> None:
    _claims(cluster, 1234)
    claims = _kube(cluster, page_size=100).list_resource_claims()
    assert sorted(c["metadata"]["name"] for c in claims) == [f"claim-{i:04d}" for i in range(1234)]
    pages = _list_requests(cluster, "resourceclaims")
    assert len(pages) == 13 and all(q["limit"] == "100" for q in pages)
    assert "continue" not in pages[0] and all("continue" in q for q in pages[1:])


def test_the_pages_of_one_list_are_one_revision_whatever_changes_between_them(cluster: FakeCluster) -> None:
    _claims(cluster, 250)
    api = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=cluster.url)))
    calls = 0

    def changing(**kw: Any) -> Any:  # between the first and the second page, claims come and go
        nonlocal calls
        calls += 1
        if calls == 2:
            del cluster.dra.claims[("ns-0", "claim-0245")]
            cluster.dra.add_claim("ns-0", "claim-late", [(DRIVER, "gpu-1", "gpu-0")], ["pod-late"])
        return api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims", **kw)

    from gpuhealth.remediator.clients.pager import list_pages

    items, rv = list_pages(changing, 100)
    names = {c["metadata"]["name"] for c in items}
    assert calls == 3 and len(items) == 250 and "claim-0245" in names and "claim-late" not in names
    assert int(rv) < cluster.rv  # the list's revision: before the changes


def test_an_expired_continue_token_starts_the_paged_list_again_from_its_first_page(cluster: FakeCluster) -> None:
    _claims(cluster, 250)
    api = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=cluster.url)))
    calls = 0

    def compacting(**kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            cluster.dra.add_claim("ns-0", "claim-late", [(DRIVER, "gpu-1", "gpu-0")], ["pod-late"])
            cluster.compact()  # the first page's revision is gone: its token is 410 Expired
        return api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims", **kw)

    from gpuhealth.remediator.clients.pager import list_pages

    items, _ = list_pages(compacting, 100)
    assert len(items) == 251 and "claim-late" in {c["metadata"]["name"] for c in items}  # one list, of now
    # in pages again (never the whole list in one answer: the memory peak paging avoids), from a first page
    assert [("limit" in q, "continue" in q) for q in _list_requests(cluster, "resourceclaims")] == [
        (True, False), (True, True), (True, False), (True, True), (True, True)]


def test_the_fake_refuses_continue_tokens_as_the_api_server_does(cluster: FakeCluster) -> None:
    _claims(cluster, 30)
    api = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=cluster.url)))
    first = api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims", limit=10)
    token = first["metadata"]["continue"]
    assert first["metadata"]["remainingItemCount"] == 20 and len(first["items"]) == 10
    for kwargs, status in (({"_continue": token, "resource_version": "5"}, 400),
                           ({"_continue": base64.urlsafe_b64encode(b"nonsense").decode()}, 400)):
        with pytest.raises(ApiException) as err:
            api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims", **kwargs)
        assert err.value.status == status
    rest = api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims", _continue=token)
    assert len(rest["items"]) == 20 and "continue" not in rest["metadata"]
    # a token is the list's revision and where the page starts, not a one-time ticket: a client's retry (its answer
    # timed out) gets the same page again
    assert api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims", _continue=token) == rest
    assert json.loads(base64.urlsafe_b64decode(token))["rv"] == int(first["metadata"]["resourceVersion"])


# --- the reconcile loop -------------------------------------------------------------------------------------------
def _dra_fleet(c: FakeCluster, nodes: int = 3) -> list[dict[str, Any]]:
    """`nodes` DRA nodes gpu-0, gpu-1, ...; the last one's devices."""
    return [dra_node(c, f"gpu-{i}") for i in range(nodes)][-1]


def test_a_fleet_at_rest_reads_no_dra_objects_and_an_episode_reads_them_fresh(cluster: FakeCluster) -> None:
    devices = _dra_fleet(cluster)
    h = Harness(cluster, POLICY)
    for _ in range(5):
        h.advance(seconds=10)
        h.step()
    assert _list_requests(cluster, "resourceslices") == [] and _list_requests(cluster, "resourceclaims") == []
    h.fire("gpu-1", "cordon", gpu=alert_gpu(devices[2]))
    (decision,) = h.decided(h.step())
    assert (decision.action, decision.effect) == ("quarantine_gpu", "NoSchedule")  # GPU scope: DRA was read
    assert [q.get("limit") for q in _list_requests(cluster, "resourceslices")] == ["500"]


def test_a_node_scope_episode_under_way_reads_no_dra_objects(cluster: FakeCluster) -> None:
    _dra_fleet(cluster)
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "cordon", gpu="all")  # not one GPU: the node's
    (decision,) = h.decided(h.step())
    assert decision.action == "cordon" and "node scope: the alerts name no single GPU" in decision.reason
    read = len(_list_requests(cluster, "resourceslices"))
    for _ in range(5):  # cordoned, the alert still firing: nothing left that DRA could change
        h.advance(seconds=10)
        h.fire("gpu-1", "cordon", gpu="all")
        h.step()
    assert len(_list_requests(cluster, "resourceslices")) == read == 1


@pytest.mark.parametrize(("kubernetes", "core", "taints"), [
    ("1.33", ("v1beta2", "v1beta1"), ("v1alpha3",)),  # DRA beta; DeviceTaintRule alpha (DRADeviceTaints)
    ("1.35", ("v1",), ("v1alpha3",)),
    ("1.36", ("v1",), ("v1beta2",)),  # DeviceTaintRule beta, behind DRADeviceTaintRules
    ("1.37", ("v1",), ("v1",)),
])
def test_gpu_scope_works_in_whichever_version_the_cluster_serves_dra(cluster: FakeCluster, kubernetes: str,
                                                                      core: tuple[str, ...],
                                                                      taints: tuple[str, ...]) -> None:
    cluster.dra.core, cluster.dra.served = core, taints
    devices = _dra_fleet(cluster, 1)
    h = Harness(cluster, POLICY)
    h.fire("gpu-0", "drain", gpu=alert_gpu(devices[4]))
    decided = h.decided(h.step())
    assert [(d.action, d.effect) for d in decided] == [("quarantine_gpu", "NoSchedule"),
                                                       ("quarantine_gpu", "NoExecute")], kubernetes
    assert {r["apiVersion"] for r in cluster.dra.rules.values()} == {f"resource.k8s.io/{taints[0]}"}
    assert cluster.evictions() == ["default/train-gpu-0-gpu-4"]  # the claims were read: that GPU's pod only
    assert not cluster.taints("gpu-0")


def test_dra_in_v1beta1_without_device_taints_is_node_scope_and_says_why(cluster: FakeCluster) -> None:
    cluster.dra.core, cluster.dra.served = ("v1beta1",), ()  # Kubernetes 1.32: devices wrapped in `basic`
    devices = _dra_fleet(cluster, 1)
    h = Harness(cluster, POLICY)
    h.fire("gpu-0", "cordon", gpu=alert_gpu(devices[1]))
    (decision,) = h.decided(h.step())
    assert decision.action == "cordon" and "node scope: the cluster serves no DeviceTaintRule" in decision.reason


def test_at_rest_leftover_device_taints_are_swept_every_five_minutes_not_every_pass(cluster: FakeCluster) -> None:
    from gpuhealth.remediator.clients.device_taints import DeviceTaints

    _dra_fleet(cluster, 2)
    h = Harness(cluster, POLICY)
    taints = DeviceTaints(h.kube)
    h.step()  # the first pass sweeps (nothing there yet)
    taints.taint("v1", "gpu-1", DRIVER, "gpu-1", ["gpu-2"], "gpuhealth.io/unhealthy", "NoSchedule", "left behind")
    lists = len(_list_requests(cluster, "devicetaintrules"))
    for _ in range(4):
        h.advance(minutes=1)
        h.step()
    assert cluster.dra.rules and len(_list_requests(cluster, "devicetaintrules")) == lists  # at rest: not each pass
    h.advance(minutes=1, seconds=1)
    h.step()
    assert not cluster.dra.rules  # swept within SWEEP_AT_REST
