"""The watch of the exporter's own Node (gpuhealth/exporter/node_watch.py) over HTTP against the fake API server, under
the chart's RBAC (the fixtures `api` and `sa_dir`: tests/exporter/conftest.py): it resumes where it stopped, lists again
only when it must, and backs off without giving up. What it means for the GPU reset marker (nothing changes while it
is broken): tests/exporter/test_exporter_reset_marker.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpuhealth.exporter.gpu_reset import ANNOTATION
from gpuhealth.exporter.kube_http import KubeError
from gpuhealth.exporter.node_watch import NodeWatch
from tests.exporter.node_identity import NODE
from tests.fakes.apiserver import FakeCluster
from tests.support.polling import wait_for


def test_an_api_server_restart_resumes_the_watch_where_it_stopped(api: FakeCluster, sa_dir: Path) -> None:
    stop = threading.Event()
    watch = NodeWatch(api.url, NODE, sa_dir=str(sa_dir), watch_seconds=(60, 60), backoff=(0.05, 0.2))
    try:
        watch.start(stop)
        assert wait_for(lambda: api.calls[("watch", "nodes")] == 1)
        api.update_node("gpu-node-2", lambda n: n["metadata"]["labels"].update(x="1"))  # moves the bookmark on
        time.sleep(0.3)
        resume_at = str(api.rv)
        api.drop_watches()
        assert wait_for(lambda: api.calls[("watch", "nodes")] == 2)
        assert watch.failures == 1 and api.calls[("list", "nodes")] == 1  # resumed, not listed again
        last = [q for method, path, q in api.queries if q.get("watch")][-1]
        assert last["resourceVersion"] == resume_at  # from its bookmark: nothing delivered twice
        api.update_node(NODE, lambda n: n["metadata"]["annotations"].update({ANNOTATION: "r-1"}))
        # until the resumed watch delivers, the Node seen is not known to be current: annotations() refuses
        assert wait_for(lambda: _annotation_if_current(watch) == "r-1")
    finally:
        stop.set()


def _annotation_if_current(watch: NodeWatch) -> str | None:
    try:
        return watch.annotations().get(ANNOTATION)
    except KubeError:
        return None


def test_a_failing_api_server_is_retried_with_a_bounded_backoff(api: FakeCluster, sa_dir: Path) -> None:
    stop = threading.Event()
    api.fail("GET", "^/api/v1/nodes$", 503, times=10_000)
    watch = NodeWatch(api.url, NODE, sa_dir=str(sa_dir), backoff=(0.1, 0.4))
    try:
        watch.start(stop)
        time.sleep(2.0)
        attempts = api.calls[("list", "nodes")]
        # waits of 0.1, 0.2, 0.4, 0.4, ... s, each jittered down to half: 6 to 12 in 2 s; neither a busy loop nor
        # given up
        assert 3 <= attempts <= 16, attempts
        assert watch.failures == attempts
        api.heal()
        assert wait_for(lambda: watch.node() is not None, seconds=2)  # within the longest wait
    finally:
        stop.set()


def test_a_watch_the_api_server_ends_is_renewed_from_where_it_stopped(api: FakeCluster, sa_dir: Path) -> None:
    stop = threading.Event()
    watch = NodeWatch(api.url, NODE, sa_dir=str(sa_dir), watch_seconds=(1, 1))  # timeoutSeconds=1
    try:
        watch.start(stop)
        assert wait_for(lambda: api.calls[("watch", "nodes")] >= 3, seconds=10)
        assert watch.failures == 0 and api.calls[("list", "nodes")] == 1  # an ended watch is no failure
        assert watch.annotations() == {}
    finally:
        stop.set()


def marker(watch: NodeWatch) -> str | None:
    """The reset marker the watch sees; None while it is broken (annotations() then refuses to answer)."""
    try:
        return watch.annotations().get(ANNOTATION)
    except KubeError:
        return None


def test_a_watch_gone_silent_is_found_dead_and_resumed_before_the_reset_rung_times_out(
        api: FakeCluster, sa_dir: Path) -> None:
    # A connection whose peer vanished without a word: no event, no bookmark, no end. With the API server's
    # bookmark about every minute, silence past `silence` (150 s by default; 1 s here) is a dead connection.
    stop = threading.Event()
    api.bookmark_interval = 0.2
    watch = NodeWatch(api.url, NODE, sa_dir=str(sa_dir), watch_seconds=(600, 600), backoff=(0.05, 0.2), silence=1.0)
    try:
        watch.start(stop)
        assert wait_for(lambda: api.calls[("watch", "nodes")] == 1)
        api.silence_watches()
        time.sleep(0.3)  # the watch has gone quiet before the change
        api.update_node(NODE, lambda n: n["metadata"]["annotations"].update({ANNOTATION: "r-1"}))
        assert wait_for(lambda: marker(watch) == "r-1", seconds=5)  # not after 600 s
        assert watch.failures == 1 and api.calls[("list", "nodes")] == 1  # resumed from where it was, not listed
    finally:
        stop.set()
        api.drop_watches()


def test_a_quiet_node_kept_alive_by_bookmarks_is_no_failure(api: FakeCluster, sa_dir: Path) -> None:
    # Nothing changes for several silence periods, but the API server's periodic bookmarks keep the watch alive.
    stop = threading.Event()
    api.bookmark_interval = 0.2
    watch = NodeWatch(api.url, NODE, sa_dir=str(sa_dir), watch_seconds=(600, 600), silence=1.0)
    try:
        watch.start(stop)
        time.sleep(3.5)
        assert watch.failures == 0 and api.calls[("watch", "nodes")] == 1
        assert watch.annotations() == {}
    finally:
        stop.set()
