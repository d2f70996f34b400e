"""An HTTP server on 127.0.0.1 that answers every GET with the same body: a fixed Alertmanager answer, a fixed
exposition to scrape."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StaticAnswer:
    """Serves `body` as `content_type` on every path until closed (a context manager, or close())."""

    def __init__(self, body: bytes, content_type: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # a reader that stops at its byte cap hangs up
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.address}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> StaticAnswer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
