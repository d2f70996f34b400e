"""The docs agree with the chart (issue 12): every port, URL, Secret name, Alertmanager timing,
credentials_file path and dashboard that README.md, docs/ and examples/ name is checked against what
helm/gpuhealth renders.

Renders (once per module, through the same helm-python-sdk call as tests/chart/test_helm.py, without
importing it: that module renders four value sets and imports the kubernetes client at import time):

- DEFAULT: the chart's own values, as `helm install gpuhealth ./helm/gpuhealth -n gpuhealth` would.
- INSTALL: the `values-prod.yaml` block of docs/install.md, read from the page itself (it turns on
  the AlertmanagerConfig and names an existing token Secret).

What is extracted, and from where (the regexes below are the whole contract; a doc sentence that
names one of these things in another shape is not checked, so keep to these shapes):

- URL_TO_SERVICE: `http://<service>[.<namespace>[.svc]][:<port>]/...` whose host is a Service the chart
  renders: the port must be that Service's port, the namespace the release's.
- PORT_WORD / LISTEN: `port 9842`, `on :9842`, `Service :8080`, `Service's 8080`, `--listen ...:9095`.
  The program is the last of exporter / node agent / remediator / Service named before it on the line
  (`Service` in the match itself wins): the port must be that program's rendered container port (the
  Service's port for `Service`). A port whose last-named program is another one (dcgm-exporter,
  Alertmanager, Prometheus) is not the chart's and is skipped; a port with no program named fails.
- CREDENTIALS_FILE: every `credentials_file:` path is one and the same, and it is where the documented
  kube-prometheus-stack mount (`alertmanagerSpec.secrets: [<secret>]` MOUNT) puts key `token` of the
  token Secret the INSTALL render reads.
- SECRET_PATTERNS: every Secret name mentioned is rendered by DEFAULT, or is the existing Secret the
  INSTALL render mounts into the remediator and names in its AlertmanagerConfig.
- TIMING (`group_wait: 10s`, `groupInterval: 30s`, ... in README/docs prose, outside ```yaml blocks): equal
  to the rendered AlertmanagerConfig's route for the alerts that ask for an action. Alertmanager configurations
  (examples/*.yml, and ```yaml blocks of README/docs with a `route`) are parsed: each route to the remediator
  whose matchers are those of one of the chart's two routes (its child route's, with the parent's on other
  labels) must have that route's group_by and timings, and each of the chart's routes must be in
  examples/alertmanager.yml. The "The chart renders:" block of docs/install.md must be a subset of the
  rendered AlertmanagerConfig.
- VALUE_NAME (`monitoring.prometheusRule.namespaceLabel`, `dashboards.namespace`, ... in backticks, in README,
  helm/README.md and docs): a value of the chart (values.schema.json, which is strict, remediator.policy included;
  below a free-form object such as exporter.config anything goes; `*` and `<...>` stand for any key).
- GRANT_ROW: the `gpuhealth-remediator` rows of docs/install.md's "What the chart grants, and why" whose scope is
  `cluster`: the ClusterRole rendered with every policy setting on grants exactly them, and a row that says
  `only with `<policy key>[: <value>]`` is not granted without that setting.
- Dashboards: every dashboards/json/*.json is named in README or docs, as `*<title>*` (with or without
  the `gpuhealth / ` prefix) or its file name in backticks; every `*gpuhealth / ...*` named is shipped;
  the chart renders one ConfigMap per file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.support import paths
from tests.support.chart_render import granted, render_fresh

ROOT = paths.REPO
CHART = ROOT / "helm" / "gpuhealth"
RELEASE, NAMESPACE = "gpuhealth", "gpuhealth"
INSTALL_MD = ROOT / "docs" / "install.md"
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*") if p.suffix in {".yml", ".yaml"})

# --- the regexes ---

URL_TO_SERVICE = re.compile(
    r"https?://(?P<service>[a-z0-9-]+)(?:\.(?P<namespace>[a-z0-9-]+)(?:\.svc(?:\.cluster\.local)?)?)?"
    r"(?::(?P<port>\d+))?(?P<path>/[\w./-]*)?"
)
PORT_WORD = re.compile(r"(?:\bport\s+|\bon\s+:|\b(?P<service>Service)(?:'s)?\s+:?)(?P<port>\d{4,5})\b")
LISTEN = re.compile(r"--listen[= ][\w.]*:(?P<port>\d{2,5})\b")
OWNER = re.compile(r"(?<![\w-])(?P<who>exporter|node agent|remediator|Service|dcgm-exporter|dcgm_exporter"
                   r"|Alertmanager|alertmanager|Prometheus|prometheus)\b")
THIRD_PARTY = {"dcgm-exporter", "dcgm_exporter", "Alertmanager", "alertmanager", "Prometheus", "prometheus"}
CREDENTIALS_FILE = re.compile(r"\bcredentials_file:\s*(?P<path>[^\s,}]+)")
MOUNT = re.compile(r"alertmanagerSpec\.secrets:\s*\[(?P<secret>[a-z0-9.-]+)\]`?\s+mounts it at\s+`(?P<path>[^`]+)`")
SECRET_PATTERNS = [
    re.compile(r"\bSecret `(?P<name>[a-z0-9][a-z0-9.-]*)`"),
    re.compile(r"\b(?:create|get) secret (?:generic )?(?P<name>[a-z0-9][a-z0-9.-]*)"),
    re.compile(r"\bexistingSecret:\s*(?P<name>[a-z0-9][a-z0-9.-]*)"),
    re.compile(r"\bsecretName:\s*(?P<name>[a-z0-9][a-z0-9.-]*)"),
    re.compile(r"alertmanagerSpec\.secrets:\s*\[(?P<name>[a-z0-9][a-z0-9.-]*)\]"),
    re.compile(r"/etc/alertmanager/secrets/(?P<name>[a-z0-9][a-z0-9.-]*)/"),
    re.compile(r"\bcredentials:\s*\{name:\s*(?P<name>[a-z0-9][a-z0-9.-]*)"),
]
TIMING = re.compile(
    r"\b(?P<key>group_wait|group_interval|repeat_interval|groupWait|groupInterval|repeatInterval):\s*"
    r"(?P<value>\d+[smhd])\b"
)
SNAKE_TO_CAMEL = {"group_wait": "groupWait", "group_interval": "groupInterval", "repeat_interval": "repeatInterval"}
VALUE_NAME = re.compile(r"`(?P<path>(?:nameOverride|fullnameOverride|image|imagePullSecrets|exporter|remediator"
                        r"|monitoring|networkPolicy|dashboards|cleanup)\.[A-Za-z0-9_.*<>-]*[A-Za-z0-9_*>])(?:[:`\s])")
FILE_SUFFIXES = (".yaml", ".yml", ".json", ".md", ".py", ".txt")
EMPHASIS = re.compile(r"(?<![\w*`])\*(?P<name>[^*\s](?:[^*\n]*[^*\s])?)\*(?![\w*])")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.S | re.M)


# --- rendering ---

def _render(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    return render_fresh(values)


def _install_values() -> dict[str, Any]:
    for m in FENCE.finditer(INSTALL_MD.read_text()):
        if m.group("body").startswith("# values-prod.yaml"):
            values: dict[str, Any] = yaml.safe_load(m.group("body"))
            return values
    raise AssertionError("docs/install.md: no ```yaml block starting with `# values-prod.yaml`")


class Chart:
    def __init__(self) -> None:
        helm.disable_logging()  # the loader logs each symlink it follows (files/rules, files/dashboards)
        self.default = _render(None)
        self.install = _render(_install_values())

    @staticmethod
    def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
        assert len(found) == 1, f"expected one rendered {kind} {name or ''}, found {len(found)}"
        return found[0]

    def container_ports(self, kind: str, name: str) -> set[int]:
        pod = self.one(self.default, kind, name)["spec"]["template"]["spec"]
        return {p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}

    @property
    def services(self) -> dict[str, set[int]]:
        return {d["metadata"]["name"]: {p["port"] for p in d["spec"]["ports"]}
                for d in self.default if d["kind"] == "Service"}

    @property
    def ports(self) -> dict[str, set[int]]:
        return {
            "exporter": self.container_ports("DaemonSet", f"{RELEASE}-exporter"),
            "remediator": self.container_ports("Deployment", f"{RELEASE}-remediator"),
            "Service": self.services[f"{RELEASE}-remediator"],
        }

    @property
    def alertmanager_config(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one(self.install, "AlertmanagerConfig")["spec"]
        return spec

    @property
    def remediator_routes(self) -> dict[str, dict[str, Any]]:
        """The chart's two routes to the remediator: "actionable" and "informational" (remediation none)."""
        children = self.alertmanager_config["route"]["routes"]
        out = {("informational" if self._matchers(c) == {'remediation="none"'} else "actionable"): c for c in children}
        assert len(out) == len(children) == 2, f"expected an actionable and an informational route: {children}"
        return out

    @staticmethod
    def _matchers(route: dict[str, Any]) -> set[str]:
        return {f'{m["name"]}{m["matchType"]}"{m["value"]}"' for m in route.get("matchers", [])}

    def matchers_of(self, name: str) -> frozenset[str]:
        """A child route's matchers, with the parent's on the labels the child does not match itself (the
        parent's remediation=~".+" gives way to the child's remediation matcher)."""
        child = self.remediator_routes[name]
        own = {m["name"] for m in child["matchers"]}
        parent = {f'{m["name"]}{m["matchType"]}"{m["value"]}"' for m in self.alertmanager_config["route"]["matchers"]
                  if m["name"] not in own}
        return frozenset(parent | self._matchers(child))

    @property
    def install_token_secret(self) -> str:
        """The token Secret the INSTALL render reads: the remediator mounts it, the AlertmanagerConfig names it."""
        pod = self.one(self.install, "Deployment", f"{RELEASE}-remediator")["spec"]["template"]["spec"]
        mounted = {v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "token"}
        hook = self.alertmanager_config["receivers"][0]["webhookConfigs"][0]
        named = hook["httpConfig"]["authorization"]["credentials"]["name"]
        assert mounted == {named}, f"the remediator mounts {mounted}, the AlertmanagerConfig names {named}"
        return str(named)


