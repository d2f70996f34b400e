"""A stateful fake Kubernetes API server over real HTTP (127.0.0.1, JSON), for the remediator's tests.

The official `kubernetes` client talks to it exactly as to a real API server. It keeps real state
and behaves like the API server where the remediator depends on it:
- nodes: list (label/field selectors), get, merge and strategic-merge PATCH with a resourceVersion
  precondition (409 Conflict on a stale one), PATCH nodes/status (conditions merged by type; as the API server's
  status strategy, spec is reset and metadata changes, labels and annotations, are kept); a Node or Pod write whose
  annotations total over 256 KiB is 422 Invalid, as apimachinery validates (tests/fake_validation.py);
- pods: list with field selectors (=, ==, !=), delete, and the Eviction subresource, which answers
  429 TooManyRequests when a PodDisruptionBudget allows no more disruptions. As on a real cluster an
  evicted or deleted pod is not gone at once: it gets a deletionTimestamp (Terminating) and
  disappears after its grace period (the pod's spec.terminationGracePeriodSeconds when given, else
  `pod_grace`: a short 1 s on the real clock; the remediator harness sets 30 s, the Kubernetes default,
  with `clock` on its injected clock); evicting a pod that is
  already terminating succeeds without touching PDBs; DELETE with gracePeriodSeconds=0 removes at once;
- events (create, list by involvedObject.name; 422 when the Event's namespace is not the involved
  object's, or "default" for cluster-scoped objects, as the API server validates);
- coordination.k8s.io/v1 Leases (create, get, replace with a resourceVersion precondition);
  batch/v1 Jobs (create, defaulted as the API server does before admission: tests/fake_defaults.py; get, list by
  label; 409 AlreadyExists; merge PATCH); a created Job counts one active pod, and
  the pod itself exists (with the kubelet's status: an image pull backing off, a refusal) only when a test plays the
  Job controller and the kubelet (`job_pod`, `job_makes_no_pod`); karpenter.sh/v1 NodeClaims (list, delete);
- pods: merge PATCH (annotations) with a resourceVersion precondition, seen by watches;
- fault injection: answer a matching request with an error status, or delay it (client timeouts), or kill the
  client at it (`crash_on`: the test's callback runs, the request is dropped unperformed and unanswered);
- watches (`?watch=true`) on nodes and pods: ADDED/MODIFIED/DELETED as newline-delimited JSON from the
  given resourceVersion (an object entering or leaving a selector is ADDED or DELETED, as on a real API
  server), BOOKMARKs when asked for (as soon as the resourceVersion moves, and every `bookmark_interval`, 60 s,
  as a real API server's cacher does), `timeoutSeconds`, and an ERROR 410 Expired event when the
  resourceVersion is older than the `watch_history` kept, and `drop_watches` cuts every open watch off mid-stream
  (an API server restart), `silence_watches` leaves them open and silent (a peer gone without a word). Changes go
  through the API or the helpers
  (`add_node`, `add_pod`, `update_node`, `update_pod`): a test that edits `nodes[...]` in place is not seen
  by watches. `calls` counts requests by (verb, resource), as the API server's metrics do, `listed` the objects
  list answers carried; `queries` keeps
  each request's query parameters (`resourceVersion=0`, selectors).
- paged lists, as the API server serves them: `limit` cuts a list to that many objects (in key order) with a
  `continue` token; the next pages come from the list as it was at its resourceVersion, whatever changed
  meanwhile, with `remainingItemCount` when no selector was given; a token with a `resourceVersion` is a 400, an
  unreadable one a 400, and one whose revision was compacted (`compact`, or the history outgrowing
  `watch_history`) a 410 Expired;
- authentication: bearer tokens map to identities (`add_token`, `add_service_account_token`: a pod-bound
  service-account token carries its pod's node name, as on Kubernetes 1.30+). Once any token is known, a
  request without a known one gets 401 Unauthorized; a cluster that knows no token checks none (every
  request is anonymous), as the remediator tests expect;
- authorization: `load_rbac` takes rendered manifests and from then on authorizes every request against their
  Roles, ClusterRoles and bindings with the API server's RBAC semantics (tests/fake_rbac.py): 403 Forbidden in
  the API server's Status shape, every denial kept in `forbidden`; tests/chart_rbac.py loads the chart's (the
  remediator harness, ServeProcess and the e2e do so by default) with a token per ServiceAccount and a
  system:masters one for what a test does as a person;
- admission: `load_admission` takes rendered manifests and enforces their ValidatingAdmissionPolicies and
  Bindings on every write, with the policies' own CEL (tests/fake_admission.py); a node PATCH is admitted
  with the patched Node as `object` and the stored one as `oldObject`, as on the API server. A denial is
  the API server's Status (its reason and code, its "... denied request: ..." message).
- Dynamic Resource Allocation (`dra`, tests/fake_dra.py): ResourceSlices, ResourceClaims and DeviceTaintRules
  in resource.k8s.io, discovery of the versions served, and NoExecute device taints evicting the pods whose
  claims use the device, as kube-controller-manager does.
The kubernetes client sends POST bodies without Content-Type; as the API server does, we read JSON.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.apiserver.admission import (
    ANONYMOUS,
    AdmissionPolicies,
    Attributes,
    Identity,
    attributes,
    service_account,
)
from tests.fakes.apiserver.defaults import default_job
from tests.fakes.apiserver.dra import FakeDra
from tests.fakes.apiserver.rbac import Authorizer, watching
from tests.fakes.apiserver.rbac import request as rbac_request
from tests.fakes.apiserver.validation import invalid_annotations

Obj = dict[str, Any]


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a watch the test stopped) is normal here, not an error to print."""

    daemon_threads = True
    cluster: FakeCluster  # what its handlers serve

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _status(code: int, reason: str, message: str = "") -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message or reason}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, path: str = "") -> Any:
    """Merge patch, except lists with a patch merge key (conditions by type) merge item by item."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        here = f"{path}.{key}"
        if value is None:
            out.pop(key, None)
        elif here.endswith(".conditions") and isinstance(value, list):
            by_type = {c["type"]: c for c in out.get(key) or []}
            for c in value:
                by_type[c["type"]] = merge_patch(by_type.get(c["type"], {}), c)
            out[key] = list(by_type.values())
        else:
            out[key] = strategic_merge_patch(out.get(key), value, here)
    return out


def _field(obj: Obj, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


_FIELD_TERM = re.compile(r"^([^!=]+)(!=|==|=)(.*)$")


def _selected(obj: Obj, field_selector: str | None, label_selector: str | None) -> bool:
    for term in filter(None, (field_selector or "").split(",")):
        match = _FIELD_TERM.match(term)
        if match is None:
            raise ValueError(f"bad field selector term {term!r}")
        key, op, want = match.groups()
        equal = str(_field(obj, key) or "") == want
        if equal != (op != "!="):
            return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, want = term.partition("=")
        if labels.get(key) != want:
            return False
    return True


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
        old_in = self.old is not None and _selected(json.loads(self.old), fs, ls)
        new_in = self.type != "DELETED" and _selected(json.loads(self.new), fs, ls)
        if self.type == "DELETED":
            return ("DELETED", self.new) if old_in or _selected(json.loads(self.new), fs, ls) else None
        if new_in:
            return ("MODIFIED" if old_in else "ADDED"), self.new
        return ("DELETED", self.new) if old_in else None


def _verb(method: str, path: str, query: dict[str, str]) -> tuple[str, str]:
    """(verb, resource) as the API server's request metrics name them: RBAC's attributes of the request."""
    r = rbac_request(method, path, query)
    if r is None:
        return method.lower(), path  # a non-resource path (discovery)
    return r.verb, f"{r.resource}/{r.subresource}" if r.subresource else r.resource


class _ApiHandler(BaseHTTPRequestHandler):
    """One HTTP request to the fake API server: authentication, RBAC, injected faults, then the cluster's route or
    a watch stream. The cluster it serves is its server's (`_QuietServer.cluster`)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        cluster: FakeCluster = self.server.cluster  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with cluster.lock:
            cluster.requests.append((method, url.path))
            cluster.queries.append((method, url.path, query))
            cluster.calls[_verb(method, url.path, query)] += 1
            fault = cluster._take_fault(method, url.path)
        identity = cluster.authenticate(self.headers.get("Authorization"))
        if identity is None:
            return self._send(401, _status(401, "Unauthorized"))
        if cluster.rbac is not None:
            attrs = rbac_request(method, url.path, query)
            if not cluster.rbac.allowed(identity, url.path, attrs):
                with cluster.lock:
                    cluster.forbidden.append((identity.username, method, url.path))
                return self._send(403, cluster.rbac.forbidden(identity, url.path, attrs))
        if fault and fault.get("delay"):
            time.sleep(fault["delay"])
        if fault and fault.get("status"):
            return self._send(fault["status"], _status(fault["status"], fault.get("reason", "Injected")))
        if fault and fault.get("crash"):  # crash_on: the client dies as it sends; nothing done, no answer
            fault["crash"]()
            self.close_connection = True
            return None
        if method == "GET" and watching(query):
            return self._watch(url.path, query)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return self._send(400, _status(400, "BadRequest", "body is not JSON"))
        with cluster.lock:
            try:
                if method == "GET" and "continue" in query:  # a later page of a paged list: its snapshot
                    code, out = cluster._next_page(query)
                else:
                    code, out = cluster._route(method, url.path, query, body,
                                               self.headers.get("Content-Type") or "", identity)
                    if method == "GET" and code == 200 and query.get("limit"):
                        out = cluster._first_page(out, query)
                if method == "GET" and code == 200 and isinstance(out.get("items"), list):
                    cluster.listed[_verb(method, url.path, query)] += len(out["items"])
            except ValueError as exc:
                code, out = 400, _status(400, "BadRequest", str(exc))
        self._send(code, out)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, path: str, query: dict[str, str]) -> None:
        cluster: FakeCluster = self.server.cluster  # type: ignore[attr-defined]
        try:
            kind, namespace, initial, pos = cluster._watch_start(path, query)
        except LookupError as exc:
            return self._send(404, _status(404, "NotFound", str(exc)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        fs, ls = query.get("fieldSelector"), query.get("labelSelector")
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        for obj in initial:
            self._chunk(b'{"type":"ADDED","object":' + obj.encode() + b"}\n")
        marked = pos or 0
        generation, silenced = cluster._dropped, cluster._silenced
        bookmarked = time.monotonic()
        while time.monotonic() < deadline and not cluster._closed:
            if cluster._dropped != generation:  # the connection dies mid-stream: no last chunk
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if cluster._silenced != silenced:  # a connection dead on the way (no FIN, no RST): nothing more
                while not cluster._closed and cluster._dropped == generation:
                    time.sleep(cluster.watch_tick)
                self.close_connection = True
                return
            if pos is None:  # too old: as the API server does, a 200 carrying an ERROR event
                expired = _status(410, "Expired", "too old resource version")
                self._chunk(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                break
            events, pos = cluster._watch_next(kind, pos, namespace, fs, ls,
                                              min(cluster.watch_tick, deadline - time.monotonic()))
            if pos is None:
                continue
            for rv, etype, obj in events:
                self._chunk(b'{"type":"' + etype.encode() + b'","object":' + obj.encode() + b"}\n")
                marked = rv
            due = time.monotonic() - bookmarked >= cluster.bookmark_interval
            if bookmarks and (pos > marked or due):  # as the cacher: when it moves, and about every minute
                self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                    "kind": "Node" if kind == "nodes" else "Pod", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(pos)}}}).encode() + b"\n")
                marked, bookmarked = pos, time.monotonic()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class FakeCluster:
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
        self.dra = FakeDra(self)  # ResourceSlices, ResourceClaims, DeviceTaintRules (tests/fake_dra.py)
        self.requests: list[tuple[str, str]] = []
        self.queries: list[tuple[str, str, dict[str, str]]] = []  # each request's (method, path, query parameters)
        self.forbidden: list[tuple[str, str, str]] = []  # (user, method, path) of every request RBAC denied
        self._evicted: list[str] = []
        self._gone_at: dict[tuple[str, str], float] = {}  # terminating pods: when they disappear
        self._faults: list[dict[str, Any]] = []
        self.calls: Counter[tuple[str, str]] = Counter()  # (verb, resource) -> requests
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
        self.server = _QuietServer(("127.0.0.1", 0), _ApiHandler)
        self.server.cluster = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    # --- lifecycle -------------------------------------------------------------------------
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

    # --- authentication and admission ---------------------------------------------------------
    def add_token(self, token: str, identity: Identity) -> Identity:
        with self.lock:
            self.identities[token] = identity
        return identity

    def add_service_account_token(self, token: str, namespace: str, name: str, node: str | None = None,
                                  pod: str | None = None) -> Identity:
        """A projected service-account token of a pod on `node` (None: a token that names no node)."""
        return self.add_token(token, service_account(namespace, name, node, pod))

    def load_admission(self, manifests: list[Obj]) -> None:
        """Enforce the ValidatingAdmissionPolicies (and Bindings) among these manifests from now on."""
        policies = AdmissionPolicies(manifests)
        with self.lock:
            self.admission = policies

    def load_rbac(self, manifests: list[Obj]) -> None:
        """Authorize every request from now on against the Roles, ClusterRoles and bindings among these manifests
        (tests/fake_rbac.py): 403 Forbidden for what they do not grant, and every request must authenticate."""
        authorizer = Authorizer(manifests)
        with self.lock:
            self.rbac = authorizer

    def authenticate(self, authorization: str | None) -> Identity | None:
        """Who a request is, from its Authorization header; None: 401."""
        scheme, _, token = (authorization or "").partition(" ")
        with self.lock:
            if not self.token and not self.identities and self.rbac is None:
                return ANONYMOUS  # a cluster that knows no token checks none (the remediator tests)
            if scheme == "Bearer" and token in self.identities:
                return self.identities[token]
            if self.token and authorization == f"Bearer {self.token}":
                return Identity("test-user", ("system:authenticated",))
        return None

    def _admit(self, attrs: Attributes | None, identity: Identity, obj: Obj | None,
               old: Obj | None) -> tuple[int, Obj] | None:
        if attrs is None or self.admission is None:
            return None
        denial = self.admission.admit(attrs, identity, obj, old)
        return None if denial is None else (denial.code, denial.status)

    # --- test helpers ----------------------------------------------------------------------
    def _next_rv(self) -> str:
        with self.lock:
            self.rv += 1
            self._changed.notify_all()  # watches send a BOOKMARK: the resourceVersion moved
            return str(self.rv)

    def add_node(self, name: str, pool: str = "gpu", labels: dict[str, str] | None = None,
                 unschedulable: bool = False, boot_id: str = "boot-1",
                 annotations: dict[str, str] | None = None) -> Obj:
        with self.lock:
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": self._next_rv(),
                                 "labels": {"karpenter.sh/nodepool": pool, **(labels or {})},
                                 "annotations": dict(annotations or {})},
                    "spec": {"unschedulable": unschedulable} if unschedulable else {},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}],
                               "nodeInfo": {"bootID": boot_id}}}
            self._emit("nodes", node, self.nodes.get(name))
            self.nodes[name] = node
            return node

    def add_pod(self, node: str, name: str, namespace: str = "default", labels: dict[str, str] | None = None,
                owner_kind: str | None = "ReplicaSet", gpus: int = 0, mirror: bool = False,
                grace_seconds: int | None = None, resources: dict[str, Any] | None = None) -> Obj:
        """A pod bound to `node`, created now on `clock` (an API server always stamps creationTimestamp). `gpus`:
        that many nvidia.com/gpu; `resources`: the container's resources as given instead."""
        with self.lock:
            meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "labels": dict(labels or {}), "resourceVersion": self._next_rv(),
                         "creationTimestamp": _rfc3339(self.clock())}
            if owner_kind:
                meta["ownerReferences"] = [{"kind": owner_kind, "name": f"{name}-owner", "apiVersion": "apps/v1",
                                            "uid": f"uid-{namespace}-{name}-owner", "controller": True}]
            if mirror:
                meta["annotations"] = {"kubernetes.io/config.mirror": "x"}
            if resources is None:
                resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
            pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                   "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": resources}]},
                   "status": {"phase": "Running"}}
            if grace_seconds is not None:
                pod["spec"]["terminationGracePeriodSeconds"] = grace_seconds
            self._emit("pods", pod, self.pods.get((namespace, name)))
            self.pods[(namespace, name)] = pod
            return pod

    def backdate_pods(self, when: float) -> None:
        """Every pod there now was created at `when`: for a test clock set after a fixture made its pods on the
        real one (the remediator compares creationTimestamp with the alerts' startsAt). Once: a second harness on
        the cluster (another replica) finds the pods a test made on the test clock."""
        if self._backdated:
            return
        self._backdated = True
        with self.lock:
            for pod in self.pods.values():
                pod["metadata"]["creationTimestamp"] = _rfc3339(when)

    def update_node(self, name: str, change: Callable[[Obj], None]) -> Obj:
        """A change made elsewhere (a person's kubectl, the kubelet): `change` edits the Node in place; it gets
        a new resourceVersion and watches see it."""
        with self.lock:
            old = self.nodes[name]
            node = copy.deepcopy(old)
            change(node)
            node["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("nodes", node, old)
            self.nodes[name] = node
            return copy.deepcopy(node)

    def delete_node(self, name: str) -> None:
        """The Node is gone (Karpenter deleted it): watches see DELETED."""
        with self.lock:
            self._emit("nodes", self.nodes.pop(name), None, deleted=True)

    def update_pod(self, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        """As update_node, for a Pod (a phase change, a condition)."""
        with self.lock:
            old = self.pods[(namespace, name)]
            pod = copy.deepcopy(old)
            change(pod)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("pods", pod, old)
            self.pods[(namespace, name)] = pod
            return copy.deepcopy(pod)

    def reap(self) -> None:
        """Remove the terminating pods whose grace period is over on `clock` (requests and watches do it too)."""
        with self.lock:
            self._reap()

    def add_job(self, namespace: str, name: str, succeeded: int = 0, suspend: bool = False) -> Obj:
        """A batch/v1 Job (a workload's owner), with the status the Job controller would keep."""
        with self.lock:
            job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": name, "namespace": namespace, "uid": f"uid-job-{name}",
                                "resourceVersion": self._next_rv(), "annotations": {}},
                   "spec": {"suspend": suspend, "backoffLimit": 6, "template": {"spec": {"containers": []}}},
                   "status": {"active": 1, "succeeded": succeeded}}
            self.jobs[(namespace, name)] = job
            return copy.deepcopy(job)

    def job_pod(self, namespace: str, job: str, waiting: str = "", message: str = "", refused: str = "",
                exit_code: int | None = None) -> Obj:
        """The pod the Job controller makes for a Job created through the API (its template, owned by the Job, bound to
        the template's nodeName), with the status its node's kubelet reports: a container `waiting` for a reason
        (ImagePullBackOff, `message` as the kubelet words it), a pod the kubelet `refused` at admission (phase
        Failed, reason OutOfcpu), or a container that ended with `exit_code`; the Job's status follows (backoffLimit 0).
        Watches see it."""
        with self.lock:
            owner = self.jobs[(namespace, job)]
            template = copy.deepcopy(owner["spec"]["template"])
            labels = {**(template.get("metadata") or {}).get("labels", {}), "batch.kubernetes.io/job-name": job,
                      "job-name": job}
            name = f"{job}-x7k2p"
            container = template["spec"]["containers"][0]["name"]
            state: Obj = {"waiting": {"reason": waiting or "ContainerCreating",
                                      **({"message": message} if message else {})}}
            status: Obj = {"phase": "Pending",
                           "containerStatuses": [{"name": container, "ready": False, "restartCount": 0,
                                                  "image": template["spec"]["containers"][0]["image"],
                                                  "state": state}]}
            if refused:
                status = {"phase": "Failed", "reason": refused, "message": message or f"Pod was rejected: {refused}"}
            elif exit_code is not None:
                status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
                status["containerStatuses"][0]["state"] = {"terminated": {
                    "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}}
            pod: Obj = {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                                     "labels": labels, "resourceVersion": self._next_rv(),
                                     "creationTimestamp": _rfc3339(self.clock()),
                                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                          "uid": owner["metadata"]["uid"], "controller": True}]},
                        "spec": template["spec"], "status": status}
            self._emit("pods", pod, self.pods.get((namespace, name)))
            self.pods[(namespace, name)] = pod
            if refused or exit_code not in (None, 0):
                owner["status"] = {"failed": 1}
            else:
                owner["status"] = {"succeeded": 1} if exit_code == 0 else {"active": 1, "ready": 0}
            return copy.deepcopy(pod)

    def job_makes_no_pod(self, namespace: str, job: str) -> None:
        """The Job controller cannot create the Job's pod (FailedCreate: the RuntimeClass does not exist, the
        namespace's Pod Security level refuses a privileged pod, a ResourceQuota): the Job counts no pod."""
        with self.lock:
            self.jobs[(namespace, job)]["status"] = {"ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}

    def add_pdb(self, namespace: str, match_labels: dict[str, str], disruptions_allowed: int) -> Obj:
        pdb = {"namespace": namespace, "matchLabels": match_labels, "disruptionsAllowed": disruptions_allowed}
        with self.lock:
            self.pdbs.append(pdb)
        return pdb

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

    def node(self, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def taints(self, name: str) -> list[Obj]:
        return list(self.node(name)["spec"].get("taints") or [])

    def pods_on(self, node: str) -> list[Obj]:
        """The node's pods as `kubectl get pods` shows them: Terminating ones included until they are gone."""
        with self.lock:
            self._reap()
            return [copy.deepcopy(p) for p in self.pods.values() if p["spec"]["nodeName"] == node]

    def terminating(self, node: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods_on(node) if p["metadata"].get("deletionTimestamp")]

    def evictions(self) -> list[str]:
        """Pods evicted or deleted so far (namespace/name), in order."""
        with self.lock:
            return list(self._evicted)

    def _terminate(self, key: tuple[str, str], grace: float | None = None) -> None:
        pod = self.pods[key]
        self._evicted.append(f"{key[0]}/{key[1]}")
        if grace is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", self.pod_grace))
        if grace <= 0:
            self._emit("pods", self.pods.pop(key), None, deleted=True)
            self._gone_at.pop(key, None)
            return
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            before = json.dumps(pod)
            now = self.clock()
            meta["deletionTimestamp"] = _rfc3339(now)
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

    def events_for(self, name: str) -> list[Obj]:
        with self.lock:
            return [e for e in self.events if e["involvedObject"].get("name") == name]

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events_for(name)]

    def writes(self) -> list[tuple[str, str]]:
        with self.lock:
            return [r for r in self.requests if r[0] != "GET"]

    # --- watches ---------------------------------------------------------------------------
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

    # --- paged lists: limit and continue, as the API server serves them ------------------------------------------
    def _first_page(self, out: Obj, query: dict[str, str]) -> Obj:
        """A list cut to `limit` objects, in the order of their keys (namespace, name), as etcd lists them; the rest
        is kept as the list was at its resourceVersion, for the `continue` token: every page of one list is of the
        same revision, whatever changes meanwhile."""
        items = out.get("items")
        if not isinstance(items, list) or not str(out.get("kind", "")).endswith("List"):
            return out
        items = sorted(items, key=lambda o: ((o.get("metadata") or {}).get("namespace") or "",
                                             (o.get("metadata") or {}).get("name") or ""))
        selected = bool(query.get("fieldSelector") or query.get("labelSelector"))
        return self._page({k: v for k, v in out.items() if k != "items"}, items, int(query["limit"]), selected)

    def _page(self, head: Obj, items: list[Obj], limit: int, selected: bool) -> Obj:
        page, rest = (items[:limit], items[limit:]) if limit > 0 else (items, [])
        meta = {k: v for k, v in (head.get("metadata") or {}).items() if k not in ("continue", "remainingItemCount")}
        if rest:
            self._page_ids += 1
            self._pages[self._page_ids] = (head, rest, selected)
            while len(self._pages) > 100:  # clients that stop paging halfway: the oldest lists are forgotten
                del self._pages[min(self._pages)]
            token = {"rv": int(meta.get("resourceVersion") or 0), "list": self._page_ids}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            if not selected:  # the API server counts what is left only for a list without selectors
                meta["remainingItemCount"] = len(rest)
        return {**head, "metadata": meta, "items": page}

    def _next_page(self, query: dict[str, str]) -> tuple[int, Obj]:
        if query.get("resourceVersion"):
            return 400, _status(400, "BadRequest", "specifying resource version is not allowed when using continue")
        try:
            token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
            rv, list_id = int(token["rv"]), int(token["list"])
        except (ValueError, KeyError, TypeError) as exc:
            return 400, _status(400, "BadRequest", f"continue key is not valid: {exc}")
        kept = self._pages.pop(list_id, None)
        if kept is None or rv < self._compacted:  # that revision is compacted away
            return 410, _status(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                "list result. You can start a new list without the continue parameter.")
        head, rest, selected = kept
        return 200, self._page(head, rest, int(query.get("limit") or 0), selected)

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
                return kind, namespace, [json.dumps(o) for o in store if _selected(o, fs, ls)], self.rv
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

    # --- the API ---------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, str], body: Any,
               content_type: str, identity: Identity = ANONYMOUS) -> tuple[int, Obj]:
        fs, ls = query.get("fieldSelector"), query.get("labelSelector")
        self._reap()
        parts = path.strip("/").split("/")
        attrs = attributes(method, path, body)
        if parts[:3] == ["api", "v1", "nodes"]:
            return self._nodes(method, parts[3:], body, content_type, fs, ls, attrs, identity)
        if method == "POST" and parts[:2] == ["apis", "batch"] and parts[5:6] == ["jobs"] and isinstance(body, dict):
            body = default_job(body)  # as the API server: defaulted before admission sees it, and stored so
        # Other writes are admitted before their object is looked up: `object` is the body sent (CREATE,
        # PUT) or null (PATCH, DELETE). The chart's policies are about Nodes, admitted exactly below.
        denied = self._admit(attrs, identity, body if method in ("POST", "PUT") else None, None)
        if denied is not None:
            return denied
        if parts[:3] == ["api", "v1", "pods"] and method == "GET":
            return 200, self._list("PodList", self._pods_for(fs), fs, ls)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5:
            ns, kind, rest = parts[3], parts[4], parts[5:]
            if kind == "pods":
                return self._pods(method, ns, rest, body, fs, ls, query)
            if kind == "events":
                return self._events(method, ns, body, fs)
        if parts[:4] == ["apis", "coordination.k8s.io", "v1", "namespaces"] and parts[5:6] == ["leases"]:
            return self._leases(method, parts[4], parts[6:], body)
        if parts[:4] == ["apis", "batch", "v1", "namespaces"] and parts[5:6] == ["jobs"]:
            return self._jobs(method, parts[4], parts[6:], body, ls)
        if parts[:2] == ["apis", "resource.k8s.io"]:
            return self.dra.route(method, parts[2:], body, ls)
        if parts[:4] == ["apis", "karpenter.sh", "v1", "nodeclaims"]:
            if method == "GET" and len(parts) == 4:
                return 200, {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaimList", "metadata": {},
                             "items": list(self.nodeclaims.values())}
            if method == "DELETE" and len(parts) == 5:
                if self.nodeclaims.pop(parts[4], None) is None:
                    return 404, _status(404, "NotFound")
                return 200, _status(200, "Deleted") | {"status": "Success"}
        return 404, _status(404, "NotFound", f"no route for {method} {path}")

    def _pods_for(self, fs: str | None) -> Any:
        """The pods a field selector can match: those of one node when it names one (a fleet has 100,000)."""
        node = next((t.split("=", 2)[-1] for t in (fs or "").split(",") if re.match(r"^spec\.nodeName==?[^=]", t)),
                    None)
        return self.pods.values() if node is None else [p for p in self.pods.values()
                                                        if p["spec"].get("nodeName") == node]

    def _list(self, kind: str, items: Any, fs: str | None, ls: str | None) -> Obj:
        return {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": str(self.rv)},
                "items": [copy.deepcopy(o) for o in items if _selected(o, fs, ls)]}

    def _nodes(self, method: str, rest: list[str], body: Any, content_type: str, fs: str | None,
               ls: str | None, attrs: Attributes | None = None,
               identity: Identity = ANONYMOUS) -> tuple[int, Obj]:
        if not rest:
            if method == "GET":
                return 200, self._list("NodeList", self.nodes.values(), fs, ls)
            return 405, _status(405, "MethodNotAllowed")
        node = self.nodes.get(rest[0])
        if node is None:
            return 404, _status(404, "NotFound", f'nodes "{rest[0]}" not found')
        if method == "GET" and len(rest) == 1:
            return 200, copy.deepcopy(node)
        if method == "PATCH" and len(rest) in (1, 2) and rest[1:] in ([], ["status"]):
            if not isinstance(body, dict):
                return 400, _status(400, "BadRequest", "patch must be an object")
            want_rv = (body.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != node["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified; please apply your changes "
                                    "to the latest version and try again")
            if content_type.startswith("application/merge-patch+json"):
                merged = merge_patch(node, body)
            elif content_type.startswith("application/strategic-merge-patch+json"):
                merged = strategic_merge_patch(node, body)
            else:
                return 415, _status(415, "UnsupportedMediaType", content_type)
            if rest[1:] == ["status"]:  # the status strategy resets only spec: metadata changes are kept
                merged["spec"] = node.get("spec")
            else:
                merged["status"] = node.get("status")
            invalid = invalid_annotations(merged)  # validation runs before admission
            if invalid is not None:
                return 422, invalid
            denied = self._admit(attrs, identity, merged, node)  # after the patch is applied, before it is stored
            if denied is not None:
                return denied
            merged["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("nodes", merged, node)
            self.nodes[rest[0]] = merged
            return 200, copy.deepcopy(merged)
        return 405, _status(405, "MethodNotAllowed")

    def _pods(self, method: str, ns: str, rest: list[str], body: Any, fs: str | None,
              ls: str | None, query: dict[str, str]) -> tuple[int, Obj]:
        if not rest and method == "GET":
            return 200, self._list("PodList", (p for (n, _), p in self.pods.items() if n == ns), fs, ls)
        if not rest:
            return 405, _status(405, "MethodNotAllowed")
        pod = self.pods.get((ns, rest[0]))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{rest[0]}" not found')
        if method == "DELETE" and len(rest) == 1:
            grace = (body or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            self._terminate((ns, rest[0]), None if grace is None else int(grace))
            return 200, copy.deepcopy(self.pods.get((ns, rest[0]), pod))
        if method == "POST" and rest[1:] == ["eviction"]:
            if not isinstance(body, dict) or body.get("kind") != "Eviction":
                return 400, _status(400, "BadRequest", "expected an Eviction")
            if pod["metadata"].get("deletionTimestamp"):  # already terminating: nothing more to disrupt
                return 201, _status(201, "Created") | {"status": "Success"}
            labels = pod["metadata"].get("labels") or {}
            for pdb in self.pdbs:
                if pdb["namespace"] == ns and all(labels.get(k) == v for k, v in pdb["matchLabels"].items()):
                    if pdb["disruptionsAllowed"] <= 0:
                        return 429, _status(429, "TooManyRequests",
                                            "Cannot evict pod as it would violate the pod's disruption budget.")
                    pdb["disruptionsAllowed"] -= 1
            self._terminate((ns, rest[0]))
            return 201, _status(201, "Created") | {"status": "Success"}
        if method == "PATCH" and len(rest) == 1:
            patched = self._merge_patch(pod, body)
            if patched[0] == 200:
                self._emit("pods", patched[1], pod)
                self.pods[(ns, rest[0])] = patched[1]
            return patched[0], copy.deepcopy(patched[1])
        return 405, _status(405, "MethodNotAllowed")

    def _merge_patch(self, obj: Obj, body: Any) -> tuple[int, Obj]:
        """A merge patch (what the workload watcher sends) with a resourceVersion precondition; status unchanged."""
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "patch must be an object")
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
            return 409, _status(409, "Conflict", "the object has been modified; please apply your changes "
                                "to the latest version and try again")
        merged = merge_patch(obj, body)
        merged["status"] = copy.deepcopy(obj.get("status"))
        invalid = invalid_annotations(merged)
        if invalid is not None:
            return 422, invalid
        merged["metadata"]["resourceVersion"] = self._next_rv()
        return 200, merged

    def _events(self, method: str, ns: str, body: Any, fs: str | None) -> tuple[int, Obj]:
        if method == "POST":
            if not isinstance(body, dict) or "involvedObject" not in body:
                return 400, _status(400, "BadRequest", "event needs involvedObject")
            involved_ns = (body.get("involvedObject") or {}).get("namespace") or ""
            if (body.get("metadata") or {}).get("namespace") not in (None, ns):
                return 422, _status(422, "Invalid", "the namespace of the provided object does not match the "
                                    "namespace sent on the request")
            if (involved_ns and involved_ns != ns) or (not involved_ns and ns != "default"):
                return 422, _status(422, "Invalid", f"Event is invalid: involvedObject.namespace: Invalid value: "
                                    f"{involved_ns!r}: does not match event.namespace {ns!r}")
            event = copy.deepcopy(body)
            event.setdefault("metadata", {})["namespace"] = ns
            event["metadata"]["resourceVersion"] = self._next_rv()
            self.events.append(event)
            return 201, event
        if method == "GET":
            return 200, self._list("EventList", (e for e in self.events if e["metadata"]["namespace"] == ns), fs, None)
        return 405, _status(405, "MethodNotAllowed")

    def _leases(self, method: str, ns: str, rest: list[str], body: Any) -> tuple[int, Obj]:
        if method == "POST" and not rest:
            name = body["metadata"]["name"]
            if (ns, name) in self.leases:
                return 409, _status(409, "AlreadyExists", f'leases "{name}" already exists')
            lease = copy.deepcopy(body)
            lease["metadata"].update(namespace=ns, resourceVersion=self._next_rv())
            self.leases[(ns, name)] = lease
            return 201, copy.deepcopy(lease)
        if not rest:
            return 405, _status(405, "MethodNotAllowed")
        current = self.leases.get((ns, rest[0]))
        if current is None:
            return 404, _status(404, "NotFound", f'leases "{rest[0]}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "PUT":
            if (body.get("metadata") or {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            lease = copy.deepcopy(body)
            lease["metadata"].update(namespace=ns, resourceVersion=self._next_rv())
            self.leases[(ns, rest[0])] = lease
            return 200, copy.deepcopy(lease)
        return 405, _status(405, "MethodNotAllowed")

    def _jobs(self, method: str, ns: str, rest: list[str], body: Any, ls: str | None = None) -> tuple[int, Obj]:
        if method == "GET" and not rest:
            return 200, self._list("JobList", (j for (n, _), j in self.jobs.items() if n == ns), None, ls)
        if method == "POST" and not rest:
            name = body["metadata"]["name"]
            if (ns, name) in self.jobs:
                return 409, _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job = copy.deepcopy(body)
            job["metadata"].update(namespace=ns, resourceVersion=self._next_rv(), uid=f"uid-job-{name}",
                                   creationTimestamp=_rfc3339(self.clock()))
            job["status"] = {"active": 1}  # its pod is made only when a test asks (job_pod, job_makes_no_pod)
            self.jobs[(ns, name)] = job
            return 201, copy.deepcopy(job)
        if method == "GET" and len(rest) == 1:
            job = self.jobs.get((ns, rest[0]))
            if job is None:
                return 404, _status(404, "NotFound", f'jobs.batch "{rest[0]}" not found')
            return 200, copy.deepcopy(job)
        if method == "PATCH" and len(rest) == 1 and (ns, rest[0]) in self.jobs:
            code, out = self._merge_patch(self.jobs[(ns, rest[0])], body)
            if code == 200:
                self.jobs[(ns, rest[0])] = out
            return code, copy.deepcopy(out)
        return 405, _status(405, "MethodNotAllowed")
