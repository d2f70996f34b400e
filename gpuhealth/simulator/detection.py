"""Detection and resolution delays read from the project's own files, never restated here.

- rules/ (alerts and recording): each alert's `for`, `keep_firing_for`, labels, its group's `interval`,
  and the longest window its expression looks back over (a signal keeps an alert true that long after it
  stops: `increase5m` or a `[10m]` range);
- the Alertmanager routing (examples/alertmanager.yml): group_wait, group_interval and repeat_interval of the
  route that sends each alert to the remediator;
- the chart's values (helm/gpuhealth/values.yaml): the exporter's scrape interval (monitoring.podMonitor.interval)
  and the remediator's pass interval (remediator.interval; null: `serve --interval`'s default, read from its parser).

Durations are parsed by gpuhealth.remediator.policy.parse_duration, as the policy's are.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuhealth.remediator.decide.nodestate import REMEDIATIONS, max_rung_of
from gpuhealth.remediator.decide.vocabulary import Remediation, Rung
from gpuhealth.remediator.policy import parse_duration

REPO = Path(__file__).resolve().parents[2]  # gpuhealth/simulator/detection.py: the checkout
DEFAULT_RULES = REPO / "rules"
DEFAULT_ALERTMANAGER = REPO / "examples" / "alertmanager.yml"
DEFAULT_VALUES = REPO / "helm" / "gpuhealth" / "values.yaml"
# kube-prometheus-stack's global evaluation interval, used by rule groups without their own `interval`
# (rules/alerts/gpu.yaml: "Evaluated every 15 s, not the global 30 s").
DEFAULT_EVALUATION_INTERVAL = 30.0

_WINDOW = re.compile(r"(?:increase|rate|over_time)(\d+(?:ms|s|m|h|d))\b|\[(\d+(?:ms|s|m|h|d))\]")


class DetectionConfigError(ValueError):
    """A rules, Alertmanager or values file that cannot be read as the pipeline's timings."""


def _seconds(text: Any, where: str) -> float:
    try:
        return parse_duration(str(text)).total_seconds()
    except ValueError as exc:
        raise DetectionConfigError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class AlertRule:
    name: str
    remediation: Remediation
    max_rung: Rung | None  # the ceiling of a persisting fault (nodestate.max_rung_of of its label)
    for_s: float
    keep_firing_for_s: float
    evaluation_interval_s: float
    window_s: float  # how long the expression stays true after the signal stops
    source: str  # file of the rule
    # the rule's labels as written (severity, component, remediation, max_rung, ...): what its alerts carry, the
    # node's and the GPU's labels added (gpuhealth/simulator/alerts.py reads them as serve's receiver does)
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Route:
    group_wait_s: float
    group_interval_s: float
    repeat_interval_s: float


@dataclass(frozen=True)
class Pipeline:
    """The timings between a signal on a node and the remediator's pass that acts on it."""

    alerts: dict[str, AlertRule]
    scrape_interval_s: float
    pass_interval_s: float
    actionable_route: Route  # remediation != none
    informational_route: Route  # remediation none
    detection_delay_s: float | None = None  # --detection-delay: replaces the rule-derived delay for every fault

    def route(self, alert: AlertRule) -> Route:
        return self.informational_route if alert.remediation == Remediation.NONE else self.actionable_route

    def fire_delay(self, alert: AlertRule, rng: random.Random, group_open: bool) -> float:
        """Signal on the node -> webhook at the remediator: the next scrape, the next evaluation of the group,
        `for` (counted in evaluations), then group_wait for a node's new group or the next group_interval
        tick for a group that already has firing alerts."""
        if self.detection_delay_s is not None:
            return self.detection_delay_s
        e = alert.evaluation_interval_s
        pending = math.ceil(alert.for_s / e - 1e-9) * e if alert.for_s > 0 else 0.0
        route = self.route(alert)
        am = rng.uniform(0, route.group_interval_s) if group_open else route.group_wait_s
        return rng.uniform(0, self.scrape_interval_s) + rng.uniform(0, e) + pending + am

    def resolve_delay(self, alert: AlertRule, rng: random.Random) -> float:
        """Signal gone -> resolved webhook: the next scrape, the expression's window, keep_firing_for, the next
        evaluation, and the next group_interval tick (Alertmanager sends resolutions at group_interval)."""
        route = self.route(alert)
        return (rng.uniform(0, self.scrape_interval_s) + alert.window_s + alert.keep_firing_for_s
                + rng.uniform(0, alert.evaluation_interval_s) + rng.uniform(0, route.group_interval_s))


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise DetectionConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise DetectionConfigError(f"{path}: not valid YAML: {exc}") from None


def _window(expr: str) -> float:
    found = [m.group(1) or m.group(2) for m in _WINDOW.finditer(expr)]
    return max((parse_duration(w).total_seconds() for w in found), default=0.0)


