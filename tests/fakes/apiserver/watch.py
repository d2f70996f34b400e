"""Watches, as the API server serves them from its history: where a watch starts (the current objects, or a
resourceVersion still kept), the changes it sees after that, and the ways a test ends them (cut off, silenced,
compacted away)."""

from __future__ import annotations

import bisect
import json
from typing import Any

from tests.fakes.apiserver.selectors import selected
from tests.fakes.apiserver.state import ClusterState


class Watches(ClusterState):
    def drop_watches(self) -> None:
        """Every watch open now is cut off mid-stream, as when the API server restarts or a load balancer drops
        its connections: no final chunk, the connection closed."""
        with self.lock:
            self._dropped += 1
            self._changed.notify_all()

    def silence_watches(self) -> None:
        """Every watch open now goes silent without being closed, as a connection whose peer vanished (a lost API
        server host, a load balancer that dropped it without a reset): no event, no bookmark, no end, until
        drop_watches() or the end of the test."""
        with self.lock:
            self._silenced += 1
            self._changed.notify_all()

    def compact(self) -> None:
        """Forget all history (etcd compaction): watches from an older resourceVersion get 410 Expired."""
        with self.lock:
            self.history.clear()
            self._compacted = self.rv

    def _watch_start(self, path: str, query: dict[str, str]) -> tuple[str, str | None, list[str], int | None]:
        """(kind, namespace, objects to send as ADDED first, position); position None: too old (410)."""
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 3:
            kind, namespace = "nodes", None
        elif parts[:3] == ["api", "v1", "pods"] and len(parts) == 3:
            kind, namespace = "pods", None
        elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
            kind, namespace = "pods", parts[3]
        else:
            raise LookupError(f"no watch for {path}")
        fs, ls = query.get("fieldSelector"), query.get("labelSelector")
        since = query.get("resourceVersion") or "0"
        with self.lock:
            self._reap()
            if since == "0":  # no resourceVersion: the current objects as ADDED, then the changes
                store: Any = self.nodes.values() if kind == "nodes" else (
                    p for (n, _), p in self.pods.items() if namespace is None or n == namespace)
                return kind, namespace, [json.dumps(o) for o in store if selected(o, fs, ls)], self.rv
            pos = int(since)
            return kind, namespace, [], None if pos < self._compacted else pos

    def _watch_next(self, kind: str, pos: int, namespace: str | None, fs: str | None, ls: str | None,
                    wait: float) -> tuple[list[tuple[int, str, str]], int | None]:
        """The changes after `pos` this watch sees (waiting up to `wait` for one), and the new position (None:
        the history it needs was compacted under it, so it ends with 410 Expired)."""
        with self.lock:
            self._reap()
            if self.rv == pos and wait > 0:
                self._changed.wait(wait)
                self._reap()
            if pos < self._compacted:
                return [], None
            start = bisect.bisect_right(self.history, pos, key=lambda e: e.rv)
            out = []
            for e in self.history[start:]:
                if e.kind == kind:
                    seen = e.matches(namespace, fs, ls)
                    if seen is not None:
                        out.append((e.rv, *seen))
            return out, self.rv
