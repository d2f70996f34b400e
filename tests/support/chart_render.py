"""The chart as `helm template gpuhealth helm/gpuhealth -n gpuhealth -f values` renders it (Helm 4 SDK in-process,
no helm binary), for every test that reads the rendering: `render` (cached per values, a fresh copy each call)
and `render_fresh` (rendered again: a generated token differs each time, as with `helm template`); and what the
rendered RBAC grants a ServiceAccount (`granted`)."""

from __future__ import annotations

import functools
import json
from typing import Any

import yaml

from tests.support import paths

CHART = paths.REPO / "helm" / "gpuhealth"
RELEASE = NAMESPACE = "gpuhealth"
# libyaml's loader where PyYAML was built with it (same documents as safe_load, several times faster: the rendering
# holds every rule and dashboard, and most chart tests read it)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def render_fresh(values: dict[str, Any] | None = None, *, with_template: bool = False) -> list[dict[str, Any]]:
    """Every manifest, in template order; `with_template`: each carries the template it came from as
    `__template` (not a Kubernetes field: strip it before handing a doc to anything strict)."""
    import helm_python as helm

    helm.disable_logging()  # the loader logs each link it follows (files/rules, files/dashboards)
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs = []
    for name, text in sorted(out.items()):
        if name.endswith(".yaml"):
            for doc in yaml.load_all(text, Loader=_LOADER):
                if doc:
                    if with_template:
                        doc["__template"] = name
                    docs.append(doc)
    return docs


@functools.cache
def _cached(values_json: str) -> str:
    return json.dumps(render_fresh(json.loads(values_json)))


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """As render_fresh, rendered once per set of values (the token is the same across calls)."""
    result: list[dict[str, Any]] = json.loads(_cached(json.dumps(values or {}, sort_keys=True)))
    return result


def rules_by_role(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(kind, namespace or '', name) -> rules, of every Role and ClusterRole."""
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d["rules"]
            for d in docs if d["kind"] in ("ClusterRole", "Role")}


def granted(docs: list[dict[str, Any]], account: str) -> dict[tuple[str, str, str], set[str]]:
    """(namespace or '*', apiGroup, resource) -> verbs the ServiceAccount `account` holds through the bindings."""
    roles = rules_by_role(docs)
    grants: dict[tuple[str, str, str], set[str]] = {}
    for b in docs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace", "")
        role_ns = ns if b["roleRef"]["kind"] == "Role" else ""
        for rule in roles[(b["roleRef"]["kind"], role_ns, b["roleRef"]["name"])]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.setdefault((ns or "*", group, resource), set()).update(rule["verbs"])
    return grants
