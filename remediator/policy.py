"""The remediation policy: a YAML file, validated at start, with errors naming file, key and line.

Every key has a default (see docs/remediation.md and policy.example.yaml); a policy file only
needs the keys it changes. Unknown keys are errors: a typo must not silently fall back to a
default that disrupts more than intended.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from remediator.decide.nodestate import RUNGS


class PolicyError(ValueError):
    def __init__(self, source: str, key: str, line: int | None, reason: str) -> None:
        where = f"{source}: {key}" + (f" (line {line})" if line else "")
        super().__init__(f"{where}: {reason}")
        self.source, self.key, self.line, self.reason = source, key, line, reason


@dataclass(frozen=True)
class Quota:
    """An absolute count or a percentage of a pool; a percentage never rounds a pool to zero."""

    count: int | None = None
    percent: float | None = None

    def limit(self, pool_size: int) -> int:
        if self.count is not None:
            return self.count
        return max(1, math.ceil((self.percent or 0.0) * pool_size / 100 - 1e-9))

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"


@dataclass(frozen=True)
class RungPolicy:
    timeout: timedelta | None  # how long the rung's own work may take before it counts as failed
    escalate_after: timedelta | None  # how long the fault may persist after the rung before climbing


@dataclass(frozen=True)
class WorkloadPolicy:
    """The `workloads:` section: classifying ended workload pods (remediator/workloads/classify.py, workloads.py)."""

    enabled: bool = False
    namespaces: tuple[str, ...] = ()  # required when enabled: RBAC (pods patch, events, jobs) is granted in these
    selector: str | None = None  # label selector of the pods to watch; None: every pod that requests GPUs
    # Exit codes that are the application's own doing. 1 is not among them: a CUDA error from a broken
    # GPU also ends a Python program with 1.
    app_exit_codes: tuple[int, ...] = (2, 126, 127)
    look_behind: timedelta = timedelta(minutes=10)  # node alerts this long before the failure count
    look_ahead: timedelta = timedelta(minutes=5)  # ...and this long after: app/unknown verdicts wait this long
    node_suspect_window: timedelta = timedelta(hours=1)  # a workload counts once per node in this window
    restart_loop_threshold: int = 3  # the same app cause this many times in a row is a restart loop
    restart_loop_suspend: bool = False  # suspend the Job (spec.suspend) in a restart loop


@dataclass(frozen=True)
class Policy:
    pool_label: str = "karpenter.sh/nodepool"
    default_pool: str = "default"
    exclude: tuple[dict[str, str], ...] = ()
    max_disrupted: Quota = Quota(percent=10)
    max_cordoned: Quota = Quota(percent=20)
    max_actions_per_hour: int = 20
    breaker_threshold: float = 30.0
    breaker_min_nodes: int = 3
    breaker_cooldown: timedelta = timedelta(minutes=30)
    max_rung: str = "replace"
    rungs: dict[str, RungPolicy] = field(default_factory=lambda: dict(DEFAULT_RUNGS))
    drain_on_timeout: str = "wait"
    eviction_backoff: tuple[float, ...] = (1.0,)
    karpenter_do_not_disrupt: bool = True  # karpenter.sh/do-not-disrupt on the Node from drain until return/replace
    healthy_delay: timedelta = timedelta(minutes=15)
    quiet_timeout: timedelta = timedelta(hours=6)
    label_node: str = "node"
    label_remediation: str = "remediation"
    label_gpu: str = "gpu"
    alertmanager_url: str | None = None  # None: not set (serve refuses); "none": silences deliberately not checked
    alertmanager_peers: tuple[str, ...] = ()  # every member of an HA Alertmanager, when url is a list
    alertmanager_timeout: float = 5.0
    alertmanager_sync_interval: timedelta | None = timedelta(seconds=30)  # None: webhooks only (edge-triggered)
    alertmanager_receiver: str | None = "(.+/)?gpuhealth-remediator"  # the route's receiver (a regex), or any
    alertmanager_filters: tuple[str, ...] | None = None  # matchers, as the route's (None: the node label =~ ".+")
    alertmanager_min_uptime: timedelta = timedelta(minutes=5)  # a younger Alertmanager never resolves
    alertmanager_token_file: str | None = None
    alertmanager_ca_file: str | None = None
    silence_on_error: str = "defer"
    jobs_namespace: str = "gpuhealth"
    jobs_image: str = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    jobs_service_account: str = "gpuhealth-node-action"
    jobs_ttl_seconds: int = 3600
    replace_method: str = "nodeclaim"
    replace_hook_url: str | None = None
    replace_condition_type: str = "AcceleratedHardwareReady"
    lease_namespace: str = "gpuhealth"
    lease_name: str = "gpuhealth-remediator"
    lease_duration: timedelta = timedelta(seconds=15)
    workloads: WorkloadPolicy = WorkloadPolicy()

    def rung(self, name: str) -> RungPolicy:
        return self.rungs[name]

    @property
    def silences_url(self) -> str | None:
        """Where to check silences; None when not set or opted out with `alertmanager.url: none`."""
        return None if self.alertmanager_url in (None, "none") else self.alertmanager_url

    @property
    def alertmanager_members(self) -> tuple[str, ...]:
        """The Alertmanager URLs to ask, in order (an HA pair: any member that answers)."""
        first = self.silences_url
        if first is None:
            return ()
        return self.alertmanager_peers if first in self.alertmanager_peers else (first,)

    @property
    def alertmanager_matchers(self) -> tuple[str, ...]:
        """The filter the sync lists alerts with: what the route sends gpuhealth (every alert that names a node)."""
        if self.alertmanager_filters is not None:
            return self.alertmanager_filters
        return (f'{self.label_node}=~".+"',)

    def check_serve(self, interval: float) -> None:
        """What `serve` needs beyond a valid file: a silence source (or an explicit opt-out), and passes
        shorter than the Lease, so a leader's view is never older than its claim to lead."""
        if self.alertmanager_url is None:
            raise PolicyError("<policy>", "alertmanager.url", None,
                              "required for serve: an http(s) URL to check silences, or `none` to opt out "
                              "(then Alertmanager silences do not stop gpuhealth; only holds do)")
        if interval <= 0 or interval >= self.lease_duration.total_seconds():
            raise PolicyError("<policy>", "leader.lease_duration", None,
                              f"the reconcile interval ({interval:g}s) must be shorter than the lease duration "
                              f"({self.lease_duration.total_seconds():g}s)")


