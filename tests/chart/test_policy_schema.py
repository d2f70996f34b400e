"""The chart refuses at render time a `remediator.policy` the remediator would refuse at start (values.schema.json,
whose remediator.policy part helm/policy_schema.py derives from the policy reader, gpuhealth/remediator/policy/): `helm
template`, so Argo CD's diff, names the key, instead of a pod that crash-loops after the sync."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml

from gpuhealth.remediator.policy import PolicyError, parse_policy
from tests.support import paths
from tests.support.chart_render import render_fresh

ROOT = paths.REPO
VALUES_SCHEMA = ROOT / "helm" / "gpuhealth" / "values.schema.json"
EXAMPLE = ROOT / "gpuhealth" / "remediator" / "policy.example.yaml"
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.S | re.M)


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    """helm/policy_schema.py (`make schema`)."""
    spec = importlib.util.spec_from_file_location("policy_schema", ROOT / "helm" / "policy_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def committed() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(VALUES_SCHEMA.read_text())["properties"]["remediator"]["properties"]["policy"]
    return schema


def _render_error(policy: dict[str, Any]) -> str:
    with pytest.raises(helm.HelmValuesError) as err:
        render_fresh({"remediator": {"policy": policy}})
    return str(err.value)


def _parser_accepts(policy: Any) -> bool:
    try:
        parse_policy(yaml.safe_dump(policy))
    except PolicyError:
        return False
    return True


# --- freshness ---

def test_the_committed_policy_schema_is_what_the_parsers_make(generator: ModuleType) -> None:
    fresh = generator.policy_schema()
    assert committed() == fresh, "values.schema.json's remediator.policy is stale: run `make schema`"


def test_check_mode_reports_a_stale_schema_and_the_rewrite_touches_only_the_policy(generator: ModuleType,
                                                                                     tmp_path: Path) -> None:
    copy = tmp_path / "values.schema.json"
    copy.write_text(VALUES_SCHEMA.read_text())
    assert generator.main(["--check", "--schema", str(copy)]) == 0
    stale = json.loads(copy.read_text())
    stale["properties"]["remediator"]["properties"]["policy"] = {"type": "object"}
    copy.write_text(json.dumps(stale, indent=2) + "\n")
    assert generator.main(["--check", "--schema", str(copy)]) == 1
    assert generator.main(["--schema", str(copy)]) == 0
    rewritten = json.loads(copy.read_text())
    assert rewritten == json.loads(VALUES_SCHEMA.read_text())


# --- at render time ---

def test_a_misspelt_policy_key_fails_the_render_naming_it() -> None:
    message = _render_error({"ladder": {"reboot": {"timeot": "30m"}}})
    assert "/remediator/policy/ladder/reboot" in message and "'timeot' not allowed" in message
    message = _render_error({"budgte": {"max_disrupted": 1}})
    assert "/remediator/policy" in message and "'budgte' not allowed" in message


def test_a_value_outside_a_keys_choices_fails_the_render_naming_the_key_and_the_choices() -> None:
    message = _render_error({"drain": {"on_timeout": "forse"}})
    assert "/remediator/policy/drain/on_timeout" in message and "'wait', 'force', 'escalate'" in message


@pytest.mark.parametrize(("policy", "key"), [
    ({"ladder": {"reboot": {"timeout": "30 minutes"}}}, "/remediator/policy/ladder/reboot/timeout"),
    ({"budget": {"max_disrupted": "10"}}, "/remediator/policy/budget/max_disrupted"),  # a count or "10%"
    ({"breaker": {"min_nodes": 0}}, "/remediator/policy/breaker/min_nodes"),
    ({"dra": {"enabled": "yes"}}, "/remediator/policy/dra/enabled"),
    ({"reset": {"operands": [{"pods": {"app": "x"}}]}}, "/remediator/policy/reset/operands/0"),  # name required
])
def test_a_wrongly_typed_value_fails_the_render_naming_the_key(policy: dict[str, Any], key: str) -> None:
    assert not _parser_accepts(policy)  # the remediator would refuse it too
    assert key in _render_error(policy)


def test_the_policy_example_renders_as_the_charts_policy_and_is_the_remediators() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    docs = render_fresh({"remediator": {"policy": example}})
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuhealth-remediator")
    parse_policy(config["data"]["policy.yaml"])


# --- never stricter than the parser, never looser on keys ---

def _documented_policies() -> Iterator[tuple[str, Any]]:
    """Every policy the project shows a user: the example file, the examples in its comments, and the policies of
    the docs' YAML blocks (a policy file, or the chart's remediator.policy)."""
    yield "gpuhealth/remediator/policy.example.yaml", yaml.safe_load(EXAMPLE.read_text())
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), start=1):
        commented = re.match(r"^\s*#\s+(- \{.*\})\s*$", line)
        if commented:  # exclude: [...] items
            yield f"gpuhealth/remediator/policy.example.yaml:{number}", {"exclude": yaml.safe_load(commented.group(1))}
    for path in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        for block in FENCE.finditer(path.read_text()):
            if block.group("lang") not in ("yaml", "yml"):
                continue
            try:
                doc = yaml.safe_load(block.group("body"))
            except yaml.YAMLError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("remediator"), dict) and "policy" in doc["remediator"]:
                yield f"{path.relative_to(ROOT)} (values)", doc["remediator"]["policy"]
            elif isinstance(doc, dict) and _parser_accepts(doc):
                yield f"{path.relative_to(ROOT)} (policy)", doc


# Values the parsers take that a schema written from the example alone would refuse.
UNUSUAL = [
    {"alertmanager": {"sync_interval": "off"}}, {"alertmanager": {"sync_interval": None}},
    {"alertmanager": {"sync_interval": False}}, {"alertmanager": {"url": ["http://a:9093", "http://b:9093"]}},
    {"alertmanager": {"url": "none", "timeout": 2.5}}, {"ladder": {"reboot": {"timeout": 600, "escalate_after": None}}},
    {"budget": {"max_disrupted": 0, "max_cordoned": " 12.5% "}}, {"breaker": {"threshold": "30%"}},
    {"budget": None}, {"workloads": None}, {"reset": {"operands": [{"name": "nvsm", "pods": None}]}},
    {"replace": {"method": "hook", "hook_url": "http://repair.example"}}, {"drain": {"eviction_backoff": [1, "2.5s"]}},
]


@pytest.mark.parametrize("policy", UNUSUAL, ids=[json.dumps(p) for p in UNUSUAL])
def test_the_schema_takes_every_unusual_value_the_parser_takes(policy: dict[str, Any]) -> None:
    assert _parser_accepts(policy)
    jsonschema.validate(policy, committed())


def test_the_schema_takes_every_policy_the_docs_and_the_example_show() -> None:
    shown = list(_documented_policies())
    assert len(shown) >= 3, shown  # the example, its commented exclude, install.md's values
    for where, policy in shown:
        assert _parser_accepts(policy), where
        errors = [e.message for e in jsonschema.Draft7Validator(committed()).iter_errors(policy)]
        assert not errors, f"{where}: {errors}"


def _sections(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every mapping of fixed keys reached through keys (not list items)."""
    if "properties" in schema:
        yield path
        for name, sub in schema["properties"].items():
            yield from _sections(sub, (*path, name))


def test_an_unknown_key_in_any_section_is_refused_by_both() -> None:
    sections = list(_sections(committed()))
    assert ("ladder", "reset_gpu") in sections and ("workloads", "restart_loop") in sections
    for path in sections:
        policy: Any = {"x_unknown": 1}
        for name in reversed(path):
            policy = {name: policy}
        assert not _parser_accepts(policy), path
        assert not jsonschema.Draft7Validator(committed()).is_valid(policy), path


def test_a_section_read_over_its_defaults_needs_none_of_its_keys_in_both() -> None:
    """ladder.reboot's fields have no default of their own (RungPolicy), but the section is read over the field's
    default: `reboot: {}` keeps it, so neither the parser nor the schema requires a key there."""
    sections = list(_sections(committed()))
    assert ("ladder", "reboot") in sections
    for path in sections:
        policy: Any = {}
        for name in reversed(path):
            policy = {name: policy}
        assert _parser_accepts(policy), path
        assert jsonschema.Draft7Validator(committed()).is_valid(policy), path
