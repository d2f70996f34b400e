"""rules/: the health policy. promtool checks and unit-tests it; this file adds what promtool cannot see.

Every alert must carry the labels and annotations the remediator and on-call rely on, have a runbook
page, be tested both firing and not firing, and read only metrics the exporter serves
(exporter.catalog), recording rules, `up` or ALERTS.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.catalog import FAMILIES

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
RULE_FILES = sorted([*RULES.glob("alerts/*.yaml"), *RULES.glob("recording/*.yaml")])
TEST_FILES = sorted(RULES.glob("tests/*.yaml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_BASE = "https://github.com/gpuhealth/gpuhealth/blob/main/docs/runbooks/"
COMPONENT_FILES = {"gpu", "memory", "nvlink", "thermal", "pcie", "network", "kernel", "probe", "slo"}

ALLOWED = {
    "severity": {"critical", "warning", "info"},
    "component": {"gpu", "memory", "nvlink", "thermal", "pcie", "network", "kernel", "probe", "job"},
    "remediation": {"none", "cordon", "drain", "reset_gpu", "reboot", "replace"},
}
ANNOTATIONS = ("summary", "description", "runbook_url")
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
                   "and", "or", "unless", "inf", "nan"}
OTHER_METRICS = {"up", "ALERTS", "ALERTS_FOR_STATE"}


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path}: not a YAML mapping"
    return doc


def _rules() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, rule) for path in RULE_FILES for group in _load(path)["groups"] for rule in group["rules"]]


ALERTS = [(path, rule) for path, rule in _rules() if "alert" in rule]
RECORDS = {rule["record"] for _, rule in _rules() if "record" in rule}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not on PATH: install Debian's prometheus package (`make test` does: apt-get install "
                    "prometheus); the rules cannot be checked without it")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (not functions, keywords, labels, strings or durations)."""
    text = re.sub(r"#[^\n]*", " ", expr)  # comments
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', " ", text)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def _known_metric(name: str) -> bool:
    exposed = {f.exposed_name for f in FAMILIES.values()}
    return name in exposed or name in RECORDS or name in OTHER_METRICS


def _tested_alerts() -> tuple[set[str], set[str]]:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        for test in _load(path).get("tests", []):
            for case in test.get("alert_rule_test", []) or []:
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    return firing, quiet


# --- promtool ---

def test_rule_and_test_files_exist() -> None:
    assert {p.stem for p in RULES.glob("alerts/*.yaml")} == COMPONENT_FILES
    assert RECORDS and TEST_FILES


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: str(p.relative_to(RULES)))
def test_promtool_check_rules_accepts_rule_file(path: Path) -> None:
    result = _run("check", "rules", str(path))
    assert result.returncode == 0, f"promtool check rules {path}:\n{result.stdout}{result.stderr}"


def test_promtool_unit_tests_pass() -> None:
    result = _run("test", "rules", *(str(p) for p in TEST_FILES))
    assert result.returncode == 0, f"promtool test rules:\n{result.stdout}{result.stderr}"


# --- what every alert must carry ---

@pytest.mark.parametrize("rule", [r for _, r in ALERTS], ids=[r["alert"] for _, r in ALERTS])
def test_alert_has_allowed_labels_annotations_and_runbook(rule: dict[str, Any]) -> None:
    name, labels, annotations = rule["alert"], rule.get("labels", {}), rule.get("annotations", {})
    for key, allowed in ALLOWED.items():
        assert labels.get(key) in allowed, f"{name}: label {key}={labels.get(key)!r}, allowed {sorted(allowed)}"
    for key in ANNOTATIONS:
        assert annotations.get(key), f"{name}: annotation {key} missing"
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE}{name}.md", f"{name}: runbook_url {annotations['runbook_url']}"
    assert (RUNBOOKS / f"{name}.md").is_file(), f"{name}: runbook docs/runbooks/{name}.md missing"
    assert "{{" in annotations["description"], f"{name}: description shows no value or label"


@pytest.mark.parametrize("rule", [r for _, r in ALERTS], ids=[r["alert"] for _, r in ALERTS])
def test_alert_threshold_is_commented(rule: dict[str, Any]) -> None:
    assert "#" in rule["expr"], f"{rule['alert']}: the threshold has no comment saying what the number is and why"


def test_alerts_page_lists_every_alert() -> None:
    page = (ROOT / "docs" / "alerts.md").read_text()
    missing = sorted(r["alert"] for _, r in ALERTS if f"[{r['alert']}](runbooks/{r['alert']}.md)" not in page)
    assert not missing, f"docs/alerts.md has no row for: {missing}"


def test_alert_names_are_unique() -> None:
    names = [r["alert"] for _, r in ALERTS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_tested_alerts_carry_node_and_gpu_labels() -> None:
    """node comes from the target (node="*" on fleet alerts), gpu from the series: promtool checks the exact labels
    of every expected alert, so requiring them in the expectations requires them on the alerts."""
    gpu_scoped = {r["alert"] for _, r in ALERTS if "$labels.gpu" in r["annotations"].get("summary", "")}
    for path in TEST_FILES:
        for test in _load(path).get("tests", []):
            for case in test.get("alert_rule_test", []) or []:
                for alert in case.get("exp_alerts") or []:
                    labels = alert.get("exp_labels", {})
                    where = f"{path.name}: {case['alertname']} at {case['eval_time']}"
                    assert labels.get("node"), f"{where}: expected alert has no node label"
                    if case["alertname"] in gpu_scoped:
                        assert labels.get("gpu"), f"{where}: GPU-scoped alert expected without a gpu label"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing, quiet = _tested_alerts()
    names = {r["alert"] for _, r in ALERTS}
    assert not names - firing, f"alerts no promtool test expects firing: {sorted(names - firing)}"
    assert not names - quiet, f"alerts no promtool test expects quiet: {sorted(names - quiet)}"
    assert not (firing | quiet) - names, f"tests for alerts that do not exist: {sorted((firing | quiet) - names)}"


# --- only metrics that exist ---

def test_metric_name_extraction_finds_selectors_only() -> None:
    expr = ('max by (node, gpu) (rate(foo_total{a="b", c=~"x|y"}[5m] offset 10m)) > 0  # bar_total\n'
            'unless on (node) label_replace(baz:qux:sum, "gpu", "$1", "pci", "(.+)") and time() - up')
    assert metric_names(expr) == {"foo_total", "baz:qux:sum", "up"}


def test_unknown_metric_is_rejected() -> None:
    assert not _known_metric("gpuhealth_made_up_metric")
    assert not _known_metric("gpuhealth_xid_errors")  # a counter is exposed with _total
    assert _known_metric("gpuhealth_xid_errors_total") and _known_metric("up")


@pytest.mark.parametrize("rule", [r for _, r in _rules()], ids=[r.get("alert") or r["record"] for _, r in _rules()])
def test_expression_uses_only_known_metrics(rule: dict[str, Any]) -> None:
    unknown = sorted(n for n in metric_names(rule["expr"]) if not _known_metric(n))
    name = rule.get("alert") or rule["record"]
    assert not unknown, f"{name}: metrics neither in exporter.catalog nor recorded: {unknown}"


def test_health_inputs_never_read_cordon_state() -> None:
    for path, rule in _rules():
        names = metric_names(rule["expr"])
        assert not {n for n in names if n.startswith("kube_")}, f"{path}: {rule.get('alert') or rule['record']}"
