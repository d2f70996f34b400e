"""This node's Node object, kept current by a watch: the GPU reset marker, the labels and the EFA capacity.

One LIST of the node by name (`fieldSelector=metadata.name=<node>`, `resourceVersion=0`: answered from the API
server's watch cache), then a WATCH from the list's resourceVersion with bookmarks, renewed when the API server
ends it (`timeoutSeconds`, 5-10 minutes, jittered as client-go's reflector does) from the last resourceVersion
seen. A watch silent past SILENCE_SECONDS (no event and not the API server's bookmark of about every minute) is a
dead connection. A watch whose resourceVersion is too old (410 Gone, after a compaction or a long outage) lists
again, with a consistent read; any other failure is retried from where it stopped after a backoff that doubles from
1 s to at most 30 s, each wait jittered down to half. At 2,000 nodes that is about 4.5 requests a second for the
fleet, where a GET of every Node every 10 s was 200 (docs/benchmarks.md, "API requests at 2,000 nodes").

Fail safe, as the GET it replaces: while the watch is broken (a request failed, the watch ended in an error, the
Node was deleted or an answer was not this Node) `annotations()` raises KubeError, so the GPU reset marker's reader
changes nothing (gpuhealth/exporter/gpu_reset.py: the probes stay paused or running as they were, and the failed read is
counted) until a list or watch answers again. `node()` keeps the last Node seen, for what changes only with a new
Node (labels, capacity).
"""

from __future__ import annotations

import copy
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from http.client import HTTPException
from typing import Any
from urllib.parse import quote

from gpuhealth.exporter.kube_http import SA_DIR, KubeError, KubeHttp

log = logging.getLogger(__name__)

WATCH_SECONDS = (300.0, 600.0)  # how long one watch may last, chosen in this range per watch (client-go's)
BACKOFF_SECONDS = (1.0, 30.0)  # after a failure: the first wait, and the most it doubles to
READ_SLACK_SECONDS = 30.0  # a watch silent this long past its timeoutSeconds is a dead connection
# The API server sends a watch that asked for bookmarks one about every minute, changes or not (its cacher's
# defaultBookmarkFrequency): a watch silent for longer than this is a connection whose peer is gone without a word
# (a lost API server host, a load balancer that dropped it). Found in 2.5 minutes, not at the watch's end (up to
# 10.5): a reset marker set meanwhile would otherwise wait out most of the reset rung's 10-minute timeout.
SILENCE_SECONDS = 150.0
READ_BYTES = 65536
MAX_EVENT_BYTES = 8 << 20  # etcd stores objects of at most 1.5 MiB: a longer line is not a Node
GONE = 410

Obj = dict[str, Any]


