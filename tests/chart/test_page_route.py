"""The second route, to a person (issue 34, item 4): monitoring.alertmanagerConfig.page.receiver sends the alerts
that page a person (severity critical, remediation none: gpuhealth itself failing on a pool, an exporter refusing
its settings, a correlated fault, a node-action Job that never started, the remediator's control plane, the SLO's
fast burn) to a receiver of the user's, and they still reach the remediator. Under kube-prometheus-stack's defaults
they reached only the remediator, which takes no action for them.

Routed as the tests of tests/chart/test_kube_prometheus_stack.py route (the Prometheus Operator's translation,
`amtool config routes test`), and delivered by a real Alertmanager to a receiver that records what it is sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.test_kube_prometheus_stack import (
    INFORMATIONAL,
    NAMESPACE,
    OTHERS,
    RELEASE,
    REMEDIATOR,
    alerts_as_sent,
    one,
    push_label_sets,
    routed_before_and_after,
    routes,
    secrets_of,
    settled,
    team_base,
)
from tests.support import kube_prometheus_stack as kps
from tests.support import paths
from tests.support.chart_render import render
from tests.support.operator_alertmanager import generate
from tests.support.polling import wait_for
from tests.support.real_alertmanager import RealAlertmanager, free_port

PAGE = f"{NAMESPACE}/{RELEASE}-remediator/page"  # the operator's name for the chart's page receiver
# The alerts that page a person: those issue 34 names, the control plane's, the SLO's fast burn, and a diag test that
# failed for the node's configuration (issue 37). A rule that stops carrying severity critical and remediation none
# drops out of the route: this list says it must not.
PAGES = {"GpuhealthMonitoringFault", "GpuhealthExporterMisconfigured", "GpuhealthCorrelatedFault",
         "GpuhealthNodeActionJobNotStarted", "GpuhealthRemediatorNoLeader", "GpuhealthRemediatorBreakerOpen",
         "GpuhealthAlertmanagerSyncFailing", "GPUFleetAvailabilityBudgetBurnFast", "GPUDiagFailedConfig"}
# The alerts that page a person beside their node action (page="true", issue 37): the Xids NVIDIA asks a person
# about, those its catalog does not know, and 48 alone (field diagnostics).
PAGES_WITH_ACTION = {"GPUXidContactSupport", "GPUXidUnknown", "GPUXidDoubleBitError"}


def _values(url: str = "http://pager.example/hook", group_wait: str = "30s") -> dict[str, Any]:
    return {"monitoring": {"prometheusRule": {"enabled": True}, "alertmanagerConfig": {
        "enabled": True, "page": {"receiver": {"webhookConfigs": [{"url": url}]}, "groupWait": group_wait}}}}


@pytest.mark.parametrize("base", ["kube-prometheus-stack", "team"])
def test_the_alerts_that_page_a_person_reach_the_page_receiver_and_still_the_remediator(
        base: str, tmp_path: Path) -> None:
    rendered = render(_values())
    base_config = kps.base_config() if base == "kube-prometheus-stack" else team_base()
    gpuhealth, before, after = routed_before_and_after(base_config, rendered, tmp_path)
    wrong = []
    for name, labels in gpuhealth.items():
        mine = INFORMATIONAL if labels["remediation"] == "none" else REMEDIATOR
        theirs = [r for r in before[name] if before[name] != [base_config["route"]["receiver"]]]
        expected = [PAGE, mine, *theirs] if name in PAGES | PAGES_WITH_ACTION else [mine, *theirs]
        if after[name] != expected:
            wrong.append(f"{name} {labels}: routed to {after[name]}, expected {expected}")
    wrong += [f"{name}: routed to {after[name]}, before to {before[name]}" for name in OTHERS
              if after[name] != before[name]]
    assert not wrong, "\n" + "\n".join(wrong)
    if base == "kube-prometheus-stack":  # what the route adds: before it, these reached only the remediator
        assert all(before[name] == [kps.ALERTMANAGER_CONFIG["route"]["receiver"]] for name in PAGES)


def test_without_a_page_receiver_the_chart_renders_no_page_route() -> None:
    amc = one(render({"monitoring": {"alertmanagerConfig": {"enabled": True}}}), "AlertmanagerConfig")["spec"]
    assert [r["name"] for r in amc["receivers"]] == ["gpuhealth-remediator"]
    assert all(r["receiver"] == "gpuhealth-remediator" for r in amc["route"]["routes"])


@pytest.mark.parametrize("receiver", [{"name": "mine", "webhookConfigs": [{"url": "http://x"}]},
                                      {"webhookConfig": [{"url": "http://x"}]},
                                      {"slackConfigs": []}])
def test_a_page_receiver_the_operator_would_not_take_is_refused_by_the_schema(receiver: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"/monitoring/alertmanagerConfig/page/receiver"):
        render({"monitoring": {"alertmanagerConfig": {"enabled": True, "page": {"receiver": receiver}}}})


class _Recorder(BaseHTTPRequestHandler):
    posts: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.posts.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def pager() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A receiver that records every notification it is sent (a person's pager, as a webhook)."""
    posts: list[dict[str, Any]] = []
    handler = type("Recorder", (_Recorder,), {"posts": posts})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page", posts
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _rendered(url: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]]]:
    """The chart rendered with the page receiver at `url` (group_wait 1 s), and its alerts' label sets as sent."""
    rendered = render(_values(url, group_wait="1s"))
    return rendered, alerts_as_sent(one(rendered, "PrometheusRule"))


