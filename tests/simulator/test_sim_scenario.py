"""Scenario files: shipped ones load, bad ones are refused with file:line and why (as the policy is)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gpuhealth.remediator.policy.keys import Derived, Section, key_of, yaml_of
from gpuhealth.simulator.detection import load_rules
from gpuhealth.simulator.failure_data import Cause
from gpuhealth.simulator.scenario import ScenarioError, check_alerts, load_scenario, parse_scenario, shipped_scenarios
from gpuhealth.simulator.scenario_file import ScenarioFile
from gpuhealth.simulator.scenario_parts import LemonModel, RungModel, SmallJobSpec, SwitchModel, TrainingJobSpec
from tests.support import paths

REPO = paths.REPO


def test_every_shipped_scenario_loads_and_names_only_real_alerts() -> None:
    names = shipped_scenarios()
    assert {"llama3", "rsc1", "rsc2", "mixed-1000"} <= set(names)
    alerts = set(load_rules(REPO / "rules"))
    for name in names:
        sc = load_scenario(name)
        check_alerts(sc, alerts, "rules/")
        assert sc.training, name  # every shipped scenario reports an ETTR
        assert sc.small is not None, name  # ... and a job success rate


def test_rsc_scenarios_read_r_f_as_the_infrastructure_failures_only() -> None:
    for name in ("rsc1", "rsc2"):
        causes = {c for c, _ in load_scenario(name).mix}
        assert "Faulty GPU" in causes and not causes & {"Software Bug", "Dependency", "NCCL Watchdog Timeouts"}
    assert load_scenario("rsc1").other_failure_rate == pytest.approx(17.2)
    assert "Software Bug" in {c for c, _ in load_scenario("llama3").mix}  # Llama 3's rate is all causes


def test_llama3_scenario_is_the_papers_run() -> None:
    sc = load_scenario("llama3")
    assert sc.days == 54
    assert sc.training[0].nodes * sc.gpus_per_node == 16384
    assert sc.rate_per_1000_node_days == pytest.approx(419 / (2048 * 54) * 1000)


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("days: 10\nfleet:\n  pools: {a: many}\n", 3, "fleet.pools.a: expected an integer >= 1"),
    ("days: 10\nfleet:\n  pools: {a: 4}\nfailures:\n  rate: often\n", 5, "failures.rate: expected failures per 1,000"),
    ("days: 10\nfleet:\n  pools: {a: 4}\nfailures:\n  ratee: 3\n", 5, "failures.ratee: unknown key"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ndays: 20\n", 4, "days: set twice, on lines 1 and 4"),
    ("days: 10\nfleet:\n  pools: {a: 4}\nremediation:\n  reboot: {duration: soon}\n", 5,
     "remediation.reboot.duration: expected a duration"),
    ("days: 10\nfleet:\n  pools: {a: 4}\nremediation:\n  reboot: {success: 1.5}\n", 5,
     "remediation.reboot.success: expected a number >= 0 and <= 1"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ncauses:\n  X: {kind: hardware, fixed_by: {reboot: 0.5}}\n", 5,
     "causes.X.fixed_by: probabilities must add up to 1"),
    ("days: 10\nfleet:\n  pools: {a: 4}\njobs:\n  training:\n    - {nodes: 2, checkpoint_interval: 5m, pool: b}\n",
     6, "jobs.training[0].pool: no such pool"),
    ("fleet:\n  pools: {a: 4}\n", None, "days: required"),
    ("days: 10\nfleet:\n  pools: {a: 4}\njobs:\n  training:\n    - {nodes: 2, checkpoint_interval: 5m, repeat: true}\n",
     6, "jobs.training[0].repeat: a repeated job needs `work`"),
    ("days: 10\nfleet:\n  pools: {a: 4}\njobs:\n  training:\n    - {nodes: 2, checkpoint_interval: 5m, resume: 3}\n",
     6, "jobs.training[0].resume: expected true or false"),
    ("days: 10\nfleet:\n  pools: {a: 4}\njobs:\n  other_failure_rate: -1\n", 5,
     "jobs.other_failure_rate: expected a number >= 0"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ndetection:\n  found_by_people: later\n", 5,
     "detection.found_by_people: expected a duration"),
    ("days: 10\nfleet:\n  pools: {a: 4}\n  spares: {b: 2}\n", 4, "fleet.spares: no such pool b"),
    ("days: 10\nfleet:\n  pools: {a: 4}\n  spares: {a: -1}\n", 4, "fleet.spares.a: expected an integer >= 0"),
    ("days: 10\nfleet:\n  pools: {a: 4}\n  new_node_faulty: 2\n", 4,
     "fleet.new_node_faulty: expected a number >= 0 and <= 1"),
    ("days: 10\nfleet:\n  pools: {a: 4}\n  dra: maybe\n", 4, "fleet.dra: expected true or false"),
    ("days: 10\nfleet:\n  pools: {a: 4}\n  burn_in: sometimes\n", 4, "fleet.burn_in: expected true or false"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ncauses:\n  X:\n    kind: hardware\n    fixed_by: {reboot: 1}\n"
     "    detection: {coverage: 1.5}\n", 8, "causes.X.detection.coverage: expected a number >= 0 and <= 1"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ncauses:\n  X:\n    kind: hardware\n    fixed_by: {reboot: 1}\n"
     "    detection: {flapping: 0.5, quiet: 0s}\n", 8, "causes.X.detection.quiet: expected a duration above 0"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ndetection:\n  false_positives: {HostHungTask: lots}\n", 5,
     "detection.false_positives.HostHungTask: expected a number >= 0"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ndetection:\n  perfect: true\n  false_positives: {HostHungTask: 1}\n", 6,
     "detection.false_positives: perfect detection has none"),
    ("days: 10\nfleet:\n  pools: {a: 4}\njobs:\n  training:\n    - {checkpoint_interval: 5m}\n", None,
     "jobs.training[0].nodes: required"),
    ("days: 10\nfleet:\n  pools: {a: 4}\njobs:\n  training:\n    - {nodes: 2}\n", None,
     "jobs.training[0].checkpoint_interval: required"),
    ("days: 10\nfleet:\n  pools: {a: 4}\ncauses:\n  X: {kind: external, fixed_by: {external: 1}}\n", 5,
     "causes.X: external_repair is required for kind external"),
    ("days: 10\nfleet:\n  pools: {a: 4}\nfailures:\n  mix: {Nope: 1}\n", 5, "failures.mix.Nope: unknown key"),
    ("days: 10\nfleet:\n  pools: {a: 4}\nremediation:\n  reboot: {duration: 5m, speed: 2}\n", 5,
     "remediation.reboot.speed: unknown key (allowed: duration, success)"),
])
def test_bad_scenarios_name_file_line_and_why(text: str, line: int | None, fragment: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text, "bad.yaml")
    message = str(err.value)
    assert message.startswith(f"bad.yaml:{line}: " if line else "bad.yaml: "), message
    assert fragment in message, message


def test_a_cause_naming_an_alert_the_rules_lack_is_refused(tmp_path: Path) -> None:
    sc = parse_scenario("days: 1\nfleet: {pools: {a: 2}}\ncauses:\n  Faulty GPU: {alert: NoSuchAlert, kind: hardware,"
                        " fixed_by: {reboot: 1}}\n", "s.yaml")
    with pytest.raises(ScenarioError, match=r"causes\.Faulty GPU\.alert: no alert 'NoSuchAlert'"):
        check_alerts(sc, set(load_rules(REPO / "rules")), "rules/")


def test_a_missing_or_non_utf8_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"days: 1\n# caf\xe9\n")
    with pytest.raises(ScenarioError, match=r"latin1.yaml:2: <file>: not UTF-8"):
        load_scenario(bad)


def test_a_false_positive_naming_an_alert_the_rules_lack_is_refused() -> None:
    sc = parse_scenario("days: 1\nfleet: {pools: {a: 2}}\ndetection:\n  false_positives: {NoSuchAlert: 1}\n", "s.yaml")
    with pytest.raises(ScenarioError, match=r"detection\.false_positives\.NoSuchAlert: no alert 'NoSuchAlert'"):
        check_alerts(sc, set(load_rules(REPO / "rules")), "rules/")


def test_detection_defaults_come_from_the_data_files_and_perfect_detection_drops_them() -> None:
    sc = parse_scenario("days: 1\nfleet: {pools: {a: 2}}\n", "s.yaml")
    assert dict(sc.false_positives)["HostHungTask"] > 0
    assert sc.causes["SSD"].detection.coverage < 1 and sc.causes["NIC"].detection.flapping > 0
    perfect = parse_scenario("days: 1\nfleet: {pools: {a: 2}}\ndetection: {perfect: true}\n", "s.yaml")
    assert perfect.false_positives == ()
    assert all(c.detection.coverage == 1 and c.detection.flapping == 0 for c in perfect.causes.values())


# The keys of ScenarioFile whose value is a part read by its own fields: the docs' name for them, and the part.
PARTS: dict[str, tuple[str, type]] = {
    "causes": ("causes.<name>", Cause), "failures.lemon": ("failures.lemon", LemonModel),
    "failures.switches": ("failures.switches", SwitchModel), "jobs.training": ("jobs.training[]", TrainingJobSpec),
    "jobs.small": ("jobs.small", SmallJobSpec),
    **{f"remediation.{rung}": ("remediation.<rung>", RungModel)
       for rung in ("drain", "reset_gpu", "reboot", "replace")},
}


def _keys(cls: type, prefix: str) -> set[str]:
    """The keys a dataclass read by remediator.policy's read_section takes, below `prefix`."""
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        spec = yaml_of(f)
        if isinstance(spec, Section):
            out |= _keys(f.default_factory(), f"{prefix}{key_of(f)}.")  # type: ignore[misc]
        elif not isinstance(spec, Derived):
            out.add(prefix + key_of(f))
    return out


def test_the_docs_name_every_key_a_scenario_file_takes_and_no_other() -> None:
    expected: set[str] = set()
    for key in _keys(ScenarioFile, ""):
        name, part = PARTS.get(key, (key, type(None)))
        expected |= {key} if part is type(None) else _keys(part, f"{name}.") | ({key} if key == "causes" else set())
    text = (REPO / "docs" / "simulation.md").read_text()
    table = text[text.index("## Scenario files"):text.index("## What runs for real")]
    documented = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
    assert documented == expected, (sorted(documented - expected), sorted(expected - documented))
