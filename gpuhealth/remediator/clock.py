"""The one place the remediator reads the wall clock. Everything else is handed a `Clock`, so that a
test (or `plan --now`) decides what time it is, and no behaviour depends on the date a test runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)
