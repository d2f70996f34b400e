"""Which fault each real (and format-string-built) kernel-log line is, by the shipped pattern file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.exporter.kernel.patterns import KernelEventMatcher, PatternError, load_patterns
from gpuhealth.exporter.kernel.records import iter_text_records

# One row per record of tests/fixtures/kmsg/samples.txt, in order: (kind, the fields that matter).
EXPECTED_SAMPLES: list[tuple[str | None, dict[str, str]]] = [
    ("xid", {"xid": "79", "pci": "0000:05:00"}),
    ("xid", {"xid": "79", "pci": "0000:01:00"}),
    ("xid", {"xid": "79", "pci": "0000:29:00.0"}),
    ("xid", {"xid": "79", "pci": "0000:b3:00.0"}),  # the three-line variant, without an Xid
    ("gpu_map", {"pci": "0000:9b:00", "uuid": "GPU-509665ad-b600-ac93-3616-d754b23d636d"}),
    (None, {}),  # board serial number
    ("xid", {"xid": "119", "pci": "0000:9b:00"}),
    (None, {}),  # GSP RPC buffer detail
    ("xid", {"xid": "13", "pci": "0000:38:00"}),
    ("xid", {"xid": "13", "pci": "0000:38:00"}),
    ("xid", {"xid": "13", "pci": "0000:38:00"}),
    ("xid", {"xid": "32", "pci": "0000:66:00"}),
    ("xid", {"xid": "13", "pci": "0000:b5:00"}),
    ("xid", {"xid": "48", "pci": "0008:06:00"}),
    ("xid", {"xid": "74", "pci": "0003:00:00"}),
    ("xid", {"xid": "149", "pci": "0018:01:00", "fatal": "Fatal"}),
    ("xid", {"xid": "149", "pci": "0009:01:00", "fatal": "Fatal"}),
    ("xid", {"xid": "154", "pci": "0009:01:00", "action_code": "0x4", "action": "Drain and Reset"}),
    ("xid", {"xid": "154", "pci": "0019:01:00", "action_code": "0x1", "action": "GPU Reset Required"}),
    ("xid", {"xid": "145", "pci": "0018:01:00", "fatal": "Nonfatal"}),
    ("xid", {"xid": "145", "pci": "0008:01:00", "fatal": "Nonfatal"}),
    ("xid", {"xid": "149", "pci": "0008:01:00", "fatal": "Fatal"}),
    ("xid", {"xid": "154", "pci": "0008:01:00", "action_code": "0x1", "action": "GPU Reset Required"}),
    ("event", {"event": "nvlink_error"}),
    ("event", {"event": "nvlink_error"}),
    ("sxid", {"sxid": "24007", "fatal": "Fatal", "pci": "0000:c3:00.0"}),
    ("sxid", {"sxid": "20009", "fatal": "Non-fatal", "pci": "0000:06:00.0"}),
    ("sxid", {"sxid": "20034", "fatal": "Fatal", "pci": "0000:00:00.0"}),
    ("event", {"event": "mlx5_fatal", "device": "0000:03:00.0"}),
    ("event", {"event": "mlx5_fatal", "device": "0000:d2:00.0"}),
    ("event", {"event": "mlx5_fatal"}),
    ("event", {"event": "netdev_tx_timeout", "device": "eth0"}),
    ("event", {"event": "mlx5_error", "device": "0000:5c:00.0"}),
    ("event", {"event": "mlx5_error", "device": "0000:5c:00.0"}),
    ("ignore", {}),  # ACCESS_REG noise from counter reads
    ("event", {"event": "mlx5_link_down", "device": "0000:41:00.1"}),
    (None, {}),  # efa: enabling device (healthy probe)
    (None, {}),
    (None, {}),  # efa_0: IB device registered
    ("event", {"event": "hung_task"}),
    (None, {}),  # hung-task detail line
    ("event", {"event": "soft_lockup"}),
    ("event", {"event": "nccl_segfault"}),
    ("event", {"event": "peermem_error"}),
    (None, {}),  # nvswitch open (informational)
]

EXPECTED_CONSTRUCTED: list[tuple[str | None, dict[str, str]]] = [
    ("event", {"event": "pcie_aer_fatal", "device": "0000:17:00.0"}),  # the header names the source device
    ("event", {"event": "pcie_aer_fatal", "device": "0000:17:00.0"}),  # its detail: part of it (the probe)
    ("event", {"event": "pcie_aer_nonfatal", "device": "0000:18:00.0"}),
    ("event", {"event": "pcie_aer_corrected", "device": "0000:00:03.0"}),
    ("event", {"event": "mce"}),
    ("event", {"event": "mce_corrected"}),
    ("event", {"event": "hard_lockup"}),
    ("event", {"event": "efa_error", "device": "0000:00:1b.0"}),
]


@pytest.mark.parametrize(("name", "expected"), [("samples.txt", EXPECTED_SAMPLES),
                                                 ("constructed.txt", EXPECTED_CONSTRUCTED)])
def test_each_fixture_record_is_classified_as_expected(
    fixtures: Path, name: str, expected: list[tuple[str | None, dict[str, str]]]
) -> None:
    matcher = KernelEventMatcher()
    records = list(iter_text_records((fixtures / "kmsg" / name).read_text().splitlines()))
    assert len(records) == len(expected)
    for record, (kind, fields) in zip(records, expected, strict=True):
        match = matcher.match(record.text)
        got_kind = match.kind if match else None
        assert got_kind == kind, record.text
        if match:
            assert {k: match.fields.get(k) for k in fields} == fields, record.text


def test_an_xid_line_of_a_new_shape_is_counted_as_unparsed_not_ignored() -> None:
    match = KernelEventMatcher().match("NVRM: Xid (GPU 3 on bus 9b): 222 something new")
    assert match is not None and match.kind == "unparsed_xid"


def test_unknown_xid_numbers_are_still_xids() -> None:
    match = KernelEventMatcher().match("NVRM: Xid (PCI:0000:9b:00): 999, a future Xid")
    assert match is not None and (match.kind, match.fields["xid"]) == ("xid", "999")


def test_a_new_pattern_is_one_entry_in_the_data_file(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("patterns:\n  - {name: oom, kind: event, event: oom_kill, regex: 'Out of memory: Killed process'}\n")
    match = KernelEventMatcher(load_patterns(f)).match("Out of memory: Killed process 4242 (python)")
    assert match is not None and match.fields == {"event": "oom_kill"}


@pytest.mark.parametrize(("body", "why"), [
    ("patterns:\n  - {name: x, kind: event, event: e, regex: '(unclosed'}\n", "pattern 'x': bad regex"),
    ("patterns:\n  - {name: x, kind: bogus, regex: 'a'}\n", "kind must be one of"),
    ("patterns:\n  - {name: x, kind: event, regex: 'a'}\n", "needs `event:`"),
    ("patterns:\n  - {name: x, kind: xid, regex: 'a'}\n", "needs a (?P<xid>...) group"),
    ("patterns:\n  - {name: x, kind: event, event: e, regex: a, colour: red}\n", "unknown key(s) ['colour']"),
    ("patterns: [\n", "not valid YAML"),
    # a second `regex:` in one pattern would replace the first without a word
    ("patterns:\n  - name: x\n    kind: ignore\n    regex: a\n    regex: b\n",
     ":5: patterns[0].regex: set twice, on lines 4 and 5"),
    ("rules: []\n", "needs a top-level `patterns:` list"),
    ("patterns:\n  - {name: x, kind: gpu_map, regex: 'GPU at (?P<pci>\\S+)'}\n", "needs the group(s) uuid"),
    ("patterns:\n  - {name: x, kind: sxid, regex: 'SXid (?P<sxid>\\d+)'}\n", "needs the group(s) fatal, pci"),
    ("patterns:\n  - {name: x, kind: event, event: e, regex: a, part_of: [y]}\n", "name no pattern: y"),
    ("patterns:\n  - {name: x, kind: event, event: e, regex: a, announces: y}\n", "announces must be a list"),
    ("patterns:\n  - {name: x, kind: ignore, regex: a, part_of: [x]}\n", "part_of/announces are for event patterns"),
    ("patterns:\n  - {name: x, kind: event, event: e, regex: a, condition: GpuhealthGpuHealthy}\n",
     "pattern 'x': condition must be one of GpuhealthGPUHealthy, GpuhealthNVLinkHealthy, GpuhealthEFAHealthy, "
     "GpuhealthKernelHealthy, not 'GpuhealthGpuHealthy'"),
    ("patterns:\n  - {name: x, kind: event, event: e, regex: a, condition: GpuhealthProbesHealthy}\n",
     "condition must be one of"),  # about the probes, not a fault a line can report
    ("patterns:\n  - {name: x, kind: event, event: e, regex: a, condition: [GpuhealthKernelHealthy]}\n",
     "condition must be one of"),
    ("patterns:\n  - {name: x, kind: ignore, regex: a, condition: GpuhealthKernelHealthy}\n",
     "pattern 'x': condition is for xid, sxid, event patterns, not ignore"),
])
def test_a_bad_pattern_file_is_refused_with_file_entry_and_reason(tmp_path: Path, body: str, why: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(body)
    with pytest.raises(PatternError) as err:
        load_patterns(f)
    assert str(f) in str(err.value) and why in str(err.value)


def test_a_missing_or_unreadable_pattern_file_is_a_clear_error(tmp_path: Path) -> None:
    for path, why in ((tmp_path / "none.yaml", "No such file"), (tmp_path, "Is a directory")):
        with pytest.raises(PatternError, match=why):
            load_patterns(path)


def test_every_shipped_pattern_is_anchored_at_the_start_of_the_kernel_message() -> None:
    # an application's log that quotes a kernel line must not match: only the kernel's own prefix starts a record
    assert [p.name for p in load_patterns() if not p.regex.pattern.startswith("^")] == []


# --- the node condition each pattern sets (`condition:`) ---

# What gpuhealth/exporter/conditions.py decided in code before the patterns named their condition: every Xid (the
# fatal ones) the GPU condition, every SXid (the fatal ones) NVLink's, and these events.
_EVENT_CONDITIONS_IN_CODE = {
    "nvlink_error": "GpuhealthNVLinkHealthy", "efa_error": "GpuhealthEFAHealthy",
    **dict.fromkeys(("pcie_aer_fatal", "mce", "hung_task", "soft_lockup", "hard_lockup", "mlx5_fatal"),
                    "GpuhealthKernelHealthy"),
}


def test_each_shipped_pattern_sets_the_condition_the_code_gave_its_kind_and_event() -> None:
    by_kind = {"xid": "GpuhealthGPUHealthy", "sxid": "GpuhealthNVLinkHealthy"}
    for p in load_patterns():
        expected = _EVENT_CONDITIONS_IN_CODE.get(p.event, "") if p.kind == "event" else by_kind.get(p.kind, "")
        assert p.condition == expected, p.name


def test_a_match_carries_its_patterns_condition(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("patterns:\n"
                 "  - {name: oom, kind: event, event: oom_kill, regex: '^Out of memory',\n"
                 "     condition: GpuhealthKernelHealthy}\n"
                 "  - {name: quiet, kind: event, event: usb, regex: '^usb '}\n")
    matcher = KernelEventMatcher(load_patterns(f))
    oom, usb = matcher.match("Out of memory: Killed process 1"), matcher.match("usb 1-1: new device")
    assert oom is not None and oom.condition == "GpuhealthKernelHealthy"
    assert usb is not None and usb.condition == ""


def test_the_condition_of_a_kind_and_event_is_the_first_pattern_that_names_one() -> None:
    matcher = KernelEventMatcher()
    assert matcher.condition_of("xid") == "GpuhealthGPUHealthy"
    assert matcher.condition_of("sxid") == "GpuhealthNVLinkHealthy"
    assert matcher.condition_of("event", "mce") == "GpuhealthKernelHealthy"
    assert matcher.condition_of("event", "mce_corrected") == ""
    assert matcher.condition_of("event", "no_such_event") == ""
