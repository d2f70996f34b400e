"""bench/rules_scale.py end to end at a tiny size: synthetic fleet, real promtool backfill, Debian's Prometheus with
every rule file of rules/. No timing is asserted (figures live in docs/benchmarks.md); this only keeps the bench
runnable and checks that the rules evaluate without errors over the series it synthesises."""

from __future__ import annotations

import shutil
import sys

import pytest
import yaml

from tests.support import paths, process_tree

ROOT = paths.REPO
RULE_FILES = sorted([*ROOT.glob("rules/alerts/*.yaml"), *ROOT.glob("rules/recording/*.yaml")])


def _pairs(stdout: str) -> dict[str, float]:
    pairs = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("rules_"):
            pairs[parts[0]] = float(parts[1])
    return pairs


@pytest.fixture(scope="module")
def bench_output() -> str:
    if not (shutil.which("promtool") and shutil.which("prometheus")):
        pytest.fail("promtool and prometheus are needed: apt-get install prometheus (make test does)")
    result = process_tree.run(
        [sys.executable, str(ROOT / "bench" / "rules_scale.py"), "--sizes", "4", "--evaluations", "2", "--lead", "2",
         "--group-interval", "1s", "--eval-interval", "1s", "--slo-days", "1", "--no-merge"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"bench failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_bench_times_every_rule_group_of_the_project(bench_output: str) -> None:
    pairs = _pairs(bench_output)
    groups = {g["name"] for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]}
    timed = {name[len("rules_4_"):-len("_max_seconds")] for name in pairs
             if name.startswith("rules_4_") and name.endswith("_max_seconds")}
    assert timed == groups


def test_rules_evaluate_without_failures_over_the_synthetic_fleet(bench_output: str) -> None:
    pairs = _pairs(bench_output)
    assert pairs["rules_4_evaluation_failures"] == 0
    assert pairs["rules_4_series"] > 4 * 300  # every family the rules read, 8 GPUs and 32 EFA devices per node
    assert pairs["rules_4_samples"] > pairs["rules_4_series"]


@pytest.fixture(scope="module")
def sharded_output() -> str:
    result = process_tree.run(
        [sys.executable, str(ROOT / "bench" / "rules_scale.py"), "--shards", "2", "--sizes", "12", "--evaluations",
         "2", "--lead", "2", "--group-interval", "1s", "--eval-interval", "1s", "--slo-days", "1", "--no-merge"],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, f"bench failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _groups(pairs: dict[str, float], prefix: str) -> set[str]:
    return {name[len(prefix) + 1:-len("_max_seconds")] for name in pairs
            if name.startswith(f"{prefix}_gpuhealth") and name.endswith("_max_seconds")}


def test_sharded_bench_times_the_node_groups_on_a_shard_and_the_fleet_groups_on_the_global_ruler(
        sharded_output: str) -> None:
    pairs = {line.split()[0]: float(line.split()[1]) for line in sharded_output.splitlines()
             if len(line.split()) == 2 and line.split()[0].startswith(("shard_", "global_"))}
    sets = yaml.safe_load((ROOT / "rules" / "sets.yaml").read_text())
    assert _groups(pairs, "shard") == set(sets["node"])
    assert _groups(pairs, "global") == set(sets["fleet"])
    assert pairs["shard_evaluation_failures"] == pairs["global_evaluation_failures"] == 0
    # the forwarded series reach the fleet groups (served live to the global ruler's scrape): a job is scored
    assert pairs["global_jobs_scored"] >= 1
    assert 0 < pairs["shard_nodes"] < 12  # the shard's share of the fleet, by the node label's hash
    assert pairs["shard_ms_per_node"] > 0