def load_rules(rules_dir: Path, evaluation_interval_s: float = DEFAULT_EVALUATION_INTERVAL) -> dict[str, AlertRule]:
    """Every alert rule under rules_dir (alerts/ and recording/, or the YAML files of one directory)."""
    files = sorted(rules_dir.glob("alerts/*.yaml")) + sorted(rules_dir.glob("recording/*.yaml"))
    if not files:
        files = sorted(rules_dir.glob("*.yaml"))
    if not files:
        raise DetectionConfigError(f"{rules_dir}: no rule files (expected alerts/*.yaml or *.yaml)")
    out: dict[str, AlertRule] = {}
    for path in files:
        doc = _load_yaml(path) or {}
        for group in doc.get("groups") or []:
            e = _seconds(group["interval"], f"{path}: group {group.get('name')}.interval") \
                if group.get("interval") else evaluation_interval_s
            for rule in group.get("rules") or []:
                name = rule.get("alert")
                if not name:
                    continue
                where = f"{path}: {name}"
                labels = rule.get("labels") or {}
                remediation = _remediation(labels.get("remediation", "none"), where)
                out[name] = AlertRule(
                    name=name, remediation=remediation, max_rung=max_rung_of(labels.get("max_rung"), remediation),
                    for_s=_seconds(rule["for"], f"{where}.for") if rule.get("for") else 0.0,
                    keep_firing_for_s=_seconds(rule["keep_firing_for"], f"{where}.keep_firing_for")
                    if rule.get("keep_firing_for") else 0.0,
                    evaluation_interval_s=e, window_s=_window(str(rule.get("expr", ""))), source=str(path),
                    labels=tuple((str(k), str(v)) for k, v in labels.items()))
    return out


_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"(.*)"\s*$')


def _remediation(label: Any, where: str) -> Remediation:
    """A rule's remediation label, as the webhook reads it (intake/webhook.py): "none" or a rung."""
    if str(label) not in REMEDIATIONS:
        raise DetectionConfigError(f"{where}: remediation {label!r} is not one of {', '.join(REMEDIATIONS)}")
    return Remediation(str(label))


def _route_takes(route: dict[str, Any], remediation: str) -> bool:
    for m in route.get("matchers") or []:
        match = _MATCHER.match(str(m))
        if not match or match.group(1) != "remediation":
            continue
        op, value = match.group(2), match.group(3)
        hit = re.fullmatch(value, remediation) is not None if op in ("=~", "!~") else value == remediation
        if hit == (op in ("!~", "!=")):
            return False
    return True


def load_routes(path: Path) -> tuple[Route, Route]:
    """(actionable, informational): the routes to the gpuhealth-remediator receiver that take an alert with
    remediation reboot and one with remediation none."""
    doc = _load_yaml(path) or {}
    root = doc.get("route") or {}

    def timing(route: dict[str, Any], parent: dict[str, Any]) -> Route:
        def get(key: str, default: str) -> float:
            return _seconds(route.get(key, parent.get(key, default)), f"{path}: route.{key}")
        # Alertmanager's own defaults: group_wait 30s, group_interval 5m, repeat_interval 4h
        return Route(get("group_wait", "30s"), get("group_interval", "5m"), get("repeat_interval", "4h"))

    found: dict[str, Route] = {}
    for route in root.get("routes") or []:
        if "gpuhealth-remediator" not in str(route.get("receiver", "")):
            continue
        for key, remediation in (("actionable", "reboot"), ("informational", "none")):
            if key not in found and _route_takes(route, remediation):
                found[key] = timing(route, root)
    missing = [k for k in ("actionable", "informational") if k not in found]
    if missing:
        raise DetectionConfigError(f"{path}: no route to the gpuhealth-remediator receiver for "
                                   f"{' and '.join(missing)} alerts")
    return found["actionable"], found["informational"]


def serve_default_interval() -> float:
    """`gpuhealth-remediator serve --interval`'s default, from its own parser."""
    from gpuhealth.remediator.cli import build_parser

    return float(build_parser().parse_args(["serve"]).interval)


def load_values(path: Path) -> tuple[float, float]:
    """(scrape interval, pass interval) from the chart's values."""
    doc = _load_yaml(path) or {}
    try:
        scrape = doc["monitoring"]["podMonitor"]["interval"]
    except (KeyError, TypeError):
        raise DetectionConfigError(f"{path}: no monitoring.podMonitor.interval") from None
    interval = (doc.get("remediator") or {}).get("interval")
    return (_seconds(scrape, f"{path}: monitoring.podMonitor.interval"),
            float(interval) if interval is not None else serve_default_interval())


def load_pipeline(rules_dir: Path = DEFAULT_RULES, alertmanager: Path = DEFAULT_ALERTMANAGER,
                  values: Path = DEFAULT_VALUES, evaluation_interval_s: float = DEFAULT_EVALUATION_INTERVAL,
                  detection_delay_s: float | None = None) -> Pipeline:
    actionable, informational = load_routes(alertmanager)
    scrape, pass_interval = load_values(values)
    return Pipeline(alerts=load_rules(rules_dir, evaluation_interval_s), scrape_interval_s=scrape,
                    pass_interval_s=pass_interval, actionable_route=actionable, informational_route=informational,
                    detection_delay_s=detection_delay_s)
