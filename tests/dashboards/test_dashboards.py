"""The Grafana dashboards (dashboards/): committed JSON is fresh, every query reads only metrics that
exist and parses, every panel has a unit, uids are stable, the dashboards link to each other.

Metric names are read at test time from the exporter's catalog (exposed names, as in docs/metrics.md),
rules/recording/*.yaml and the remediator's registry (gpuhealth/remediator/metrics.py), so a renamed metric or
recording rule fails here instead of leaving an empty panel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuhealth_training.metrics import EXPOSED_NAMES as TRAINING_METRICS

from dashboards import generate
from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.remediator.metrics import Metrics
from tests.support import paths
from tests.support.promql_names import metric_names

ROOT = paths.REPO
JSON_DIR = ROOT / "dashboards" / "json"
METRICS_DOC = ROOT / "docs" / "metrics.md"

# Series from outside gpuhealth's own code, each with the reason it may be read:
EXTERNAL = {
    "up": "Prometheus: the exporter target's health (the rules read it too)",
    "ALERTS": "Prometheus: firing alerts from rules/alerts",
    "ALERTS_FOR_STATE": "Prometheus: when each alert with a `for` became active",
    "process_resident_memory_bytes": "the exporter's own process metrics (docs/metrics.md: process_*)",
    "process_cpu_seconds_total": "the exporter's own process metrics (docs/metrics.md: process_*)",
}
# Grafana's built-in variables, as a value promtool can parse.
BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__range_s": "3600",
            "__interval_ms": "60000"}
EXPECTED = {"fleet-health.json": "gpuhealth-fleet", "node-drilldown.json": "gpuhealth-node",
            "remediation.json": "gpuhealth-remediation", "job-reliability.json": "gpuhealth-jobs"}


def _recording_rules() -> set[str]:
    names = set()
    for path in sorted((ROOT / "rules").glob("*/*.yaml")):  # alert files keep the records their alerts read
        if path.parent.name == "tests":
            continue
        for group in yaml.safe_load(path.read_text())["groups"]:
            names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


def _remediator_metrics() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def known_metrics() -> dict[str, str]:
    known = {f.exposed_name: "exporter" for f in FAMILIES.values()}
    known |= {n: "recording rule" for n in _recording_rules()}
    known |= {n: "remediator" for n in _remediator_metrics()}
    known |= {n: "training job (gpuhealth_training)" for n in TRAINING_METRICS}
    known |= EXTERNAL
    return known


def substitute(expr: str) -> str:
    """A Grafana query as plain PromQL: built-ins become durations, other variables a value."""
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return BUILTINS.get(name, "x")
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", repl, expr)


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((JSON_DIR / name).read_text())
    return doc


def _panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in doc["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def _queries() -> list[tuple[str, str, str]]:
    """(dashboard, where, expr) for every panel query and query variable."""
    found = []
    for name in sorted(EXPECTED):
        doc = _load(name)
        for p in _panels(doc):
            for t in p.get("targets", []):
                found.append((name, f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"]))
        for v in doc["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((.*),\s*\w+\)", v["query"])
                assert m, f"{name}: variable {v['name']}: expected label_values(selector, label), got {v['query']}"
                found.append((name, f"variable {v['name']}", m.group(1)))
    return found


QUERIES = _queries()


# --- freshness and shape ---

def test_committed_json_is_what_the_generator_writes() -> None:
    files = generate.render_all()
    assert sorted(files) == sorted(p.name for p in JSON_DIR.glob("*.json")), "run `make dashboards`"
    for name, text in files.items():
        assert (JSON_DIR / name).read_text() == text, f"dashboards/json/{name} is stale: run `make dashboards`"


def test_check_mode_reports_stale_json(tmp_path: Path) -> None:
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "remediation.json").write_text("{}\n")
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_uids_are_stable_and_titles_unique() -> None:
    titles = set()
    for name, uid in EXPECTED.items():
        doc = _load(name)
        assert doc["uid"] == uid
        assert generate.TAG in doc["tags"]
        titles.add(doc["title"])
    assert len(titles) == len(EXPECTED)



def test_job_reliability_dashboard_shows_what_on_call_asks() -> None:
    # success rate, failures by class and reason, restart loops, slow ranks per job, time lost to failures
    exprs = " ".join(expr for name, _, expr in QUERIES if name == "job-reliability.json")
    for needed in (":gpuhealth_workload_success:ratio_rate1h", ":gpuhealth_workload_platform_failures:ratio_rate30d",
                   "sum by (class, reason) (increase(gpuhealth_workload_failures_total",
                   "gpuhealth_workload_restart_loop", "namespace_job:gpuhealth_training_step_seconds:median5m",
                   "group_right () max by (namespace, job, rank, node, pool)",
                   "gpuhealth_workload_lost_seconds_total"):
        assert needed in exprs, f"the job-reliability dashboard has no query on {needed}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_datasource_variable_used_everywhere(name: str) -> None:
    doc = _load(name)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for p in _panels(doc):
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_panel_has_a_unit_and_a_unique_id(name: str) -> None:
    doc = _load(name)
    ids = [p["id"] for p in _panels(doc)]
    assert len(ids) == len(set(ids)) and 0 not in ids
    for p in _panels(doc):
        if p["type"] != "row":
            assert p["fieldConfig"]["defaults"].get("unit"), f"{name}: panel {p['title']!r} has no unit"
            assert p["targets"], f"{name}: panel {p['title']!r} has no query"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dashboards_link_to_each_other(name: str) -> None:
    doc = _load(name)
    links = [link for link in doc["links"] if link["type"] == "dashboards"]
    assert links and all(generate.TAG in link["tags"] and link["keepTime"] and link["includeVars"] for link in links)


def test_node_links_point_at_the_node_dashboard() -> None:
    urls = [link["url"] for name in EXPECTED for p in _panels(_load(name))
            for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", [])]
    assert urls and all(url.startswith(f"/d/{EXPECTED['node-drilldown.json']}/") and "var-node=" in url
                        for url in urls)


def test_rates_use_rate_interval() -> None:
    for name, where, expr in QUERIES:
        for m in re.finditer(r"\b(?:rate|irate|increase)\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)", expr):
            window = re.search(r"\[([^\]]*)\]", m.group(1))
            assert window, f"{name} {where}: no range in {m.group(0)}"
            assert window.group(1).strip() in ("$__rate_interval", "$__range"), (
                f"{name} {where}: use [$__rate_interval] (or $__range in a stat), not [{window.group(1)}]")


# --- metrics exist ---

def test_metric_name_extraction() -> None:
    expr = 'sum by (pool) (rate(foo_total{a="b:c"}[$__rate_interval])) / on (node) bar:baz:ratio > 0'
    assert metric_names(expr) == {"foo_total", "bar:baz:ratio"}
    assert substitute('x{node="$node", p=~"${pool}"}[$__rate_interval]') == 'x{node="x", p=~"x"}[5m]'


def test_external_metrics_are_documented() -> None:
    assert "process_*" in METRICS_DOC.read_text()


def test_no_query_needs_kube_state_metrics() -> None:
    # gpuhealth neither ships nor requires kube-state-metrics: a panel reading it is empty without it
    assert not [expr for _, _, expr in QUERIES if re.search(r"\bkube_", expr)]


COUNT_PANELS = [(name, p["title"], t["expr"]) for name in sorted(EXPECTED) for p in _panels(_load(name))
                for t in p.get("targets", []) if re.match(r"count\b", t["expr"]) and "ALERTS" not in t["expr"]]


def test_counts_of_faulty_things_show_zero_not_no_data() -> None:
    """A count over a filter is empty when nothing matches: every such panel query falls back to 0."""
    assert len(COUNT_PANELS) > 10
    for name, title, expr in COUNT_PANELS:
        assert re.search(r"\bor (?:vector\(0\)|0 \* )", expr), f"{name}: {title!r}: {expr}"


@pytest.mark.parametrize(("name", "where", "expr"), QUERIES, ids=[f"{n}:{w}" for n, w, _ in QUERIES])
def test_query_reads_only_known_metrics(name: str, where: str, expr: str) -> None:
    known = known_metrics()
    unknown = sorted(m for m in metric_names(substitute(expr)) if m not in known)
    assert not unknown, (f"{name} {where}: {unknown} is not an exporter metric (docs/metrics.md), a recording rule "
                         f"(rules/recording) or a remediator metric (gpuhealth/remediator/metrics.py): {expr}")
    assert metric_names(substitute(expr)), f"{name} {where}: no metric in {expr}"


def test_every_recording_rule_the_dashboards_need_exists() -> None:
    used = {m for _, _, expr in QUERIES for m in metric_names(substitute(expr)) if ":" in m}
    assert used <= _recording_rules()
    assert used, "the fleet dashboard reads the SLO recording rules"


# --- promtool parses every query ---

def test_promtool_parses_every_query(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: install Debian's prometheus package (make test does)")
    groups = [{"name": f"{name} {where}", "rules": [{"record": f"dashboard:query_{i}:check", "expr": substitute(expr)}]}
              for i, (name, where, expr) in enumerate(QUERIES)]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(QUERIES)} rules found" in result.stdout


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "a:b:c", "expr": substitute("sum by (node (rate(x[$__rate_interval]))")}]}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
