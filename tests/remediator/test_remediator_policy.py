from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gpuhealth.remediator.decide.vocabulary import Rung
from gpuhealth.remediator.policy import Policy, PolicyError, Quota, load_policy, parse_policy
from tests.support import paths

EXAMPLE = paths.REPO / "gpuhealth" / "remediator" / "policy.example.yaml"


def test_example_policy_is_valid_and_states_every_default() -> None:
    assert load_policy(EXAMPLE) == Policy()


def test_no_policy_file_means_the_defaults() -> None:
    assert load_policy(None) == Policy()


@pytest.mark.parametrize(("size", "pct", "limit"), [(1, 10, 1), (5, 10, 1), (10, 10, 1), (11, 10, 2),
                                                     (100, 10, 10), (3, 20, 1), (16, 20, 4)])
def test_percent_budgets_never_round_a_small_pool_to_zero(size: int, pct: int, limit: int) -> None:
    assert Quota(percent=pct).limit(size) == limit


def test_an_absolute_zero_budget_is_respected() -> None:
    assert parse_policy("budget: {max_disrupted: 0}").budget.max_disrupted.limit(50) == 0


def test_keys_override_only_what_they_name() -> None:
    p = parse_policy("ladder:\n  reset_gpu: {escalate_after: 5m}\ndrain: {on_timeout: escalate}\n")
    assert p.rung("reset_gpu").escalate_after == timedelta(minutes=5)
    assert p.rung("reset_gpu").timeout == timedelta(minutes=10)
    assert p.drain.on_timeout == "escalate"


@pytest.mark.parametrize(("text", "key", "line"), [
    ("budget:\n  max_disruptd: 2\n", "budget.max_disruptd", 2),
    ("budget:\n  max_disrupted: lots\n", "budget.max_disrupted", 2),
    ("pools: {}\nbreaker:\n  threshold: 130%\n", "breaker.threshold", 3),
    ("ladder:\n  reboot:\n    timeout: soon\n", "ladder.reboot.timeout", 3),
    ("drain: {on_timeout: panic}\n", "drain.on_timeout", 1),
    ("replace: {method: hook}\n", "replace.hook_url", None),
    ("alertmanager: {url: alertmanager:9093}\n", "alertmanager.url", 1),
    ("exclude: {a: b}\n", "exclude", 1),
    ("surprise: 1\n", "surprise", 1),
    ("workloads:\n  enabled: true\n", "workloads.namespaces", None),
    ("workloads:\n  enabled: yes please\n", "workloads.enabled", 2),
    ("workloads:\n  namespaces: [ML_Team]\n", "workloads.namespaces", 2),
    ("workloads:\n  app_exit_codes: [0, 2]\n", "workloads.app_exit_codes", 2),
    ("workloads:\n  look_ahead: soon\n", "workloads.look_ahead", 2),
    ("workloads:\n  selector: team in (a, b)\n", "workloads.selector", 2),
    ("workloads:\n  restart_loop:\n    threshold: 1\n", "workloads.restart_loop.threshold", 3),
    ("workloads:\n  restart_loop: {supsend: true}\n", "workloads.restart_loop.supsend", 2),
])
def test_errors_name_file_key_and_line(tmp_path: Path, text: str, key: str, line: int | None) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert err.value.key == key and err.value.line == line
    assert str(err.value).startswith(f"{path}: {key}")


