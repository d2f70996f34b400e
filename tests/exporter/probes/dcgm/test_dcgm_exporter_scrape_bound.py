"""How much of dcgm-exporter's /metrics the exporter reads: at most MAX_SCRAPE_BYTES, however the answer is framed.

A real HTTP server on 127.0.0.1 answers with the recorded L4 page, padded with a comment line to the size
under test, framed by Content-Length, by closing the connection, or in chunks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.probes.base import OUTPUT_TOO_LARGE
from gpuhealth.exporter.probes.dcgm import MAX_SCRAPE_BYTES, DcgmExporterProbe
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot
from tests.exporter.probes.dcgm.local_http import serving
from tests.exporter.probes.dcgm.test_dcgm_probe import L4_SCRAPE, as_map, error_of

FRAMINGS = ("content-length", "close-delimited", "chunked")
_CHUNK = 64 * 1024


def padded_page(size: int) -> bytes:
    """The recorded L4 scrape followed by one comment line, `size` bytes in all: still a valid page."""
    page = L4_SCRAPE.read_bytes()
    return page + b"# " + b"x" * (size - len(page) - 3) + b"\n"


@dataclass
class Served:
    url: str = ""
    sent: int = 0  # body bytes the server got into the socket before the client hung up
    done: threading.Event = field(default_factory=threading.Event)


@contextmanager
def serve(body: bytes, framing: str, declared_length: int | None = None,
          stall: threading.Event | None = None) -> Iterator[Served]:
    """Answers every GET with body in the given framing; with `stall`, waits for it after the first chunk."""
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if framing == "chunked" else "HTTP/1.0"

        def do_GET(self) -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                if framing == "content-length":
                    self.send_header("Content-Length", str(declared_length or len(body)))
                if framing == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                self.end_headers()
                for start in range(0, len(body), _CHUNK):
                    self._write(body[start:start + _CHUNK])
                    if stall is not None:
                        stall.wait(10)
                if framing == "chunked":
                    self.wfile.write(b"0\r\n\r\n")
            except ConnectionError:  # the probe hung up once it had read enough: expected here
                pass
            finally:
                served.done.set()

        def _write(self, chunk: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if framing == "chunked" else chunk)
            served.sent += len(chunk)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as server:
        served.url = f"http://127.0.0.1:{server.server_port}/metrics"
        try:
            yield served
        finally:
            if stall is not None:
                stall.set()


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_scrape_one_byte_over_the_bound_fails_closed_as_output_too_large(framing: str) -> None:
    with serve(padded_page(MAX_SCRAPE_BYTES + 1), framing) as served:
        err = error_of(DcgmExporterProbe(served.url, trust_unverified=True))
    assert err.reason == OUTPUT_TOO_LARGE
    assert err.message == f"{served.url}: more than 4 MiB, not parsed"


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_scrape_of_exactly_the_bound_is_read_whole_and_parsed(framing: str) -> None:
    with serve(padded_page(MAX_SCRAPE_BYTES), framing) as served:
        result = DcgmExporterProbe(served.url, trust_unverified=True).collect(5)
    assert as_map(result) == as_map(DcgmExporterProbe(str(L4_SCRAPE), trust_unverified=True).collect(5))
    assert result.gpus


@pytest.mark.parametrize("framing", FRAMINGS)
def test_the_recorded_page_is_parsed_in_every_framing(framing: str) -> None:
    with serve(L4_SCRAPE.read_bytes(), framing) as served:
        result = DcgmExporterProbe(served.url, trust_unverified=True).collect(5)
    assert as_map(result) == as_map(DcgmExporterProbe(str(L4_SCRAPE), trust_unverified=True).collect(5))


def test_a_declared_length_over_the_bound_is_refused_before_the_body_is_read() -> None:
    # The server sends one chunk of a declared 300 MB and then stalls: only the header can end the probe early.
    with serve(padded_page(1024 * 1024), "content-length", declared_length=300_000_000,
               stall=threading.Event()) as served:
        started = time.monotonic()
        err = error_of(DcgmExporterProbe(served.url, trust_unverified=True), deadline=5)
        assert time.monotonic() - started < 3
    assert err.reason == OUTPUT_TOO_LARGE


def test_reading_an_endless_chunked_scrape_stops_near_the_bound() -> None:
    stream = padded_page(16 * MAX_SCRAPE_BYTES)
    with serve(stream, "chunked") as served:
        err = error_of(DcgmExporterProbe(served.url, trust_unverified=True))
        assert served.done.wait(10)
    assert err.reason == OUTPUT_TOO_LARGE
    # What loopback socket buffers hold (a few MiB each way) may be sent beyond what was read, no more.
    assert served.sent < 6 * MAX_SCRAPE_BYTES


def test_a_scrape_file_over_the_bound_fails_closed_as_output_too_large(tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    path.write_bytes(padded_page(MAX_SCRAPE_BYTES + 1))
    err = error_of(DcgmExporterProbe(str(path), trust_unverified=True))
    assert err.reason == OUTPUT_TOO_LARGE


def test_an_oversized_scrape_is_served_as_a_failed_probe_with_reason_output_too_large() -> None:
    snapshot = Snapshot()
    with serve(padded_page(MAX_SCRAPE_BYTES + 1), "chunked") as served:
        ProbeRunner(DcgmExporterProbe(served.url, trust_unverified=True), snapshot, interval=60, deadline=5).run_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, Expectations()))
    samples = [s for fam in text_string_to_metric_families(generate_latest(registry).decode()) for s in fam.samples]
    assert {s.labels["probe"]: s.value for s in samples if s.name == "gpuhealth_probe_success"} == {"dcgm_exporter": 0}
    assert {(s.labels["probe"], s.labels["reason"]): s.value
            for s in samples if s.name == "gpuhealth_probe_error"} == {("dcgm_exporter", OUTPUT_TOO_LARGE): 1}
    assert not any(s.name.startswith("gpuhealth_gpu_") for s in samples)