@pytest.fixture(scope="module")
def chart() -> Chart:
    return Chart()


# --- the documents, line by line ---

def _lines() -> Iterator[tuple[str, int, str]]:
    """(file relative to the repository, line number, line) of README.md, docs/**/*.md, examples/**/*.y*ml."""
    for path in [*DOCS, *EXAMPLES]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            yield str(path.relative_to(ROOT)), number, line


def _where(path: Path, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{path.read_text().count(chr(10), 0, offset) + 1}"


# --- ports and URLs ---

def test_urls_to_the_charts_services_name_the_service_port(chart: Chart) -> None:
    services = chart.services
    wrong, seen = [], 0
    for where, number, line in _lines():
        for m in URL_TO_SERVICE.finditer(line):
            if m.group("service") not in services:
                continue  # Alertmanager, Prometheus, a local dcgm-exporter: not the chart's
            seen += 1
            url, ports = m.group(0), services[m.group("service")]
            if m.group("port") is None or int(m.group("port")) not in ports:
                wrong.append(f"{where}:{number}: {url}: the Service {m.group('service')} listens on {sorted(ports)}"
                             f" (values.yaml remediator.service.port), not {m.group('port') or 'the default 80'}")
            if m.group("namespace") not in (None, NAMESPACE):
                wrong.append(f"{where}:{number}: {url}: the release's namespace is {NAMESPACE}")
    assert seen, "no URL to the remediator's Service found in README/docs/examples: the regex is stale"
    assert not wrong, "\n" + "\n".join(wrong)


def test_every_port_named_for_a_program_is_its_rendered_port(chart: Chart) -> None:
    expected = chart.ports
    wrong, seen = [], set()
    for where, number, line in _lines():
        for regex in (PORT_WORD, LISTEN):
            for m in regex.finditer(line):
                if m.groupdict().get("service"):
                    who = "Service"
                else:
                    owners = [o.group("who") for o in OWNER.finditer(line, 0, m.start() if regex is PORT_WORD
                                                                              else len(line))]
                    if not owners:
                        wrong.append(f"{where}:{number}: {m.group(0)!r}: name the program "
                                     "(exporter, remediator, Service) on the line")
                        continue
                    if owners[-1] in THIRD_PARTY:
                        continue  # another program's port (dcgm-exporter 9400, Alertmanager 9093, ...)
                    who = "exporter" if owners[-1] == "node agent" else owners[-1]
                seen.add(who)
                if int(m.group("port")) not in expected[who]:
                    wrong.append(f"{where}:{number}: {m.group(0)!r}: the rendered {who} port is "
                                 f"{sorted(expected[who])}, not {m.group('port')}")
    assert seen == {"exporter", "remediator", "Service"}, f"ports found only for {seen}: the regexes are stale"
    assert not wrong, "\n" + "\n".join(wrong)


def test_the_service_targets_the_remediators_container_port(chart: Chart) -> None:
    service = chart.one(chart.default, "Service", f"{RELEASE}-remediator")
    pod = chart.one(chart.default, "Deployment", f"{RELEASE}-remediator")["spec"]["template"]["spec"]
    named = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}
    for port in service["spec"]["ports"]:
        assert named.get(port["targetPort"], port["targetPort"]) in chart.ports["remediator"]


