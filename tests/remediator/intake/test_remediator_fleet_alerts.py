"""The remediator takes no action for an alert about gpuhealth's own control plane (issue 34, item 4): the
control plane's alerts (rules/alerts/remediator.yaml) and the other fleet alerts carry node="*" and remediation
none, and the chart's AlertmanagerConfig sends them to the remediator too (its route matches node=~".+"). Posted
with the labels their rules give them, they are answered 202 and reported as ignored (`*` is no node's name), no
Node is written, and a pass starts nothing."""

from __future__ import annotations

from typing import Any

import yaml

from tests.fakes.apiserver import FakeCluster
from tests.support import paths
from tests.support.remediator_harness import Harness, webhook

RULES = paths.REPO / "rules" / "alerts"


def _fleet_alert_labels() -> dict[str, dict[str, str]]:
    """alertname -> the labels its rule gives it, for every alert that names no node (node="*")."""
    out = {}
    for path in sorted(RULES.glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                labels = rule.get("labels") or {}
                if "alert" in rule and labels.get("node") == "*":
                    out[rule["alert"]] = {"alertname": rule["alert"], **{k: str(v) for k, v in labels.items()}}
    return out


def test_the_control_planes_alerts_and_every_fleet_alert_are_ignored_and_change_no_node(cluster: FakeCluster) -> None:
    fleet = _fleet_alert_labels()
    assert {"GpuhealthRemediatorNoLeader", "GpuhealthRemediatorBreakerOpen", "GpuhealthAlertmanagerSyncFailing",
            "GpuhealthMonitoringFault", "GpuhealthNodeActionJobNotStarted"} <= set(fleet)
    h = Harness(cluster)
    before = {name: node["metadata"]["resourceVersion"] for name, node in cluster.nodes.items()}
    body = webhook("*", "none", gpu=None, alertname="GpuhealthRemediatorNoLeader")
    template: dict[str, Any] = body["alerts"][0]
    body["alerts"] = [dict(template, labels={**labels, "namespace": "gpuhealth", "pool": "p1"},
                           fingerprint=f"fp-{name}") for name, labels in fleet.items()]
    response = h.post(body)
    assert response.status_code == 202, response.get_json()
    answer = response.get_json()
    assert answer["accepted"] == 0 and not answer["queued"]
    assert {i["fingerprint"]: i["reason"] for i in answer["ignored"]} == {
        f"fp-{name}": "label node='*' is not a node name" for name in fleet}
    h.step()
    after = {name: node["metadata"]["resourceVersion"] for name, node in cluster.nodes.items()}
    assert after == before  # nothing recorded, no taint, no cordon, on any node
    assert not [w for w in cluster.writes() if "/nodes" in w[1]]
    assert not [e for n in cluster.nodes for e in cluster.events_for(n)]
