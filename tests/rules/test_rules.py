"""rules/: the health policy. promtool checks and unit-tests it; this file adds what promtool cannot see.

Every alert must carry the labels and annotations the remediator and on-call rely on, have a runbook
page, be tested both firing and not firing (and on both sides of its `for` and keep_firing_for, checked
by mutating the rule and requiring the promtool tests to fail), read only metrics the exporter serves
(gpuhealth.exporter.catalog), recording rules of its own group evaluated before it (in a fleet group also a node group's
record, which the shards forward, read by alerts with a `for`), `up` or ALERTS, and match its row in docs/alerts.md and
its runbook header.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuhealth_training.metrics import EXPOSED_NAMES as TRAINING_METRICS

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.probes.registry import filled_by
from tests.support import paths, rule_sets
from tests.support.promql_names import metric_names

ROOT = paths.REPO
RULES = ROOT / "rules"
RULE_FILES = sorted([*RULES.glob("alerts/*.yaml"), *RULES.glob("recording/*.yaml")])
TEST_FILES = sorted(RULES.glob("tests/*.yaml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_BASE = "https://github.com/gpuhealth/gpuhealth/blob/main/docs/runbooks/"
# The SLO's burn-rate alerts live with the records they read, in rules/recording/slo.yaml.
COMPONENT_FILES = {"gpu", "memory", "nvlink", "thermal", "pcie", "network", "kernel", "probe", "training", "remediator"}

ALLOWED = {
    "severity": {"critical", "warning", "info"},
    "component": {"gpu", "memory", "nvlink", "thermal", "pcie", "network", "kernel", "probe", "job", "remediator"},
    "remediation": {"none", "cordon", "drain", "reset_gpu", "reboot", "replace"},
}
ANNOTATIONS = ("summary", "description", "runbook_url")
# the series training jobs export themselves (training/gpuhealth_training, rules/alerts/training.yaml)
OTHER_METRICS = {"up", "ALERTS", "ALERTS_FOR_STATE", *TRAINING_METRICS}


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's: faster
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


def _remediator_metrics() -> set[str]:
    """The remediator's own series (gpuhealth/remediator/metrics.py): the job-reliability rules read its workload
    metrics."""
    from gpuhealth.remediator.metrics import Metrics

    return {f"{f.name}_total" if f.type == "counter" else f.name for f in Metrics().registry.collect()}


def _known_metric(name: str) -> bool:
    exposed = {f.exposed_name for f in FAMILIES.values()}
    return name in exposed or name in RECORDS or name in OTHER_METRICS or name in _remediator_metrics()


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


LADDER = ("cordon", "drain", "reset_gpu", "reboot", "replace")


@pytest.mark.parametrize("rule", [r for _, r in ALERTS], ids=[r["alert"] for _, r in ALERTS])
def test_every_alert_that_acts_says_how_far_its_fault_may_climb(rule: dict[str, Any]) -> None:
    """max_rung is the health policy's ceiling, reviewed in Git beside the rung: never left to the remediator's default,
    never below the alert's own rung (the remediator would read such a label as the alert's own rung)."""
    labels = rule.get("labels", {})
    if labels.get("remediation") == "none":
        assert "max_rung" not in labels, f"{rule['alert']}: max_rung on an alert that asks for no action"
        return
    ceiling = labels.get("max_rung")
    assert ceiling in LADDER, f"{rule['alert']}: max_rung {ceiling!r} is not a rung"
    assert LADDER.index(ceiling) >= LADDER.index(labels["remediation"]), f"{rule['alert']}: max_rung below its rung"


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
    assert _known_metric("gpuhealth_workload_failures_total") and not _known_metric("gpuhealth_workload_failures")


@pytest.mark.parametrize("rule", [r for _, r in _rules()], ids=[r.get("alert") or r["record"] for _, r in _rules()])
def test_expression_uses_only_known_metrics(rule: dict[str, Any]) -> None:
    unknown = sorted(n for n in metric_names(rule["expr"]) if not _known_metric(n))
    name = rule.get("alert") or rule["record"]
    assert not unknown, f"{name}: metrics neither in gpuhealth.exporter.catalog nor recorded: {unknown}"


def test_health_inputs_never_read_cordon_state() -> None:
    for path, rule in _rules():
        names = metric_names(rule["expr"])
        assert not {n for n in names if n.startswith("kube_")}, f"{path}: {rule.get('alert') or rule['record']}"


# --- evaluation order: no alert reads another group's record, but a fleet group reads what the shards forward ---

def _groups() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, group) for path in RULE_FILES for group in _load(path)["groups"]]


def _recorded_where() -> dict[str, tuple[str, int]]:
    where: dict[str, tuple[str, int]] = {}
    for _, group in _groups():
        for index, rule in enumerate(group["rules"]):
            if "record" in rule:
                assert rule["record"] not in where, f"{rule['record']} is recorded twice"
                where[rule["record"]] = (group["name"], index)
    return where


# Fleet groups that read another fleet group's record (group: the groups it reads), one more evaluation late at most
# than what that group read (itself a forwarded record, so two in all), with the same guards: the alerts reading it
# wait a `for`, promtool tests order the reader first. gpuhealth-training's alert reads the job's median from its own
# group (docs/benchmarks.md: each read of every rank at 10,000 nodes takes about half a second, one read a group).
LATE_FLEET_READS = {"gpuhealth-training": {"gpuhealth-training-median"}}


def _late_reads() -> dict[str, set[str]]:
    """Group -> the groups whose records it reads late (of this or the previous evaluation): forwarded node groups'
    records and the fleet reads LATE_FLEET_READS allows."""
    reads = {group: set(groups) for group, groups in _forwarded_reads().items()}
    for group, groups in LATE_FLEET_READS.items():
        reads.setdefault(group, set()).update(groups)
    return reads


def _forwarded_reads() -> dict[str, set[str]]:
    """Fleet group -> the node groups whose records it reads (rules/sets.yaml): records computed where the raw series
    are (the shards), forwarded, aggregated once over the fleet, as Thanos Ruler and Mimir ruler setups do."""
    sets, where = rule_sets.sets(), _recorded_where()
    reads: dict[str, set[str]] = {}
    for _, group in _groups():
        for rule in group["rules"]:
            for name in metric_names(rule["expr"]) & RECORDS:
                if group["name"] in sets["fleet"] and where[name][0] in sets["node"]:
                    reads.setdefault(group["name"], set()).add(where[name][0])
    return reads


def test_rules_read_only_records_of_their_own_group_evaluated_before_them() -> None:
    """Prometheus evaluates a group's rules in order but runs groups concurrently (promtool: in random order), so a
    rule reading another group's record sees this or the previous evaluation's value at random (flaky tests, and
    alerts that fire or resolve one evaluation late at random in production). The exceptions: a fleet group may
    read a node group's record (the shards forward it), and the fleet reads LATE_FLEET_READS lists; the tests below
    bound what that lateness may do."""
    late, where = _late_reads(), _recorded_where()
    problems = []
    for path, group in _groups():
        for index, rule in enumerate(group["rules"]):
            for name in sorted(metric_names(rule["expr"]) & RECORDS):
                rec_group, rec_index = where[name]
                if rec_group in late.get(group["name"], set()):
                    continue
                if rec_group != group["name"] or rec_index >= index:
                    problems.append(f"{path.name}: {rule.get('alert') or rule['record']} (group {group['name']}) reads "
                                    f"{name}, recorded in group {rec_group} at position {rec_index}, not before it")
    assert not problems, "\n".join(problems)


def test_fleet_groups_read_forwarded_records_instead_of_every_nodes_raw_series() -> None:
    """The global ruler's cost at 10,000 nodes (docs/benchmarks.md): the slow ranks and the monitoring fault read the
    shards' records, not the 80,000 ranks' and 60,000 probes' raw series."""
    assert _forwarded_reads() == {"gpuhealth-training": {"gpuhealth-training-ranks"},
                                  "gpuhealth-training-median": {"gpuhealth-training-ranks"},
                                  "gpuhealth-probe-fleet": {"gpuhealth-probe"}}
    fleet_reads = set().union(*(metric_names(r["expr"]) for g in rule_sets.set_groups("fleet") for r in g["rules"]))
    assert not fleet_reads & {"gpuhealth_training_step_seconds", "gpuhealth_probe_success", "gpuhealth_probe_error"}


def test_alerts_reading_a_forwarded_record_wait_a_for() -> None:
    """A forwarded record is this or the previous evaluation's (one Prometheus) or a few seconds late (remote write):
    an alert that reads it, or reads its group's records made from it, must have a `for`, so lateness delays it by
    an evaluation and never makes it fire on a value that was never there for long."""
    where, sets, late_reads = _recorded_where(), rule_sets.sets(), _late_reads()
    readers: dict[str, str] = {}  # alert: its `for`
    for _, group in _groups():
        if group["name"] not in sets["fleet"]:
            continue
        tainted: set[str] = set()  # records of this group made from a forwarded record
        late = late_reads.get(group["name"], set())
        for rule in group["rules"]:
            reads = metric_names(rule["expr"]) & RECORDS
            if any(where[n][0] in late for n in reads) or reads & tainted:
                if "record" in rule:
                    tainted.add(rule["record"])
                else:
                    readers[rule["alert"]] = rule.get("for", "0s")
    assert set(readers) == {"TrainingRankSlow", "GpuhealthMonitoringFault"}
    assert not [alert for alert, wait in readers.items() if _minutes(wait) == 0], "alerts with no for"


def test_promtool_tests_see_forwarded_records_one_evaluation_late() -> None:
    """promtool runs groups in random order unless told: every test file that loads a fleet group and a group whose
    record it reads late (a node group's, LATE_FLEET_READS) evaluates the reading group first, so its expectations
    hold at the later of the two cases (and the same on every run)."""
    loaded = {path.name: {g["name"] for f in _load(path)["rule_files"]
                          for g in _load((path.parent / f).resolve())["groups"]} for path in TEST_FILES}
    problems = []
    for name, groups in loaded.items():
        order = _load(RULES / "tests" / name).get("group_eval_order") or []
        for fleet_group, node_groups in _late_reads().items():
            for node_group in sorted(node_groups & groups if fleet_group in groups else set()):
                if not (fleet_group in order and node_group in order
                        and order.index(fleet_group) < order.index(node_group)):
                    problems.append(f"{name}: group_eval_order must list {fleet_group} before {node_group}")
    assert not problems, "\n".join(problems)


def test_order_check_catches_a_record_of_another_group() -> None:
    assert metric_names("node_gpu_xid:gpuhealth_xid_errors:increase5m > 0") & RECORDS


# --- what the promtool tests must cover ---

def _cases() -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    return [(path, test, case) for path in TEST_FILES for test in _load(path).get("tests", [])
            for case in test.get("alert_rule_test", []) or []]


def _minutes(duration: str) -> float:
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)([hms])", duration):
        total += float(number) * {"h": 60.0, "m": 1.0, "s": 1 / 60}[unit]
    return total


def test_every_alert_has_two_quiet_and_one_firing_expectation() -> None:
    firing: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for _, _, case in _cases():
        counts = firing if case.get("exp_alerts") else quiet
        counts[case["alertname"]] = counts.get(case["alertname"], 0) + 1
    names = {r["alert"] for _, r in ALERTS}
    assert not {n for n in names if firing.get(n, 0) < 1}, "alerts without a firing expectation"
    assert not {n for n in names if quiet.get(n, 0) < 2}, sorted(n for n in names if quiet.get(n, 0) < 2)


def test_every_keep_firing_for_alert_is_seen_clearing() -> None:
    """A firing expectation followed, in the same test, by a later quiet one: the alert is seen to stop."""
    seen = set()
    for _, test, case in _cases():
        if case.get("exp_alerts"):
            later = [c for c in test["alert_rule_test"]
                     if c["alertname"] == case["alertname"] and not c.get("exp_alerts")
                     and _minutes(c["eval_time"]) > _minutes(case["eval_time"])]
            if later:
                seen.add(case["alertname"])
    missing = sorted(r["alert"] for _, r in ALERTS if r.get("keep_firing_for") and r["alert"] not in seen)
    assert not missing, f"alerts with keep_firing_for never seen to clear after firing: {missing}"


def _mutations() -> list[tuple[str, str, str]]:
    """(alert, field, new value): each must make the promtool tests fail, i.e. the tests pin both sides."""
    out = []
    for _, rule in ALERTS:
        for field in ("for", "keep_firing_for"):
            if rule.get(field):
                minutes = _minutes(rule[field])
                out.append((rule["alert"], field, "0s"))  # an expectation relies on it holding the alert back / up
                out.append((rule["alert"], field, f"{int(minutes * 2 + 5)}m"))  # an expectation relies on it ending
    return out


MUTATIONS = _mutations()


def _run_mutation(mutation: tuple[str, str, str]) -> tuple[tuple[str, str, str], int]:
    alert, field, value = mutation
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "rules"
        shutil.copytree(RULES, copy, ignore=shutil.ignore_patterns("tests"))
        for path in [*copy.glob("alerts/*.yaml"), *copy.glob("recording/*.yaml")]:
            doc = _load(path)
            hit = False
            for group in doc["groups"]:
                for rule in group["rules"]:
                    if rule.get("alert") == alert:
                        rule[field], hit = value, True
            if hit:
                path.write_text(yaml.safe_dump(doc, sort_keys=False))
        # only the tests that expect something of this alert, and only those expectations: fast enough to run
        # once per mutation
        (copy / "tests").mkdir()
        files = []
        for path in TEST_FILES:
            doc = _load(path)
            tests = []
            for test in doc.get("tests", []):
                cases = [c for c in test.get("alert_rule_test", []) or [] if c["alertname"] == alert]
                if cases:
                    tests.append({**{k: v for k, v in test.items() if k != "promql_expr_test"},
                                  "alert_rule_test": cases})
            if tests:
                files.append(copy / "tests" / path.name)
                files[-1].write_text(yaml.safe_dump({**doc, "tests": tests}, sort_keys=False))
        result = subprocess.run([_promtool(), "test", "rules", *map(str, files)], cwd=copy, capture_output=True,
                                text=True, timeout=120)
        return mutation, result.returncode


@pytest.mark.parametrize("alert", sorted({m[0] for m in MUTATIONS}))
def test_tests_pin_both_sides_of_for_and_keep_firing_for(alert: str) -> None:
    """Setting an alert's `for` to 0 must break a test (an expectation before `for` elapses, condition already true,
    where it does not fire yet); doubling it must break one (it fires right after). The same for keep_firing_for:
    0 breaks an expectation where it still fires after the condition stopped, doubling one where it has stopped."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_run_mutation, [m for m in MUTATIONS if m[0] == alert]))
    survivors = [f"{field}={value}" for (_, field, value), rc in results if rc == 0]
    assert not survivors, f"{alert}: promtool tests still pass with {survivors} (that side of it is untested)"


# --- gpu label values ---

GPU_LABEL = re.compile(r"^(?:\d+|[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]|all|unknown)$")


def test_gpu_label_values_are_an_index_a_bus_id_all_or_unknown() -> None:
    """The remediator resets the GPU the label names: an index, a PCI bus id as NVML writes it, or every GPU of the
    node for all/unknown. Nothing else may reach it."""
    bad = []
    for path, _, case in _cases():
        for alert in case.get("exp_alerts") or []:
            gpu = alert.get("exp_labels", {}).get("gpu")
            if gpu is not None and not GPU_LABEL.match(str(gpu)):
                bad.append(f"{path.name}: {case['alertname']} at {case['eval_time']}: gpu={gpu!r}")
    assert not bad, "\n".join(bad)
    assert not GPU_LABEL.match("0000:9b:00") and GPU_LABEL.match("00000000:9B:00.0")


# --- probe gaps ---

STATE_PROBES = {"nvml", "dcgm", "dcgm_exporter", "diag", "efa"}


@pytest.mark.parametrize("rule", [r for _, r in ALERTS], ids=[r["alert"] for _, r in ALERTS])
def test_state_alerts_ride_out_a_probe_gap(rule: dict[str, Any]) -> None:
    """A failed probe run makes its samples vanish: an alert on NVML/DCGM/EFA state keeps firing through the gap
    (keep_firing_for >= 1m: 2 x the 30 s scrape), and one with a `for` reads through a range function (a pending
    alert is dropped on a gap, keep_firing_for does not help it), or its `for` never completes."""
    families = {f.exposed_name: f for f in FAMILIES.values()}
    read = [families[n] for n in metric_names(rule["expr"]) if n in families]
    state = [f for f in read if set(filled_by(f.name)) & STATE_PROBES]
    if not state or all(_bridged(rule["expr"], f.exposed_name) for f in state):
        return
    assert _minutes(rule.get("keep_firing_for", "0s")) >= 1, f"{rule['alert']}: a probe gap resolves it"
    if rule.get("for"):
        ranged = re.search(r"(?:_over_time|rate|increase)\([^()]*\[\d+[hm]\]", rule["expr"])
        assert ranged, f"{rule['alert']}: a probe gap restarts its `for` (read the state through last_over_time)"


def _bridged(expr: str, name: str) -> bool:
    """Every read of `name` is last_over_time(name[>= 2m]): it holds the last sample through a failed run (2 x the
    30 s scrape and more), so the alert needs no keep_firing_for (the GPURecoveryAction* alerts resolve on the
    driver's own all-clear, not a minute later)."""
    reads = re.findall(rf"\b{name}\b", expr)
    held = re.findall(rf"last_over_time\({name}\[(\d+)m\]\)", expr)
    return len(reads) == len(held) and all(int(m) >= 2 for m in held)


# --- docs/alerts.md and the runbooks match the rules ---

def _doc_rows() -> dict[str, dict[str, str]]:
    rows = {}
    header: list[str] = []
    for line in (ROOT / "docs" / "alerts.md").read_text().splitlines():
        if line.startswith("| alert |"):
            header = [c.strip() for c in line.strip("|").split("|")]
        m = re.match(r"^\| <a id=\"[a-z0-9]+\"></a>\[(\w+)\]\(runbooks/\w+\.md\) \|", line)
        if m and header:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows[m.group(1)] = dict(zip(header, cells, strict=True))
    return rows


def _duration(value: str | None) -> str:
    return "0" if not value or _minutes(value) == 0 else value


@pytest.mark.parametrize("rule", [r for _, r in ALERTS], ids=[r["alert"] for _, r in ALERTS])
def test_alerts_page_row_matches_the_rule(rule: dict[str, Any]) -> None:
    row = _doc_rows().get(rule["alert"])
    assert row, f"docs/alerts.md: no row for {rule['alert']}"
    name = rule["alert"]
    assert row["for"] == _duration(rule.get("for")), f"{name}: for {row['for']} in docs, {rule.get('for')} in the rule"
    assert row["keep_firing_for"] == _duration(rule.get("keep_firing_for")), f"{name}: keep_firing_for differs"
    assert row["severity"] == rule["labels"]["severity"], f"{name}: severity differs"
    assert row["remediation"] == rule["labels"]["remediation"], f"{name}: remediation differs"
    # every number the expression compares against (other than 0 and 1) is written in the threshold column
    for number in re.findall(r"(?:>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)?)", re.sub(r"#[^\n]*", "", rule["expr"])):
        if float(number) not in (0.0, 1.0):
            assert number in row["threshold"], f"{name}: threshold {number} not in docs/alerts.md ({row['threshold']})"
    tail = row["clears after fix within"]
    if rule["labels"]["remediation"] in ("reset_gpu", "reboot"):
        found = re.search(r"(\d+)\s*min", tail)
        assert found, f"{name}: docs/alerts.md does not say within how many minutes it clears after a fix"
        assert int(found.group(1)) >= _minutes(rule.get("keep_firing_for", "0s")), f"{name}: tail shorter than keep"
        if rule["labels"]["remediation"] == "reset_gpu":
            # the remediator escalates a reset_gpu fault still firing 15 min after the reset (policy default)
            assert int(found.group(1)) < 15, f"{name}: clears {found.group(1)} min after a fix, >= the 15 min timeout"


@pytest.mark.parametrize("item", ALERTS, ids=[r["alert"] for _, r in ALERTS])
def test_runbook_header_matches_the_rule(item: tuple[Path, dict[str, Any]]) -> None:
    path, rule = item
    page = (RUNBOOKS / f"{rule['alert']}.md").read_text()
    m = re.search(r"^\| (\w+) \| (\w+) \| (\w+) \| (\w+) \| (\w+) \| \[`([^`]+)`\]", page, re.M)
    assert m, f"{rule['alert']}: runbook has no header row"
    labels = rule["labels"]
    assert m.groups()[:3] == (labels["severity"], labels["component"], labels["remediation"]), rule["alert"]
    assert m.group(4) == (rule.get("for") or "0s"), f"{rule['alert']}: runbook header for"
    assert m.group(5) == (rule.get("keep_firing_for") or "0s"), f"{rule['alert']}: runbook header keep_firing_for"
    assert m.group(6) == str(path.relative_to(ROOT)), f"{rule['alert']}: runbook names {m.group(6)}, rule is in {path}"
