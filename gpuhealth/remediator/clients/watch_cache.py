"""A list+watch cache of one kind of object (nodes, pods), over the official kubernetes client.

As client-go's reflector does: list, then watch from the list's resourceVersion (with bookmarks and a
server-side timeout, after which it watches again from where it stopped); an expired resourceVersion
(410 Gone, as an HTTP status or as an ERROR event in the stream) means list again; other errors back off
and retry. Objects are plain dicts (the API's JSON, as `_preload_content=False` gives it; typed by the kind a
cache holds: WatchCache[RawNode], decide/api_objects.py) and are shared, never copied: callers must not change them.

`on_change(event_type, obj, old_obj)` runs on the cache's thread after the store changed: ADDED (old_obj
None), MODIFIED, DELETED (obj is the last state seen). A list (the first, or after an expiry) reports
the difference from what the cache held: so the first list reports every object as ADDED.

Options beyond the selectors: `index` (a key per object, e.g. the pods' node: `indexed(key)`), and
`transform` (what to keep of each object, as client-go's SetTransform, to bound memory: it runs on each page of a list
as the page arrives, and on each watch event, so whole objects are never all held at once).

`apply(obj)` puts an object the caller just wrote (the API's answer) into the cache at once, so the
caller reads its own writes before the watch brings them; an older version arriving later from the watch
does not overwrite it. Comparing resourceVersions as integers is what that takes: Kubernetes calls them
opaque, but they are etcd revisions; when one is not an integer the watch's order decides.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.clients.pager import PAGE_SIZE, list_pages
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawObject

log = logging.getLogger("gpuhealth.remediator")

Obj = TypeVar("Obj", bound=RawObject)  # the kind of object a cache holds (RawNode, RawPod), as the API's JSON
OnChange = Callable[[str, Obj, Obj | None], None]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


class Expired(Exception):
    """The resourceVersion we watch from is too old (410 Gone): list again."""


def key_of(obj: RawObject) -> Key:
    return api_objects.namespace(obj), api_objects.name(obj)


def _rv(obj: RawObject | None) -> str:
    return str(api_objects.resource_version(obj) or "") if obj is not None else ""


def _older(candidate: str, current: str) -> bool:
    """True when `candidate` is known to be older than `current` (both integers)."""
    try:
        return int(candidate) < int(current)
    except ValueError:
        return False


def newer_rv(current: str, candidate: str) -> str:
    """The newer of two resourceVersions (`candidate` when they cannot be compared: the latest one seen)."""
    return current if candidate and _older(candidate, current or "0") else (candidate or current)


class WatchCache(Generic[Obj]):
    def __init__(self, list_fn: Callable[..., Any], *, field_selector: str | None = None,
                 label_selector: str | None = None, on_change: OnChange[Obj] | None = None, name: str = "",
                 timeout_seconds: int = 300, request_timeout: float = 10.0,
                 backoff: Sequence[float] = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0),
                 index: Callable[[Obj], str | None] | None = None,
                 transform: Callable[[Obj], Obj] | None = None) -> None:
        self.list_fn, self.field_selector, self.label_selector = list_fn, field_selector, label_selector
        self.on_change, self.name = on_change, name or getattr(list_fn, "__name__", "objects")
        self.timeout_seconds, self.request_timeout, self.backoff = timeout_seconds, request_timeout, backoff
        self.index, self.transform = index, transform  # transform: what to keep of each object (memory)
        self.page_size = PAGE_SIZE  # objects a page of the list (0: the whole list in one answer)
        self._lock = threading.Lock()
        self._items: dict[Key, Obj] = {}
        self._by_index: dict[str, dict[Key, Obj]] = {}
        self._synced = threading.Event()
        self._progress = threading.Condition(self._lock)
        self._resource_version = ""  # the last one the list, an event or a bookmark brought
        self._response: Any = None
        self._deleted: dict[tuple[str, str], str] = {}  # key -> resourceVersion of its deletion, since the last list
        self.failures = 0  # consecutive failed requests
        self.stats = {"lists": 0, "watches": 0, "events": 0, "bookmarks": 0, "expired": 0, "errors": 0}

    # --- reading ---------------------------------------------------------------------------
    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is in the cache."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def healthy(self) -> bool:
        """Listed, and the last list or watch request did not fail."""
        return self._synced.is_set() and self.failures == 0

    @property
    def resource_version(self) -> str:
        return self._resource_version

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._items.values())

    def get(self, name: str, namespace: str = "") -> Obj | None:
        with self._lock:
            return self._items.get((namespace, name))

    def indexed(self, value: str) -> list[Obj]:
        """The objects whose `index` is `value` (e.g. the pods on a node)."""
        with self._lock:
            return list(self._by_index.get(value, {}).values())

    def wait_for(self, resource_version: str, timeout: float) -> bool:
        """Wait until the cache has seen `resource_version` (an event or a bookmark at or past it)."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while _older(self._resource_version or "0", resource_version):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._progress.wait(left)
        return True

    # --- writing (the caller's own writes) -----------------------------------------------------
    def apply(self, obj: Obj) -> None:
        """An object the caller just wrote, as the API answered it: in the cache now, unless it already
        holds a newer version."""
        self._store("MODIFIED", self.transform(obj) if self.transform else obj, only_known=True)

    # --- the loop --------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name=f"watch-{self.name}", daemon=True)
        thread.start()
        threading.Thread(target=self._close_on, args=(stop,), name=f"watch-{self.name}-stop", daemon=True).start()
        return thread

    def run(self, stop: threading.Event) -> None:
        rv = ""
        while not stop.is_set():
            try:
                if not rv:
                    rv = self.relist()
                rv = self._watch(rv, stop)
            except Expired:
                self.stats["expired"] += 1
                log.info("watch %s: resourceVersion %s expired: listing again", self.name, rv)
                rv = ""
            except Exception as exc:
                if stop.is_set():
                    break
                self.stats["errors"] += 1
                delay = self.backoff[min(self.failures, len(self.backoff) - 1)] if self.backoff else 1.0
                self.failures += 1
                log.warning("watch %s: %s (retrying in %.1fs)", self.name, _describe(exc), delay)
                if isinstance(exc, ApiException) and exc.status == 410:
                    rv = ""
                stop.wait(delay)

    def _close_on(self, stop: threading.Event) -> None:
        """Stopping interrupts a watch that is waiting for the server."""
        stop.wait()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed
                response.shutdown()

    def _selectors(self) -> dict[str, str]:
        out = {}
        if self.field_selector:
            out["field_selector"] = self.field_selector
        if self.label_selector:
            out["label_selector"] = self.label_selector
        return out

    def relist(self) -> str:
        """List in pages of `page_size` (clients/pager.py: each page through `transform` as it arrives, an expired
        continue token starts the list again), replace the cache with the answer (reporting the difference), and
        return its resourceVersion."""
        items, list_rv = list_pages(self.list_fn, self.page_size, self._held_or_kept, **self._selectors(),
                                    _request_timeout=self.request_timeout)
        self.stats["lists"] += 1
        self.failures = 0
        listed = {key_of(o): o for o in items}
        del items
        with self._lock:
            # A list may be older than what the watch has applied meanwhile (the leader lists on its own
            # thread): an object changed after the list is not gone, and one deleted after it does not return.
            gone = [o for k, o in self._items.items() if k not in listed and not (list_rv and _older(list_rv, _rv(o)))]
            for k in [k for k, rv in self._deleted.items() if list_rv and _older(list_rv, rv)]:
                listed.pop(k, None)
            self._deleted = {k: rv for k, rv in self._deleted.items() if list_rv and _older(list_rv, rv)}
        for obj in listed.values():
            self._store("ADDED", obj)
        for obj in gone:
            self._store("DELETED", obj)
        self._advance(list_rv)
        self._synced.set()
        return list_rv

    def _held_or_kept(self, obj: Obj) -> Obj:
        """A listed object: the cache's own copy where it holds that very version (a relist then holds each unchanged
        object once, not the old cache and the new list side by side), else what `transform` keeps of it."""
        rv = _rv(obj)
        with self._lock:
            held = self._items.get(key_of(obj))
        if held is not None and rv and _rv(held) == rv:
            return held
        return self.transform(obj) if self.transform else obj

    def _watch(self, rv: str, stop: threading.Event) -> str:
        """One watch request, until the server ends it; returns the resourceVersion to go on from."""
        self.stats["watches"] += 1
        response = self.list_fn(**self._selectors(), watch=True, resource_version=rv, allow_watch_bookmarks=True,
                                timeout_seconds=self.timeout_seconds, _preload_content=False,
                                _request_timeout=(self.request_timeout, self.timeout_seconds + self.request_timeout))
        self._response = response
        self.failures = 0
        try:
            buffer = b""
            for chunk in response.stream(None, decode_content=False):
                if stop.is_set():
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        rv = self._event(json.loads(line), rv)
        finally:
            self._response = None
            response.release_conn()
        return rv

    def _event(self, event: dict[str, Any], rv: str) -> str:
        etype = event.get("type")
        obj: Any = event.get("object") or {}  # the object, or an ERROR's Status
        if etype == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message") or "expired")
            raise RuntimeError(f"watch error: {obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        new_rv = _rv(obj) or rv
        if etype == "BOOKMARK":
            self.stats["bookmarks"] += 1
        elif etype in ("ADDED", "MODIFIED", "DELETED"):
            self.stats["events"] += 1
            self._store(etype, self.transform(obj) if self.transform else obj)
        self._advance(new_rv)
        return new_rv

    def _advance(self, rv: str) -> None:
        with self._progress:
            if rv and not _older(rv, self._resource_version or "0"):
                self._resource_version = rv
            self._progress.notify_all()

    def _store(self, etype: str, obj: Obj, only_known: bool = False) -> None:
        key = key_of(obj)
        with self._lock:
            old = self._items.get(key)
            if only_known and old is None:
                return  # our write's answer for an object the watch has since deleted: it must not come back
            if etype == "DELETED":
                self._deleted[key] = _rv(obj)
            if old is not None and _rv(old) == _rv(obj) and etype != "DELETED":
                return  # nothing new (a relist, or our own write coming back)
            if old is not None and _older(_rv(obj), _rv(old)):
                return  # we already hold a newer version (our own write)
            if etype == "DELETED":
                if old is None:
                    return
                self._items.pop(key, None)
            else:
                self._items[key] = obj
            if self.index is not None:
                if old is not None:
                    self._by_index.get(self.index(old) or "", {}).pop(key, None)
                if etype != "DELETED":
                    value = self.index(obj)
                    if value is not None:
                        self._by_index.setdefault(value, {})[key] = obj
        if self.on_change is not None:
            reported = "ADDED" if old is None else etype
            try:
                self.on_change(reported, obj, old)
            except Exception:
                log.exception("watch %s: on_change failed", self.name)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
