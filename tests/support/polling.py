"""Waiting in a test for what another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(what: Callable[[], object], seconds: float = 10.0) -> bool:
    """Whether `what` comes true within `seconds` (polled every 50 ms; asked once more at the end)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if what():
            return True
        time.sleep(0.05)
    return bool(what())
