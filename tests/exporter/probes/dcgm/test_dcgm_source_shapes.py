"""DCGM outputs in the shapes DCGM's own source writes, which the earlier fixtures did not have.

- `dcgmi diag -j` from DCGM 3.3 on names the GPU of each result in `gpu_id` (one GPU per result), not
  `gpu_ids`; deployment tests give it as a number, with their messages under `warnings` (dcgmi/Diag.cpp).
- dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT counts each Xid within its window, a series per `xid`
  (internal/pkg/collector/xid_collector.go, rendered by internal/pkg/rendermetrics/render_metrics.go).

The fixtures are built from that source; tests/fixtures/dcgm/README.md names the file and version of each.
(The failing `dcgmi health -c -j` shape is tested in test_dcgm_probe.py, on health_failure_dcgm_source.json.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.exporter.probes.dcgm import DcgmDiagProbe, parse_dcgm_exporter, parse_diag
from gpuhealth.exporter.samples import ProbeResult
from tests.support import paths

FIXTURES = paths.FIXTURES / "dcgm"
XID_COUNT_SCRAPE = FIXTURES / "metrics_xid_count_dcgm_exporter_source.prom"
GPU1 = {"gpu": "1", "uuid": "GPU-11111111-2222-3333-4444-555555555551", "pci_bus_id": "00000000:10:1D.0",
        "source": "dcgm"}


def diag_of(name: str) -> ProbeResult:
    return parse_diag(json.loads((FIXTURES / name).read_text()), 1.0)


def failed(result: ProbeResult) -> set[tuple[str, str]]:
    return {(s.labels["test"], s.labels["gpu"]) for s in result.samples
            if s.name == "gpuhealth_dcgm_diag_result" and s.labels["result"] == "fail"}


def test_a_dcgm_3_3_diag_failure_names_the_gpu_of_its_gpu_id(tmp_path: Path) -> None:
    script = tmp_path / "dcgmi"
    script.write_text(f"#!/bin/sh\ncat '{FIXTURES / 'diag3_3_3_r2_gpu_id_dcgm_source.json'}'\nexit 226\n")
    script.chmod(0o755)
    result = DcgmDiagProbe([str(script)], level=2).collect(5)
    assert failed(result) == {("GPU Memory", "1")}
    passed = {(s.labels["test"], s.labels["gpu"]) for s in result.samples
              if s.name == "gpuhealth_dcgm_diag_result" and s.labels["result"] == "pass"}
    assert {("GPU Memory", "0"), ("PCIe", "0"), ("PCIe", "1")} <= passed
    assert list(result.problems.gpu) == [
        "dcgmi diag: GPU Memory failed on GPU 1: A memory mismatch was detected on GPU 1, but no error was "
        "reported by CUDA or NVML."]


def test_a_dcgm_3_3_deployment_failure_names_its_numeric_gpu_id_and_keeps_its_message() -> None:
    result = diag_of("diag3_3_3_r1_gpu_id_dcgm_source.json")
    assert failed(result) == {("Page Retirement/Row Remap", "1")}
    assert list(result.problems.gpu) == [
        "dcgmi diag: Page Retirement/Row Remap failed on GPU 1: GPU 1 had uncorrectable memory errors and "
        "row remapping failed."]


def test_a_diag_result_left_null_for_a_gpu_that_did_not_run_the_test_is_passed_over() -> None:
    # Diag.cpp (3.3) writes results[i] for the i-th GPU of the run and none for a GPU whose test was not
    # run; JSON fills the gap before a later GPU's result with null.
    doc = json.loads((FIXTURES / "diag3_3_3_r2_gpu_id_dcgm_source.json").read_text())
    hardware = next(c for c in doc["DCGM GPU Diagnostic"]["test_categories"] if c["category"] == "Hardware")
    hardware["tests"][0]["results"][0] = None
    result = parse_diag(doc, 1.0)
    assert failed(result) == {("GPU Memory", "1")}
    assert not any(s.labels.get("test") == "GPU Memory" and s.labels["gpu"] == "0" for s in result.samples)


def test_the_older_3x_gpu_ids_list_still_gives_one_result_per_gpu() -> None:
    result = diag_of("virtualclient_DCGMIDiag_r3_results.json")
    gpus = {s.labels["gpu"] for s in result.samples
            if s.name == "gpuhealth_dcgm_diag_result" and s.labels["category"] != "Deployment"}
    assert gpus == {"0"}


def xid_window(result: ProbeResult) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in result.samples
            if s.name == "gpuhealth_dcgm_xid_errors_window"}


# dcgm-exporter's collector test expects a gauge; its etc/default-counters.csv lists the field as a counter.
@pytest.mark.parametrize("prom_type", ["gauge", "counter"])
def test_dcgm_exporters_xid_window_count_is_read_per_gpu_and_xid(prom_type: str) -> None:
    text = XID_COUNT_SCRAPE.read_text().replace("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge",
                                                f"# TYPE DCGM_EXP_XID_ERRORS_COUNT {prom_type}")
    result = parse_dcgm_exporter(text)
    assert xid_window(result) == {
        tuple(sorted({**GPU1, "xid": "13"}.items())): 1,
        tuple(sorted({**GPU1, "xid": "48"}.items())): 2,
    }  # GPU 0's series without an xid (no Xid in the window) gives nothing
    last = [s for s in result.samples if s.name == "gpuhealth_dcgm_last_xid"]
    assert [(s.labels["gpu"], s.value) for s in last] == [("1", 48)]
    assert {s.labels["gpu"] for s in result.samples if s.name == "gpuhealth_gpu_info"} == {"0", "1"}
