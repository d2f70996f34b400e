"""An HA Alertmanager is a list of members, each asked on its own. One URL that stands for several Alertmanagers (the
headless Service alertmanager-operated, the chart's default URL) gets each call answered by any pod, so "every member
answered" and each member's uptime would be checked against different pods: the remediator says so (a warning, a
gauge), and the chart lists the StatefulSet's pods by name when told its name and replicas."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.fakes.apiserver import FakeCluster
from tests.support.chart_render import render_fresh
from tests.support.real_alertmanager import RealAlertmanager
from tests.support.remediator_harness import Harness

HEADLESS = "alertmanager-operated.monitoring.svc"  # a cluster's DNS name: resolved here by a stand-in resolver


@pytest.fixture(scope="module")
def am() -> Iterator[RealAlertmanager]:
    with RealAlertmanager() as alertmanager:
        yield alertmanager


@pytest.fixture
def headless_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster DNS of a headless Service with two ready pods: its name resolves to both pods' addresses (here
    127.0.0.1, where the real Alertmanager listens, and 127.0.0.2); every other name as the system resolves it."""
    system = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kw: Any) -> Any:
        if host == HEADLESS:
            return [entry for pod in ("127.0.0.1", "127.0.0.2") for entry in system(pod, port, *args, **kw)]
        return system(host, port, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def policy(url: str | list[str]) -> str:
    return yaml.safe_dump({"alertmanager": {"url": url, "min_uptime": "0s"}})


def test_a_member_url_that_stands_for_several_alertmanagers_is_warned_about_once_and_counted(
        cluster: FakeCluster, am: RealAlertmanager, headless_dns: None, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://{HEADLESS}:{am.port}"
    h = Harness(cluster, policy(url))
    with caplog.at_level(logging.WARNING, "gpuhealth.remediator"):
        h.step()
        h.advance(seconds=30)
        h.step()
    warnings = [r.getMessage() for r in caplog.records if "resolves to 2 addresses" in r.getMessage()]
    assert len(warnings) == 1 and url in warnings[0] and "statefulSet" in warnings[0], warnings
    assert h.metric("gpuhealth_remediator_alertmanager_member_addresses", member=url) == 2
    assert h.metric("gpuhealth_remediator_alertmanager_syncs_total", result="ok") == 2  # it still syncs


def test_members_listed_one_by_one_raise_no_warning(cluster: FakeCluster, am: RealAlertmanager,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    members = [am.url, f"http://localhost:{am.port}"]  # two names for one Alertmanager, each one address
    h = Harness(cluster, policy(members))
    with caplog.at_level(logging.WARNING, "gpuhealth.remediator"):
        h.step()
    assert not [r for r in caplog.records if "addresses" in r.getMessage()]
    assert [h.metric("gpuhealth_remediator_alertmanager_member_addresses", member=m) for m in members] == [1, 1]


def _policy_of(values: dict[str, Any]) -> dict[str, Any]:
    docs = render_fresh(values)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "policy.yaml" in (d.get("data") or {}))
    policy: dict[str, Any] = yaml.safe_load(config["data"]["policy.yaml"])
    return policy


def test_the_chart_lists_each_pod_of_the_alertmanager_statefulset_as_a_member() -> None:
    sts = {"name": "alertmanager-kube-prometheus-stack-alertmanager", "replicas": 3}
    listed = _policy_of({"remediator": {"alertmanager": {"statefulSet": sts}}})["alertmanager"]["url"]
    assert listed == [f"http://alertmanager-kube-prometheus-stack-alertmanager-{i}.alertmanager-operated.monitoring"
                      f".svc:9093" for i in range(3)]
    tls = _policy_of({"remediator": {"alertmanagerURL": "https://alertmanager-operated.obs.svc:9095/am/",
                                     "alertmanager": {"statefulSet": {"name": "alertmanager-main", "replicas": 2}}}})
    assert tls["alertmanager"]["url"] == ["https://alertmanager-main-0.alertmanager-operated.obs.svc:9095/am",
                                          "https://alertmanager-main-1.alertmanager-operated.obs.svc:9095/am"]
    assert _policy_of({})["alertmanager"]["url"] == "http://alertmanager-operated.monitoring.svc:9093"  # the default
    opted_out = {"remediator": {"alertmanagerURL": "none", "alertmanager": {"statefulSet": sts}}}
    assert _policy_of(opted_out)["alertmanager"]["url"] == "none"
