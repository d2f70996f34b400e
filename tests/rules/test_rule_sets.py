"""rules/sets.yaml splits the rule groups by where they can run (docs/scaling.md): node groups on every shard of a
Prometheus sharded by node, each shard for its own nodes; fleet groups once over all shards. This proves the split:
a node group reads only what a node's exporter target serves (and its own group's records), keeps `node` in every
aggregation and join, so a shard that has all of a node's series computes exactly what one Prometheus would; a fleet
group is one that could not (it reads across nodes or the remediator's series); and every group is in one set."""

from __future__ import annotations

from typing import Any

import pytest
from gpuhealth_training.metrics import EXPOSED_NAMES as TRAINING_METRICS

from gpuhealth.exporter.catalog import FAMILIES
from tests.support import rule_sets

GROUPS = rule_sets.groups()
SETS = rule_sets.sets()


def _records(names: list[str]) -> set[str]:
    return {r["record"] for name in names for r in GROUPS[name]["rules"] if "record" in r}


def _fleet_alerts() -> set[str]:
    return {r["alert"] for name in SETS["fleet"] for r in GROUPS[name]["rules"] if "alert" in r}


# What a node's targets serve (the exporter's families, `up` of its target, and the training ranks running on it, whose
# PodMonitor hashes on the node too: docs/scaling.md) and what node groups record from them.
NODE_SERIES = {f.exposed_name for f in FAMILIES.values()} | {"up"} | set(TRAINING_METRICS) | _records(SETS["node"])


def _problems(group: dict[str, Any]) -> list[str]:
    return [f"{rule.get('alert') or rule['record']}: {problem}" for rule in group["rules"]
            for problem in rule_sets.per_node_problems(str(rule["expr"]), NODE_SERIES, _fleet_alerts(), _node_alerts())]


def _node_alerts() -> set[str]:
    return {r["alert"] for name in SETS["node"] for r in GROUPS[name]["rules"] if "alert" in r}


def test_every_group_is_in_exactly_one_set() -> None:
    listed = SETS["node"] + SETS["fleet"]
    assert sorted(listed) == sorted(GROUPS), "rules/sets.yaml must list every group of rules/ once"
    assert not set(SETS["node"]) & set(SETS["fleet"])


@pytest.mark.parametrize("name", SETS["node"])
def test_node_group_reads_only_one_nodes_series(name: str) -> None:
    assert _problems(GROUPS[name]) == []


@pytest.mark.parametrize("name", SETS["fleet"])
def test_fleet_group_could_not_run_on_a_shard(name: str) -> None:
    """A group in the fleet set that reads one node's series only would belong on the shards, where it scales."""
    assert _problems(GROUPS[name]), f"{name} reads one node's series only: list it under node"


def test_the_slo_pool_fractions_and_job_rollups_are_fleet_groups() -> None:
    fleet = {r.get("alert") or r["record"] for name in SETS["fleet"] for r in GROUPS[name]["rules"]}
    assert {"fleet:gpuhealth_node_availability:ratio", "GPUFleetAvailabilityBudgetBurnFast",  # the SLO
            "GpuhealthMonitoringFault",  # a pool's share
            ":gpuhealth_workload_platform_failures:ratio_rate30d", "TrainingRankSlow"} <= fleet  # job rollups


def test_node_groups_hold_back_only_on_fleet_alerts() -> None:
    """The probe alerts' hold (unless ... GpuhealthMonitoringFault) is the one read of a fleet result in a node
    group: on a shard it finds nothing and holds nothing back (the remediator's monitoring_fault holds there)."""
    held = {alert for name in SETS["node"] for r in GROUPS[name]["rules"] for alert in rule_sets.holds(str(r["expr"]))}
    assert held & _fleet_alerts() == {"GpuhealthMonitoringFault"}
    # the other holds are on an alert of a node group, joined on node (test_node_group_reads_only_one_nodes_series)
    assert held - _fleet_alerts() <= _node_alerts()


def test_the_shards_remote_write_in_docs_sends_exactly_what_the_fleet_groups_read() -> None:
    """docs/scaling.md's write_relabel_configs (the e2e's too): every series a fleet group reads that a shard has,
    and nothing else (the remediator's series the global Prometheus scrapes itself)."""
    from gpuhealth.remediator.metrics import Metrics

    remediator = {f"{f.name}_total" if f.type == "counter" else f.name for f in Metrics().registry.collect()}
    (doc,) = rule_sets.scaling_doc_yaml("### The shards' remote write")
    (keep,) = doc["remote_write"][0]["write_relabel_configs"]
    assert keep["source_labels"] == ["__name__"] and keep["action"] == "keep"
    assert set(keep["regex"].split("|")) == rule_sets.fleet_inputs(remediator)


@pytest.mark.parametrize(("expr", "problem"), [
    ('max by (node, pool) (gpuhealth_gpus_visible) < 8', None),
    ('sum by (pool) (gpuhealth_gpus_visible) < 8', "by (pool) drops the node"),
    ('max(gpuhealth_gpus_visible) < 8', "max(...) aggregates over every node"),
    ('max without (node) (gpuhealth_gpus_visible)', "without (node) removes the node"),
    ('up == 0 and on (pool) gpuhealth_gpus_visible', "on (pool) drops the node"),
    ('max by (node) (gpuhealth_remediator_leader)', "reads gpuhealth_remediator_leader, not a node's series"),
    ('up == 0 unless on (pool) ALERTS{alertname="GpuhealthMonitoringFault"}', None),
    ('up == 0 unless on (pool) ALERTS{alertname="GPUXidFatal"}', "holds on GPUXidFatal, not a fleet alert"),
])
def test_per_node_check_accepts_one_nodes_series_and_rejects_the_rest(expr: str, problem: str | None) -> None:
    found = rule_sets.per_node_problems(expr, NODE_SERIES, {"GpuhealthMonitoringFault"})
    assert found == ([problem] if problem else [])


@pytest.mark.parametrize(("expr", "problem"), [
    ('up == 0 unless on (node, pool) ALERTS{alertname="GPUXidFatal"}', None),
    ('up == 0 unless on (pool) ALERTS{alertname="GPUXidFatal"}', "holds on GPUXidFatal, not a fleet alert"),
    ('up == 0 unless on (node) ALERTS{alertname="NoGroupHasIt"}', "holds on NoGroupHasIt, not a fleet alert"),
])
def test_a_hold_on_a_node_groups_alert_is_per_node_only_when_joined_on_the_node(expr: str, problem: str | None) -> None:
    # GPUXidDoubleBitError holds on GPUXidDoubleBitErrorRemapped of the same GPU: the same shard evaluates both.
    found = rule_sets.per_node_problems(expr, NODE_SERIES, {"GpuhealthMonitoringFault"}, {"GPUXidFatal"})
    assert found == ([problem] if problem else [])
