"""The exporter's YAML config: what it accepts, and the file:line it names when it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.exporter.config import DEFAULT_PROBES, ConfigError, Settings, UnknownSetting, listen_in, load_file


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "exporter.yaml"
    path.write_text(text)
    return str(path)


def test_an_empty_file_means_the_defaults(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "")) == Settings()


def test_settings_and_probe_overrides_are_applied(tmp_path: Path) -> None:
    s = load_file(write(tmp_path, """
node: gpu-node-17
instance_type: p5.48xlarge
gpus_expected: 8
fault_window: 600
probes:
  diag: {enabled: false}
  kmsg: {interval: 2}
"""))
    assert (s.node, s.instance_type, s.gpus_expected, s.fault_window) == ("gpu-node-17", "p5.48xlarge", 8, 600)
    assert s.probes["diag"].enabled is False
    assert (s.probes["kmsg"].interval, s.probes["kmsg"].deadline) == (2, DEFAULT_PROBES["kmsg"].deadline)
    assert s.probes["nvml"] == DEFAULT_PROBES["nvml"]


@pytest.mark.parametrize(("text", "words"), [
    ("", ("default",)),
    ("efa_counters: all\n", ("all",)),
    ("efa_counters: [default, tx_bytes]\n", ("default", "tx_bytes")),
    ("efa_counters:\n  - rx_drops\n  - cmds_err\n", ("rx_drops", "cmds_err")),
    ("efa_counters: default, tx_pkts\n", ("default", "tx_pkts")),
])
def test_efa_counters_take_default_all_or_names(tmp_path: Path, text: str, words: tuple[str, ...]) -> None:
    assert load_file(write(tmp_path, text)).efa_counters == words


@pytest.mark.parametrize(("text", "where", "why"), [
    ("node: a\nlisten_port: 9\n", ":2:", "listen_port: unknown setting"),
    ("probes:\n  kmsg:\n    intervall: 3\n", ":3:", "probes.kmsg.intervall: unknown key"),
    ("probes:\n  gpu: {}\n", ":2:", "probes.gpu: unknown probe"),
    ("probes:\n  nvml: {deadline: 0}\n", ":2:", "probes.nvml.deadline: must be > 0"),
    ("probes:\n  nvml: {enabled: maybe}\n", ":2:", "probes.nvml.enabled: expected bool"),
    ("gpus_expected: eight\n", ":1:", "gpus_expected: expected int or NoneType"),
    ("fault_window: true\n", ":1:", "fault_window: expected a number"),
    ("node: [a, b]\n", ":1:", "node: expected a single value"),
    ("node: a\n  bad: indent\n", ":2", "not valid YAML"),
    ("- a list\n", ":1:", "expected a mapping of settings"),
    ("log_level: loud\n", ":1:", "log_level: must be one of debug, info, warning, error"),
    ("diag_level: 9\n", ":1:", "diag_level: must be 1, 2, 3 or 4"),
    ("condition_interval: 0\n", ":1:", "condition_interval: must be > 0"),
    ("fault_window: -5\n", ":1:", "fault_window: must be > 0"),
    ("efa_expected: -1\n", ":1:", "efa_expected: must be >= 0"),
    ("node: a\nefa_counters:\n  - rx_drops\n  - tx_byte\n", ":4:", "efa_counters: unknown EFA counter 'tx_byte'"),
    ("efa_counters: rx_drops,,cmds_err\n", ":1:", "efa_counters: empty name"),
    ("efa_counters: [all, tx_bytes]\n", ":1:", "efa_counters: all already means every counter"),
    ("efa_counters: []\n", ":1:", "efa_counters: name at least one counter"),
    ("efa_counters: 3\n", ":1:", "efa_counters: expected str"),
    ("efa_counters: {a: 1}\n", ":1:", "efa_counters: expected a single value"),
])
def test_a_bad_file_is_refused_with_file_line_and_reason(tmp_path: Path, text: str, where: str, why: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_file(path)
    assert str(err.value).startswith(path + where), str(err.value)
    assert why in str(err.value)


@pytest.mark.parametrize("text", ["node: a\nlisten_port: 9\n", "probes:\n  kmsg:\n    intervall: 3\n",
                                  "probes:\n  gpu: {}\n"])
def test_a_key_it_does_not_have_is_told_apart_from_a_bad_value(tmp_path: Path, text: str) -> None:
    """An unknown key (or probe) is most often a newer exporter's: the refusal says to check the image, not the value
    (gpuhealth/exporter/cli.py's refusal line)."""
    with pytest.raises(UnknownSetting):
        load_file(write(tmp_path, text))
    with pytest.raises(ConfigError) as err:
        load_file(write(tmp_path, "fault_window: -5\n"))
    assert not isinstance(err.value, UnknownSetting)


def test_the_listen_address_is_read_from_a_file_that_is_refused(tmp_path: Path) -> None:
    """Where a refusing exporter serves gpuhealth_exporter_config_error: the file's listen, whatever else it holds."""
    assert listen_in(write(tmp_path, "listen: 127.0.0.1:9900\nfrom_a_newer_exporter: 1\n")) == "127.0.0.1:9900"
    assert listen_in(write(tmp_path, "node: a\n")) is None
    assert listen_in(write(tmp_path, "node: [a\n")) is None
    assert listen_in(str(tmp_path / "missing.yaml")) is None


@pytest.mark.parametrize(("text", "line", "key", "lines"), [
    ("node: a\nlog_level: info\nnode: b\n", 3, "node", (1, 3)),
    ("probes:\n  kmsg:\n    deadline: 5\n    interval: 1\n    deadline: 500\n", 5, "probes.kmsg.deadline", (3, 5)),
    ("probes:\n  dcgm: {enabled: true}\n  diag: {}\n  dcgm: {enabled: false}\n", 4, "probes.dcgm", (2, 4)),
    ("probes: {nvml: {interval: 1, interval: 2}}\n", 1, "probes.nvml.interval", (1, 1)),
    ("node: a\nprobes:\n  kmsg: {}\nprobes:\n  kmsg: {}\n", 4, "probes", (2, 4)),
])
def test_a_key_set_twice_is_refused_with_both_lines_and_its_path(
        tmp_path: Path, text: str, line: int, key: str, lines: tuple[int, int]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_file(path)
    assert str(err.value).startswith(f"{path}:{line}: {key}: set twice, on lines {lines[0]} and {lines[1]}"), \
        str(err.value)


def test_a_duplicate_key_is_refused_even_where_the_value_would_be_refused_anyway(tmp_path: Path) -> None:
    """The duplicate is the mistake to show: the file as a whole is checked before any value is read."""
    path = write(tmp_path, "probes:\n  efa:\n    bogus: 1\n    bogus: 2\n")
    with pytest.raises(ConfigError, match=r":4: probes\.efa\.bogus: set twice, on lines 3 and 4"):
        load_file(path)


def test_the_same_key_in_different_mappings_is_not_a_duplicate(tmp_path: Path) -> None:
    s = load_file(write(tmp_path, "probes:\n  kmsg: {interval: 2, deadline: 1}\n  nvml: {interval: 3, deadline: 1}\n"))
    assert (s.probes["kmsg"].interval, s.probes["nvml"].interval) == (2, 3)


def test_a_self_referencing_alias_is_refused_and_does_not_loop(tmp_path: Path) -> None:
    path = write(tmp_path, "efa_counters: &x [*x]\n")
    with pytest.raises(ConfigError, match="efa_counters: expected a single value"):
        load_file(path)


def test_a_file_that_is_not_utf8_names_the_file_the_line_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_bytes(b"node: a\n# caf\xe9 (latin-1)\nlog_level: info\n")
    with pytest.raises(ConfigError) as err:
        load_file(str(path))
    assert str(err.value).startswith(f"{path}:2: not UTF-8: byte 0xe9"), str(err.value)


def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_bytes("\ufeffnode: gpu-node-1\n".encode())
    assert load_file(str(path)).node == "gpu-node-1"
