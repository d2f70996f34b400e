"""One way to read every file a person edits (gpuhealth/contract/yaml_source.py): the exporter's settings, the
kernel-log patterns, the policy and a simulator scenario all refuse what it refuses, with the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.contract.yaml_source import YamlSourceError, parse, read_text
from gpuhealth.exporter.config import ConfigError, load_file
from gpuhealth.exporter.kernel.patterns import PatternError, load_patterns
from gpuhealth.remediator.policy import PolicyError, load_policy

TWICE = "ladder:\n  drain:\n    timeout: 1h\n    timeout: 2h\n"


def test_a_key_set_twice_is_refused_at_any_depth_with_both_lines() -> None:
    with pytest.raises(YamlSourceError) as err:
        parse(TWICE)
    assert (err.value.line, err.value.key) == (4, "ladder.drain.timeout")
    assert err.value.reason.startswith("set twice, on lines 3 and 4")


def test_an_alias_is_read_once_and_a_self_referring_one_ends() -> None:
    doc = parse("a: &x {b: 1}\nc: *x\nd: &y [*y]\n")
    assert doc.data["c"] == {"b": 1} and doc.lines["a.b"] == 1


def test_each_key_has_its_line() -> None:
    assert parse("exclude:\n  - {label: a}\nbudget:\n  max_disrupted: 1\n").lines == {
        "exclude": 1, "exclude[0].label": 2, "budget": 3, "budget.max_disrupted": 4}


def test_a_bom_is_dropped_and_latin1_is_refused_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert parse(read_text(tmp_path / "bom.yaml")).data == {"a": 1}
    (tmp_path / "latin1.yaml").write_bytes(b"a: 1\n# caf\xe9\n")
    with pytest.raises(YamlSourceError) as err:
        read_text(tmp_path / "latin1.yaml")
    assert err.value.line == 2 and err.value.reason.startswith("not UTF-8: byte 0xe9")


@pytest.mark.parametrize("load,error,text", [
    (load_file, ConfigError, "probes:\n  kmsg: {interval: 1}\n  kmsg: {interval: 2}\n"),
    (load_patterns, PatternError, "patterns: []\npatterns: []\n"),
    (load_policy, PolicyError, TWICE),
])
def test_every_program_refuses_a_key_set_twice(tmp_path: Path, load: object, error: type[Exception],
                                               text: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(error, match="set twice"):
        load(path if load is not load_file else str(path))  # type: ignore[operator]
