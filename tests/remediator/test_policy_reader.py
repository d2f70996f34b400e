"""The policy's one section reader (gpuhealth/remediator/policy/load.py): every section is read by walking its
dataclass's fields, so these hold for every key; tests/test_remediator_policy.py has the keys' own rules."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from gpuhealth.remediator.decide.vocabulary import RUNG_ORDER
from gpuhealth.remediator.policy import Policy, PolicyError, Quota, parse_policy
from gpuhealth.remediator.policy.keys import Derived, Key, Section, Sections, key_of, yaml_of
from gpuhealth.remediator.policy.schema import LadderSettings


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "p.yaml")
    return err.value


def _sections(cls: type = Policy) -> list[type]:
    """Policy and every section class below it."""
    found = [cls]
    for f in dataclasses.fields(cls):
        spec = yaml_of(f)
        if isinstance(spec, Section):
            found += _sections(type(f.default if f.default_factory is dataclasses.MISSING else f.default_factory()))
        elif isinstance(spec, Sections):
            found += _sections(spec.each)
    return found


def test_an_unknown_key_is_refused_at_its_line_naming_the_keys_the_fields_allow() -> None:
    assert str(_error("pools: {}\nbreaker:\n  min_node: 2\n")) == (
        "p.yaml: breaker.min_node (line 3): unknown key (allowed: cooldown, min_nodes, threshold)")
    assert str(_error("alertmanager:\n  peers: [http://a]\n")).startswith(  # a derived field is no key
        "p.yaml: alertmanager.peers (line 2): unknown key (allowed: bearer_token_file, ca_file, filters, max_answer")


def test_a_value_of_the_wrong_type_is_refused_at_its_line() -> None:
    assert str(_error("budget:\n  max_actions_per_hour: many\n")) == (
        "p.yaml: budget.max_actions_per_hour (line 2): expected an integer >= 0, got 'many'")
    assert str(_error("drain: [wait]\n")) == "p.yaml: drain (line 1): expected a mapping"


def test_a_nested_section_overrides_only_the_keys_it_names_over_the_fields_default() -> None:
    p = parse_policy("ladder:\n  reboot: {escalate_after: 1h}\n")
    assert p.rung("reboot") == dataclasses.replace(Policy().rung("reboot"), escalate_after=timedelta(hours=1))
    assert str(_error("ladder:\n  reboot:\n    timeot: 1m\n")) == (
        "p.yaml: ladder.reboot.timeot (line 3): unknown key (allowed: escalate_after, timeout)")


def test_a_key_one_level_down_is_read_from_its_own_mapping() -> None:
    w = parse_policy("workloads:\n  restart_loop: {threshold: 5}\n").workloads
    assert (w.restart_loop_threshold, w.restart_loop_suspend) == (5, False)
    assert str(_error("workloads:\n  restart_loop_threshold: 5\n")).startswith(
        "p.yaml: workloads.restart_loop_threshold (line 2): unknown key (allowed: app_exit_codes, enabled, ")


def test_keys_left_out_keep_their_defaults_and_null_sections_are_empty() -> None:
    assert parse_policy("") == parse_policy("budget:\nladder: {reboot: null}\n") == Policy()
    p = parse_policy("budget: {max_cordoned: 3}\n")
    assert p == dataclasses.replace(Policy(), budget=dataclasses.replace(Policy().budget, max_cordoned=Quota(count=3)))


def test_a_list_of_sections_reads_each_item_and_a_field_without_default_is_required() -> None:
    ops = parse_policy("reset:\n  operands:\n  - {name: dcgm}\n").reset.operands
    assert [(o.name, o.pods) for o in ops] == [("dcgm", ())]
    assert str(_error("reset:\n  operands:\n  - {pods: {app: x}}\n")) == (
        "p.yaml: reset.operands[0].name: expected a non-empty string, got None")
    assert str(_error("reset: {operands: dcgm}\n")) == (
        "p.yaml: reset.operands (line 1): expected a list of {name, pods}")


def test_every_field_of_every_section_says_how_it_is_read_and_what_it_means() -> None:
    for cls in _sections():
        for f in dataclasses.fields(cls):
            spec = yaml_of(f)
            assert isinstance(spec, Key | Section | Sections | Derived), f"{cls.__name__}.{f.name}"
            assert spec.doc, f"{cls.__name__}.{f.name} has no doc"
            assert key_of(f).count(".") <= 1, f"{cls.__name__}.{f.name}: at most one level down"


def test_the_ladder_has_a_section_per_rung_in_the_ladders_order() -> None:
    rungs = [f.name for f in dataclasses.fields(LadderSettings) if isinstance(yaml_of(f), Section)]
    assert rungs == list(RUNG_ORDER)
    with pytest.raises(KeyError):
        Policy().rung("max_rung")


@pytest.mark.parametrize(("value", "why"), [
    ("9999999d", "at most 3650d, got '9999999d'"),  # read, then OverflowError in every pass that added it to now
    ("1e400", "at most 3650d"), (".inf", "at most 3650d, got inf"), ("99999999999999999999999", "at most 3650d"),
    ("\u0663h", "expected a duration"),  # an Arabic-Indic three: float() reads it, the chart's schema would not
])
def test_a_duration_past_ten_years_is_refused_at_its_line_not_read_to_overflow_later(value: str, why: str) -> None:
    err = _error(f"return_to_service:\n  healthy_delay: {value}\n")
    assert (err.key, err.line) == ("return_to_service.healthy_delay", 2) and why in err.reason


def test_the_longest_duration_taken_reads_and_stays_within_a_datetime_from_now() -> None:
    from datetime import UTC, datetime
    delay = parse_policy("return_to_service:\n  healthy_delay: 3650d\n").return_to_service.healthy_delay
    assert delay == timedelta(days=3650) and datetime(2026, 12, 2, tzinfo=UTC) + delay


def test_a_huge_integer_is_refused_at_its_line() -> None:
    for key in ("max_actions_per_hour", "max_disrupted"):
        err = _error(f"budget:\n  {key}: {'9' * 30}\n")
        assert (err.key, err.line) == (f"budget.{key}", 2) and "at most 2147483647" in err.reason


@pytest.mark.parametrize(("text", "line", "why"), [
    ("budget:\n  max_disrupted: " + "[" * 2000 + "]" * 2000 + "\n", 2, "nested deeper than 64 levels"),
    ("budget:\n  max_disrupted: 1\nx:\n" + "".join("  " * i + "a:\n" for i in range(1, 100)), 67,
     "nested deeper than 64 levels"),
    ("budget:\n  max_actions_per_hour: " + "9" * 5000 + "\n", 2, "a number 5000 characters long"),
])
def test_deep_nesting_and_numbers_past_pythons_int_limit_are_a_policy_error_with_a_line(text: str, line: int,
                                                                                        why: str) -> None:
    """PyYAML's composer recurses per level (RecursionError) and its int() refuses past 4,300 digits (ValueError):
    both escaped the loader with no file or line."""
    err = _error(text)
    assert (err.source, err.line) == ("p.yaml", line) and why in err.reason
