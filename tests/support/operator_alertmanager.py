"""What the Prometheus Operator makes of AlertmanagerConfig objects (monitoring.coreos.com/v1alpha1): the
Alertmanager configuration it generates from a base configuration (kube-prometheus-stack's `alertmanager.config`)
and the AlertmanagerConfigs its Alertmanager selects, for `amtool` and a real Alertmanager in the tests.

Written from the operator's documented behaviour (Documentation/user-guides/alerting.md, the API reference, and
pkg/alertmanager/amcfg.go read for the facts, not copied), for the operator of kube-prometheus-stack 88.x
(v0.93) and an Alertmanager >= 0.22 (matchers in the v2 syntax):

- Each AlertmanagerConfig's top route becomes a child of the base configuration's root route, inserted BEFORE
  the base configuration's own routes (AlertmanagerConfigs in namespace/name order), with `continue: true`
  forced, so every route after it still sees the alerts.
- Receiver names (in the route tree and the receivers) become `<namespace>/<name>/<receiver>`.
- The matcher strategy (`alertmanagerConfigMatcherStrategy.type` of the Alertmanager): `OnNamespace` (the
  default) adds `namespace="<the AlertmanagerConfig's namespace>"` to the top route's matchers;
  `OnNamespaceExceptForAlertmanagerNamespace` does so except for an AlertmanagerConfig in the Alertmanager's
  own namespace; `None` adds nothing.
- Matchers: `{name, matchType, value}` become `name<matchType>"value"` (value escaped: backslash, newline,
  double quote), for each of `=`, `!=`, `=~`, `!~`.
- Routes: `groupBy`, `groupWait`, `groupInterval`, `repeatInterval`, `continue` and child `routes`, recursively;
  a zero groupInterval/repeatInterval is dropped. The operator's own checks: the top route names a receiver,
  every named receiver exists, `groupBy` has no duplicates and `...` only alone.
- Webhook receivers: `url`, `sendResolved` (left out when unset: Alertmanager's default, true), `maxAlerts`
  (left out when 0), `httpConfig.authorization` with the credentials read from the named Secret in the
  AlertmanagerConfig's namespace and written into the configuration as `credentials`, as the operator does
  (`type` defaults to Bearer; an empty Secret value means no authorization; a missing Secret or key fails, as
  the operator then rejects the AlertmanagerConfig). With `secret_files`, each value is written to a file
  there and named by `credentials_file` instead, for a test that changes the token under a running
  Alertmanager.

Not translated (a field outside these fails, never passes silently): inhibitRules, muteTimeIntervals and time
intervals, every receiver type but webhooks, urlSecret, timeout, payload, the deprecated `regex` matcher and
`match`/`match_re`, httpConfig other than authorization (basicAuth, oauth2, tlsConfig, proxy, bearerTokenSecret),
the alertmanagerConfiguration (a global AlertmanagerConfig instead of the base configuration), Alertmanagers
older than 0.22, and which AlertmanagerConfigs an Alertmanager selects (tests/support/kube_prometheus_stack.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
Secrets = dict[tuple[str, str], dict[str, str]]  # (namespace, name) -> data, decoded

STRATEGIES = ("OnNamespace", "OnNamespaceExceptForAlertmanagerNamespace", "None")
MATCH_TYPES = ("=", "!=", "=~", "!~")

_OBJECT = {"apiVersion", "kind", "metadata", "spec"}
_METADATA = {"name", "namespace", "labels", "annotations"}
_SPEC = {"route", "receivers"}
_ROUTE = {"receiver", "groupBy", "groupWait", "groupInterval", "repeatInterval", "matchers", "continue", "routes"}
_MATCHER = {"name", "matchType", "value"}
_RECEIVER = {"name", "webhookConfigs"}
_WEBHOOK = {"url", "sendResolved", "maxAlerts", "httpConfig"}
_HTTP_CONFIG = {"authorization"}
_AUTHORIZATION = {"type", "credentials"}
_SECRET_KEY = {"name", "key"}
_ZERO_DURATIONS = {"0", "0s", "0ms", "0m", "0h"}


class TranslationError(ValueError):
    """The AlertmanagerConfig holds something this translation does not know, or the operator would reject."""


def _only(where: str, obj: Any, allowed: set[str]) -> Obj:
    if not isinstance(obj, dict):
        raise TranslationError(f"{where}: expected a mapping, got {obj!r}")
    unknown = set(obj) - allowed
    if unknown:
        raise TranslationError(f"{where}: {sorted(unknown)} not translated (add them here, do not drop them)")
    return obj


def matcher(where: str, m: Obj) -> str:
    _only(where, m, _MATCHER)
    name, match_type, value = m.get("name"), m.get("matchType"), m.get("value", "")
    if not isinstance(name, str) or not name.strip():
        raise TranslationError(f"{where}: matcher 'name' is required")
    if match_type not in MATCH_TYPES:
        raise TranslationError(f"{where}: matchType {match_type!r}: expected one of {MATCH_TYPES} "
                               "(the deprecated regex/no matchType form is not translated)")
    escaped = str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return f'{name}{match_type}"{escaped}"'


def _route(where: str, r: Obj, prefix: str, receivers: set[str], top: bool) -> Obj:
    _only(where, r, _ROUTE)
    out: Obj = {}
    receiver = r.get("receiver", "")
    if receiver:
        if receiver not in receivers:
            raise TranslationError(f"{where}: receiver {receiver!r} not found")
        out["receiver"] = f"{prefix}/{receiver}"
    elif top:
        raise TranslationError(f"{where}: root route must define a receiver")
    group_by = list(r.get("groupBy") or [])
    if len(set(group_by)) != len(group_by) or ("..." in group_by and len(group_by) > 1):
        raise TranslationError(f"{where}: groupBy {group_by}: no duplicates, and '...' only alone")
    if group_by:
        out["group_by"] = group_by
    matchers = [matcher(f"{where}.matchers[{i}]", m) for i, m in enumerate(r.get("matchers") or [])]
    if matchers:
        out["matchers"] = matchers
    if r.get("continue"):
        out["continue"] = True
    for key, snake in (("groupWait", "group_wait"), ("groupInterval", "group_interval"),
                       ("repeatInterval", "repeat_interval")):
        value = r.get(key)
        if value and not (key != "groupWait" and str(value) in _ZERO_DURATIONS):
            out[snake] = str(value)
    children = [_route(f"{where}.routes[{i}]", c, prefix, receivers, False)
                for i, c in enumerate(r.get("routes") or [])]
    if children:
        out["routes"] = children
    return out


def _secret(where: str, ref: Any, namespace: str, secrets: Secrets) -> str:
    _only(where, ref, _SECRET_KEY)
    data = secrets.get((namespace, str(ref.get("name"))))
    if data is None or ref.get("key") not in data:
        raise TranslationError(f"{where}: Secret {namespace}/{ref.get('name')} key {ref.get('key')!r} not found "
                               "(the operator rejects the AlertmanagerConfig)")
    return data[str(ref["key"])]


def _webhook(where: str, w: Obj, namespace: str, secrets: Secrets, files: Path | None) -> Obj:
    _only(where, w, _WEBHOOK)
    if not w.get("url"):
        raise TranslationError(f"{where}: url is required (urlSecret is not translated)")
    out: Obj = {"url": w["url"]}
    if w.get("sendResolved") is not None:
        out["send_resolved"] = bool(w["sendResolved"])
    if int(w.get("maxAlerts") or 0) > 0:
        out["max_alerts"] = int(w["maxAlerts"])
    if "httpConfig" in w:
        http = _only(f"{where}.httpConfig", w["httpConfig"], _HTTP_CONFIG)
        config: Obj = {}
        if "authorization" in http:
            auth = _only(f"{where}.httpConfig.authorization", http["authorization"], _AUTHORIZATION)
            if "credentials" not in auth:
                raise TranslationError(f"{where}.httpConfig.authorization: credentials (a Secret key) are required")
            credentials = _secret(f"{where}.httpConfig.authorization.credentials", auth["credentials"], namespace,
                                  secrets)
            if credentials:  # an empty Secret value: the operator sends no Authorization header
                config["authorization"] = {"type": auth.get("type") or "Bearer", "credentials": credentials}
                if files is not None:
                    ref = auth["credentials"]
                    path = files / namespace / str(ref["name"]) / str(ref["key"])
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(credentials)
                    config["authorization"] = {"type": auth.get("type") or "Bearer", "credentials_file": str(path)}
        if config:
            out["http_config"] = config
    return out


def _receiver(where: str, r: Obj, prefix: str, namespace: str, secrets: Secrets, files: Path | None) -> Obj:
    _only(where, r, _RECEIVER)
    out: Obj = {"name": f"{prefix}/{r['name']}"}
    hooks = [_webhook(f"{where}.webhookConfigs[{i}]", w, namespace, secrets, files)
             for i, w in enumerate(r.get("webhookConfigs") or [])]
    if hooks:
        out["webhook_configs"] = hooks
    return out


def generate(base: Obj, amconfigs: list[Obj], secrets: Secrets | None = None, *, strategy: str = "OnNamespace",
             alertmanager_namespace: str = "monitoring", secret_files: Path | None = None) -> Obj:
    """The Alertmanager configuration the operator writes for `base` and the selected `amconfigs` (`secrets`: the
    Secrets' decoded data by (namespace, name); `secret_files`: write them there, see above)."""
    if strategy not in STRATEGIES:
        raise TranslationError(f"matcher strategy {strategy!r}: expected one of {STRATEGIES}")
    config = copy.deepcopy(base)
    if "route" not in config or config["route"].get("continue"):
        raise TranslationError("the base configuration needs a root route, without continue")
    secrets = secrets or {}
    ordered = sorted(amconfigs, key=lambda a: (a["metadata"]["namespace"], a["metadata"]["name"]))
    routes: list[Obj] = []
    for amc in ordered:
        _only("AlertmanagerConfig", amc, _OBJECT)
        if amc.get("kind") != "AlertmanagerConfig" or amc.get("apiVersion") != "monitoring.coreos.com/v1alpha1":
            raise TranslationError(f"{amc.get('apiVersion')}/{amc.get('kind')}: not a v1alpha1 AlertmanagerConfig")
        meta = _only("metadata", amc["metadata"], _METADATA)
        namespace, name = meta["namespace"], meta["name"]
        where = f"AlertmanagerConfig {namespace}/{name}"
        spec = _only(f"{where}.spec", amc.get("spec") or {}, _SPEC)
        prefix = f"{namespace}/{name}"
        names = [r.get("name") for r in spec.get("receivers") or []]
        if len(set(names)) != len(names):
            raise TranslationError(f"{where}: receiver names are not unique: {names}")
        config.setdefault("receivers", []).extend(
            _receiver(f"{where}.receivers[{i}]", r, prefix, namespace, secrets, secret_files)
            for i, r in enumerate(spec.get("receivers") or []))
        if "route" not in spec:
            continue
        route = _route(f"{where}.route", spec["route"], prefix, set(names), True)
        if strategy == "OnNamespace" or (strategy == "OnNamespaceExceptForAlertmanagerNamespace"
                                         and namespace != alertmanager_namespace):
            route["matchers"] = [*route.get("matchers", []), f'namespace="{namespace}"']
        route["continue"] = True
        routes.append(route)
    config["route"]["routes"] = routes + list(config["route"].get("routes") or [])
    return config
