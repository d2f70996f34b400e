"""Faults a test injects into the fake API server: an error status, a delay, or a client killed at one request."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.fakes.apiserver.state import ClusterState


class Faults(ClusterState):
    def fail(self, method: str, path: str, status: int, times: int = 1, reason: str = "Injected") -> None:
        """Answer the next `times` requests matching (method, path regex) with `status`."""
        with self.lock:
            self._faults.append({"method": method, "path": re.compile(path), "status": status, "times": times,
                                 "reason": reason})

    def heal(self) -> None:
        """The outage is over: drop every injected failure and delay not yet used."""
        with self.lock:
            self._faults.clear()

    def delay(self, method: str, path: str, seconds: float, times: int = 1) -> None:
        with self.lock:
            self._faults.append({"method": method, "path": re.compile(path), "delay": seconds, "times": times})

    def crash_on(self, method: str, path: str, then: Callable[[], None], after: int = 0) -> None:
        """A client killed at an exact point: the request matching (method, path regex) after `after` such requests
        were served runs `then` (the test SIGKILLs the client there) and is never performed nor answered (the
        connection is closed), as if the client had died just before sending it."""
        with self.lock:
            self._faults.append({"method": method, "path": re.compile(path), "crash": then, "times": 1,
                                 "after": after})

    def _take_fault(self, method: str, path: str) -> dict[str, Any] | None:
        for f in self._faults:
            if f["times"] > 0 and f["method"] == method and f["path"].search(path):
                if f.get("after", 0) > 0:  # crash_on: that many matching requests are served first
                    f["after"] -= 1
                    return None
                f["times"] -= 1
                return f
        return None
