"""The served exporter's load on the API server, and how soon it obeys the GPU reset marker: it watches its own
Node (gpuhealth/exporter/node_watch.py) instead of reading it every reset_marker_interval (a GET of every Node every 10
s was 200 requests a second at 2,000 nodes; bench/api_requests.py measures both).

`gpuhealth-exporter` runs as a process against the fake API server, under the chart's RBAC for its ServiceAccount
(the fixtures `api` and `sa_dir`: tests/exporter/conftest.py).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuhealth.exporter.gpu_reset import ANNOTATION, RELEASED_REASON
from tests.exporter.node_identity import NODE
from tests.fakes.apiserver import FakeCluster
from tests.support import process_tree
from tests.support.polling import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def exporter(api: FakeCluster, sa_dir: Path, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts the served agent on NODE (its GPU probes off: nothing here to pause), with the given flags."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> subprocess.Popen[bytes]:
        (tmp_path / "kern.log").write_text("")
        (tmp_path / "exporter.yaml").write_text("condition_interval: 0.5\n")
        exe = shutil.which("gpuhealth-exporter", path=str(Path(sys.executable).parent))
        assert exe
        proc = process_tree.spawn(
            [exe, "--config", str(tmp_path / "exporter.yaml"), "--listen", f"127.0.0.1:{_free_port()}",
             "--kmsg-file", str(tmp_path / "kern.log"), "--node", NODE, "--kube-api", api.url,
             "--service-account-dir", str(sa_dir), "--state-file", str(tmp_path / "s.json"),
             "--disable", "nvml,dcgm,diag,efa", "--no-pod-resources", *flags],
            stderr=subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if k != "INSTANCE_TYPE"})
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def probes_condition(api: FakeCluster) -> dict[str, str]:
    return next((c for c in api.node(NODE)["status"]["conditions"] if c["type"] == "GpuhealthProbesHealthy"), {})


def node_reads(api: FakeCluster) -> int:
    return sum(n for (verb, resource), n in api.calls.items() if resource == "nodes")


def test_the_exporter_watches_its_node_instead_of_reading_it_every_interval(
        api: FakeCluster, exporter: Callable[..., subprocess.Popen[bytes]]) -> None:
    exporter("--reset-marker-interval", "0.2")
    assert wait_for(lambda: probes_condition(api).get("reason") == "ProbesHealthy")
    before = node_reads(api)
    time.sleep(3)  # 15 reset-marker intervals
    assert node_reads(api) - before == 0  # before: a GET of the Node every interval (15 here; 200/s at 2,000 nodes)
    reads = {verb: n for (verb, resource), n in api.calls.items() if resource == "nodes"}
    assert reads == {"list": 1, "watch": 1}  # one list, one watch still open: nothing per interval
    queries = [q for method, path, q in api.queries if path == "/api/v1/nodes"]
    assert all(q["fieldSelector"] == f"metadata.name={NODE}" for q in queries)  # its own Node, nothing else
    assert {q.get("allowWatchBookmarks") for q in queries if q.get("watch")} == {"true"}


def test_the_reset_marker_is_obeyed_when_it_is_set_not_at_the_next_interval(
        api: FakeCluster, exporter: Callable[..., subprocess.Popen[bytes]]) -> None:
    exporter("--reset-marker-interval", "120")
    assert wait_for(lambda: probes_condition(api).get("reason") == "ProbesHealthy")
    api.update_node(NODE, lambda n: n["metadata"]["annotations"].update({ANNOTATION: "gpuhealth-reset-x"}))
    set_at = time.monotonic()
    assert wait_for(lambda: probes_condition(api).get("reason") == RELEASED_REASON, seconds=10)
    assert time.monotonic() - set_at < 10  # before: at the next read, up to 120 s here (10 s by default)
    api.update_node(NODE, lambda n: n["metadata"]["annotations"].pop(ANNOTATION))
    assert wait_for(lambda: probes_condition(api).get("reason") == "ProbesHealthy", seconds=10)
