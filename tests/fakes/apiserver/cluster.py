"""FakeCluster: the fake API server as a test holds it (tests/fakes/apiserver/__init__.py says what it serves and
how strictly), made of its parts: the state it keeps, who may ask what, the routes, paged lists, watches, injected
faults, and what a test changes and reads outside the API."""

from __future__ import annotations

import threading

from tests.fakes.apiserver.access import Access
from tests.fakes.apiserver.edits import Edits
from tests.fakes.apiserver.faults import Faults
from tests.fakes.apiserver.paging import PagedLists
from tests.fakes.apiserver.reads import Reads
from tests.fakes.apiserver.routes import Routes
from tests.fakes.apiserver.server import ApiHandler, QuietServer
from tests.fakes.apiserver.watch import Watches


class FakeCluster(Access, Routes, PagedLists, Watches, Faults, Edits, Reads):
    def __init__(self, token: str = "") -> None:
        super().__init__(token)
        self.server = QuietServer(("127.0.0.1", 0), ApiHandler)
        self.server.cluster = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> FakeCluster:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for close in self.on_close:
            close()
        with self.lock:
            self._closed = True
            self._changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
