"""rules/sets.yaml: which rule groups run on every shard of a Prometheus sharded by node (node) and which run once
over the fleet (fleet), and the check that a group is per node: what tests/rules/test_rule_sets.py proves, and what
the chart tests and the sharded e2e load."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.support import paths
from tests.support.promql_names import metric_names

RULES = paths.REPO / "rules"
SETS_FILE = RULES / "sets.yaml"
SETS = ("node", "fleet")

_AGGREGATIONS = ("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                 "quantile", "limitk", "limit_ratio")
# `unless on (...) ALERTS{alertname="X"...}`: a per-node alert held back while fleet alert X is pending or firing
_HOLD = re.compile(r'unless\s+on\s*\(([^)]*)\)\s*ALERTS\{alertname="(\w+)"[^}]*\}')


def rule_files() -> list[Path]:
    return sorted([*RULES.glob("alerts/*.yaml"), *RULES.glob("recording/*.yaml")])


def groups() -> dict[str, dict[str, Any]]:
    """Every rule group of rules/, by name."""
    out: dict[str, dict[str, Any]] = {}
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            out[group["name"]] = group
    return out


def sets() -> dict[str, list[str]]:
    doc = yaml.safe_load(SETS_FILE.read_text())
    return {name: list(doc.get(name) or []) for name in SETS}


def set_groups(which: str) -> list[dict[str, Any]]:
    """The groups of a set ("node", "fleet", or "both"), in rules/'s file order."""
    chosen = set(sets()["node"] + sets()["fleet"]) if which == "both" else set(sets()[which])
    return [g for name, g in groups().items() if name in chosen]


def _strip(expr: str) -> str:
    text = re.sub(r"#[^\n]*", " ", expr)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def holds(expr: str) -> list[str]:
    """The fleet alerts whose ALERTS an expression reads only to hold its own result back."""
    return [m.group(2) for m in _HOLD.finditer(re.sub(r"#[^\n]*", " ", expr))]


def per_node_problems(expr: str, node_series: Iterable[str], fleet_alerts: Iterable[str],
                      node_alerts: Iterable[str] = ()) -> list[str]:
    """Why an expression is not about one node's series alone ([] when it is): it reads only `node_series` (the
    families a node's targets serve, and per-node records), every aggregation keeps `node` (by (node, ...), never
    without node, never all series), and every vector match joins on node; the exceptions are a hold on a fleet
    alert (`unless on (pool, ...) ALERTS{alertname="<fleet alert>"}`), which only removes results and is absent on
    a shard that does not evaluate it, and a hold on an alert of a node group (`node_alerts`) joined on node, which
    the same shard evaluates for the same node."""
    fleet, known, local = set(fleet_alerts), set(node_series), set(node_alerts)
    problems = [f"holds on {m.group(2)}, not a fleet alert"
                for m in _HOLD.finditer(re.sub(r"#[^\n]*", " ", expr)) if m.group(2) not in fleet
                and not (m.group(2) in local and "node" in {label.strip() for label in m.group(1).split(",")})]
    text = _HOLD.sub(" ", re.sub(r"#[^\n]*", " ", expr))
    problems += [f"reads {name}, not a node's series" for name in sorted(metric_names(text) - known)]
    text = _strip(text)
    for m in re.finditer(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)", text):
        labels = {label.strip() for label in m.group(2).split(",") if label.strip()}
        if (m.group(1) in ("by", "on")) != ("node" in labels):
            problems.append(f"{m.group(1)} ({m.group(2)}) {'drops' if m.group(1) in ('by', 'on') else 'removes'} "
                            "the node")
    # an aggregation with no by/without before its argument aggregates every series (the rules never write the
    # trailing `sum(...) by (...)` form, so one is reported here too)
    bare = rf"\b({'|'.join(_AGGREGATIONS)})\s*\("
    problems += [f"{m.group(1)}(...) aggregates over every node" for m in re.finditer(bare, text)]
    return problems


def fleet_inputs(own_scrapes: Iterable[str]) -> set[str]:
    """The series the fleet groups read that are not their own records nor in `own_scrapes` (what the fleet engine
    scrapes itself): what the shards must send it."""
    fleet = set_groups("fleet")
    records = {r["record"] for g in fleet for r in g["rules"] if "record" in r}
    read = set().union(*(metric_names(str(r["expr"])) for g in fleet for r in g["rules"]))
    return read - records - set(own_scrapes)


def scaling_doc_yaml(heading: str) -> list[Any]:
    """The YAML blocks under a heading of docs/scaling.md (up to the next heading), as a reader copies them."""
    text = (paths.REPO / "docs" / "scaling.md").read_text()
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    section = text[start:end if end > 0 else len(text)]
    return [doc for block in re.findall(r"```yaml\n(.*?)```", section, re.S) for doc in yaml.safe_load_all(block)
            if doc]