DEFAULT_RUNGS: dict[str, RungPolicy] = {
    "cordon": RungPolicy(timeout=None, escalate_after=None),
    "drain": RungPolicy(timeout=timedelta(hours=1), escalate_after=None),
    "reset_gpu": RungPolicy(timeout=timedelta(minutes=10), escalate_after=timedelta(minutes=30)),
    "reboot": RungPolicy(timeout=timedelta(minutes=30), escalate_after=timedelta(minutes=30)),
    "replace": RungPolicy(timeout=timedelta(hours=1), escalate_after=None),
}

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """A duration as the policy (and Prometheus' `for`, `keep_firing_for`, intervals) write it: 30s, 10m, 1.5h.
    ValueError if it is not one."""
    match = _DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"expected a duration like 30s, 10m, 1h, got {text!r}")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


class YamlReader:
    """A YAML file read with each key's line, errors as PolicyError(file, key, line, reason); reused for the
    fleet simulator's scenario files (simulator/scenario.py)."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.lines: dict[str, int] = {}
        try:
            root = yaml.compose(text)
            self.data: Any = yaml.safe_load(text) if root is not None else {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise PolicyError(source, "<file>", mark.line + 1 if mark else None, f"not valid YAML: {exc}") from exc
        if root is not None:
            self._index(root, "")
        if self.data is None:
            self.data = {}

    def _index(self, node: yaml.Node, prefix: str) -> None:
        """Each key's line; and no key twice in one mapping, at any depth (YAML keeps the later value
        silently: `max_disrupted: 1` and then `max_disrupted: 50` would be read as 50)."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "<complex key>"
                path = f"{prefix}.{name}" if prefix else name
                line = key.start_mark.line + 1
                first = seen.get((key.tag, name))
                if first is not None:
                    raise PolicyError(self.source, path, line, f"set twice, on lines {first} and {line}: YAML "
                                      "would keep the later value silently; remove one")
                seen[(key.tag, name)] = line
                self.lines[path] = line
                self._index(value, path)
        elif isinstance(node, yaml.SequenceNode):  # e.g. exclude: [{label: value}, ...]
            for i, item in enumerate(node.value):
                self._index(item, f"{prefix}[{i}]")

    def fail(self, key: str, reason: str) -> PolicyError:
        return PolicyError(self.source, key, self.lines.get(key), reason)

    def section(self, key: str, allowed: set[str], value: Any = None) -> dict[str, Any]:
        data = self.data if not key else value
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise self.fail(key or "<file>", "expected a mapping")
        for k in data:
            if k not in allowed:
                full = f"{key}.{k}" if key else str(k)
                raise self.fail(full, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return data

    def duration(self, key: str, value: Any, optional: bool = False) -> timedelta | None:
        if value is None and optional:
            return None
        if isinstance(value, bool):
            raise self.fail(key, "expected a duration like 30s, 10m, 1h")
        if isinstance(value, int | float) and value >= 0:
            return timedelta(seconds=value)
        try:
            return parse_duration(str(value))
        except ValueError:
            null = " or null" if optional else ""
            raise self.fail(key, f"expected a duration like 30s, 10m, 1h{null}, got {value!r}") from None

    def quota(self, key: str, value: Any) -> Quota:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return Quota(count=value)
        text = str(value).strip()
        if text.endswith("%"):
            try:
                pct = float(text[:-1])
            except ValueError:
                pct = -1
            if 0 < pct <= 100:
                return Quota(percent=pct)
        raise self.fail(key, f"expected a node count (0 or more) or a percentage like \"10%\", got {value!r}")

    def integer(self, key: str, value: Any, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def string(self, key: str, value: Any, choices: tuple[str, ...] = (), optional: bool = False) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def percent(self, key: str, value: Any) -> float:
        text = str(value).strip()
        try:
            pct = float(text[:-1]) if text.endswith("%") else -1.0
        except ValueError:
            pct = -1.0
        if not 0 < pct <= 100:
            raise self.fail(key, f"expected a percentage like \"30%\", got {value!r}")
        return pct


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    r = YamlReader(source, text)
    top = r.section("", {"pools", "exclude", "budget", "breaker", "ladder", "drain", "return_to_service", "episode",
                         "alert_labels", "alertmanager", "jobs", "replace", "leader", "workloads"})
    d = Policy()
    kw: dict[str, Any] = {}

    pools = r.section("pools", {"label", "default"}, top.get("pools"))
    if "label" in pools:
        kw["pool_label"] = r.string("pools.label", pools["label"])
    if "default" in pools:
        kw["default_pool"] = r.string("pools.default", pools["default"])

    exclude = top.get("exclude")
    if exclude is not None:
        if not isinstance(exclude, list):
            raise r.fail("exclude", "expected a list of label selectors (mappings of label: value)")
        selectors = []
        for item in exclude:
            if not isinstance(item, dict) or not item or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in item.items()):
                raise r.fail("exclude", f"each selector must be a non-empty mapping of label: \"value\", got {item!r}")
            selectors.append(dict(item))
        kw["exclude"] = tuple(selectors)

    budget = r.section("budget", {"max_disrupted", "max_cordoned", "max_actions_per_hour"}, top.get("budget"))
    if "max_disrupted" in budget:
        kw["max_disrupted"] = r.quota("budget.max_disrupted", budget["max_disrupted"])
    if "max_cordoned" in budget:
        kw["max_cordoned"] = r.quota("budget.max_cordoned", budget["max_cordoned"])
    if "max_actions_per_hour" in budget:
        kw["max_actions_per_hour"] = r.integer("budget.max_actions_per_hour", budget["max_actions_per_hour"])

    breaker = r.section("breaker", {"threshold", "min_nodes", "cooldown"}, top.get("breaker"))
    if "threshold" in breaker:
        kw["breaker_threshold"] = r.percent("breaker.threshold", breaker["threshold"])
    if "min_nodes" in breaker:
        kw["breaker_min_nodes"] = r.integer("breaker.min_nodes", breaker["min_nodes"], minimum=1)
    if "cooldown" in breaker:
        kw["breaker_cooldown"] = r.duration("breaker.cooldown", breaker["cooldown"])

    ladder = r.section("ladder", {"max_rung", *RUNGS}, top.get("ladder"))
    if "max_rung" in ladder:
        kw["max_rung"] = r.string("ladder.max_rung", ladder["max_rung"], RUNGS)
    rungs = dict(DEFAULT_RUNGS)
    for name in RUNGS:
        if name in ladder:
            spec = r.section(f"ladder.{name}", {"timeout", "escalate_after"}, ladder[name])
            base = rungs[name]
            rungs[name] = RungPolicy(
                timeout=r.duration(f"ladder.{name}.timeout", spec["timeout"], optional=True)
                if "timeout" in spec else base.timeout,
                escalate_after=r.duration(f"ladder.{name}.escalate_after", spec["escalate_after"], optional=True)
                if "escalate_after" in spec else base.escalate_after)
    kw["rungs"] = rungs

    drain = r.section("drain", {"on_timeout", "eviction_backoff", "karpenter_do_not_disrupt"}, top.get("drain"))
    if "on_timeout" in drain:
        kw["drain_on_timeout"] = r.string("drain.on_timeout", drain["on_timeout"], ("wait", "force", "escalate"))
    if "eviction_backoff" in drain:
        steps = drain["eviction_backoff"]
        if not isinstance(steps, list):
            raise r.fail("drain.eviction_backoff", "expected a list of durations")
        kw["eviction_backoff"] = tuple(
            (r.duration("drain.eviction_backoff", s) or timedelta()).total_seconds() for s in steps)
    if "karpenter_do_not_disrupt" in drain:
        if not isinstance(drain["karpenter_do_not_disrupt"], bool):
            raise r.fail("drain.karpenter_do_not_disrupt",
                         f"expected true or false, got {drain['karpenter_do_not_disrupt']!r}")
        kw["karpenter_do_not_disrupt"] = drain["karpenter_do_not_disrupt"]

    rts = r.section("return_to_service", {"healthy_delay"}, top.get("return_to_service"))
    if "healthy_delay" in rts:
        kw["healthy_delay"] = r.duration("return_to_service.healthy_delay", rts["healthy_delay"])

    episode = r.section("episode", {"quiet_timeout"}, top.get("episode"))
    if "quiet_timeout" in episode:
        kw["quiet_timeout"] = r.duration("episode.quiet_timeout", episode["quiet_timeout"])

    labels = r.section("alert_labels", {"node", "remediation", "gpu"}, top.get("alert_labels"))
    for key in ("node", "remediation", "gpu"):
        if key in labels:
            kw[f"label_{key}"] = r.string(f"alert_labels.{key}", labels[key])

    _alertmanager(r, kw, top.get("alertmanager"))

    jobs = r.section("jobs", {"namespace", "image", "service_account", "ttl_seconds_after_finished"}, top.get("jobs"))
    if "namespace" in jobs:
        kw["jobs_namespace"] = r.string("jobs.namespace", jobs["namespace"])
    if "image" in jobs:
        kw["jobs_image"] = r.string("jobs.image", jobs["image"])
    if "service_account" in jobs:
        kw["jobs_service_account"] = r.string("jobs.service_account", jobs["service_account"])
    if "ttl_seconds_after_finished" in jobs:
        kw["jobs_ttl_seconds"] = r.integer("jobs.ttl_seconds_after_finished", jobs["ttl_seconds_after_finished"])

    rep = r.section("replace", {"method", "hook_url", "condition_type"}, top.get("replace"))
    if "method" in rep:
        kw["replace_method"] = r.string("replace.method", rep["method"], ("nodeclaim", "condition", "hook"))
    if "hook_url" in rep:
        kw["replace_hook_url"] = r.string("replace.hook_url", rep["hook_url"], optional=True)
    if "condition_type" in rep:
        kw["replace_condition_type"] = r.string("replace.condition_type", rep["condition_type"])
    if kw.get("replace_method") == "hook" and not kw.get("replace_hook_url"):
        raise r.fail("replace.hook_url", "required when replace.method is hook")

    leader = r.section("leader", {"namespace", "name", "lease_duration"}, top.get("leader"))
    if "namespace" in leader:
        kw["lease_namespace"] = r.string("leader.namespace", leader["namespace"])
    if "name" in leader:
        kw["lease_name"] = r.string("leader.name", leader["name"])
    if "lease_duration" in leader:
        kw["lease_duration"] = r.duration("leader.lease_duration", leader["lease_duration"])
        if kw["lease_duration"] < timedelta(seconds=3):
            raise r.fail("leader.lease_duration", "expected at least 3s (it is renewed every third of it)")

    if top.get("workloads") is not None:
        kw["workloads"] = _workloads(r, top["workloads"])

    merged = {**{f: getattr(d, f) for f in d.__dataclass_fields__}, **kw}
    return Policy(**merged)


_LABEL_TERM = re.compile(r"^[A-Za-z0-9_./-]+(=|==|!=)[A-Za-z0-9_.-]*$|^!?[A-Za-z0-9_./-]+$")


def _alertmanager(r: YamlReader, kw: dict[str, Any], value: Any) -> None:
    am = r.section("alertmanager", {"url", "timeout", "on_error", "sync_interval", "receiver", "filters",
                                    "min_uptime", "bearer_token_file", "ca_file"}, value)
    if "url" in am:
        urls = am["url"] if isinstance(am["url"], list) else [am["url"]]
        if not urls:
            raise r.fail("alertmanager.url", "expected an http(s) URL, a list of them (an HA Alertmanager), or none")
        checked = []
        for url in urls:
            url = r.string("alertmanager.url", url, optional=len(urls) == 1)
            if url is not None and (url != "none" or len(urls) > 1) and not re.match(r"^https?://", url):
                raise r.fail("alertmanager.url", f"expected an http(s) URL or none, got {url!r}")
            checked.append(url.rstrip("/") if url else None)
        kw["alertmanager_url"] = checked[0]
        if len(checked) > 1:
            kw["alertmanager_peers"] = tuple(u for u in checked if u)
    if "timeout" in am:
        kw["alertmanager_timeout"] = (r.duration("alertmanager.timeout", am["timeout"]) or timedelta()).total_seconds()
    if "on_error" in am:
        kw["silence_on_error"] = r.string("alertmanager.on_error", am["on_error"], ("defer", "proceed"))
    if "sync_interval" in am:
        off = am["sync_interval"] in (None, "off") or am["sync_interval"] is False
        kw["alertmanager_sync_interval"] = None if off else r.duration("alertmanager.sync_interval",
                                                                        am["sync_interval"])
    if "receiver" in am:
        receiver = r.string("alertmanager.receiver", am["receiver"], optional=True)
        try:
            re.compile(receiver or "")
        except re.error as exc:
            raise r.fail("alertmanager.receiver", f"not a regular expression: {exc}") from exc
        kw["alertmanager_receiver"] = receiver
    if "filters" in am and am["filters"] is not None:
        filters = am["filters"]
        if not isinstance(filters, list):
            raise r.fail("alertmanager.filters", 'expected a list of matchers like node=~".+"')
        kw["alertmanager_filters"] = tuple(r.string("alertmanager.filters", f) for f in filters)
    if "min_uptime" in am:
        kw["alertmanager_min_uptime"] = r.duration("alertmanager.min_uptime", am["min_uptime"])
    for key in ("bearer_token_file", "ca_file"):
        if key in am:
            kw[f"alertmanager_{key.replace('bearer_', '')}"] = r.string(f"alertmanager.{key}", am[key], optional=True)

def _workloads(r: YamlReader, value: Any) -> WorkloadPolicy:
    w = r.section("workloads", {"enabled", "namespaces", "selector", "app_exit_codes", "look_behind", "look_ahead",
                                "node_suspect_window", "restart_loop"}, value)
    d = WorkloadPolicy()
    kw: dict[str, Any] = {}
    if "enabled" in w:
        if not isinstance(w["enabled"], bool):
            raise r.fail("workloads.enabled", f"expected true or false, got {w['enabled']!r}")
        kw["enabled"] = w["enabled"]
    if "namespaces" in w:
        names = w["namespaces"]
        if not isinstance(names, list) or not all(isinstance(n, str) and re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n)
                                                  for n in names):
            raise r.fail("workloads.namespaces", f"expected a list of namespace names, got {names!r}")
        kw["namespaces"] = tuple(dict.fromkeys(names))
    if kw.get("enabled") and not kw.get("namespaces"):
        raise r.fail("workloads.namespaces", "required when workloads.enabled is true: the namespaces whose pods "
                     "gpuhealth classifies (its RBAC is granted there only)")
    if "selector" in w:
        selector = r.string("workloads.selector", w["selector"], optional=True)
        if selector is not None and not all(_LABEL_TERM.match(t.strip()) for t in selector.split(",")):
            raise r.fail("workloads.selector", f"expected a label selector like team=ml,gpuhealth.io/watch, "
                         f"got {selector!r}")
        kw["selector"] = selector
    if "app_exit_codes" in w:
        codes = w["app_exit_codes"]
        if not isinstance(codes, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255 for c in codes):
            raise r.fail("workloads.app_exit_codes", f"expected a list of exit codes 1-255, got {codes!r}")
        kw["app_exit_codes"] = tuple(sorted(set(codes)))
    for key in ("look_behind", "look_ahead", "node_suspect_window"):
        if key in w:
            kw[key] = r.duration(f"workloads.{key}", w[key])
    loop = r.section("workloads.restart_loop", {"threshold", "suspend"}, w.get("restart_loop"))
    if "threshold" in loop:
        kw["restart_loop_threshold"] = r.integer("workloads.restart_loop.threshold", loop["threshold"], minimum=2)
    if "suspend" in loop:
        if not isinstance(loop["suspend"], bool):
            raise r.fail("workloads.restart_loop.suspend", f"expected true or false, got {loop['suspend']!r}")
        kw["restart_loop_suspend"] = loop["suspend"]
    return replace(d, **kw)


def read_utf8(path: Path, error: Callable[[str, str, int | None, str], Exception]) -> str:
    """A configuration file's text, or `error(file, "<file>", line, why)` when it cannot be read or is not UTF-8
    (the line of the first bad byte), for every file a person edits: the policy, a simulator scenario."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(str(path), "<file>", None, f"cannot read: {exc.strerror}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(str(path), "<file>", line, f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
                    f"({exc.reason}); save the file as UTF-8") from exc


def load_policy(path: str | Path | None) -> Policy:
    """The policy at `path`, or the defaults when no path is given."""
    if path is None:
        return Policy()
    p = Path(path)
    text = read_utf8(p, PolicyError)
    return parse_policy(text, str(p))