# --- the token ---

def test_one_credentials_file_path_where_the_documented_mount_puts_the_token(chart: Chart) -> None:
    secret = chart.install_token_secret
    expected = f"/etc/alertmanager/secrets/{secret}/token"
    install = INSTALL_MD.read_text()
    mounts = list(MOUNT.finditer(install))
    assert mounts, "docs/install.md no longer says where alertmanagerSpec.secrets mounts the token: MOUNT is stale"
    wrong = [f"{_where(INSTALL_MD, m.start())}: mounts {m.group('secret')} at {m.group('path')}; the chart's "
             f"token Secret (existingSecret) is {secret} and kube-prometheus-stack mounts key token at {expected}"
             for m in mounts if (m.group("secret"), m.group("path")) != (secret, expected)]
    found = [(where, number, m.group("path")) for where, number, line in _lines()
             for m in CREDENTIALS_FILE.finditer(line)]
    assert found, "no credentials_file in README/docs/examples: the regex is stale"
    wrong += [f"{where}:{number}: credentials_file {path}, expected {expected} (docs/install.md, 5b)"
              for where, number, path in found if path != expected]
    assert not wrong, "\n" + "\n".join(wrong)


def test_every_secret_named_is_rendered_or_is_the_existing_secret_the_chart_reads(chart: Chart) -> None:
    rendered = {d["metadata"]["name"] for d in chart.default if d["kind"] == "Secret"}
    existing = chart.install_token_secret
    wrong, seen = [], set()
    for where, number, line in _lines():
        for regex in SECRET_PATTERNS:
            for m in regex.finditer(line):
                name = m.group("name")
                seen.add(name)
                if name not in rendered | {existing}:
                    wrong.append(f"{where}:{number}: Secret {name!r}: the default render has {sorted(rendered)}, "
                                 f"docs/install.md's values bring {existing!r} (existingSecret)")
    assert rendered <= seen, f"the docs never name the rendered Secret(s) {sorted(rendered - seen)}"
    assert not wrong, "\n" + "\n".join(wrong)