class NodeWatch:
    def __init__(self, api: str, node: str, sa_dir: str = SA_DIR, timeout: float = 10.0,
                 on_change: Callable[[], None] | None = None,
                 watch_seconds: tuple[float, float] = WATCH_SECONDS,
                 backoff: tuple[float, float] = BACKOFF_SECONDS, silence: float = SILENCE_SECONDS) -> None:
        """on_change: called (on the watch's thread) whenever the Node seen changes; keep it short. silence: how
        long a watch may send nothing (not even a bookmark) before it counts as a dead connection."""
        self.http = KubeHttp(api, sa_dir, timeout)
        self.node_name = node
        self.on_change = on_change
        self.watch_seconds = watch_seconds
        self.backoff = backoff
        self.silence = silence
        self.failures = 0  # requests that failed, and watches that ended in an error
        self._lock = threading.Lock()
        self._node: Obj | None = None
        self._rv = ""  # where the next watch resumes; "" lists first
        self._consistent = False  # the next list must be current (after a 410), not from a possibly older cache
        self._broken: str | None = "not read yet"  # why the Node seen may not be current; None while it is
        self._selector = quote(f"metadata.name={node}", safe="")

    # --- what the exporter reads -----------------------------------------------------------
    def node(self) -> Obj | None:
        """The last Node seen (kept while the watch is broken); None before the first."""
        with self._lock:
            return copy.deepcopy(self._node) if self._node is not None else None

    def annotations(self) -> dict[str, str]:
        """The Node's annotations while the watch is current; KubeError while it is broken, or before a first read."""
        with self._lock:
            if self._broken is not None or self._node is None:
                raise KubeError(f"node {self.node_name}: {self._broken or 'not read yet'}")
            annotations = self._node.get("metadata", {}).get("annotations") or {}
        if not isinstance(annotations, dict):
            raise KubeError(f"node {self.node_name}: metadata.annotations is not an object")
        return {str(k): str(v) for k, v in annotations.items()}

    # --- keeping it current ----------------------------------------------------------------
    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="node-watch", daemon=True)
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        """List (when there is nothing to resume from) and watch until `stop`, waiting after each failure."""
        wait = 0.0
        while not stop.is_set():
            started = time.monotonic()
            try:
                if not self._rv:
                    self.list()
                self.watch_once(stop)
            except KubeError as exc:
                wait = min(max(wait * 2, self.backoff[0]), self.backoff[1])
                delay = wait * random.uniform(0.5, 1.0)  # jittered: a fleet cut off at once does not return at once
                log.warning("watch of node %s: %s (again in %.1f s; the GPU reset marker is unread meanwhile)",
                            self.node_name, exc, delay)
                stop.wait(delay)
            except Exception:  # the thread must outlive any bug: it is how the reset marker is seen
                wait = self.backoff[1]
                self._fail("unexpected error")
                log.exception("watch of node %s (again in %.0f s)", self.node_name, wait)
                stop.wait(wait)
            else:
                wait = 0.0
                if time.monotonic() - started < self.backoff[0]:
                    stop.wait(self.backoff[0])  # a watch ended as soon as it began (a 410, a proxy): not in a loop

    def list(self) -> None:
        """Read the Node afresh: the state a watch then resumes from. KubeError when it cannot."""
        # resourceVersion=0: from the API server's watch cache (cheap), except after a 410, where that cache may be
        # older than what this watch had seen (another API server); then a consistent read, as client-go relists
        path = f"/api/v1/nodes?fieldSelector={self._selector}" + ("" if self._consistent else "&resourceVersion=0")
        try:
            answer = self.http.request("GET", path)
            items = answer.get("items")
            rv = str((answer.get("metadata") or {}).get("resourceVersion") or "")
            if not isinstance(items, list) or not rv:
                raise KubeError(f"GET {path}: not a NodeList")
            mine = [i for i in items if isinstance(i, dict) and (i.get("metadata") or {}).get("name") == self.node_name]
            if len(mine) != 1 or len(items) != 1:
                raise KubeError(f"GET {path}: {len(items)} Nodes, {len(mine)} of them {self.node_name}")
        except KubeError as exc:
            self._fail(str(exc))
            raise
        self._consistent = False
        self._keep(mine[0], rv)

    def watch_once(self, stop: threading.Event) -> None:
        """One watch from the last resourceVersion, read until the API server ends it (returns) or it fails
        (KubeError). A 410 Gone lists at the next call."""
        seconds = max(1, int(random.uniform(*self.watch_seconds)))
        path = (f"/api/v1/nodes?fieldSelector={self._selector}&watch=true&allowWatchBookmarks=true"
                f"&resourceVersion={self._rv}&timeoutSeconds={seconds}")
        try:
            # the socket's timeout bounds each read: silence past it (no event, no bookmark) is a dead connection
            resp = self.http.open("GET", path, timeout=min(seconds + READ_SLACK_SECONDS, self.silence))
        except KubeError as exc:
            if exc.code == GONE:
                self._expired()
                return
            self._fail(str(exc))
            raise
        self._current()  # it resumes where the Node seen was: the changes since then come first
        pending = b""  # an event not yet ended by its newline
        with resp:
            while not stop.is_set():
                try:
                    # read1, not readline: it tells a watch the API server ended (the last chunk) from a
                    # connection cut mid-stream (IncompleteRead), where readline returns b"" for both
                    data = resp.read1(READ_BYTES)
                except (OSError, ValueError, HTTPException) as exc:  # cut, reset, or silent past its timeout
                    self._fail(f"watch broke: {exc!r}")
                    raise KubeError(f"watch of node {self.node_name} broke: {exc!r}") from exc
                if not data:
                    return  # the API server ended the watch (timeoutSeconds): resume from the last resourceVersion
                *lines, pending = (pending + data).split(b"\n")
                if len(pending) > MAX_EVENT_BYTES:
                    self._fail("a watch event larger than any Node")
                    raise KubeError(f"watch of node {self.node_name}: an event over {MAX_EVENT_BYTES} bytes")
                for line in lines:
                    if line.strip() and not self._event(line):
                        return  # 410 Gone: the next call lists

    def _event(self, line: bytes) -> bool:
        """Take one event; False when the watch has to end (its resourceVersion expired)."""
        try:
            event = json.loads(line)
            etype, obj = event["type"], event["object"]
            if etype == "ERROR":  # its object is a Status, with no resourceVersion
                code, why = obj.get("code"), f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
            else:
                rv = str(obj["metadata"]["resourceVersion"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._fail(f"not a watch event: {line[:200]!r}")
            raise KubeError(f"watch of node {self.node_name}: not a watch event ({exc!r})") from exc
        if etype == "ERROR":
            if code == GONE:
                self._expired()
                return False
            self._fail(f"watch error {why}")
            raise KubeError(f"watch of node {self.node_name}: error {why}")
        if etype == "BOOKMARK":
            with self._lock:
                self._rv = rv
            return True
        if obj.get("metadata", {}).get("name") != self.node_name:
            self._fail(f"the watch answered with node {obj.get('metadata', {}).get('name')!r}")
            raise KubeError(f"watch of node {self.node_name}: an event for another Node")
        if etype == "DELETED":
            self._fail("the Node was deleted")
            with self._lock:
                self._rv = ""  # list again: a Node of this name may come back
            raise KubeError(f"node {self.node_name} was deleted")
        self._keep(obj, rv)
        return True

    def _keep(self, node: Obj, rv: str) -> None:
        with self._lock:
            changed = node != self._node
            self._node, self._rv = node, rv
        if not self._current() and changed and self.on_change is not None:
            self.on_change()

    def _current(self) -> bool:
        """The Node seen is current again; True (and on_change called) when it was not."""
        with self._lock:
            was, self._broken = self._broken, None
        if was is None:
            return False
        if was != "not read yet":
            log.info("watch of node %s is current again (it was not: %s)", self.node_name, was)
        if self.on_change is not None:
            self.on_change()
        return True

    def _expired(self) -> None:
        """410 Gone: the resourceVersion is older than the API server keeps. The Node seen stays current until the
        list (at once) says otherwise."""
        log.info("watch of node %s: resourceVersion %s expired, listing again", self.node_name, self._rv)
        with self._lock:
            self._rv = ""
            self._consistent = True

    def _fail(self, why: str) -> None:
        with self._lock:
            self.failures += 1
            self._broken = why
