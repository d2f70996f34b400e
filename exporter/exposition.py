"""Serves /metrics in the Prometheus text format (0.0.4), rendered here rather than by prometheus_client.

prometheus_client's renderers cost ~10 us a sample (OpenMetrics, which it picks when Prometheus
asks for it first) or ~5 us (text), and gzip at level 9 another ~1.3 us: on an 8-GPU node with 32
EFA devices (~1,600 series) a scrape took ~16 ms (docs/benchmarks.md). The output here is byte for
byte what prometheus_client.exposition.generate_latest writes (tests/test_exposition.py), at ~1 us a
sample, gzipped at level 1. Prometheus lists the text format in its Accept header, so serving it is
ordinary content negotiation. Anything unusual (other metric types, timestamps, names that need
escaping) is rendered by prometheus_client itself.
"""

from __future__ import annotations

import gzip
import math
import re
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST, ThreadingWSGIServer, generate_latest, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
GZIP_LEVEL = 1  # the body is ~100 bytes a line of repetitive labels: level 1 is within ~20% of 9, at a third the CPU


class _One:
    """A single metric as a registry, for prometheus_client's own renderer."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self.metric]


def _escape_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


# Names already checked: the same few recur in every scrape.
_good_metric_names: set[str] = set()
_good_label_names: set[str] = set()
_go_float = cast(Callable[[float], str], floatToGoString)  # the library's value format, e.g. 1.0, +Inf, 1.5e+06


_values: dict[float, str] = {}  # most values are 0.0 and 1.0: format each once


def _value(value: float) -> str:
    if not value:  # 0.0 and -0.0 are one key to a dict, but print differently
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    text = _values.get(value)
    if text is None:
        text = _go_float(value)
        if len(_values) >= 4096:
            _values.clear()
        _values[value] = text
    return text


def _legacy(names: Iterable[str], pattern: re.Pattern[str], good: set[str]) -> bool:
    if good.issuperset(names):
        return True
    if all(pattern.match(n) for n in names):
        good.update(names)
        return True
    return False


def _render_plain(metric: Metric) -> list[str] | None:
    """The lines of a gauge or counter with legacy names and no timestamps or OpenMetrics-only samples;
    None for anything else."""
    if metric.type not in ("gauge", "counter") or not _legacy((metric.name,), _METRIC_NAME, _good_metric_names):
        return None
    name = metric.name + "_total" if metric.type == "counter" else metric.name
    help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = [f"# HELP {name} {help_text}\n# TYPE {name} {metric.type}\n"]
    keys: Any = None
    order: list[str] = []
    template = ""
    for s in metric.samples:
        if s.timestamp is not None or s.name != name:
            return None
        labels = s.labels
        if keys is None or labels.keys() != keys:  # a family's samples share their label names: one template
            if not _legacy(labels, _LABEL_NAME, _good_label_names):
                return None
            keys, order = labels.keys(), sorted(labels)
            pairs = ",".join(f'{k}="{{}}"' for k in order)
            template = f"{name}{{{{{pairs}}}}} {{}}\n" if order else f"{name} {{}}\n"
        values = [labels[k] for k in order]
        joined = "".join(values)
        if "\\" in joined or "\n" in joined or '"' in joined:
            values = [_escape_value(v) for v in values]
        lines.append(template.format(*values, _value(s.value)))
    return lines


def render_text(registry: Collector) -> bytes:
    """The text exposition format of everything `registry` collects."""
    out: list[str] = []
    for metric in registry.collect():
        lines = _render_plain(metric)
        if lines is not None:
            out.extend(lines)
        else:
            out.append(generate_latest(_One(metric)).decode("utf-8"))
    return "".join(out).encode("utf-8")


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], list[bytes]]


def make_app(registry: CollectorRegistry) -> WsgiApp:
    """prometheus_client's WSGI app, with the text format always and this renderer."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        headers: list[tuple[str, str]] = [("Allow", "OPTIONS,GET")]
        if method == "OPTIONS":
            status, output = "200 OK", b""
        elif method != "GET":
            status, output = "405 Method Not Allowed", f"# HTTP 405: {method}; use OPTIONS or GET\n".encode()
        elif environ.get("PATH_INFO") == "/favicon.ico":
            status, headers, output = "200 OK", [], b""
        else:
            params = parse_qs(environ.get("QUERY_STRING", ""))
            source = registry.restricted_registry(params["name[]"]) if "name[]" in params else registry
            status, headers, output = "200 OK", [("Content-Type", CONTENT_TYPE_LATEST)], render_text(source)
            if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
                output = gzip.compress(output, GZIP_LEVEL)
                headers.append(("Content-Encoding", "gzip"))
        start_response(status, headers)
        return [output]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def start_server(port: int, addr: str, registry: CollectorRegistry) -> WSGIServer:
    """Serves `registry` on addr:port from a daemon thread, as prometheus_client.start_http_server does."""
    family, _, _, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(str(sockaddr[0]), port, make_app(registry), Server, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd
