"""Reading a raw socket to its end, for tests that speak HTTP by hand to see exactly what a server sends."""

from __future__ import annotations

import contextlib
import socket


def until_closed(s: socket.socket, timeout: float) -> bytes:
    """What the server sent before it closed the connection (b"" if it closed without a word)."""
    s.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            data += chunk
    return data
