"""Serves /metrics: prometheus_client's own WSGI app and text renderer, in the text format (0.0.4), gzip level 1.

Two settings differ from prometheus_client.start_http_server, and only settings:
- the format: the library picks OpenMetrics when the scraper lists it first, as Prometheus does, and
  its OpenMetrics renderer costs about twice its text renderer (~10 us a sample against ~5 us,
  docs/benchmarks.md). Prometheus also lists the text format in its Accept header, so the text
  format (generate_latest) is served to every client: ordinary content negotiation.
- gzip: the library compresses at level 9; the body is ~100 bytes a line of repetitive labels,
  for which level 1 is within ~20% of the size at a fraction of the CPU.
Everything else (OPTIONS, 405, ?name[]= filtering, the rendering itself) is prometheus_client's.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import ThreadingWSGIServer, gzip_accepted, make_wsgi_app
from prometheus_client.registry import Collector

TEXT_FORMAT = "text/plain;version=0.0.4"  # what the app is told the client accepts
GZIP_LEVEL = 1

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def make_app(registry: Collector) -> WsgiApp:
    """prometheus_client's WSGI app for `registry`, always in the text format, gzipped at GZIP_LEVEL when accepted."""
    library_app: WsgiApp = make_wsgi_app(registry, disable_compression=True)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        gzip_it = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
        answer: list[Any] = []
        body = b"".join(library_app({**environ, "HTTP_ACCEPT": TEXT_FORMAT},
                                    lambda status, headers, *_: answer.extend((status, headers))))
        status, headers = answer
        if gzip_it and status.startswith("200") and any(k == "Content-Type" for k, _ in headers):
            body = gzip.compress(body, GZIP_LEVEL)
            headers = [*headers, ("Content-Encoding", "gzip")]
        start_response(status, headers)
        return [body]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def start_server(port: int, addr: str, registry: Collector) -> WSGIServer:
    """Serves `registry` on addr:port (IPv4 or IPv6) from a daemon thread, as prometheus_client's
    start_wsgi_server does, with make_app's settings."""
    family, _, _, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(str(sockaddr[0]), port, make_app(registry), Server, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd
