"""The chart under a default kube-prometheus-stack (issue 12, routing and selection): what its Prometheus,
Alertmanager and Grafana do with the monitoring objects the chart renders, with kube-prometheus-stack's own
defaults (tests/support/kube_prometheus_stack.py) and the Prometheus Operator's translation of the AlertmanagerConfig
(tests/support/operator_alertmanager.py).

- Routing: every alert of rules/, with the labels Prometheus gives it from the rendered PrometheusRule (the
  label sets rules/tests expect of each rule, plus what the chart adds: promtool checks that part on the rendered
  rules), reaches the remediator's receiver through the Alertmanager configuration the operator generates
  (checked by `amtool check-config`, routed by `amtool config routes test`); the informational ones
  (remediation none) through a route and so a group of their own; every other alert reaches exactly the
  receivers it reached before the AlertmanagerConfig was added.
- Selection: with the chart's defaults, every monitoring object that is turned on is selected.
- Grafana: the dashboards are loaded; their folder takes the two sidecar settings docs/install.md names.

The chart is rendered through tests/support/chart_render.py, as every test that reads the rendering.
"""

from __future__ import annotations

import base64
import functools
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import kube_prometheus_stack as kps
from tests.support import paths
from tests.support.chart_render import render
from tests.support.operator_alertmanager import Secrets, TranslationError, generate
from tests.support.real_alertmanager import RealAlertmanager, stamp

ROOT = paths.REPO
RELEASE, NAMESPACE = "gpuhealth", "gpuhealth"
INSTALL_MD = ROOT / "docs" / "install.md"
RULE_FILES = sorted([*ROOT.glob("rules/alerts/*.yaml"), *ROOT.glob("rules/recording/*.yaml")])
RULE_TESTS = sorted(ROOT.glob("rules/tests/*.yaml"))
REMEDIATOR = f"{NAMESPACE}/{RELEASE}-remediator/gpuhealth-remediator"  # <namespace>/<name>/<receiver>
INFORMATIONAL = REMEDIATOR + "#informational"  # the test's name for the remediation-none child route
ON = {"monitoring": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True},
                     "prometheusRule": {"enabled": True}, "alertmanagerConfig": {"enabled": True}}}


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def secrets_of(docs: list[dict[str, Any]]) -> Secrets:
    return {(d["metadata"]["namespace"], d["metadata"]["name"]):
            {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
            for d in docs if d["kind"] == "Secret"}


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render(ON)


# --- the alerts as Prometheus sends them ---

TEMPLATE = re.compile(r"^\{\{ \$labels\.(?P<name>[a-zA-Z_][a-zA-Z0-9_]*) \}\}$")


@functools.cache
def expected_by_rules_tests() -> dict[str, dict[str, str]]:
    """alertname -> the labels rules/tests expects of its first firing alert (what Prometheus gives it from the
    rules/ rule: the series' labels that survive the expression, and the rule's own)."""
    out: dict[str, dict[str, str]] = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text()).get("tests") or []:
            for case in test.get("alert_rule_test") or []:
                for alert in case.get("exp_alerts") or []:
                    out.setdefault(case["alertname"], {k: str(v) for k, v in alert["exp_labels"].items()})
    return out


def alert_rules(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def as_sent(series: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    """The alert's labels: the series' labels, then the rule's, each value a literal or `{{ $labels.<name> }}`
    (expanded from the series, as Prometheus does); an empty value removes the label."""
    out = dict(series)
    for name, value in labels.items():
        if "{{" in value:
            m = TEMPLATE.match(value)
            assert m, f"label {name}: {value!r}: only {{{{ $labels.<name> }}}} is modelled here"
            value = series.get(m.group("name"), "")
        if value:
            out[name] = value
        else:
            out.pop(name, None)
    return out


def alerts_as_sent(rule: dict[str, Any]) -> dict[str, dict[str, str]]:
    """alertname -> labels, for every alert of the rendered PrometheusRule."""
    source = {name: r for path in RULE_FILES
              for name, r in alert_rules(yaml.safe_load(path.read_text())["groups"]).items()}
    expected = expected_by_rules_tests()
    missing = sorted(set(source) - set(expected))
    assert not missing, f"rules/tests expects no firing alert of {missing}: their labels are unknown"
    out = {}
    for name, r in alert_rules(rule["spec"]["groups"]).items():
        own = source[name].get("labels") or {}
        # the series' labels: what the expression keeps (rules/tests' labels less the rule's own)
        series = {k: v for k, v in expected[name].items() if k not in own}
        out[name] = {**as_sent(series, r.get("labels") or {}), "alertname": name}
    assert set(out) == set(source), "the rendered PrometheusRule's alerts are not those of rules/"
    return out


# --- routing, by amtool ---

MATCHER = re.compile(r'^\s*(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*'
                     r'(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^"]*?))\s*$')


def _matchers(route: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every matcher of the route tree as (name, op, value); match/match_re are not used by either side."""
    assert not route.get("match") and not route.get("match_re"), "match/match_re: not modelled here"
    out = []
    for text in route.get("matchers") or []:
        m = MATCHER.match(text)
        assert m, f"matcher {text!r}: not parsed"
        value = m.group("quoted")
        value = m.group("bare") if value is None else re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e[1], e[1]), value)
        out.append((m.group("name"), m.group("op"), value))
    return out + [m for child in route.get("routes") or [] for m in _matchers(child)]


def _outcome(matcher: tuple[str, str, str], labels: dict[str, str]) -> bool:
    name, op, value = matcher
    got = labels.get(name, "")
    if op in ("=", "!="):
        return (got == value) == (op == "=")
    return (re.fullmatch(value, got) is not None) == (op == "=~")


def amtool(*args: str) -> str:
    binary = shutil.which("amtool")
    if binary is None:
        pytest.fail("amtool is not on PATH: install Debian's prometheus-alertmanager package (make test does)")
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"amtool {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def routes(config: dict[str, Any], alerts: dict[str, dict[str, str]], tmp_path: Path) -> dict[str, list[str]]:
    """key -> the receivers `amtool config routes test` routes those labels to, in the route tree's order.
    Routing reads only whether each matcher of the tree matches, so amtool is asked once for each distinct
    outcome of the matchers (a handful of processes, not one per alert)."""
    path = tmp_path / f"alertmanager-{len(list(tmp_path.iterdir()))}.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    amtool("check-config", str(path))
    matchers = _matchers(config["route"])
    asked: dict[tuple[bool, ...], list[str]] = {}
    out = {}
    for key, labels in alerts.items():
        outcome = tuple(_outcome(m, labels) for m in matchers)
        if outcome not in asked:
            args = [f'{k}="{v}"' for k, v in sorted(labels.items())]
            asked[outcome] = amtool("config", "routes", "test", f"--config.file={path}", *args).strip().split(",")
        out[key] = asked[outcome]
    return out


def tell_children_apart(config: dict[str, Any]) -> dict[str, Any]:
    """The generated configuration with the receiver of the child route for remediation="none" renamed
    INFORMATIONAL, so that amtool shows which of gpuhealth's two routes (so which group) an alert takes. A chart
    without that route is left as it is (and its informational alerts fail the test)."""
    for route in config["route"]["routes"]:
        for child in route.get("routes") or [] if route.get("receiver") == REMEDIATOR else []:
            if child.get("matchers") == ['remediation="none"'] and child.get("receiver") == REMEDIATOR:
                child["receiver"] = INFORMATIONAL
                (receiver,) = [r for r in config["receivers"] if r["name"] == REMEDIATOR]
                config["receivers"].append({**receiver, "name": INFORMATIONAL})
    return config


def routed_before_and_after(base_config: dict[str, Any], rendered: list[dict[str, Any]], tmp_path: Path
                            ) -> tuple[dict[str, dict[str, str]], dict[str, list[str]], dict[str, list[str]]]:
    """gpuhealth's alerts as sent, and the receivers each alert (and OTHERS') reaches under the base configuration
    alone and with the chart's AlertmanagerConfig merged in by the operator."""
    config = generate(base_config, [one(rendered, "AlertmanagerConfig")], secrets_of(rendered),
                      strategy=kps.MATCHER_STRATEGY)
    gpuhealth = alerts_as_sent(one(rendered, "PrometheusRule"))
    everything = {**gpuhealth, **OTHERS}
    return gpuhealth, routes(base_config, everything, tmp_path), routes(tell_children_apart(config), everything,
                                                                        tmp_path)


# Other teams' alerts, as kube-prometheus-stack's own rules and a team's would send them.
OTHERS = {
    "Watchdog": {"alertname": "Watchdog", "severity": "none"},
    "InfoInhibitor": {"alertname": "InfoInhibitor", "severity": "none", "namespace": NAMESPACE},
    "KubePodCrashLooping-ml": {"alertname": "KubePodCrashLooping", "severity": "warning", "namespace": "ml",
                               "pod": "trainer-0", "container": "trainer"},
    # the remediator's own pod crashing: in gpuhealth's namespace, but not a gpuhealth alert (no remediation)
    "KubePodCrashLooping-gpuhealth": {"alertname": "KubePodCrashLooping", "severity": "warning",
                                      "namespace": NAMESPACE, "pod": "gpuhealth-remediator-0"},
    "KubeNodeNotReady": {"alertname": "KubeNodeNotReady", "severity": "warning", "node": "gpu-1",
                         "namespace": kps.NAMESPACE},
    "NodeFilesystemAlmostFull": {"alertname": "NodeFilesystemAlmostFull", "severity": "critical",
                                 "namespace": kps.NAMESPACE, "instance": "10.0.0.1:9100"},
    "TeamAppDown": {"alertname": "TeamAppDown", "severity": "critical", "namespace": "ml", "team": "ml"},
}

# A base configuration as a platform team extends kube-prometheus-stack's: an on-call receiver for the ml
# namespace and a pager for every critical alert.
TEAM_ROUTES = [{"receiver": "ml-oncall", "matchers": ['namespace="ml"']},
               {"receiver": "platform-pager", "matchers": ['severity="critical"']}]


def team_base() -> dict[str, Any]:
    base = kps.base_config()
    base["route"]["routes"] += TEAM_ROUTES
    base["receivers"] += [{"name": "ml-oncall"}, {"name": "platform-pager"}]
    return base


@pytest.mark.parametrize("base", ["kube-prometheus-stack", "team"])
def test_every_gpuhealth_alert_reaches_the_remediator_and_no_other_routing_changes(
        base: str, rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    base_config = kps.base_config() if base == "kube-prometheus-stack" else team_base()
    amc = one(rendered, "AlertmanagerConfig")
    assert kps.selects(amc)
    gpuhealth, before, after = routed_before_and_after(base_config, rendered, tmp_path)

    wrong = []
    for name, labels in gpuhealth.items():
        # remediation none: the informational route and group; the rest: the actionable one. Then whatever the
        # base configuration's routes give them (continue: true), less the root's fallback receiver.
        mine = INFORMATIONAL if labels["remediation"] == "none" else REMEDIATOR
        theirs = [r for r in before[name] if before[name] != [base_config["route"]["receiver"]]]
        if after[name] != [mine, *theirs]:
            wrong.append(f"{name} {labels}: routed to {after[name]}, expected {[mine, *theirs]}")
    for name in OTHERS:
        if after[name] != before[name]:
            wrong.append(f"{name} {OTHERS[name]}: routed to {after[name]}, before the AlertmanagerConfig to "
                         f"{before[name]}")
    assert not wrong, "\n" + "\n".join(wrong)
    # the cases that make it a test: informational alerts the classifier reads, and other teams' receivers
    assert {"GPUXidApplication", "GPUContainedMemoryError"} <= {n for n, a in gpuhealth.items()
                                                                 if a["remediation"] == "none"}
    if base == "team":
        assert after["GPUXidFatal"] == [REMEDIATOR, "platform-pager"]
        assert after["KubePodCrashLooping-ml"] == ["ml-oncall"]


def test_every_alert_of_rules_carries_node_and_remediation() -> None:
    for path in RULE_FILES:
        for name, rule in alert_rules(yaml.safe_load(path.read_text())["groups"]).items():
            labels = rule.get("labels") or {}
            assert labels.get("remediation") in {"none", "cordon", "drain", "reset_gpu", "reboot", "replace"}, name
    for name, labels in expected_by_rules_tests().items():
        assert labels.get("node"), f"{name}: rules/tests expects it without a node label"


def test_the_rendered_alerts_carry_the_release_namespace_and_keep_their_own(
        rendered: list[dict[str, Any]]) -> None:
    sent = alerts_as_sent(one(rendered, "PrometheusRule"))
    assert {a["namespace"] for a in sent.values()} == {NAMESPACE}
    # series with a namespace of their own (a training job's, a workload's) keep it, under another name
    kept = {n: a["exported_namespace"] for n, a in sent.items() if "exported_namespace" in a}
    assert set(kept) == {"TrainingRankSlow", "WorkloadRestartLoop"}, kept
    # with namespaceLabel false, the alerts are those of rules/ and carry no namespace but their own
    plain = alerts_as_sent(one(render({"monitoring": {"prometheusRule": {"enabled": True, "namespaceLabel": False}}}),
                               "PrometheusRule"))
    assert {n for n, a in plain.items() if "namespace" in a} == set(kept)


def test_prometheus_gives_the_rendered_alerts_those_labels(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    """promtool on the rendered PrometheusRule: a node alert gets namespace and no exported_namespace (the
    template expands to nothing), a training job's alert keeps its own namespace as exported_namespace."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: install Debian's prometheus package (make test does)")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": one(rendered, "PrometheusRule")["spec"]["groups"]}))
    sent = alerts_as_sent(one(rendered, "PrometheusRule"))
    tests = []
    for path in (ROOT / "rules" / "tests" / "gpu_test.yaml", ROOT / "rules" / "tests" / "training_test.yaml"):
        wanted = "GPUXidApplication" if path.name == "gpu_test.yaml" else "TrainingRankSlow"
        for test in yaml.safe_load(path.read_text())["tests"]:
            cases = [c for c in test.get("alert_rule_test") or [] if c["alertname"] == wanted and c.get("exp_alerts")]
            if cases:
                case = cases[0]
                labels = {k: v for k, v in sent[wanted].items() if k != "alertname"}
                case["exp_alerts"] = [{**case["exp_alerts"][0], "exp_labels": labels}]
                tests.append({**test, "alert_rule_test": [case], "promql_expr_test": []})
                break
    assert len(tests) == 2
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                        "tests": tests}, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sent["TrainingRankSlow"]["exported_namespace"] == "team-a" and "exported_namespace" not in sent[
        "GPUXidApplication"]


# --- the translation helper refuses what it does not know ---

def test_the_translation_fails_on_fields_it_does_not_translate(rendered: list[dict[str, Any]]) -> None:
    amc = one(rendered, "AlertmanagerConfig")
    secrets = secrets_of(rendered)
    generate(kps.base_config(), [amc], secrets)
    for path, value in ((("spec", "route", "activeTimeIntervals"), ["weekdays"]),
                        (("spec", "inhibitRules"), []),
                        (("spec", "receivers", 0, "slackConfigs"), []),
                        (("spec", "receivers", 0, "webhookConfigs", 0, "timeout"), "5s"),
                        (("spec", "receivers", 0, "webhookConfigs", 0, "httpConfig", "tlsConfig"), {}),
                        (("spec", "route", "routes", 0, "matchers", 0, "regex"), True)):
        broken = yaml.safe_load(yaml.safe_dump(amc))
        target = broken
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(TranslationError, match="not translated"):
            generate(kps.base_config(), [broken], secrets)
    with pytest.raises(TranslationError, match="not found"):  # the token Secret missing: the operator rejects it
        generate(kps.base_config(), [amc], {})


def test_the_translation_follows_the_operators_semantics(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    amc = one(rendered, "AlertmanagerConfig")
    config = generate(kps.base_config(), [amc], secrets_of(rendered))
    first, *rest = config["route"]["routes"]
    assert rest == kps.base_config()["route"]["routes"]  # before the base configuration's routes
    assert first["continue"] is True and first["receiver"] == REMEDIATOR
    assert first["matchers"][-1] == f'namespace="{NAMESPACE}"'
    hook = next(r for r in config["receivers"] if r["name"] == REMEDIATOR)["webhook_configs"][0]
    token = secrets_of(rendered)[(NAMESPACE, f"{RELEASE}-remediator")]["token"]
    assert hook == {"url": f"http://{RELEASE}-remediator.{NAMESPACE}.svc:8080/alerts", "send_resolved": True,
                    "http_config": {"authorization": {"type": "Bearer", "credentials": token}}}
    untouched = generate(kps.base_config(), [amc], secrets_of(rendered), strategy="None")["route"]["routes"][0]
    assert not any("namespace" in m for m in untouched["matchers"])
    on_disk = generate(kps.base_config(), [amc], secrets_of(rendered), secret_files=tmp_path)
    auth = next(r for r in on_disk["receivers"] if r["name"] == REMEDIATOR)["webhook_configs"][0]["http_config"]
    assert Path(auth["authorization"]["credentials_file"]).read_text() == token
    except_own = generate(kps.base_config(), [amc], secrets_of(rendered),
                          strategy="OnNamespaceExceptForAlertmanagerNamespace", alertmanager_namespace=NAMESPACE)
    assert not any("namespace" in m for m in except_own["route"]["routes"][0]["matchers"])


# --- selection ---

def test_a_default_kube_prometheus_stack_selects_every_monitoring_object_turned_on() -> None:
    docs = render(ON)
    kinds = {"PodMonitor", "ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}
    objects = [d for d in docs if d["kind"] in kinds]
    assert {d["kind"] for d in objects} == kinds
    ignored = [f"{d['kind']} {d['metadata']['name']}: labels {d['metadata'].get('labels')}"
               for d in objects if not kps.selects(d)]
    assert not ignored, "a default kube-prometheus-stack ignores:\n" + "\n".join(ignored)
    # another release name, and per-object labels, which win
    docs = render({"monitoring": {**ON["monitoring"], "release": "prom",
                                  "podMonitor": {"enabled": True, "labels": {"release": "other", "team": "gpu"}}}})
    labels = {d["kind"]: d["metadata"]["labels"] for d in docs if d["kind"] in kinds}
    assert labels["PodMonitor"]["release"] == "other" and labels["PodMonitor"]["team"] == "gpu"
    assert {labels[k]["release"] for k in kinds - {"PodMonitor"}} == {"prom"}
    # "" puts no release label on any (the objects' own labels only)
    docs = render({"monitoring": {**ON["monitoring"], "release": ""}})
    assert not any("release" in d["metadata"]["labels"] for d in docs if d["kind"] in kinds)


# --- Grafana ---

def _install_block(first_line: str) -> dict[str, Any]:
    for m in re.finditer(r"^```yaml\n(?P<body>.*?)^```", INSTALL_MD.read_text(), re.S | re.M):
        if m.group("body").startswith(first_line):
            values: dict[str, Any] = yaml.safe_load(m.group("body"))
            return values
    raise AssertionError(f"docs/install.md: no ```yaml block starting with {first_line!r}")


def test_kube_prometheus_stacks_grafana_loads_the_dashboards_into_the_documented_folder() -> None:
    def dashboards(values: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [d for d in render(values) if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]

    configmaps = dashboards(None)
    assert len(configmaps) == len(list((ROOT / "dashboards" / "json").glob("*.json")))
    # the chart's defaults: every dashboard loaded (the sidecar's label, a namespace it searches), in no folder
    assert kps.dashboard_folders(configmaps) == {cm["metadata"]["name"]: "" for cm in configmaps}
    # docs/install.md's values: a folder annotation, which does nothing under the sidecar's defaults ...
    install = _install_block("# values-prod.yaml")
    ((annotation, folder),) = install["dashboards"]["annotations"].items()
    annotated = dashboards({"dashboards": install["dashboards"]})
    assert set(kps.dashboard_folders(annotated).values()) == {""}
    # ... and with the two sidecar values it names for kube-prometheus-stack, the folder it names
    sidecar = _install_block("# kube-prometheus-stack values (its release")["grafana"]["sidecar"]["dashboards"]
    assert sidecar["folderAnnotation"] == annotation
    assert set(kps.dashboard_folders(annotated, sidecar).values()) == {folder}
    for one_of_them in ({"folderAnnotation": annotation}, {"provider": sidecar["provider"]}):
        assert set(kps.dashboard_folders(annotated, one_of_them).values()) == {""}


# --- kube-prometheus-stack's InfoInhibitor and the informational alerts, on a real Alertmanager ---

def push_label_sets(am: RealAlertmanager, alerts: dict[str, dict[str, str]]) -> None:
    """Alerts with these label sets, firing from a minute ago, pushed as Prometheus pushes them."""
    now = datetime.now(UTC)
    am._call("POST", "/api/v2/alerts", [
        {"labels": labels, "startsAt": stamp(now - timedelta(minutes=1)), "endsAt": stamp(now + timedelta(hours=1))}
        for labels in alerts.values()])


def settled(read: Any, done: Any, timeout: float = 5.0) -> Any:
    """`read()` until `done(value)` or the timeout; the last value either way (the caller asserts on it)."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = read()
    return value


def inhibited(am: RealAlertmanager, alerts: dict[str, dict[str, str]]) -> dict[str, bool]:
    listed = {frozenset(a["labels"].items()): a for a in am.alerts()}
    return {key: bool(listed[frozenset(labels.items())]["status"]["inhibitedBy"]) for key, labels in alerts.items()}


def test_the_info_inhibitor_mutes_gpuhealths_informational_alerts_unless_exempted_as_documented(
        rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    amc = one(rendered, "AlertmanagerConfig")
    sent = alerts_as_sent(one(rendered, "PrometheusRule"))
    info = {n: a for n, a in sent.items() if a["severity"] == "info"}
    assert {"GPUXidApplication", "GPUContainedMemoryError"} <= set(info)
    alerts = {**info,
              # what kube-prometheus-stack's InfoInhibitor rule gives a namespace with info alerts only
              "InfoInhibitor-gpuhealth": {"alertname": "InfoInhibitor", "severity": "none", "namespace": NAMESPACE},
              "InfoInhibitor-ml": {"alertname": "InfoInhibitor", "severity": "none", "namespace": "ml"},
              "ml-info": {"alertname": "KubeQuotaAlmostFull", "severity": "info", "namespace": "ml"}}
    documented = _install_block("# kube-prometheus-stack values: the InfoInhibitor")["alertmanager"]["config"]
    rules = kps.base_config()["inhibit_rules"]
    # the documented rules are kube-prometheus-stack's, the InfoInhibitor's with one more target matcher
    rules[2]["target_matchers"].append(f"namespace != {NAMESPACE}")
    assert documented["inhibit_rules"] == rules
    secrets = secrets_of(rendered)
    with RealAlertmanager(config=generate(kps.base_config(), [amc], secrets)) as am:
        push_label_sets(am, alerts)
        # Alertmanager marks inhibition as its inhibitor goroutine catches up: poll, a few seconds at most
        muted = settled(lambda: inhibited(am, alerts), lambda m: all(m[n] for n in info) and m["ml-info"])
        assert all(muted[n] for n in info), f"kube-prometheus-stack's defaults no longer mute {muted}: docs/install.md"
        assert muted["ml-info"]
        am.reload(generate({**kps.base_config(), "inhibit_rules": documented["inhibit_rules"]}, [amc], secrets))
        muted = settled(lambda: inhibited(am, alerts), lambda m: not any(m[n] for n in info) and m["ml-info"])
        assert not any(muted[n] for n in info), muted
        assert muted["ml-info"], "the exemption must leave other namespaces' inhibition as it was"
