"""The chart's remediator ports (tests/support/chart_render.py renders it): the kubelet's probes and Prometheus's
scrape go to the port `serve --metrics-listen` listens on, Alertmanager's webhook to the one `--listen` does, and the
NetworkPolicy (on by default) admits each only its own client. The real program on these flags:
tests/remediator/http/test_remediator_probe_port.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart_render import render

Obj = dict[str, Any]


def _one(docs: list[Obj], kind: str, name: str = "gpuhealth-remediator") -> Obj:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _container(docs: list[Obj]) -> Obj:
    container: Obj = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container


def _listens(container: Obj) -> dict[str, int]:
    """flag -> port of each `--flag=0.0.0.0:PORT` of serve."""
    out = {}
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        if value.startswith("0.0.0.0:"):
            out[flag] = int(value.rpartition(":")[2])
    return out


@pytest.mark.parametrize("values", [{}, {"remediator": {"port": 8000, "metricsPort": 8001}}])
def test_the_probes_and_the_scrape_use_the_metrics_listener_and_alertmanager_the_webhooks(values: Obj) -> None:
    docs = render(values)
    container = _container(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert _listens(container) == {"--listen": ports["http"], "--metrics-listen": ports["metrics"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "metrics"
    service = {p["name"]: p["targetPort"] for p in _one(docs, "Service")["spec"]["ports"]}
    assert service == {"http": "http", "metrics": "metrics"}
    monitor = render({**values, "monitoring": {"serviceMonitor": {"enabled": True}}})
    assert [e["port"] for e in _one(monitor, "ServiceMonitor")["spec"]["endpoints"]] == ["metrics"]


def test_by_default_only_alertmanager_reaches_the_webhook_and_only_prometheus_the_metrics() -> None:
    docs = render()
    *rules, helm_test = _one(docs, "NetworkPolicy")["spec"]["ingress"]
    # and `helm test`'s pod (tests/chart/test_chart_helm_test.py), by its own labels
    assert helm_test["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "helm-test"
    admitted = {p["port"]: [f["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for f in rule["from"]]
                for rule in rules for p in rule["ports"]}
    assert admitted == {"http": ["alertmanager"], "metrics": ["prometheus"]}
    exporter = _one(docs, "NetworkPolicy", "gpuhealth-exporter")["spec"]["ingress"]
    assert [(p["port"], [f["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for f in r["from"]])
            for r in exporter for p in r["ports"]] == [("metrics", ["prometheus"])]
