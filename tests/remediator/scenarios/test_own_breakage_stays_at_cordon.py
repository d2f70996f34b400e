"""gpuhealth's own breakage is not the node's (issue 34, section 2): an alert about gpuhealth itself (its exporter down
or gone, a probe failing or stale) keeps new work off a Ready node and climbs no further, however long it fires; only a
node whose kubelet stopped reporting (NotReady: the host is really down) climbs on it, as far as the alert's
max_rung (gpuhealth/remediator/decide/planner.py, alert_ceiling).

The alerts carry the labels the shipped rules give them (rules/alerts/probe.yaml), and the policy is the default one:
with GpuhealthExporterDown's `max_rung: replace`, a Ready node went cordon, drain at +32 min, reboot at +64 min and
replace at +96 min before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.fakes.apiserver import FakeCluster
from tests.support import paths
from tests.support.remediator_harness import Harness

PROBE_RULES = paths.REPO / "rules" / "alerts" / "probe.yaml"
HOURS = 6  # the default policy's ladder reaches replace in about 1.5 h (cordon, then three rungs 30 min apart)
REPEAT_MINUTES = 10  # Alertmanager repeats the firing alerts (repeat_interval): the episode never goes quiet
# the labels the rules' expressions add (GpuhealthProbeFailing's probe and reason, the others' probe)
EXPR_LABELS = {"GpuhealthProbeFailing": {"probe": "dcgm", "reason": "timeout"},
               "GpuhealthProbeStale": {"probe": "dcgm"}}


def own_alerts() -> dict[str, dict[str, str]]:
    """The shipped alerts about gpuhealth itself that act (component probe, remediation other than none), with the
    labels the rules give them."""
    groups = yaml.safe_load(PROBE_RULES.read_text())["groups"]
    return {r["alert"]: {k: str(v) for k, v in r["labels"].items()}
            for g in groups for r in g["rules"]
            if "alert" in r and r["labels"].get("component") == "probe" and r["labels"]["remediation"] != "none"}


OWN = own_alerts()


def fire_as_the_rules_do(h: Harness, node: str, alert: str) -> Callable[[], None]:
    labels: dict[str, Any] = {**OWN[alert], **EXPR_LABELS.get(alert, {})}
    remediation = labels.pop("remediation")

    def fire() -> None:
        h.fire(node, remediation, alertname=alert, gpu=None, labels=labels)
    return fire


def set_ready(cluster: FakeCluster, node: str, status: str) -> None:
    cluster.update_node(node, lambda n: n["status"].update(conditions=[{"type": "Ready", "status": status}]))


def test_the_shipped_rules_have_alerts_about_gpuhealth_that_act_and_exporter_down_may_climb_to_replace() -> None:
    assert set(OWN) == {"GpuhealthProbeFailing", "GpuhealthProbeStale", "GpuhealthExporterDown",
                        "GpuhealthExporterTargetMissing"}
    assert OWN["GpuhealthExporterDown"]["max_rung"] == "replace"  # a dead host's: what the NotReady case climbs to


@pytest.mark.parametrize("alert", sorted(OWN))
def test_a_ready_node_whose_only_alert_is_about_gpuhealth_stays_at_cordon_for_hours(
        cluster: FakeCluster, alert: str) -> None:
    h = Harness(cluster)  # the default policy
    cluster.add_pod("gpu-1", "train-0", gpus=8)
    fire = fire_as_the_rules_do(h, "gpu-1", alert)
    fire()
    assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute")]
    later = []
    for _ in range(HOURS * 60 // REPEAT_MINUTES):
        h.advance(minutes=REPEAT_MINUTES)
        fire()
        later += h.decided(h.step())
    assert {(d.action, d.decision) for d in later} == {("none", "skipped")}
    assert f"{alert} is about gpuhealth itself (component probe) and the node is Ready" in later[-1].reason
    assert (h.state("gpu-1").rung, h.state("gpu-1").rung_status) == ("cordon", "done")
    assert cluster.evictions() == [] and cluster.jobs == {}
    assert cluster.nodes["gpu-1"]["spec"].get("unschedulable") is True  # new work stays off the node


def test_a_node_that_turns_not_ready_under_exporter_down_climbs_as_the_alerts_max_rung_lets_it(
        cluster: FakeCluster) -> None:
    h = Harness(cluster)
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    fire = fire_as_the_rules_do(h, "gpu-2", "GpuhealthExporterDown")
    fire()
    h.step()
    for _ in range(120 // REPEAT_MINUTES):  # two hours Ready: at cordon
        h.advance(minutes=REPEAT_MINUTES)
        fire()
        h.step()
    assert h.state("gpu-2").rung == "cordon"
    set_ready(cluster, "gpu-2", "Unknown")  # the kubelet stopped posting its status: the host is down
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-2", "drain", "execute")]
    assert cluster.evictions() == ["default/train-0"]


def test_a_not_ready_node_under_a_probe_alert_still_stops_at_that_alerts_max_rung(cluster: FakeCluster) -> None:
    h = Harness(cluster)
    set_ready(cluster, "gpu-3", "False")
    fire = fire_as_the_rules_do(h, "gpu-3", "GpuhealthProbeStale")  # max_rung cordon in the rules
    fire()
    h.step()
    for _ in range(120 // REPEAT_MINUTES):
        h.advance(minutes=REPEAT_MINUTES)
        fire()
        decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
    assert "GpuhealthProbeStale's max_rung is cordon" in decided[0].reason
    assert h.state("gpu-3").rung == "cordon"


def test_a_hardware_alert_beside_exporter_down_climbs_as_far_as_its_own_max_rung_and_no_further(
        cluster: FakeCluster) -> None:
    h = Harness(cluster)
    exporter_down = fire_as_the_rules_do(h, "gpu-4", "GpuhealthExporterDown")

    def cable() -> None:
        h.fire("gpu-4", "cordon", alertname="NetdevTransmitTimeout", gpu=None,
               labels={"component": "network", "max_rung": "drain"})
    exporter_down()
    cable()
    h.step()
    decided = []
    for _ in range(HOURS * 60 // REPEAT_MINUTES):
        h.advance(minutes=REPEAT_MINUTES)
        exporter_down()
        cable()
        decided += h.decisions(h.step())
    assert [d for d in decided if d[2] == "execute"] == [("gpu-4", "drain", "execute")]
    assert h.state("gpu-4").rung == "drain" and cluster.jobs == {}
