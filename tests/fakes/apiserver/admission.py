"""Authentication and ValidatingAdmissionPolicy for the fake API server (tests/fakes/apiserver/).

- Identities: a bearer token maps to a user (username, uid, groups, extra), as the API server's
  authenticators produce them. `service_account` builds the identity a pod-bound service-account
  token authenticates as on Kubernetes 1.30+: `system:serviceaccount:<ns>:<name>`, the
  `system:serviceaccounts` groups, and the pod's name, uid and node name in `extra`
  (`authentication.kubernetes.io/node-name`: ServiceAccountTokenPodNodeInfo, on by default since 1.30).
- Admission: admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and Binding objects, as the
  chart renders them, are evaluated on every write with the policy's own CEL (cel-python), so a change
  to the chart's expression changes what the fake server enforces. Supported as the API server does:
  matchConstraints.resourceRules and excludeResourceRules (groups, versions, operations,
  resources with subresources and wildcards, resourceNames, scope), matchConditions, variables,
  validations (message, messageExpression, reason), failurePolicy, and the binding's
  validationActions (Deny denies; Warn and Audit never do), and Kubernetes' quantity library
  (tests/fakes/apiserver/quantity.py). Anything the fake cannot evaluate
  (paramKind, label selectors, audit annotations) is refused when the policy is loaded, so it is never
  silently ignored.
- Lists reach the CEL as the API server decodes them: every entry, duplicates included (two `env` entries of one
  name are valid, and the kubelet sets the last). One difference: `==` compares a list in order here, where the API
  server compares a list its schema keys (`x-kubernetes-list-type: map`: containers, volumes, env, volumeMounts by
  name or path) by key, in any order; the chart's policy never compares such a list whole
  (tests/chart/test_node_action_jobs_forgery.py checks it), so the two agree on it.
- A denial has the shape of the API server's: a Status with the validation's reason (Invalid when
  unset) and its HTTP code, and the message
  `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with binding '<binding>'
  denied request: <message>`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from tests.fakes.apiserver.quantity import FUNCTIONS as QUANTITY_FUNCTIONS

Obj = dict[str, Any]

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
OPERATIONS = {"POST": "CREATE", "PUT": "UPDATE", "PATCH": "UPDATE", "DELETE": "DELETE"}


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)
    uid: str = ""

    def user_info(self) -> Obj:
        """authentication.k8s.io/v1 UserInfo, as admission sees it (empty fields are left out, as in JSON)."""
        info: Obj = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {k: list(v) for k, v in self.extra.items()}
        return info


ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",))


def service_account(namespace: str, name: str, node: str | None = None, pod: str | None = None) -> Identity:
    """What a pod's projected service-account token authenticates as (node: the pod's spec.nodeName; None
    for a legacy Secret token or a cluster without ServiceAccountTokenPodNodeInfo)."""
    extra: dict[str, list[str]] = {}
    if pod is not None:
        extra["authentication.kubernetes.io/pod-name"] = [pod]
        extra["authentication.kubernetes.io/pod-uid"] = [f"uid-pod-{pod}"]
    if node is not None:
        extra[NODE_NAME_KEY] = [node]
        extra["authentication.kubernetes.io/node-uid"] = [f"uid-{node}"]
    return Identity(f"system:serviceaccount:{namespace}:{name}",
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
                    extra, uid=f"uid-sa-{namespace}-{name}")


@dataclass(frozen=True)
class Attributes:
    """What admission knows of a request."""

    operation: str  # CREATE | UPDATE | DELETE
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    name: str

    @property
    def qualified_resource(self) -> str:
        return self.resource if not self.group else f"{self.resource}.{self.group}"


def attributes(method: str, path: str, body: Any = None) -> Attributes | None:
    """The admission attributes of a write (None for reads, which admission never sees)."""
    operation = OPERATIONS.get(method)
    if operation is None:
        return None
    parts = path.strip("/").split("/")
    if parts[:1] == ["api"]:
        group, version, rest = "", parts[1] if len(parts) > 1 else "", parts[2:]
    else:
        group, version, rest = (parts[1] if len(parts) > 1 else ""), (parts[2] if len(parts) > 2 else ""), parts[3:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if operation == "CREATE" and not name and isinstance(body, dict):
        name = str((body.get("metadata") or {}).get("name") or "")
    return Attributes(operation, group, version, resource, subresource, namespace, name)


def _matches_resource(entry: str, a: Attributes) -> bool:
    """As the API server's rule matcher: "nodes" is the resource alone, "nodes/status" its subresource,
    "nodes/*" the resource and every subresource, "*" every resource and "*/*" everything."""
    res, _, sub = entry.partition("/")
    return res in ("*", a.resource) and sub in ("*", a.subresource)


def _rule_matches(rule: Obj, a: Attributes) -> bool:
    def has(key: str, value: str) -> bool:
        items = rule.get(key) or []
        return "*" in items or value in items

    if not (has("apiGroups", a.group) and has("apiVersions", a.version) and has("operations", a.operation)):
        return False
    if not any(_matches_resource(r, a) for r in rule.get("resources") or []):
        return False
    scope = rule.get("scope", "*")
    if (scope == "Cluster" and a.namespace) or (scope == "Namespaced" and not a.namespace):
        return False
    names = rule.get("resourceNames") or []
    return not names or a.name in names


_SUPPORTED_MATCH = {"resourceRules", "excludeResourceRules", "matchPolicy", "namespaceSelector", "objectSelector"}


def _check_match(where: str, match: Obj) -> None:
    unknown = set(match) - _SUPPORTED_MATCH
    if unknown:
        raise ValueError(f"{where}: the fake API server cannot evaluate {sorted(unknown)}")
    for selector in ("namespaceSelector", "objectSelector"):
        if match.get(selector):  # an empty selector matches everything
            raise ValueError(f"{where}: the fake API server cannot evaluate a non-empty {selector}")


def _match(match: Obj | None, a: Attributes) -> bool:
    if match is None:
        return True
    if "resourceRules" in match and not any(_rule_matches(r, a) for r in match["resourceRules"]):
        return False
    return not any(_rule_matches(r, a) for r in match.get("excludeResourceRules") or [])


class _Expression:
    def __init__(self, env: celpy.Environment, text: str, where: str) -> None:
        self.text = text
        try:
            self.program = env.program(env.compile(text), functions=QUANTITY_FUNCTIONS)
        except Exception as exc:  # CELParseError: a policy the API server would not accept
            raise ValueError(f"{where}: CEL does not compile: {text!r}: {exc}") from exc

    def evaluate(self, activation: dict[str, Any]) -> Any:
        value = self.program.evaluate(activation)
        if isinstance(value, CELEvalError):
            raise value
        return value


@dataclass
class Denial:
    code: int
    status: Obj


class Policy:
    """One ValidatingAdmissionPolicy, compiled."""

    def __init__(self, doc: Obj, env: celpy.Environment) -> None:
        self.name = str(doc["metadata"]["name"])
        spec = doc["spec"]
        where = f"ValidatingAdmissionPolicy {self.name}"
        for unsupported in ("paramKind", "auditAnnotations"):
            if spec.get(unsupported):
                raise ValueError(f"{where}: the fake API server cannot evaluate {unsupported}")
        self.failure_policy = spec.get("failurePolicy", "Fail")
        self.match = spec.get("matchConstraints") or {}
        _check_match(where, self.match)
        self.conditions = [_Expression(env, c["expression"], f"{where} matchCondition {c['name']}")
                           for c in spec.get("matchConditions") or []]
        self.variables = [(v["name"], _Expression(env, v["expression"], f"{where} variable {v['name']}"))
                          for v in spec.get("variables") or []]
        self.validations = []
        for v in spec.get("validations") or []:
            message = v.get("messageExpression")
            self.validations.append((_Expression(env, v["expression"], where), v.get("message"),
                                     _Expression(env, message, where) if message else None,
                                     v.get("reason") or "Invalid"))


class AdmissionPolicies:
    """The ValidatingAdmissionPolicies and their Bindings found in a list of manifests."""

    def __init__(self, docs: Iterable[Obj]) -> None:
        self.env = celpy.Environment()
        docs = list(docs)
        self.policies = {p.name: p for p in (Policy(d, self.env) for d in docs
                                             if d.get("kind") == "ValidatingAdmissionPolicy")}
        self.bindings: list[tuple[str, Policy, list[str], Obj | None]] = []
        for d in docs:
            if d.get("kind") != "ValidatingAdmissionPolicyBinding":
                continue
            name, spec = str(d["metadata"]["name"]), d["spec"]
            if spec.get("paramRef"):
                raise ValueError(f"ValidatingAdmissionPolicyBinding {name}: the fake cannot evaluate paramRef")
            policy = self.policies.get(spec["policyName"])
            if policy is None:  # as on the API server: a binding to no policy does nothing
                continue
            match = spec.get("matchResources")
            if match is not None:
                _check_match(f"ValidatingAdmissionPolicyBinding {name}", match)
            self.bindings.append((name, policy, list(spec.get("validationActions") or []), match))

    def admit(self, a: Attributes, user: Identity, obj: Obj | None, old: Obj | None) -> Denial | None:
        """None if every binding admits the request, else the first denial."""
        request = {
            "operation": a.operation, "name": a.name, "namespace": a.namespace,
            "resource": {"group": a.group, "version": a.version, "resource": a.resource},
            "subResource": a.subresource, "userInfo": user.user_info(), "dryRun": False,
        }
        base = {"request": json_to_cel(request), "object": json_to_cel(obj),
                "oldObject": json_to_cel(old)}
        for binding, policy, actions, match in self.bindings:
            if not (_match(policy.match, a) and _match(match, a)):
                continue
            message, reason = self._evaluate(policy, dict(base))
            if message is None or "Deny" not in actions:
                continue
            full = f"ValidatingAdmissionPolicy '{policy.name}' with binding '{binding}' denied request: {message}"
            code = REASON_CODES.get(reason, 422)
            return Denial(code, {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f'{a.qualified_resource} "{a.name or "Unknown"}" is forbidden: {full}',
                "reason": reason, "code": code,
                "details": {"name": a.name or "Unknown", "group": a.group, "kind": a.resource,
                            "causes": [{"message": full}]},
            })
        return None

    @staticmethod
    def _evaluate(policy: Policy, activation: dict[str, Any]) -> tuple[str | None, str]:
        """(the failure's message, its reason), or (None, "") when the policy admits the request."""
        try:
            for condition in policy.conditions:
                if condition.evaluate(activation) != celtypes.BoolType(True):
                    return None, ""  # not a request this policy is for
            variables: dict[celtypes.StringType, Any] = {}
            activation["variables"] = celtypes.MapType(variables)
            for name, expression in policy.variables:
                variables[celtypes.StringType(name)] = expression.evaluate(activation)
                activation["variables"] = celtypes.MapType(variables)
            for check, message, message_expression, reason in policy.validations:
                try:
                    if check.evaluate(activation) == celtypes.BoolType(True):
                        continue
                except CELEvalError as exc:
                    if policy.failure_policy == "Ignore":
                        continue
                    return f"expression '{check.text}' resulted in error: {exc.args[0] if exc.args else exc}", \
                        "Invalid"
                text = ""
                if message_expression is not None:
                    try:
                        text = str(message_expression.evaluate(activation))
                    except CELEvalError:
                        text = ""  # as the API server: fall back to message
                return text or message or f"failed expression: {check.text}", reason
        except CELEvalError as exc:
            if policy.failure_policy == "Ignore":
                return None, ""
            return f"policy '{policy.name}' failed to evaluate: {exc.args[0] if exc.args else exc}", "Invalid"
        return None, ""
