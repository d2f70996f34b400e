"""/metrics as the exporter serves it: the same bytes prometheus_client would write, served fast."""

from __future__ import annotations

import gzip
import socket
import urllib.request
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, p5_fleet
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from exporter.collector import Expectations, GpuhealthCollector
from exporter.exposition import render_text, start_server
from exporter.probes.base import Probe
from exporter.probes.efa import EfaProbe
from exporter.probes.kmsg import KmsgProbe
from exporter.probes.nvml import NvmlProbe
from exporter.runner import ProbeRunner
from exporter.snapshot import Snapshot

FIXTURES = Path(__file__).parent / "fixtures"


class Odd(Collector):
    """What the fast path must leave to prometheus_client, and label values that need escaping."""

    def collect(self) -> list[Metric]:
        g = GaugeMetricFamily("odd_gauge", 'help with \\ and\nnewline', labels=["v", "w"])
        g.add_metric(['quote " back \\ nl \n', "ünïcode ✓"], float("inf"))
        g.add_metric(["nan", ""], float("nan"))
        g.add_metric(["big", "neg"], 1.5e17)
        g.add_metric(["zero", "neg"], -0.0)
        g.add_metric(["zero", "pos"], 0)
        c = CounterMetricFamily("odd_events", "a counter", labels=["z", "a"])
        c.add_metric(["1", "2"], 3)
        t = GaugeMetricFamily("odd_stamped", "with a timestamp")
        t.add_metric([], -2.0, timestamp=1700000000.5)
        h = HistogramMetricFamily("odd_seconds", "a histogram", buckets=[("1.0", 2), ("+Inf", 3)], sum_value=4.5)
        return [g, c, t, h]


def a_node_registry() -> CollectorRegistry:
    """The exporter's registry over real probe results: 8 NVML GPUs, the p4d EFA tree, the kernel-log samples."""
    snapshot = Snapshot()
    probes: list[Probe] = [NvmlProbe(FakeNvml(p5_fleet())), EfaProbe(str(FIXTURES / "sysfs" / "p4d")),
              KmsgProbe.for_path(str(FIXTURES / "kmsg" / "samples.txt"), True, state_file=None)]
    for probe in probes:
        ProbeRunner(probe, snapshot, 15, 10).run_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, Expectations(gpus=8, efa_devices=4)))
    registry.register(ProcessCollector(registry=None))
    registry.register(Odd())
    return registry


def test_the_rendered_text_is_byte_for_byte_what_prometheus_client_writes() -> None:
    registry = a_node_registry()
    rendered = render_text(registry)
    assert b"gpuhealth_xid_errors_total{" in rendered and b"odd_seconds_bucket" in rendered
    # process_* values (CPU seconds, RSS) may change between the two renders; nothing else may
    assert _without_process(rendered) == _without_process(generate_latest(registry))
    assert rendered.count(b"\nprocess_") == generate_latest(registry).count(b"\nprocess_") > 0


def _without_process(body: bytes) -> list[bytes]:
    return [line for line in body.splitlines() if not line.startswith(b"process_")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def test_the_server_answers_prometheus_with_the_text_format_gzipped() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Odd())
    port = _free_port()
    server = start_server(port, "127.0.0.1", registry)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        prometheus = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                      "Accept-Encoding": "gzip"}
        status, headers, body = _request(url, headers=prometheus)
        assert status == 200 and headers["Content-Type"] == CONTENT_TYPE_LATEST
        assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == generate_latest(registry)
        status, headers, body = _request(url)
        assert status == 200 and "Content-Encoding" not in headers and body == generate_latest(registry)
        status, _, body = _request(f"{url}?name[]=odd_events_total")
        assert status == 200 and body == generate_latest(registry.restricted_registry(["odd_events_total"]))
        assert _request(url, method="POST")[0] == 405
        assert _request(url, method="OPTIONS")[1]["Allow"] == "OPTIONS,GET"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("addr", ["0.0.0.0", "::"])
def test_the_server_listens_on_ipv4_and_ipv6_wildcards(addr: str) -> None:
    if addr == "::" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    port = _free_port()
    try:
        server = start_server(port, addr, CollectorRegistry())
    except OSError as exc:
        pytest.skip(f"cannot listen on {addr}: {exc}")
    try:
        assert _request(f"http://127.0.0.1:{port}/metrics")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
