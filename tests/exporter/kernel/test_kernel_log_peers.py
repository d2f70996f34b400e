"""Every peer project's kernel-log test file (tests/fixtures/kmsg/peers, see its SOURCES.md) counts exactly
what its expected.json says: Xids per GPU, fatal flags and recovery actions, SXids, host events, records."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.contract.pci import normalize_bus_id
from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.samples import ProbeResult
from tests.exporter.kernel.kmsg_file_harness import event_totals, file_probe, settled_copy, total, xids
from tests.support import paths

PEERS = paths.FIXTURES / "kmsg" / "peers"
EXPECTED: dict[str, dict[str, Any]] = json.loads((PEERS / "expected.json").read_text())


def test_every_peer_file_has_an_expectation_and_every_expectation_a_file() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in PEERS.glob("*.txt"))


def _by(result: ProbeResult, family: str, key: str) -> dict[str, dict[str, dict[str, float]]]:
    """{id: {"by_pci": {pci: n}, "fatal": {"true"/"false": n}}} for Xids (key xid) or SXids (key sxid)."""
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: {"by_pci": Counter(), "fatal": Counter()})
    for s in result.samples:
        if s.name == family and s.value:
            entry = out[s.labels[key]]
            entry["by_pci"][s.labels["pci_bus_id"]] += s.value
            if s.labels["fatal"]:
                entry["fatal"][s.labels["fatal"]] += s.value
    return out


def _normalized(by_pci: dict[str, int]) -> dict[str, float]:
    return {normalize_bus_id(pci): float(n) for pci, n in by_pci.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_peer_file_counts_what_its_expectation_says(name: str, tmp_path: Path) -> None:
    want = EXPECTED[name]
    result = file_probe(settled_copy(PEERS / name, tmp_path)).collect(5)

    got_xids = _by(result, "gpuhealth_xid_errors", "xid")
    assert {x: sum(v["by_pci"].values()) for x, v in got_xids.items()} == want["xid"]
    assert {x: sorted(v["by_pci"]) for x, v in got_xids.items()} == {
        x: sorted(normalize_bus_id(p) for p in pcis) for x, pcis in want["gpu_pci"].items()}
    for xid, by_pci in want.get("xid_by_pci", {}).items():
        assert dict(got_xids[xid]["by_pci"]) == _normalized(by_pci)
    for xid, fatal in want.get("xid_fatal", {}).items():
        assert dict(got_xids[xid]["fatal"]) == fatal

    got_sxids = _by(result, "gpuhealth_nvswitch_sxid_errors", "sxid")
    assert {x: sum(v["by_pci"].values()) for x, v in got_sxids.items()} == want["sxid"]
    for sxid, by_pci in want.get("sxid_by_pci", {}).items():
        assert dict(got_sxids[sxid]["by_pci"]) == _normalized(by_pci)
    for sxid, fatal in want.get("sxid_fatal", {}).items():
        assert dict(got_sxids[sxid]["fatal"]) == fatal

    assert dict(event_totals(result)) == want["other"]
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == want["unparsed_xid"]
    if "records_kernel" in want:
        kernel = [s.value for s in result.samples
                  if s.name == "gpuhealth_kmsg_records" and s.labels["origin"] == "kernel"]
        assert kernel == [want["records_kernel"]]
    actions = {s.labels["pci_bus_id"]: s.value for s in result.samples if s.name == "gpuhealth_gpu_recovery_action"}
    assert actions == _normalized(want.get("recovery_action", {}))
    assert total(result, "gpuhealth_kmsg_lines_unrecognised") == 0


def test_the_capture_without_a_trailing_newline_keeps_its_last_record(tmp_path: Path) -> None:
    # gpud's kmsg.1.log ends without a newline: its 47th record (seq 4010) is the last line.
    source = PEERS / "gpud_kmsg_raw_nvswitch_open.txt"
    assert not source.read_bytes().endswith(b"\n")
    probe = file_probe(settled_copy(source, tmp_path))
    probe.collect(5)
    assert probe.counts[(FAMILIES["gpuhealth_kmsg_records"], (("origin", "kernel"),))] == 47
    assert xids(probe.collect(5)) == {}