# --- Alertmanager timings ---

def _fenced_yaml(path: Path) -> Iterator[tuple[int, int, str]]:
    """(start, end, body) of each ```yaml block of a Markdown file."""
    for m in FENCE.finditer(path.read_text()):
        if m.group("lang") == "yaml":
            yield m.start(), m.end(), m.group("body")


def test_timings_in_the_docs_are_the_charts(chart: Chart) -> None:
    """Timings named in prose (there may be none: the configurations are checked whole below)."""
    route = chart.remediator_routes["actionable"]
    wrong = []
    for path in DOCS:
        text = path.read_text()
        blocks = [(start, end) for start, end, _ in _fenced_yaml(path)]
        for m in TIMING.finditer(text):
            if any(start <= m.start() < end for start, end in blocks):
                continue  # configurations: test_alertmanager_routes_in_the_docs_and_examples_are_the_charts
            key = SNAKE_TO_CAMEL.get(m.group("key"), m.group("key"))
            if m.group("value") != route[key]:
                wrong.append(f"{_where(path, m.start())}: {m.group(0)!r}: the chart's "
                             f"monitoring.alertmanagerConfig.{key} is {route[key]}")
    assert not wrong, "\n" + "\n".join(wrong)


def _routes(route: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield route
    for child in route.get("routes", []):
        yield from _routes(child)


def _configurations() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, configuration) of every Alertmanager configuration in examples/ and in README/docs ```yaml blocks."""
    for path in EXAMPLES:
        config = yaml.safe_load(path.read_text())
        if isinstance(config, dict) and "route" in config:
            yield str(path.relative_to(ROOT)), config
    for path in DOCS:
        for start, _, body in _fenced_yaml(path):
            config = yaml.safe_load(body)
            if isinstance(config, dict) and isinstance(config.get("route"), dict):
                yield _where(path, start), config


def test_alertmanager_routes_in_the_docs_and_examples_are_the_charts(chart: Chart) -> None:
    routes, hook = chart.remediator_routes, chart.alertmanager_config["receivers"][0]["webhookConfigs"][0]
    receiver = chart.alertmanager_config["route"]["receiver"]
    by_matchers = {chart.matchers_of(name): name for name in routes}
    wrong, seen = [], set()
    for where, config in _configurations():
        for r in _routes(config["route"]):
            name = by_matchers.get(frozenset(r.get("matchers", [])))
            if r.get("receiver") != receiver or name is None:
                continue
            seen.add((where, name))
            for snake, camel in SNAKE_TO_CAMEL.items():
                if r.get(snake) != routes[name][camel]:
                    wrong.append(f"{where}: the {name} route {r['matchers']}: {snake} {r.get(snake)}, the chart's "
                                 f"{camel} is {routes[name][camel]}")
            if r.get("group_by") != chart.alertmanager_config["route"]["groupBy"]:
                wrong.append(f"{where}: group_by {r.get('group_by')}, the chart's "
                             f"{chart.alertmanager_config['route']['groupBy']}")
            if r.get("continue") is not True:
                wrong.append(f"{where}: the {name} route has no continue: true (the operator forces it on the "
                             "chart's route: the routes after it still see the alerts)")
        for rec in config.get("receivers", []):
            for h in rec.get("webhook_configs", []) if rec["name"] == receiver else []:
                if h["url"] != hook["url"] or h.get("send_resolved") is not True:
                    wrong.append(f"{where}: webhook {h['url']} (send_resolved {h.get('send_resolved')}), the chart's "
                                 f"{hook['url']} (sendResolved true)")
    example = str((ROOT / "examples" / "alertmanager.yml").relative_to(ROOT))
    wrong += [f"{example}: no route to the remediator with the matchers of the chart's {name} route "
              f"{sorted(chart.matchers_of(name))}" for name in routes if (example, name) not in seen]
    assert not wrong, "\n" + "\n".join(wrong)


def _not_in(doc: Any, rendered: Any, at: str) -> list[str]:
    """What of the documented YAML is not in the rendered one (mappings: a subset; lists: item by item)."""
    if isinstance(doc, dict):
        if not isinstance(rendered, dict):
            return [f"{at}: rendered {rendered!r}"]
        return [w for k, v in doc.items() for w in
                (_not_in(v, rendered[k], f"{at}.{k}") if k in rendered else [f"{at}.{k}: not rendered"])]
    if isinstance(doc, list):
        if not isinstance(rendered, list) or len(rendered) != len(doc):
            return [f"{at}: rendered {rendered!r}"]
        return [w for i, (d, r) in enumerate(zip(doc, rendered, strict=True)) for w in _not_in(d, r, f"{at}[{i}]")]
    return [] if doc == rendered else [f"{at}: documented {doc!r}, rendered {rendered!r}"]


def test_the_alertmanagerconfig_install_md_shows_is_what_the_chart_renders(chart: Chart) -> None:
    text = INSTALL_MD.read_text()
    start = text.index("The chart renders:")
    block = FENCE.search(text, start)
    assert block, "docs/install.md: no YAML block after 'The chart renders:'"
    documented = yaml.safe_load(block.group("body"))
    rendered = chart.one(chart.install, "AlertmanagerConfig")
    wrong = _not_in(documented, rendered, "AlertmanagerConfig")
    assert not wrong, f"{_where(INSTALL_MD, block.start())}: the block differs from the render:\n" + "\n".join(wrong)


# --- values ---

SCHEMA = CHART / "values.schema.json"


def _is_value(schema: dict[str, Any], path: list[str]) -> bool:
    """Whether values.schema.json admits this key path (`*`, `<...>`: any key); below an object with no
    `properties` (exporter.config, remediator.policy, affinity, ...) every key is the program's, not the chart's."""
    if not path:
        return True
    props = schema.get("properties")
    if schema.get("type") == "object" and props is None:
        return True
    if props is None:
        return False
    head, rest = path[0], path[1:]
    if head == "*" or head.startswith("<"):
        return any(_is_value(sub, rest) for sub in props.values())
    return head in props and _is_value(props[head], rest)


def test_every_value_the_docs_name_is_a_value_of_the_chart() -> None:
    schema = json.loads(SCHEMA.read_text())
    wrong, seen = [], set()
    for path in [*DOCS, ROOT / "helm" / "README.md"]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for m in VALUE_NAME.finditer(line + " "):
                name = m.group("path")
                if name.endswith(FILE_SUFFIXES):
                    continue  # exporter.yaml: a file
                seen.add(name)
                if not _is_value(schema, name.split(".")):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: `{name}` is not a value of the chart")
    assert {"monitoring.release", "monitoring.prometheusRule.namespaceLabel",
            "monitoring.alertmanagerConfig.informational.*"} <= seen, f"found only {sorted(seen)}: VALUE_NAME is stale"
    assert not wrong, "\n" + "\n".join(wrong)


# --- dashboards ---

def _dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in DASHBOARDS}


def test_every_shipped_dashboard_is_named_in_the_docs() -> None:
    text = "\n".join(p.read_text() for p in DOCS)
    emphasized = {m.group("name") for m in EMPHASIS.finditer(text)}
    missing = []
    for name, board in _dashboards().items():
        title = board["title"]
        short = title.split(" / ", 1)[-1]
        if not ({title, short} & emphasized or f"`{name}`" in text or f"`dashboards/json/{name}`" in text):
            missing.append(f"{name} ({title!r}, uid {board['uid']}): not named as *{short}* or `{name}`")
    assert not missing, "README.md / docs/ do not name:\n" + "\n".join(missing)


def test_every_dashboard_title_named_in_the_docs_is_shipped() -> None:
    titles = {b["title"] for b in _dashboards().values()}
    wrong = [f"{where}:{number}: *{m.group('name')}* is not a shipped dashboard ({sorted(titles)})"
             for where, number, line in _lines() for m in EMPHASIS.finditer(line)
             if m.group("name").startswith("gpuhealth / ") and m.group("name") not in titles]
    assert not wrong, "\n" + "\n".join(wrong)


def test_the_chart_ships_one_configmap_per_dashboard(chart: Chart) -> None:
    uids = {}
    for d in chart.default:
        if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
            for key, value in d["data"].items():
                uids[key] = json.loads(value)["uid"]
    assert uids == {name: board["uid"] for name, board in _dashboards().items()}


# --- what the chart grants ---

GRANT_ROW = re.compile(r"^\| `gpuhealth-remediator` \| (?P<verbs>[^|]+) \| (?P<resources>[^|]+) \| "
                       r"(?P<where>cluster[^|]*) \|", re.M)
ONLY_WITH = re.compile(r"only with `(?P<key>[a-z_]+\.[a-z_]+)(?:: (?P<value>[a-z_]+))?`")
EVERY_SETTING_ON = {"replace": {"method": "condition"}, "drain": {"on_timeout": "force"}, "dra": {"enabled": True}}


def _cluster_grants(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) of the remediator's ClusterRole."""
    role = Chart.one(docs, "ClusterRole", "gpuhealth-remediator")
    return {(v, g, r) for rule in role["rules"] for v in rule["verbs"] for g in rule["apiGroups"]
            for r in rule["resources"]}


def _documented_grants() -> Iterator[tuple[set[tuple[str, str, str]], dict[str, Any] | None]]:
    """Each cluster-scope row: its grants, and the policy that turns them off (None: always granted)."""
    for m in GRANT_ROW.finditer(INSTALL_MD.read_text()):
        grants = set()
        for name in re.findall(r"`([a-z0-9/.]+)`", m.group("resources")):
            resource, _, group = name.partition(".")
            grants |= {(verb, group, resource) for verb in re.findall(r"[a-z]+", m.group("verbs"))}
        only = ONLY_WITH.search(m.group("where"))
        off = None
        if only:
            section, key = only.group("key").split(".")
            off = {section: {key: False}} if only.group("value") is None else {}
        yield grants, off


def test_the_documented_cluster_grants_are_the_rendered_ones_and_only_with_their_setting() -> None:
    rows = list(_documented_grants())
    assert len(rows) >= 8, "GRANT_ROW is stale"
    on = _cluster_grants(_render({"remediator": {"policy": EVERY_SETTING_ON}}))
    documented = set().union(*(grants for grants, _ in rows))
    assert on == documented, f"rendered, not documented: {sorted(on - documented)}; " \
                             f"documented, not rendered: {sorted(documented - on)}"
    for grants, off in rows:
        if off is not None:
            left = grants & _cluster_grants(_render({"remediator": {"policy": off}}))
            assert not left, f"{sorted(left)}: granted without the setting docs/install.md says it needs"


CLEANUP_ROW = re.compile(r"^\| `gpuhealth-cleanup` \| (?P<verbs>[^|]+) \| (?P<resources>[^|]+) \| (?P<where>[^|]+) \|",
                         re.M)


def test_the_documented_grants_of_the_cleanup_hook_are_the_rendered_ones() -> None:
    """The `gpuhealth-cleanup` rows (helm uninstall's pre-delete hook) against every Role and ClusterRole bound to its
    ServiceAccount, cluster-wide and in their namespaces."""
    documented = set()
    for m in CLEANUP_ROW.finditer(INSTALL_MD.read_text()):
        for name in re.findall(r"`([a-z0-9/.]+)`", m.group("resources")):
            resource, _, group = name.partition(".")
            verbs = re.sub(r"\([^)]*\)", "", m.group("verbs"))  # "get, update (the Lease only)"
            documented |= {(verb, group, resource) for verb in re.findall(r"[a-z]+", verbs)}
    assert len(documented) >= 8, "CLEANUP_ROW is stale"
    docs = _render(None)
    rendered = {(v, g, r) for (_, g, r), verbs in granted(docs, "gpuhealth-cleanup").items() for v in verbs}
    assert rendered == documented, f"rendered, not documented: {sorted(rendered - documented)}; " \
                                   f"documented, not rendered: {sorted(documented - rendered)}"
