"""What the fake API server keeps, under one lock: the objects by kind, the resourceVersion (etcd's revision), the
history watches read, what a test injected and what was asked; and the writes every part of it commits through
(`_next_rv`, `_emit`, a pod's termination on `clock`)."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fakes.apiserver.admission import AdmissionPolicies, Identity
from tests.fakes.apiserver.dra import FakeDra
from tests.fakes.apiserver.objects import Obj, rfc3339
from tests.fakes.apiserver.rbac import Authorizer
from tests.fakes.apiserver.selectors import selected


@dataclass(frozen=True)
class WatchEvent:
    """One change, as committed: the object after it (and before it, for selectors), serialized at once."""

    rv: int
    kind: str  # nodes | pods
    type: str  # ADDED | MODIFIED | DELETED
    namespace: str
    new: str
    old: str | None

    def matches(self, namespace: str | None, fs: str | None, ls: str | None) -> tuple[str, str] | None:
        """(type, object JSON) as a watch with these selectors sees it, or None when it does not see it."""
        if namespace is not None and namespace != self.namespace:
            return None
        if not fs and not ls:
            return self.type, self.new
        old_in = self.old is not None and selected(json.loads(self.old), fs, ls)
        new_in = self.type != "DELETED" and selected(json.loads(self.new), fs, ls)
        if self.type == "DELETED":
            return ("DELETED", self.new) if old_in or selected(json.loads(self.new), fs, ls) else None
        if new_in:
            return ("MODIFIED" if old_in else "ADDED"), self.new
        return ("DELETED", self.new) if old_in else None


class ClusterState:
    def __init__(self, token: str = "") -> None:
        self.token = token  # when set, requests without `Authorization: Bearer <token>` get 401
        self.identities: dict[str, Identity] = {}  # bearer token -> who it authenticates as
        self.admission: AdmissionPolicies | None = None  # ValidatingAdmissionPolicies enforced on writes
        self.rbac: Authorizer | None = None  # Roles, ClusterRoles and bindings enforced on every request
        self._backdated = False
        self.clock: Callable[[], float] = time.time  # seconds since the epoch; pods' termination runs on it
        self.pod_grace = 1.0  # seconds an evicted pod stays Terminating, unless the pod says otherwise
        self.lock = threading.RLock()
        self.rv = 1  # etcd's first revision: a list never answers "0", which a watch reads as "any version"
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.pdbs: list[Obj] = []  # {"namespace", "matchLabels", "disruptionsAllowed"}
        self.events: list[Obj] = []
        self.leases: dict[tuple[str, str], Obj] = {}
        self.jobs: dict[tuple[str, str], Obj] = {}
        self.nodeclaims: dict[str, Obj] = {}
        self.configmaps: dict[tuple[str, str], Obj] = {}
        self.pod_logs: dict[tuple[str, str], str] = {}  # a pod's log, as its kubelet would serve it (pods/log)
        self.dra = FakeDra(self)  # ResourceSlices, ResourceClaims, DeviceTaintRules (tests/fakes/apiserver/dra.py)
        self.requests: list[tuple[str, str]] = []
        self.queries: list[tuple[str, str, dict[str, str]]] = []  # each request's (method, path, query parameters)
        self.forbidden: list[tuple[str, str, str]] = []  # (user, method, path) of every request RBAC denied
        self._evicted: list[str] = []
        self._gone_at: dict[tuple[str, str], float] = {}  # terminating pods: when they disappear
        self._faults: list[dict[str, Any]] = []
        self.calls: Counter[tuple[str, str]] = Counter()  # (verb, resource) -> requests
        self.latency = 0.0  # seconds every request waits before it is served (a real API server's round trip)
        self.in_flight = 0  # requests being served now, watches not counted (they last)
        self.peak_in_flight = 0  # the most requests served at once: a client's concurrency, as the server sees it
        self.listed: Counter[tuple[str, str]] = Counter()  # (verb, resource) -> objects the list answers carried
        self.watch_history = 10_000  # changes kept for watches; an older resourceVersion gets 410 Expired
        self.watch_tick = 0.05  # seconds between a watch's checks for terminating pods and its deadline
        self.history: list[WatchEvent] = []
        self._compacted = 0  # watches from before this resourceVersion are too old (410)
        self._changed = threading.Condition(self.lock)
        self._closed = False
        self._dropped = 0  # drop_watches() so far: a watch begun before the latest is cut
        self._silenced = 0  # silence_watches() so far: a watch begun before the latest sends nothing more
        self.bookmark_interval = 60.0  # a watch that asked for bookmarks gets one at least this often (the cacher's)
        self.on_close: list[Callable[[], None]] = []  # run on exit (clients stop their watches)
        self._pages: dict[int, tuple[Obj, list[Obj], bool]] = {}  # paged lists: (the list, items left, selected)
        self._page_ids = 0

    def _next_rv(self) -> str:
        with self.lock:
            self.rv += 1
            self._changed.notify_all()  # watches send a BOOKMARK: the resourceVersion moved
            return str(self.rv)

    def reap(self) -> None:
        """Remove the terminating pods whose grace period is over on `clock` (requests and watches do it too)."""
        with self.lock:
            self._reap()

    def _terminate(self, key: tuple[str, str], grace: float | None = None) -> None:
        pod = self.pods[key]
        self._evicted.append(f"{key[0]}/{key[1]}")
        if grace is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", self.pod_grace))
        if grace <= 0:
            self._emit("pods", self.pods.pop(key), None, deleted=True)
            self._gone_at.pop(key, None)
            return
        if not pod["metadata"].get("deletionTimestamp"):
            before = json.dumps(pod)
            pod = self.pods[key] = copy.deepcopy(pod)  # replaced, not changed in place: a paged list may hold it
            meta = pod["metadata"]
            now = self.clock()
            meta["deletionTimestamp"] = rfc3339(now)
            meta["deletionGracePeriodSeconds"] = int(grace)
            meta["resourceVersion"] = self._next_rv()
            self._gone_at[key] = now + grace
            self._emit("pods", pod, None, old_json=before)

    def _reap(self) -> None:
        now = self.clock()
        for key, at in list(self._gone_at.items()):
            if now >= at:
                gone = self.pods.pop(key, None)
                del self._gone_at[key]
                if gone is not None:
                    self._emit("pods", gone, None, deleted=True)

    def _emit(self, kind: str, obj: Obj, old: Obj | None, *, deleted: bool = False,
              old_json: str | None = None) -> None:
        """Record a committed change (under the lock) and wake the watches. A deletion gets a new
        resourceVersion, as on a real API server."""
        if deleted:
            old_json = json.dumps(obj)
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = self._next_rv()
        elif old is not None:
            old_json = json.dumps(old)
        etype = "DELETED" if deleted else ("ADDED" if old_json is None else "MODIFIED")
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        self.history.append(WatchEvent(int(obj["metadata"]["resourceVersion"]), kind, etype, namespace,
                                       json.dumps(obj), old_json))
        if len(self.history) > 2 * self.watch_history:
            drop = len(self.history) - self.watch_history
            self._compacted = self.history[drop - 1].rv
            del self.history[:drop]
        self._changed.notify_all()
