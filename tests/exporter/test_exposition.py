"""/metrics: prometheus_client's own text rendering, in the text format whatever the client prefers, gzip level 1."""

from __future__ import annotations

import gzip
import socket
import urllib.request
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.efa_expected import EfaExpectation
from gpuhealth.exporter.exposition import start_server
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.probes.base import Probe
from gpuhealth.exporter.probes.efa import EfaProbe
from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.nvml import FakeNvml, p5_fleet
from tests.support import paths

FIXTURES = paths.FIXTURES
# What Prometheus 2.42 sends: OpenMetrics first, the text format as a fallback.
PROMETHEUS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                        "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
              "Accept-Encoding": "gzip"}


class Odd(Collector):
    """Metric types, values and label values that need more than the plain case (the library renders them)."""

    def collect(self) -> list[Metric]:
        g = GaugeMetricFamily("odd_gauge", 'help with \\ and\nnewline', labels=["v", "w"])
        g.add_metric(['quote " back \\ nl \n', "ünïcode ✓"], float("inf"))
        g.add_metric(["nan", ""], float("nan"))
        g.add_metric(["big", "neg"], 1.5e17)
        c = CounterMetricFamily("odd_events", "a counter", labels=["z", "a"])
        c.add_metric(["1", "2"], 3)
        t = GaugeMetricFamily("odd_stamped", "with a timestamp")
        t.add_metric([], -2.0, timestamp=1700000000.5)
        h = HistogramMetricFamily("odd_seconds", "a histogram", buckets=[("1.0", 2), ("+Inf", 3)], sum_value=4.5)
        return [g, c, t, h]

    def describe(self) -> list[Metric]:
        return self.collect()  # so that ?name[]= can find it (the exporter's own collector describes nothing)


def a_node_registry() -> CollectorRegistry:
    """The exporter's registry over real probe results: 8 NVML GPUs, the p4d EFA tree, the kernel-log samples."""
    snapshot = Snapshot()
    probes: list[Probe] = [NvmlProbe(FakeNvml(p5_fleet())), EfaProbe(str(FIXTURES / "sysfs" / "p4d")),
              KmsgProbe.for_path(str(FIXTURES / "kmsg" / "samples.txt"), True, state_file=None)]
    for probe in probes:
        ProbeRunner(probe, snapshot, 15, 10).run_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, Expectations(gpus=8, efa=EfaExpectation(setting=4))))
    registry.register(Odd())
    return registry


@pytest.fixture
def served() -> Iterator[tuple[str, CollectorRegistry]]:
    registry = a_node_registry()
    port = _free_port()
    server = start_server(port, "127.0.0.1", registry)
    yield f"http://127.0.0.1:{port}/metrics", registry
    _stop(server)


def _stop(server: WSGIServer) -> None:
    server.shutdown()
    server.server_close()


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


def test_prometheus_gets_the_libraries_text_format_gzipped_at_level_1(served: tuple[str, CollectorRegistry]) -> None:
    url, registry = served
    status, headers, body = _request(url, headers=PROMETHEUS)
    assert status == 200 and headers["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
    assert headers["Content-Encoding"] == "gzip"
    assert body[8] == 4  # the gzip header's XFL byte: 4 = fastest (level 1), 2 = best (the library's level 9)
    text = gzip.decompress(body)
    assert text == generate_latest(registry)
    assert b"gpuhealth_efa_hw_counter_total{" in text and b'odd_stamped -2.0 1700000000500\n' in text
    assert b"# EOF" not in text  # not OpenMetrics, though Prometheus listed it first


def test_without_gzip_the_body_is_plain_and_any_accept_gets_the_text_format(
        served: tuple[str, CollectorRegistry]) -> None:
    url, registry = served
    for accept in ({}, {"Accept": "application/openmetrics-text;version=1.0.0"}):
        status, headers, body = _request(url, headers=accept)
        assert status == 200 and headers["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
        assert "Content-Encoding" not in headers and body == generate_latest(registry)


def test_the_rest_of_http_is_prometheus_clients(served: tuple[str, CollectorRegistry]) -> None:
    url, registry = served
    status, headers, body = _request(f"{url}?name[]=odd_events_total", headers=PROMETHEUS)
    only = registry.restricted_registry(["odd_events_total"])
    assert status == 200 and gzip.decompress(body) == generate_latest(only)
    assert b"odd_events_total" in generate_latest(only) and b"odd_gauge" not in generate_latest(only)
    status, headers, body = _request(url, method="POST", headers=PROMETHEUS)
    assert status == 405 and headers["Allow"] == "OPTIONS,GET" and "Content-Encoding" not in headers
    assert body.startswith(b"# HTTP 405")
    status, headers, body = _request(url, method="OPTIONS", headers=PROMETHEUS)
    assert status == 200 and headers["Allow"] == "OPTIONS,GET" and body == b""
    status, headers, body = _request(url.replace("/metrics", "/favicon.ico"), headers=PROMETHEUS)
    assert status == 200 and body == b"" and "Content-Encoding" not in headers


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
        _stop(server)
