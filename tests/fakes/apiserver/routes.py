"""The API's resources: a request's path to the handler of its kind (nodes, pods, events, leases, jobs, DRA,
NodeClaims), each as strict as the API server where the remediator and the exporter depend on it."""

from __future__ import annotations

import copy
import re
from typing import Any

from tests.fakes.apiserver.admission import ANONYMOUS, Attributes, Identity, attributes
from tests.fakes.apiserver.defaults import default_job
from tests.fakes.apiserver.objects import TEXT_BODY, Obj, api_status, rfc3339
from tests.fakes.apiserver.patches import merge_patch, strategic_merge_patch
from tests.fakes.apiserver.selectors import selected
from tests.fakes.apiserver.state import ClusterState
from tests.fakes.apiserver.validation import invalid_annotations, invalid_job


class Routes(ClusterState):
    def _admit(self, attrs: Attributes | None, identity: Identity, obj: Obj | None,
               old: Obj | None) -> tuple[int, Obj] | None:
        if attrs is None or self.admission is None:
            return None
        denial = self.admission.admit(attrs, identity, obj, old)
        return None if denial is None else (denial.code, denial.status)

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
            invalid = invalid_job(body)  # and validated before validating admission
            if invalid is not None:
                return 422, invalid
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
            if kind == "configmaps":
                return self._configmaps(method, ns, rest, body, ls)
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
                    return 404, api_status(404, "NotFound")
                return 200, api_status(200, "Deleted") | {"status": "Success"}
        return 404, api_status(404, "NotFound", f"no route for {method} {path}")

    def _pods_for(self, fs: str | None) -> Any:
        """The pods a field selector can match: those of one node when it names one (a fleet has 100,000)."""
        node = next((t.split("=", 2)[-1] for t in (fs or "").split(",") if re.match(r"^spec\.nodeName==?[^=]", t)),
                    None)
        return self.pods.values() if node is None else [p for p in self.pods.values()
                                                        if p["spec"].get("nodeName") == node]

    def _list(self, kind: str, items: Any, fs: str | None, ls: str | None) -> Obj:
        """The stored objects themselves, not copies: the server writes the answer out under the lock (server.py),
        and a stored object is replaced on every change, never changed in place, so the list kept for a paged list's
        later pages (paging.py) stays as it was. A list of 30,000 pods of 11 KiB copied whole took a minute here."""
        return {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": str(self.rv)},
                "items": [o for o in items if selected(o, fs, ls)]}

    def _nodes(self, method: str, rest: list[str], body: Any, content_type: str, fs: str | None,
               ls: str | None, attrs: Attributes | None = None,
               identity: Identity = ANONYMOUS) -> tuple[int, Obj]:
        if not rest:
            if method == "GET":
                return 200, self._list("NodeList", self.nodes.values(), fs, ls)
            return 405, api_status(405, "MethodNotAllowed")
        node = self.nodes.get(rest[0])
        if node is None:
            return 404, api_status(404, "NotFound", f'nodes "{rest[0]}" not found')
        if method == "GET" and len(rest) == 1:
            return 200, copy.deepcopy(node)
        if method == "PATCH" and len(rest) in (1, 2) and rest[1:] in ([], ["status"]):
            if not isinstance(body, dict):
                return 400, api_status(400, "BadRequest", "patch must be an object")
            want_rv = (body.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != node["metadata"]["resourceVersion"]:
                return 409, api_status(409, "Conflict", "the object has been modified; please apply your changes "
                                    "to the latest version and try again")
            if content_type.startswith("application/merge-patch+json"):
                merged = merge_patch(node, body)
            elif content_type.startswith("application/strategic-merge-patch+json"):
                merged = strategic_merge_patch(node, body)
            else:
                return 415, api_status(415, "UnsupportedMediaType", content_type)
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
        return 405, api_status(405, "MethodNotAllowed")

    def _pods(self, method: str, ns: str, rest: list[str], body: Any, fs: str | None,
              ls: str | None, query: dict[str, str]) -> tuple[int, Obj]:
        if not rest and method == "GET":
            return 200, self._list("PodList", (p for (n, _), p in self.pods.items() if n == ns), fs, ls)
        if not rest:
            return 405, api_status(405, "MethodNotAllowed")
        pod = self.pods.get((ns, rest[0]))
        if pod is None:
            return 404, api_status(404, "NotFound", f'pods "{rest[0]}" not found')
        if method == "GET" and rest[1:] == ["log"]:  # text, as the kubelet serves it; limitBytes cuts it
            text = self.pod_logs.get((ns, rest[0]), "").encode()
            limit = int(query["limitBytes"]) if query.get("limitBytes") else len(text)
            return 200, {TEXT_BODY: text[:limit].decode("utf-8", "ignore")}
        if method == "DELETE" and len(rest) == 1:
            grace = (body or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            self._terminate((ns, rest[0]), None if grace is None else int(grace))
            return 200, copy.deepcopy(self.pods.get((ns, rest[0]), pod))
        if method == "POST" and rest[1:] == ["eviction"]:
            if not isinstance(body, dict) or body.get("kind") != "Eviction":
                return 400, api_status(400, "BadRequest", "expected an Eviction")
            if pod["metadata"].get("deletionTimestamp"):  # already terminating: nothing more to disrupt
                return 201, api_status(201, "Created") | {"status": "Success"}
            labels = pod["metadata"].get("labels") or {}
            for pdb in self.pdbs:
                if pdb["namespace"] == ns and all(labels.get(k) == v for k, v in pdb["matchLabels"].items()):
                    if pdb["disruptionsAllowed"] <= 0:
                        return 429, api_status(429, "TooManyRequests",
                                            "Cannot evict pod as it would violate the pod's disruption budget.")
                    pdb["disruptionsAllowed"] -= 1
            self._terminate((ns, rest[0]))
            return 201, api_status(201, "Created") | {"status": "Success"}
        if method == "PATCH" and len(rest) == 1:
            patched = self._merge_patch(pod, body)
            if patched[0] == 200:
                self._emit("pods", patched[1], pod)
                self.pods[(ns, rest[0])] = patched[1]
            return patched[0], copy.deepcopy(patched[1])
        return 405, api_status(405, "MethodNotAllowed")

    def _merge_patch(self, obj: Obj, body: Any) -> tuple[int, Obj]:
        """A merge patch (what the workload watcher sends) with a resourceVersion precondition; status unchanged."""
        if not isinstance(body, dict):
            return 400, api_status(400, "BadRequest", "patch must be an object")
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
            return 409, api_status(409, "Conflict", "the object has been modified; please apply your changes "
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
                return 400, api_status(400, "BadRequest", "event needs involvedObject")
            involved_ns = (body.get("involvedObject") or {}).get("namespace") or ""
            if (body.get("metadata") or {}).get("namespace") not in (None, ns):
                return 422, api_status(422, "Invalid", "the namespace of the provided object does not match the "
                                    "namespace sent on the request")
            if (involved_ns and involved_ns != ns) or (not involved_ns and ns != "default"):
                return 422, api_status(422, "Invalid", f"Event is invalid: involvedObject.namespace: Invalid value: "
                                    f"{involved_ns!r}: does not match event.namespace {ns!r}")
            event = copy.deepcopy(body)
            event.setdefault("metadata", {})["namespace"] = ns
            event["metadata"]["resourceVersion"] = self._next_rv()
            self.events.append(event)
            return 201, event
        if method == "GET":
            return 200, self._list("EventList", (e for e in self.events if e["metadata"]["namespace"] == ns), fs, None)
        return 405, api_status(405, "MethodNotAllowed")

    def _leases(self, method: str, ns: str, rest: list[str], body: Any) -> tuple[int, Obj]:
        if method == "POST" and not rest:
            name = body["metadata"]["name"]
            if (ns, name) in self.leases:
                return 409, api_status(409, "AlreadyExists", f'leases "{name}" already exists')
            lease = copy.deepcopy(body)
            lease["metadata"].update(namespace=ns, resourceVersion=self._next_rv())
            self.leases[(ns, name)] = lease
            return 201, copy.deepcopy(lease)
        if not rest:
            return 405, api_status(405, "MethodNotAllowed")
        current = self.leases.get((ns, rest[0]))
        if current is None:
            return 404, api_status(404, "NotFound", f'leases "{rest[0]}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "PUT":
            if (body.get("metadata") or {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, api_status(409, "Conflict", "the object has been modified")
            lease = copy.deepcopy(body)
            lease["metadata"].update(namespace=ns, resourceVersion=self._next_rv())
            self.leases[(ns, rest[0])] = lease
            return 200, copy.deepcopy(lease)
        return 405, api_status(405, "MethodNotAllowed")

    def _configmaps(self, method: str, ns: str, rest: list[str], body: Any, ls: str | None) -> tuple[int, Obj]:
        """ConfigMaps (the evidence's summaries): create, list by label, get, delete; at most 1 MiB of data."""
        if method == "GET" and not rest:
            return 200, self._list("ConfigMapList", (c for (n, _), c in self.configmaps.items() if n == ns), None, ls)
        if method == "POST" and not rest:
            name = body["metadata"]["name"]
            if (ns, name) in self.configmaps:
                return 409, api_status(409, "AlreadyExists", f'configmaps "{name}" already exists')
            size = sum(len(str(k)) + len(str(v).encode()) for k, v in (body.get("data") or {}).items())
            if size > 1024 * 1024:
                return 422, api_status(422, "Invalid", f'ConfigMap "{name}" is invalid: []: Too long: must have at '
                                       "most 1048576 bytes")
            cm = copy.deepcopy(body)
            cm["metadata"].update(namespace=ns, resourceVersion=self._next_rv(), uid=f"uid-cm-{name}",
                                  creationTimestamp=rfc3339(self.clock()))
            self.configmaps[(ns, name)] = cm
            return 201, copy.deepcopy(cm)
        cm = self.configmaps.get((ns, rest[0])) if len(rest) == 1 else None
        if cm is None:
            return 404, api_status(404, "NotFound", f'configmaps "{rest[0] if rest else ""}" not found')
        if method == "GET":
            return 200, copy.deepcopy(cm)
        if method == "DELETE":
            del self.configmaps[(ns, rest[0])]
            return 200, api_status(200, "Success") | {"status": "Success"}
        return 405, api_status(405, "MethodNotAllowed")

    def _jobs(self, method: str, ns: str, rest: list[str], body: Any, ls: str | None = None) -> tuple[int, Obj]:
        if method == "GET" and not rest:
            return 200, self._list("JobList", (j for (n, _), j in self.jobs.items() if n == ns), None, ls)
        if method == "POST" and not rest:
            name = body["metadata"]["name"]
            if (ns, name) in self.jobs:
                return 409, api_status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job = copy.deepcopy(body)
            job["metadata"].update(namespace=ns, resourceVersion=self._next_rv(), uid=f"uid-job-{name}",
                                   creationTimestamp=rfc3339(self.clock()))
            job["status"] = {"active": 1}  # its pod is made only when a test asks (job_pod, job_makes_no_pod)
            self.jobs[(ns, name)] = job
            return 201, copy.deepcopy(job)
        if method == "GET" and len(rest) == 1:
            job = self.jobs.get((ns, rest[0]))
            if job is None:
                return 404, api_status(404, "NotFound", f'jobs.batch "{rest[0]}" not found')
            return 200, copy.deepcopy(job)
        if method == "PATCH" and len(rest) == 1 and (ns, rest[0]) in self.jobs:
            code, out = self._merge_patch(self.jobs[(ns, rest[0])], body)
            if code == 200:
                self.jobs[(ns, rest[0])] = out
            return code, copy.deepcopy(out)
        return 405, api_status(405, "MethodNotAllowed")