def _alertmanager_of(rendered: list[dict[str, Any]]) -> RealAlertmanager:
    """A real Alertmanager configured as the Prometheus Operator configures it from the rendered AlertmanagerConfig."""
    return RealAlertmanager(config=generate(kps.base_config(), [one(rendered, "AlertmanagerConfig")],
                                            secrets_of(rendered)))


def test_a_real_alertmanager_pages_a_person_for_a_monitoring_fault_and_not_for_a_node_fault(
        pager: tuple[str, list[dict[str, Any]]]) -> None:
    url, posts = pager
    rendered, sent = _rendered(url)
    pushed = {n: sent[n] for n in ("GpuhealthMonitoringFault", "GpuhealthRemediatorNoLeader", "GPUXidFatal",
                                   "GPUXidApplication")}
    with _alertmanager_of(rendered) as am:
        push_label_sets(am, pushed)

        def paged() -> set[str]:
            return {a["labels"]["alertname"] for p in posts for a in p["alerts"]}

        # group_wait 1 s: 30 s is room for a loaded machine, not a speed claim
        assert wait_for(lambda: paged() >= {"GpuhealthMonitoringFault", "GpuhealthRemediatorNoLeader"}, 30), posts
    assert paged() == {"GpuhealthMonitoringFault", "GpuhealthRemediatorNoLeader"}
    assert all(p["receiver"] == PAGE and p["status"] == "firing" for p in posts)


def test_a_real_alertmanager_pages_a_person_once_for_an_xid_that_asks_for_one_beside_its_cordon(
        pager: tuple[str, list[dict[str, Any]]]) -> None:
    url, posts = pager
    rendered, sent = _rendered(url)
    pushed = {n: sent[n] for n in ("GPUXidContactSupport", "GPUXidUnknown", "GPUXidFatal",
                                   "GPUXidDoubleBitErrorRemapped")}
    # a label set both page routes would take if they were not disjoint: paged once all the same
    pushed["BothRoutes"] = {**sent["GpuhealthMonitoringFault"], "alertname": "BothRoutes", "page": "true"}
    with _alertmanager_of(rendered) as am:
        push_label_sets(am, pushed)

        def paged() -> list[str]:
            return [a["labels"]["alertname"] for p in posts for a in p["alerts"]]

        # group_wait 1 s: 30 s is room for a loaded machine, not a speed claim
        assert wait_for(lambda: set(paged()) >= {"GPUXidContactSupport", "GPUXidUnknown", "BothRoutes"}, 30), posts
        # a second notification of one alert would come with the first flush: wait 3 group_waits for one
        got = settled(paged, lambda names: len(names) > 3, timeout=3.0)
    assert sorted(got) == ["BothRoutes", "GPUXidContactSupport", "GPUXidUnknown"]


def test_the_schema_takes_a_receiver_of_any_kind_the_operator_knows_without_its_name() -> None:
    schema = json.loads((paths.REPO / "helm" / "gpuhealth" / "values.schema.json").read_text())
    receiver = schema["properties"]["monitoring"]["properties"]["alertmanagerConfig"]["properties"]["page"][
        "properties"]["receiver"]
    jsonschema.validate({"pagerdutyConfigs": [{"routingKey": {"name": "pd", "key": "key"}}]}, receiver)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "page"}, receiver)


def test_the_page_label_is_true_or_absent_and_only_beside_a_node_action() -> None:
    # The page route matches page="true" exactly, and the other page route takes remediation none: a rule with
    # page on an alert that asks for no action would be the one way to page twice if the routes were not disjoint.
    rules = alerts_as_sent(one(render(_values()), "PrometheusRule"))
    carrying = {name: labels for name, labels in rules.items() if "page" in labels}
    assert set(carrying) == PAGES_WITH_ACTION
    assert all(labels["page"] == "true" and labels["remediation"] != "none" for labels in carrying.values())


def test_the_route_install_md_gives_without_the_alertmanagerconfig_pages_the_same_alerts_each_once(
        tmp_path: Path) -> None:
    # docs/install.md 5c's block for alertmanager.config (5b), under a root that sends everything else nowhere: its
    # receiver is swapped for a webhook (amtool check-config reads a routing_key_file), its routes kept as written.
    text = (paths.REPO / "docs" / "install.md").read_text()
    start = text.index("Without the AlertmanagerConfig (5b), add the same route")
    body = text.index("```yaml\n", start) + len("```yaml\n")
    block = yaml.safe_load(text[body:text.index("```", body)])
    config = {"route": {"receiver": "null", "routes": block["route"]["routes"]},
              "receivers": [{"name": "null"}, {"name": "gpuhealth-page", "webhook_configs": [{"url": "http://x/"}]}]}
    sent = alerts_as_sent(one(render(_values()), "PrometheusRule"))
    routed = routes(config, sent, tmp_path)
    wrong = {name: got for name, got in routed.items()
             if got != (["gpuhealth-page"] if name in PAGES | PAGES_WITH_ACTION else ["null"])}
    assert not wrong
