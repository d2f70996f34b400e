"""A server on 127.0.0.1 that answers every request one byte at a time: an Alertmanager member that is alive (each
read gets a byte well within any socket timeout) but never finishes an answer in useful time."""

from __future__ import annotations

import contextlib
import json
import socket
import threading


class DrippingServer:
    """Each connection gets a whole HTTP/1.1 answer (status line, headers, a JSON list of `size` bytes), one byte
    every `every` seconds, until it is read or the client goes away. `requests`: the request lines seen."""

    def __init__(self, every: float = 0.05, size: int = 100_000) -> None:
        self.every = every
        body = json.dumps([{"pad": "x" * max(0, size - 16)}]).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        self.answer = head.encode() + body
        self.requests: list[str] = []
        self.dripped = 0  # bytes sent, all connections together
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True, name="dripping-server").start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            request = conn.recv(65536).decode("latin-1")
            self.requests.append(request.split("\r\n", 1)[0])
            for i in range(len(self.answer)):
                if self._stop.wait(self.every):
                    return
                try:
                    conn.sendall(self.answer[i:i + 1])
                except OSError:  # the client cut the connection
                    return
                self.dripped += 1

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> DrippingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
