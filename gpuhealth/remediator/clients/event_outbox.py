"""The audit trail's outbox: Events the API did not take, kept and sent later.

Events are the audit trail, and an API outage must not leave holes in it (a reboot with no
RebootSucceeded): an Event the API does not take (5xx, 429, no answer) is retried briefly, then kept in a
bounded outbox (EventOutbox) and sent later, oldest first, by the next Event or a background flush. A
pass never waits long on an Event: while the outbox holds something, a new Event gets one try.
The client (clients/kube.py) makes the Events and hands them here with the call that creates one.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

log = logging.getLogger("gpuhealth.remediator")


def _retryable(exc: Exception) -> bool:
    """The API's trouble (a server error, throttling, no answer), not the Event's: worth sending again."""
    if isinstance(exc, ApiException):
        return exc.status in (0, 429) or exc.status >= 500
    return isinstance(exc, TransportError | OSError)


class EventOutbox:
    """Events kept to send again after the API failed to take them: the audit trail is part of 'nothing
    lost'. Oldest first, one sender at a time (an Event is never sent twice: its name is fixed when it is
    made, and 409 AlreadyExists means an earlier try got through). At most `capacity` kept; beyond, the
    oldest is dropped, logged and counted. A 4xx other than 409 and 429 is the Event's own fault: dropped at
    once (logged, counted), never retried. While nothing is kept, Events are sent as they come, several at once
    from a pass's parallel writes (act/parallel.py): only Events kept while the API failed have an order to keep."""

    def __init__(self, create: Callable[[str, Any], None], capacity: int = 1000,
                 retry: Sequence[float] = (0.1, 0.4), patience: float = 1.0,
                 backoff: Sequence[float] = (1.0, 2.0, 5.0, 10.0, 30.0)) -> None:
        self.create, self.capacity = create, capacity
        self.retry, self.patience, self.backoff = tuple(retry), patience, tuple(backoff)
        self.on_drop: Callable[[str], None] | None = None  # called with the reason: rejected, outbox_full
        self.on_sent_late: Callable[[int], None] | None = None
        self._items: deque[tuple[str, Any, str]] = deque()  # (namespace, body, what: for the log)
        self._lock = threading.Lock()  # guards _items and _flusher
        self._sending = threading.Lock()  # one sender at a time: order kept
        self._flusher: threading.Thread | None = None
        self._failing = False  # the last try met the API's trouble: Events go one sender at a time until one is taken
        self._exit_hook = False

    def __len__(self) -> int:
        return len(self._items)

    def send(self, namespace: str, body: Any, what: str) -> None:
        """Create the Event now if the API takes it (retried briefly), else keep it to send later. Never raises
        for the API's trouble; an Event the API refuses (4xx) is logged and dropped."""
        item = (namespace, body, what)
        # Nothing kept and the API not failing: no order to keep, so senders (a pass's parallel writes) go side by
        # side, one try each; a failure goes the one-at-a-time way below (retries by one sender, the rest kept).
        tried = not self._items and not self._failing
        error = self._try(item) if tried else None
        if tried and error is None:
            return
        if not self._sending.acquire(blocking=False):  # a flush (or another sender's retries) is under way
            self._keep(item, error or "a flush of earlier Events is under way")
            return
        try:
            if self._items and not self._flush_locked():  # the API is still failing: one try was enough
                self._keep(item, "the API is still failing")
                return
            deadline = time.monotonic() + self.patience
            attempt = 0
            if not tried:
                error = self._try(item)
            while error is not None:
                if attempt == len(self.retry) or time.monotonic() + self.retry[attempt] > deadline:
                    self._keep(item, error)
                    return
                time.sleep(self.retry[attempt])
                attempt += 1
                error = self._try(item)
        finally:
            self._sending.release()

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is kept, oldest first, until the API fails again; True when nothing is left."""
        if not self._sending.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            return self._flush_locked()
        finally:
            self._sending.release()

    def _try(self, item: tuple[str, Any, str]) -> str | None:
        """None: created (or it already was), or refused for good (dropped); else the API's error."""
        namespace, body, what = item
        try:
            self.create(namespace, body)
            self._failing = False
            return None
        except Exception as exc:
            if isinstance(exc, ApiException) and exc.status == 409:
                self._failing = False
                return None  # an earlier try got through before its answer was lost
            if _retryable(exc):
                self._failing = True
                return f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
            log.warning("event %s refused by the API (%s): dropped", what,
                        f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else exc)
            self._dropped("rejected")
            return None

    def _flush_locked(self) -> bool:
        sent = 0
        while True:
            with self._lock:
                if not self._items:
                    break
                item = self._items[0]
            error = self._try(item)
            if error is not None:
                return False
            with self._lock:
                if self._items and self._items[0] is item:
                    self._items.popleft()
            sent += 1
        if sent:
            log.info("sent %d Event(s) kept while the API was failing", sent)
            if self.on_sent_late is not None:
                self.on_sent_late(sent)
        return True

    def _keep(self, item: tuple[str, Any, str], why: str) -> None:
        dropped = None
        with self._lock:
            if len(self._items) >= self.capacity:
                dropped = self._items.popleft()
            self._items.append(item)
            waiting = len(self._items)
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_later, name="event-outbox", daemon=True)
                self._flusher.start()
            if not self._exit_hook:
                self._exit_hook = True
                atexit.register(self.flush, 2.0)
        log.warning("event %s not sent (%s): kept to send later (%d waiting)", item[2], why, waiting)
        if dropped is not None:
            log.warning("event %s dropped: the outbox is full (%d Events)", dropped[2], self.capacity)
            self._dropped("outbox_full")

    def _dropped(self, reason: str) -> None:
        if self.on_drop is not None:
            self.on_drop(reason)

    def _flush_later(self) -> None:
        """While anything is kept: wait (backing off), then flush; ends when the outbox is empty."""
        attempt = 0
        while True:
            time.sleep(self.backoff[min(attempt, len(self.backoff) - 1)])
            attempt += 1
            done = self.flush()
            with self._lock:
                if done and not self._items:
                    self._flusher = None
                    return
