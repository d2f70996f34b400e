"""Each alert's runbook_url, as the chart's PrometheusRule renders it, points at
monitoring.prometheusRule.runbookBaseURL: a fleet that mirrors the repository (or pins a release tag) sends
on-call to pages it can open."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support import paths
from tests.support.chart_render import render

ROOT = paths.REPO
RULE_FILES = sorted([*ROOT.glob("rules/alerts/*.yaml"), *ROOT.glob("rules/recording/*.yaml")])
UPSTREAM = "https://github.com/gpuhealth/gpuhealth/blob/main/docs/runbooks"  # what rules/ writes


def _rules_in_repo() -> dict[str, dict[str, Any]]:
    """Every rule of rules/, by alert name or record name."""
    return {r.get("alert") or r["record"]: r for path in RULE_FILES
            for group in yaml.safe_load(path.read_text())["groups"] for r in group["rules"]}


def _rendered_rules(prometheus_rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = render({"monitoring": {"prometheusRule": {"enabled": True, **prometheus_rule}}})
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return {r.get("alert") or r["record"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_by_default_every_alert_links_the_runbook_rules_names() -> None:
    in_repo = _rules_in_repo()
    alerts = {n: r for n, r in _rendered_rules({}).items() if "alert" in r}
    assert alerts and all(r["annotations"]["runbook_url"] == in_repo[n]["annotations"]["runbook_url"]
                          for n, r in alerts.items())
    assert all(r["annotations"]["runbook_url"] == f"{UPSTREAM}/{n}.md" for n, r in alerts.items())


def test_runbook_base_url_moves_every_alerts_link_and_nothing_else() -> None:
    mirror = "https://git.example.com/platform/gpuhealth/-/blob/v0.2.0/docs/runbooks/"  # a trailing slash is fine
    rendered = _rendered_rules({"runbookBaseURL": mirror})
    default = _rendered_rules({})
    alerts = [n for n, r in rendered.items() if "alert" in r]
    assert len(alerts) == len([r for r in _rules_in_repo().values() if "alert" in r])
    for name, rule in rendered.items():
        if "alert" in rule:
            assert rule["annotations"]["runbook_url"] == f"{mirror}{name}.md"
            rule["annotations"]["runbook_url"] = default[name]["annotations"]["runbook_url"]
        assert rule == default[name], f"{name}: more than its runbook_url changed"


def test_an_empty_runbook_base_url_keeps_the_links_of_rules() -> None:
    in_repo = _rules_in_repo()
    for name, rule in _rendered_rules({"runbookBaseURL": "", "namespaceLabel": False}).items():
        assert rule == in_repo[name]
