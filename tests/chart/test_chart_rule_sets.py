"""monitoring.prometheusRule.sets: which rule groups (rules/sets.yaml) a rendered PrometheusRule holds, so that the
shards of a Prometheus sharded by node evaluate the node groups and one ruler the fleet groups (docs/scaling.md);
and the PodMonitor's relabeling that shards the exporter targets by node."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import rule_sets
from tests.support.chart_render import render, render_fresh

SETS = rule_sets.sets()


def _rules(values: dict[str, Any]) -> list[dict[str, Any]]:
    docs = render({"monitoring": {"prometheusRule": {"enabled": True, **values}}})
    return [d for d in docs if d["kind"] == "PrometheusRule"]


def _names(rule: dict[str, Any]) -> list[str]:
    return [g["name"] for g in rule["spec"]["groups"]]


def test_default_is_one_prometheusrule_with_every_group_as_before() -> None:
    (default,) = _rules({})
    (both,) = _rules({"sets": "both"})
    assert default == both
    assert default["metadata"]["name"] == "gpuhealth"
    assert _names(default) == [g["name"] for g in rule_sets.set_groups("both")]  # rules/'s file order
    assert sorted(_names(default)) == sorted(SETS["node"] + SETS["fleet"])


@pytest.mark.parametrize("which", ["node", "fleet"])
def test_one_set_renders_only_its_groups_with_its_labels(which: str) -> None:
    (rule,) = _rules({"sets": which, "setLabels": {which: {"evaluated-by": which}}})
    assert sorted(_names(rule)) == sorted(SETS[which])
    assert rule["metadata"]["labels"]["evaluated-by"] == which
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # still picked by the stack's selector


def test_split_renders_both_sets_as_two_prometheusrules_each_with_its_own_labels() -> None:
    rules = {r["metadata"]["name"]: r for r in _rules({"sets": "split", "labels": {"team": "gpu"},
                                                        "setLabels": {"node": {"shard": "true"},
                                                                      "fleet": {"ruler": "thanos"}}})}
    assert sorted(rules) == ["gpuhealth-fleet", "gpuhealth-node"]
    assert sorted(_names(rules["gpuhealth-node"])) == sorted(SETS["node"])
    assert sorted(_names(rules["gpuhealth-fleet"])) == sorted(SETS["fleet"])
    node, fleet = rules["gpuhealth-node"]["metadata"]["labels"], rules["gpuhealth-fleet"]["metadata"]["labels"]
    assert node["shard"] == "true" and "ruler" not in node
    assert fleet["ruler"] == "thanos" and "shard" not in fleet
    assert node["team"] == fleet["team"] == "gpu"


def test_split_groups_are_the_rendered_groups_of_both_unchanged() -> None:
    (both,) = _rules({"sets": "both"})
    split = [g for r in _rules({"sets": "split"}) for g in r["spec"]["groups"]]
    assert sorted(split, key=lambda g: g["name"]) == sorted(both["spec"]["groups"], key=lambda g: g["name"])


def test_an_unknown_set_is_refused_by_the_schema() -> None:
    with pytest.raises(Exception, match="sets"):
        render_fresh({"monitoring": {"prometheusRule": {"enabled": True, "sets": "shards"}}})


def test_podmonitor_shards_by_the_node_label() -> None:
    """The Prometheus Operator's shards keep a target whose __tmp_hash hashes to them (the address unless set):
    set from node, after node itself is set."""
    docs = render({"monitoring": {"podMonitor": {"enabled": True}}})
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    relabel = monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]
    targets = [r.get("targetLabel") for r in relabel]
    assert {"action": "replace", "sourceLabels": ["node"], "targetLabel": "__tmp_hash"} in relabel
    assert targets.index("node") < targets.index("__tmp_hash")