def test_broken_yaml_is_a_policy_error_with_a_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("budget:\n  max_disrupted: [1\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(path)


def test_alertmanager_url_accepts_an_explicit_none_and_events_namespace_is_gone() -> None:
    assert parse_policy("alertmanager: {url: none}").alertmanager.silences_url is None
    assert parse_policy("alertmanager: {url: 'http://am:9093/'}").alertmanager.silences_url == "http://am:9093"
    with pytest.raises(PolicyError, match="unknown key"):
        parse_policy("events: {namespace: gpuhealth}")


def test_reset_escalates_after_30m_and_replace_times_out_by_default() -> None:
    assert Policy().rung("reset_gpu").escalate_after == timedelta(minutes=30)
    assert Policy().rung("replace").timeout == timedelta(hours=1)


def test_workloads_section_overrides_only_what_it_names() -> None:
    policy = parse_policy("workloads:\n  enabled: true\n  namespaces: [ml, ml, research]\n  app_exit_codes: [42, 3]\n"
                          "  restart_loop: {suspend: true}\n")
    w = policy.workloads
    assert (w.enabled, w.namespaces, w.app_exit_codes, w.restart_loop_suspend) == (True, ("ml", "research"), (3, 42),
                                                                                  True)
    assert (w.look_behind, w.look_ahead, w.restart_loop_threshold) == (timedelta(minutes=10), timedelta(minutes=5), 3)
    assert Policy().workloads.enabled is False


@pytest.mark.parametrize(("text", "key", "lines"), [
    ("budget:\n  max_disrupted: 1\n  max_cordoned: 5\n  max_disrupted: 50\n", "budget.max_disrupted", (2, 4)),
    ("budget: {max_disrupted: 1}\nbreaker: {}\nbudget: {max_disrupted: 50}\n", "budget", (1, 3)),
    ("ladder:\n  reboot:\n    timeout: 30m\n    timeout: 1h\n", "ladder.reboot.timeout", (3, 4)),
    ("exclude:\n  - {team: a, team: b}\n", "exclude[0].team", (2, 2)),
])
def test_a_key_set_twice_is_refused_with_both_lines(tmp_path: Path, text: str, key: str,
                                                    lines: tuple[int, int]) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert err.value.key == key and err.value.line == lines[1]
    assert str(err.value).startswith(f"{path}: {key} (line {lines[1]}): set twice, on lines {lines[0]} and {lines[1]}")


def test_the_same_key_in_different_mappings_is_not_a_duplicate() -> None:
    p = parse_policy("ladder:\n  reboot: {timeout: 40m}\n  reset_gpu: {timeout: 5m}\n")
    assert p.rung("reboot").timeout == timedelta(minutes=40) and p.rung("reset_gpu").timeout == timedelta(minutes=5)


def test_a_policy_file_that_is_not_utf8_names_the_file_and_why(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes("budget:\n  # r\u00e9serv\u00e9 aux GPU\n  max_disrupted: 1\n".encode("latin-1"))
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert err.value.line == 2
    assert str(err.value).startswith(f"{path}: <file> (line 2): not UTF-8: byte 0xe9")


def test_an_ha_alertmanager_is_a_list_of_members_asked_in_order() -> None:
    policy = parse_policy("alertmanager: {url: [http://am-0:9093/, http://am-1:9093]}")
    assert policy.alertmanager.members == ("http://am-0:9093", "http://am-1:9093")
    assert parse_policy("alertmanager: {url: none}").alertmanager.members == ()


def test_the_alertmanager_sync_can_be_turned_off_and_its_settings_are_checked() -> None:
    assert parse_policy("alertmanager: {sync_interval: off}").alertmanager.sync_interval is None
    assert parse_policy("alertmanager: {sync_interval: 1m}").alertmanager.sync_interval == timedelta(minutes=1)
    with pytest.raises(PolicyError, match=r"alertmanager\.receiver.*not a regular expression"):
        parse_policy("alertmanager:\n  receiver: '(unclosed'\n")
    with pytest.raises(PolicyError, match=r"alertmanager\.url.*expected an http\(s\) URL"):
        parse_policy("alertmanager: {url: [http://am-0:9093, am-1:9093]}")


def test_the_ladders_max_rung_is_read_once_into_a_rung_and_defaults_to_replace() -> None:
    assert type(parse_policy("ladder: {max_rung: reboot}").ladder.max_rung) is Rung
    assert parse_policy("ladder: {max_rung: reboot}").ladder.max_rung == Rung.REBOOT
    assert type(parse_policy("").ladder.max_rung) is Rung
