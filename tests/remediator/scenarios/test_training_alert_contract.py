"""A TrainingRankSlow alert, with exactly the labels the promtool test expects of the rule, goes through the
remediator as it is: the named node is cordoned, the job's pod keeps running, and nothing climbs past cordon."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.fakes.apiserver import FakeCluster
from tests.support import paths
from tests.support.remediator_harness import Harness, webhook

ROOT = paths.REPO


def _expected_alert_labels() -> dict[str, str]:
    doc = yaml.safe_load((ROOT / "rules" / "tests" / "training_test.yaml").read_text())
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            if case["alertname"] == "TrainingRankSlow" and case.get("exp_alerts"):
                return {k: str(v) for k, v in case["exp_alerts"][0]["exp_labels"].items()}
    pytest.fail("rules/tests/training_test.yaml expects TrainingRankSlow nowhere")


def _slow_rank_body(node: str, status: str = "firing") -> dict[str, Any]:
    body = webhook(node, status=status, alertname="TrainingRankSlow", gpu=None)
    labels = {**_expected_alert_labels(), "alertname": "TrainingRankSlow", "node": node}
    body["alerts"][0]["labels"] = labels
    body["commonLabels"] = labels
    return body


@pytest.fixture
def h(cluster: FakeCluster) -> Harness:
    return Harness(cluster, "return_to_service: {healthy_delay: 10m}\n")


def test_slow_rank_alert_cordons_its_node_and_never_touches_the_job(h: Harness, cluster: FakeCluster) -> None:
    assert _expected_alert_labels()["remediation"] == "cordon"
    cluster.add_pod("gpu-3", "llm-worker-3", gpus=8)
    assert h.post(_slow_rank_body("gpu-3")).status_code == 202  # accepted as is: node and remediation labels
    assert h.decisions(h.step()) == [("gpu-3", "cordon", "execute")]
    assert cluster.node("gpu-3")["spec"]["unschedulable"] is True
    for _ in range(4):  # the alert keeps firing for hours: the job is not drained, the node not reset
        h.advance(hours=1)
        h.post(_slow_rank_body("gpu-3"))
        h.step()
    assert h.state("gpu-3").rung == "cordon"
    assert [p["metadata"]["name"] for p in cluster.pods_on("gpu-3")] == ["llm-worker-3"]
    assert cluster.evictions() == [] and cluster.jobs == {}
    # the job ended (or the rank recovered): the alert resolves and the node comes back after the healthy delay
    h.post(_slow_rank_body("gpu-3", status="resolved"))
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-3", "uncordon", "execute")]
    assert not cluster.node("gpu-3")["spec"].get("unschedulable")
