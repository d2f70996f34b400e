"""RBAC as the API server's authorizer decides it, from rendered Roles, ClusterRoles and their bindings.

- A request's attributes as the API server derives them: the verb (get, list, watch with `?watch=` anything but
  0/f/false, create, update, patch, delete, deletecollection), API group, resource and subresource (`pods/eviction`),
  namespace and name (for list and watch, the name a `metadata.name=` field selector names);
- ClusterRoleBindings grant their ClusterRole everywhere; RoleBindings grant their Role, or a ClusterRole, only
  in the binding's namespace;
- subjects: ServiceAccount (user `system:serviceaccount:<ns>:<name>`), User, Group;
- rules: verbs, apiGroups, resources ("*" is every resource and subresource, "pods" is not "pods/eviction",
  "*/scale" a subresource of every resource), resourceNames (never satisfied by a request without a name:
  create, or list/watch without a metadata.name field selector);
- `system:masters` is allowed everything, as on a real cluster; discovery paths (/api, /apis, /version) are
  allowed to every authenticated user, as the bootstrap role system:discovery does;
- the denial is the API server's 403 Status, with its message.
Aggregated ClusterRoles are refused at load: the chart renders none, and a stand-in that ignored them would
grant less than a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakes.apiserver.admission import Identity

Obj = dict[str, Any]
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
DISCOVERY = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str


def watching(query: dict[str, str]) -> bool:
    """A `watch` parameter as the API server converts it to a bool (runtime.Convert_Slice_string_To_bool): true
    unless it is 0, f or false (any case). `?watch=True` is a watch, authorized as one, not a list."""
    value = query.get("watch")
    return value is not None and value.lower() not in ("0", "f", "false")


def request(method: str, path: str, query: dict[str, str]) -> Request | None:
    """The authorization attributes of a resource request; None for a non-resource path (discovery)."""
    parts = path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    elif rest[:1] == ["namespaces"] and len(rest) == 2:  # the Namespace object itself
        rest = ["namespaces", rest[1]]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else "")
    subresource = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        if name:
            verb = "get"
        else:
            verb = "watch" if watching(query) else "list"
            name = next((term.split("=", 1)[1].lstrip("=") for term in (query.get("fieldSelector") or "").split(",")
                         if term.startswith("metadata.name=")), "")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return Request(verb, group, resource, subresource, namespace, name)


def _covers(rule: Obj, r: Request) -> bool:
    def has(key: str, value: str) -> bool:
        items = rule.get(key) or []
        return "*" in items or value in items

    if not (has("verbs", r.verb) and has("apiGroups", r.group)):
        return False
    combined = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
    resources = rule.get("resources") or []
    if not any(res in ("*", combined) or (r.subresource and res == f"*/{r.subresource}") for res in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(r.name) and r.name in names)


def _subject_is(subject: Obj, who: Identity) -> bool:
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        return who.username == f"system:serviceaccount:{subject.get('namespace', '')}:{subject['name']}"
    if kind == "User":
        return who.username == subject["name"]
    if kind == "Group":
        return subject["name"] in who.groups
    raise ValueError(f"RBAC subject kind {kind!r} is not one of ServiceAccount, User, Group")


class Authorizer:
    def __init__(self, manifests: list[Obj]) -> None:
        self.roles: dict[tuple[str, str], list[Obj]] = {}
        self.cluster_roles: dict[str, list[Obj]] = {}
        self.bindings: list[Obj] = []
        self.cluster_bindings: list[Obj] = []
        for doc in manifests:
            kind, meta = doc.get("kind"), doc.get("metadata") or {}
            if kind == "Role":
                self.roles[(meta["namespace"], meta["name"])] = list(doc.get("rules") or [])
            elif kind == "ClusterRole":
                if doc.get("aggregationRule"):
                    raise ValueError(f"ClusterRole {meta['name']}: aggregated ClusterRoles are not modelled here")
                self.cluster_roles[meta["name"]] = list(doc.get("rules") or [])
            elif kind == "RoleBinding":
                self.bindings.append(doc)
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(doc)

    def _rules(self, binding: Obj) -> list[Obj]:
        ref = binding["roleRef"]
        if ref["kind"] == "ClusterRole":
            return self.cluster_roles.get(ref["name"], [])
        return self.roles.get((binding["metadata"]["namespace"], ref["name"]), [])

    def allowed(self, who: Identity, path: str, r: Request | None) -> bool:
        if "system:masters" in who.groups:
            return True
        if r is None:  # a non-resource URL: discovery only
            return "system:authenticated" in who.groups and path.rstrip("/").startswith(DISCOVERY)
        for binding in self.cluster_bindings:
            if any(_subject_is(s, who) for s in binding.get("subjects") or []) and any(
                    _covers(rule, r) for rule in self._rules(binding)):
                return True
        if not r.namespace:
            return False
        for binding in self.bindings:
            if binding["metadata"]["namespace"] != r.namespace:
                continue
            if any(_subject_is(s, who) for s in binding.get("subjects") or []) and any(
                    _covers(rule, r) for rule in self._rules(binding)):
                return True
        return False

    @staticmethod
    def forbidden(who: Identity, path: str, r: Request | None) -> Obj:
        """The API server's 403 Status for a denied request."""
        if r is None:
            message = f'forbidden: User "{who.username}" cannot get path "{path}"'
            details: Obj = {}
        else:
            qualified = f"{r.resource}.{r.group}" if r.group else r.resource
            named = f'{qualified} "{r.name}"' if r.name and r.verb not in ("list", "watch") else qualified
            resource = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
            scope = f'in the namespace "{r.namespace}"' if r.namespace else "at the cluster scope"
            message = (f'{named} is forbidden: User "{who.username}" cannot {r.verb} resource "{resource}" '
                       f'in API group "{r.group}" {scope}')
            details = {"kind": r.resource, **({"group": r.group} if r.group else {}),
                       **({"name": r.name} if r.name else {})}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": "Forbidden", "details": details, "code": 403}
