"""WatchCache over the official kubernetes client, against the fake API server's watches."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.clients.fleet_cache import slim_pod
from gpuhealth.remediator.clients.pager import RESTARTS, list_pages
from gpuhealth.remediator.clients.watch_cache import WatchCache
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac

Obj = dict[str, Any]


@pytest.fixture
def core() -> Iterator[tuple[FakeCluster, client.CoreV1Api]]:
    with FakeCluster() as cluster:
        for i in range(3):
            cluster.add_node(f"gpu-{i}", pool="a" if i < 2 else "b")
        chart_rbac.enforce(cluster)  # the remediator's service account: the caches it keeps are what it may list
        yield cluster, client.CoreV1Api(client.ApiClient(chart_rbac.configuration(cluster)))


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def names(cache: WatchCache) -> list[str]:
    return sorted(o["metadata"]["name"] for o in cache.items())


def cordon(node: Obj) -> None:
    node["spec"]["unschedulable"] = True


def test_lists_then_reports_every_change_as_plain_dicts(core: tuple[FakeCluster, client.CoreV1Api],
                                                         stop: threading.Event) -> None:
    cluster, api = core
    seen: list[tuple[str, str, str | None]] = []
    cache = WatchCache(api.list_node, name="nodes",
                       on_change=lambda t, o, old: seen.append((t, o["metadata"]["name"],
                                                                (old or {}).get("metadata", {}).get("name"))))
    cache.start(stop)
    assert cache.wait_synced(5)
    assert names(cache) == ["gpu-0", "gpu-1", "gpu-2"]
    assert sorted(seen) == [("ADDED", f"gpu-{i}", None) for i in range(3)]
    cluster.add_node("gpu-3")
    cluster.update_node("gpu-1", cordon)
    eventually(lambda: len(seen) == 5)
    assert seen[3:] == [("ADDED", "gpu-3", None), ("MODIFIED", "gpu-1", "gpu-1")]
    node = cache.get("gpu-1")
    assert isinstance(node, dict) and node["spec"]["unschedulable"] is True
    assert node["metadata"]["resourceVersion"] == cluster.node("gpu-1")["metadata"]["resourceVersion"]
    assert cluster.calls[("list", "nodes")] == 1 and cluster.calls[("watch", "nodes")] == 1


def test_pods_are_indexed_and_deletions_reported(core: tuple[FakeCluster, client.CoreV1Api],
                                                 stop: threading.Event) -> None:
    cluster, api = core
    cluster.add_pod("gpu-0", "train-0")
    cluster.add_pod("gpu-1", "train-1")
    deleted: list[str] = []
    cache = WatchCache(api.list_pod_for_all_namespaces, name="pods",
                       index=lambda p: p["spec"].get("nodeName"),
                       on_change=lambda t, o, old: deleted.append(o["metadata"]["name"]) if t == "DELETED" else None)
    cache.start(stop)
    assert cache.wait_synced(5)
    assert [p["metadata"]["name"] for p in cache.indexed("gpu-0")] == ["train-0"]
    client.CoreV1Api(chart_rbac.admin(cluster)).delete_namespaced_pod("train-0", "default", grace_period_seconds=0)
    eventually(lambda: deleted == ["train-0"])
    assert cache.indexed("gpu-0") == [] and cache.get("train-0", "default") is None
    assert cache.get("train-1", "default") is not None


def test_field_selector_reports_pods_entering_and_leaving_it(core: tuple[FakeCluster, client.CoreV1Api],
                                                             stop: threading.Event) -> None:
    cluster, api = core
    cluster.add_pod("gpu-0", "ok")
    cluster.add_pod("gpu-0", "crashed")
    seen: list[tuple[str, str]] = []
    cache = WatchCache(api.list_pod_for_all_namespaces, field_selector="status.phase=Failed", name="failed",
                       on_change=lambda t, o, old: seen.append((t, o["metadata"]["name"])))
    cache.start(stop)
    assert cache.wait_synced(5) and cache.items() == []

    def phase(value: str) -> Callable[[Obj], None]:
        return lambda pod: pod["status"].update(phase=value)

    cluster.update_pod("default", "crashed", phase("Failed"))
    eventually(lambda: seen == [("ADDED", "crashed")])
    cluster.update_pod("default", "ok", phase("Succeeded"))  # never in the selector: not seen
    cluster.update_pod("default", "crashed", phase("Running"))  # restarted: leaves the selector
    eventually(lambda: len(seen) == 2)
    assert seen[1] == ("DELETED", "crashed") and cache.items() == []


def test_label_selector_keeps_only_the_pool(core: tuple[FakeCluster, client.CoreV1Api],
                                            stop: threading.Event) -> None:
    cluster, api = core
    cache = WatchCache(api.list_node, label_selector="karpenter.sh/nodepool=b")
    cache.start(stop)
    assert cache.wait_synced(5) and names(cache) == ["gpu-2"]
    cluster.add_node("gpu-9", pool="b")
    cluster.add_node("gpu-8", pool="a")
    assert cache.wait_for(str(cluster.rv), 5)
    assert names(cache) == ["gpu-2", "gpu-9"]


def test_a_cache_listing_an_empty_cluster_misses_no_change_made_before_its_watch_begins(stop: threading.Event) -> None:
    """The window between the list and the watch request: a change made in it must come through the watch.
    An empty cluster is where it showed (CI): a list that answered resourceVersion "0" made the watch ask for
    "any version", which no real API server's list answers (etcd's revisions start at 1)."""
    with FakeCluster() as cluster:
        chart_rbac.enforce(cluster)
        api = client.CoreV1Api(client.ApiClient(chart_rbac.configuration(cluster)))

        def list_node(**kw: Any) -> Any:
            if kw.get("watch") and not cluster.nodes:  # the test's thread acts between the list and the watch
                cluster.add_node("gpu-new")
                cluster.add_pod("gpu-new", "train")  # a change no node watch sees: the bookmark must bring it
            return api.list_node(**kw)

        cache = WatchCache(list_node, name="nodes")
        cache.start(stop)
        assert cache.wait_synced(5)
        assert cache.wait_for(str(cluster.rv), 3), (cache.resource_version, cluster.rv)
        assert names(cache) == ["gpu-new"]


def test_bookmarks_carry_the_resource_version_forward(core: tuple[FakeCluster, client.CoreV1Api],
                                                      stop: threading.Event) -> None:
    cluster, api = core
    cache = WatchCache(api.list_node)
    cache.start(stop)
    assert cache.wait_synced(5)
    cluster.add_pod("gpu-0", "p")  # a change no node watch sees
    assert cache.wait_for(str(cluster.rv), 5)
    assert cache.stats["bookmarks"] >= 1 and cache.stats["events"] == 0


def test_expired_resource_version_lists_again(core: tuple[FakeCluster, client.CoreV1Api],
                                              stop: threading.Event) -> None:
    cluster, api = core
    cache = WatchCache(api.list_node, timeout_seconds=1)
    cache.start(stop)
    assert cache.wait_synced(5)
    watches = cluster.calls[("watch", "nodes")]
    with cluster.lock:  # the watch ends (timeoutSeconds) while history is compacted under it
        cluster.compact()
        cluster.add_node("gpu-7")
        cluster.compact()
    cluster.add_node("gpu-8")
    # on a busy machine the watch that ends and the one after it may both come after gpu-8 is seen: wait for both
    eventually(lambda: "gpu-8" in names(cache) and cluster.calls[("watch", "nodes")] > watches, 15)
    assert "gpu-7" in names(cache)
    # gpu-8 may come in the relist or in the watch after it; either way the expiry forced a second list
    eventually(lambda: cache.stats["expired"] >= 1 and cluster.calls[("list", "nodes")] == 2)


def _pod_lists(cluster: FakeCluster) -> list[dict[str, str]]:
    return [q for method, path, q in cluster.queries if path == "/api/v1/pods" and not q.get("watch")]


def test_a_list_of_every_pod_arrives_in_pages_each_slimmed_before_the_next_is_asked_for(
        core: tuple[FakeCluster, client.CoreV1Api], stop: threading.Event) -> None:
    cluster, api = core
    for i in range(1234):
        cluster.add_pod(f"gpu-{i % 3}", f"train-{i:04d}", gpus=8)
    pages_asked_at_slim: list[int] = []

    def slim(pod: Obj) -> Obj:  # which page had been asked for when this object was slimmed
        pages_asked_at_slim.append(len(_pod_lists(cluster)))
        return slim_pod(cast(Any, pod))

    cache = WatchCache(api.list_pod_for_all_namespaces, name="pods", transform=slim,
                       index=lambda p: p["spec"].get("nodeName"))
    cache.page_size = 100
    cache.start(stop)
    assert cache.wait_synced(5)
    assert sorted(p["metadata"]["name"] for p in cache.items()) == [f"train-{i:04d}" for i in range(1234)]
    assert len(cache.indexed("gpu-1")) == 411 and "managedFields" not in cache.items()[0]["metadata"]
    pages = _pod_lists(cluster)
    assert len(pages) == 13 and all(q["limit"] == "100" for q in pages)
    assert "continue" not in pages[0] and all("continue" in q for q in pages[1:])
    assert pages_asked_at_slim == [i // 100 + 1 for i in range(1234)]  # page k's objects slimmed before page k+1


def test_a_continue_token_expired_mid_list_lists_again_from_the_first_page_and_loses_nothing(
        core: tuple[FakeCluster, client.CoreV1Api], stop: threading.Event) -> None:
    cluster, api = core
    for i in range(250):
        cluster.add_pod(f"gpu-{i % 3}", f"train-{i:04d}")
    asked = 0

    def compacting(**kw: Any) -> Any:
        nonlocal asked
        if not kw.get("watch"):
            asked += 1
            if asked == 2:  # between the first and the second page: a change, and that revision compacted away
                cluster.add_pod("gpu-0", "train-late")
                cluster.compact()
        return api.list_pod_for_all_namespaces(**kw)

    cache = WatchCache(compacting, name="pods")
    cache.page_size = 100
    cache.start(stop)
    assert cache.wait_synced(5)
    assert len(cache.items()) == 251 and cache.get("train-late", "default") is not None
    assert [("continue" in q, q.get("limit")) for q in _pod_lists(cluster)] == [
        (False, "100"), (True, "100"), (False, "100"), (True, "100"), (True, "100")]  # in pages again, from page 1
    assert cache.stats["lists"] == 1 and cache.stats["errors"] == 0


def test_a_list_whose_tokens_keep_expiring_gives_up_with_the_410_for_its_callers_back_off(
        core: tuple[FakeCluster, client.CoreV1Api]) -> None:
    cluster, api = core
    for i in range(30):
        cluster.add_pod("gpu-0", f"train-{i:02d}")

    def always_compacting(**kw: Any) -> Any:
        if kw.get("_continue"):  # each list's revision is gone by its second page (a list slower than compaction)
            cluster.add_pod("gpu-1", f"late-{len(cluster.pods)}")
            cluster.compact()
        return api.list_pod_for_all_namespaces(**kw)

    with pytest.raises(ApiException) as err:
        list_pages(always_compacting, 10)
    assert err.value.status == 410
    assert sum(1 for q in _pod_lists(cluster) if "continue" not in q) == RESTARTS + 1


def test_http_410_and_server_errors_are_retried_with_backoff(core: tuple[FakeCluster, client.CoreV1Api],
                                                             stop: threading.Event) -> None:
    cluster, api = core
    cluster.fail("GET", "^/api/v1/nodes$", 500, times=2)
    cache = WatchCache(api.list_node, backoff=(0.05,), timeout_seconds=1)
    cache.start(stop)
    assert cache.wait_synced(5) and names(cache) == ["gpu-0", "gpu-1", "gpu-2"]
    assert cache.stats["errors"] == 2
    cluster.fail("GET", "^/api/v1/nodes$", 410)  # the next watch: HTTP 410 Gone
    eventually(lambda: cluster.calls[("list", "nodes")] >= 2)  # 2 failed + the first list... then a relist
    assert cache.wait_synced(0)


def test_own_write_is_read_back_at_once_and_not_rolled_back(core: tuple[FakeCluster, client.CoreV1Api],
                                                            stop: threading.Event) -> None:
    cluster, api = core
    cache = WatchCache(api.list_node)
    cache.start(stop)
    assert cache.wait_synced(5)
    for value in ("1", "2"):
        answer = json.loads(cast(Any, api.patch_node("gpu-0", {"metadata": {"annotations": {"step": value}}},
                                           _content_type="application/merge-patch+json",
                                           _preload_content=False)).data)
    cache.apply(answer)
    assert (cache.get("gpu-0") or {})["metadata"]["annotations"]["step"] == "2"
    assert cache.wait_for(str(cluster.rv), 5)  # the watch has brought both patches by now
    assert (cache.get("gpu-0") or {})["metadata"]["annotations"]["step"] == "2"


def test_watch_times_out_and_too_old_versions_expire_on_the_fake(core: tuple[FakeCluster, client.CoreV1Api]
                                                                  ) -> None:
    cluster, api = core
    start = time.monotonic()
    raw: Any = api.list_node(watch=True, resource_version=str(cluster.rv), timeout_seconds=1,
                             _preload_content=False)
    assert raw.data == b"" and 0.9 < time.monotonic() - start < 3
    cluster.compact()
    cluster.add_node("late")
    raw = api.list_node(watch=True, resource_version="1", timeout_seconds=5, _preload_content=False)
    [event] = [json.loads(line) for line in raw.data.splitlines()]
    assert event["type"] == "ERROR" and event["object"]["code"] == 410


def test_stopping_ends_a_waiting_watch(core: tuple[FakeCluster, client.CoreV1Api]) -> None:
    _, api = core
    stop = threading.Event()
    cache = WatchCache(api.list_node, timeout_seconds=60)
    thread = cache.start(stop)
    assert cache.wait_synced(5)
    time.sleep(0.1)
    stop.set()
    thread.join(3)
    assert not thread.is_alive()


def test_a_write_answered_for_an_object_the_watch_has_deleted_does_not_bring_it_back(
        core: tuple[FakeCluster, client.CoreV1Api], stop: threading.Event) -> None:
    _, api = core
    cache = WatchCache(api.list_node)
    cache.start(stop)
    assert cache.wait_synced(5)
    gone = json.loads(cast(Any, api.read_node("gpu-2", _preload_content=False)).data)
    gone["metadata"]["name"] = "gpu-deleted"  # as if its DELETED had come before our PATCH's answer
    cache.apply(gone)
    assert cache.get("gpu-deleted") is None and names(cache) == ["gpu-0", "gpu-1", "gpu-2"]


def test_a_list_older_than_the_watch_neither_drops_a_new_object_nor_revives_a_deleted_one(
        core: tuple[FakeCluster, client.CoreV1Api], stop: threading.Event) -> None:
    cluster, api = core
    stale = cast(Any, api.list_node(_preload_content=False)).data  # the fleet as it was: gpu-0..2
    answers = iter([stale])

    def list_node(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return api.list_node(**kwargs)
        return type("Answer", (), {"data": next(answers, None) or cast(Any, api.list_node(**kwargs)).data})()

    cache = WatchCache(list_node)
    cache.start(stop)
    assert cache.wait_synced(5)
    cluster.add_node("gpu-new")
    cluster.delete_node("gpu-2")
    eventually(lambda: names(cache) == ["gpu-0", "gpu-1", "gpu-new"])
    answers = iter([stale])
    cache.relist()  # a list answered before those events (the leader lists beside the running watch)
    assert names(cache) == ["gpu-0", "gpu-1", "gpu-new"]
