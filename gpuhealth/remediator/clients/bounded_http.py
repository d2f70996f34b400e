"""One HTTP GET that ends by a deadline whatever the server does, and reads at most a byte cap.

A socket timeout bounds each read, not the call: a server that sends one byte a second never trips it and holds
the caller for as long as it likes. Here a timer shuts the connection down when the deadline passes, wherever the
exchange is (connecting, the TLS handshake, the headers, the body), and the body is read in pieces, stopping one
byte past the cap. Only the name's DNS lookup is outside the deadline (the resolver's own timeouts bound it).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from email.message import Message

CHUNK = 64 << 10


class DeadlinePassed(Exception):
    """No full answer before the deadline: the connection was cut."""


class AnswerTooLarge(Exception):
    """The answer is longer than the cap: reading stopped one byte past it."""


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    headers: Message
    body: bytearray  # not copied into bytes: the answer may be megabytes


class _Cutter:
    """Shuts the connection down at the deadline, unless the exchange finished first."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.conn, self.cut = conn, False
        self._lock = threading.Lock()
        self._finished = False
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.cut = True
            sock = self.conn.sock
        if sock is not None:
            # socket.socket's own shutdown: an SSLSocket's would drop its TLS state under the reading thread
            with contextlib.suppress(OSError):  # closed meanwhile
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def finish(self) -> bool:
        """Stop the timer; True when it had already cut the connection."""
        self._timer.cancel()
        with self._lock:
            self._finished = True
            return self.cut


def get(url: str, headers: dict[str, str], deadline: float, max_bytes: int,
        context: ssl.SSLContext | None = None) -> Reply:
    """GET `url`, done by `deadline` (time.monotonic()) or DeadlinePassed; AnswerTooLarge past `max_bytes`; OSError
    and http.client.HTTPException for the rest."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlinePassed("no time left")
    parts = urllib.parse.urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=remaining, context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=remaining)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    cutter = _Cutter(conn, remaining)
    try:
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
            body = bytearray()
            while chunk := response.read1(CHUNK):
                body += chunk
                if len(body) > max_bytes:
                    raise AnswerTooLarge(f"answer larger than {max_bytes} bytes")
            incomplete = response.length is not None and response.length > 0
        finally:
            was_cut = cutter.finish()
    except (OSError, http.client.HTTPException) as exc:
        if was_cut:
            raise DeadlinePassed(f"no full answer within {remaining:.3g}s") from exc
        raise
    finally:
        conn.close()
    if was_cut:  # the cut can look like a clean end of the body
        raise DeadlinePassed(f"no full answer within {remaining:.3g}s")
    if incomplete:
        raise http.client.IncompleteRead(bytes(body), response.length)
    return Reply(response.status, response.reason, response.headers, body)
