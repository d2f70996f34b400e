"""DCGM probes against recorded real outputs, constructed failures and a stand-in `dcgmi` script."""

from __future__ import annotations

import contextlib
import json
import socket
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.clock_events import CLOCK_EVENT_BITS, clock_event_samples
from gpuhealth.exporter.probes.base import (
    BAD_OUTPUT,
    ERROR,
    MISSING_TOOL,
    NOT_FOUND,
    PERMISSION_DENIED,
    TIMEOUT,
    ProbeError,
)
from gpuhealth.exporter.probes.dcgm import (
    DcgmDiagProbe,
    DcgmExporterProbe,
    DcgmHealthProbe,
    parse_dcgm_exporter,
    parse_diag,
    parse_health,
)
from gpuhealth.exporter.probes.registry import BY_NAME
from gpuhealth.exporter.samples import GpuIdentity, ProbeResult, Problems, Sample
from tests.exporter.probes.dcgm.local_http import serving
from tests.support import paths, process_tree

FIXTURES = paths.FIXTURES / "dcgm"
L4_SCRAPE = FIXTURES / "metrics_kops_aws_L4_580.105.08.prom"
FAULTS_SCRAPE = FIXTURES / "metrics_constructed_2gpu_faults.prom"
L4_GPU = {"gpu": "0", "uuid": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", "pci_bus_id": "00000000:31:00.0",
          "source": "dcgm"}
A100 = "NVIDIA A100-SXM4-40GB"
GPU0 = {"gpu": "0", "uuid": "GPU-11111111-2222-3333-4444-555555555550", "pci_bus_id": "00000000:10:1C.0",
        "source": "dcgm"}
GPU1 = {"gpu": "1", "uuid": "GPU-11111111-2222-3333-4444-555555555551", "pci_bus_id": "00000000:10:1D.0",
        "source": "dcgm"}

Key = tuple[str, frozenset[tuple[str, str]]]


def as_map(result: ProbeResult) -> dict[Key, float]:
    """Samples keyed by (name, labels); fails on duplicate series."""
    out: dict[Key, float] = {}
    for s in result.samples:
        key = (s.name, frozenset(s.labels.items()))
        assert key not in out, f"duplicate series {key}"
        out[key] = s.value
    return out


def key(name: str, **labels: str) -> Key:
    return name, frozenset(labels.items())


def values_of(result: ProbeResult, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {k[1]: v for k, v in as_map(result).items() if k[0] == name}


def write_script(tmp_path: Path, body: str, name: str = "dcgmi") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def cat_dcgmi(tmp_path: Path, fixture: Path | str, args: str | None, exit_code: int = 0) -> list[str]:
    """A stand-in dcgmi that checks its arguments (unless None), prints an output and exits with exit_code."""
    source = fixture if isinstance(fixture, Path) else tmp_path / "output.json"
    if isinstance(fixture, str):
        source.write_text(fixture)
    check = f'[ "$*" = "{args}" ] || {{ echo "unexpected args: $*" >&2; exit 64; }}\n' if args else ""
    return [str(write_script(tmp_path, f"{ARM_WATCHES}{check}cat '{source}'\nexit {exit_code}\n"))]


# What the real dcgmi answers to `health -s a` (set all health watches).
ARM_WATCHES = '[ "$*" = "health -s a" ] && { echo "Health monitor systems set successfully."; exit 0; }\n'


def error_of(probe: Any, deadline: float = 5.0) -> ProbeError:
    with pytest.raises(ProbeError) as info:
        probe.collect(deadline)
    return info.value


# --- clock events ---------------------------------------------------------------------------------


def test_clock_event_samples_give_bitmask_and_one_flag_per_known_reason() -> None:
    labels = {"gpu": "3", "uuid": "GPU-x", "pci_bus_id": "00000000:01:00.0", "source": "nvml"}
    samples = clock_event_samples(0x48, labels)
    assert samples[0] == Sample(FAMILIES["gpuhealth_gpu_clock_event_reasons"], labels, 72.0)
    active = {s.labels["reason"]: s.value for s in samples[1:]}
    assert active == {"gpu_idle": 0, "applications_clocks_setting": 0, "sw_power_cap": 0, "hw_slowdown": 1,
                      "sync_boost": 0, "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 1,
                      "hw_power_brake_slowdown": 0, "display_clock_setting": 0}
    assert all(s.name == "gpuhealth_gpu_clock_event_active" for s in samples[1:])
    assert labels == {"gpu": "3", "uuid": "GPU-x", "pci_bus_id": "00000000:01:00.0", "source": "nvml"}


# --- failure modes shared by the dcgmi probes -----------------------------------------------------

COMMAND_PROBES = [
    pytest.param(lambda cmd: DcgmHealthProbe(cmd), id="health"),
    pytest.param(lambda cmd: DcgmDiagProbe(cmd), id="diag"),
]


@pytest.mark.parametrize("make", COMMAND_PROBES)
def test_missing_dcgmi_is_missing_tool(make: Any, tmp_path: Path) -> None:
    err = error_of(make([str(tmp_path / "no-such-dcgmi")]))
    assert err.reason == MISSING_TOOL
    assert "no-such-dcgmi" in err.message


@pytest.mark.parametrize("make", COMMAND_PROBES)
def test_non_executable_dcgmi_is_permission_denied(make: Any, tmp_path: Path) -> None:
    path = tmp_path / "dcgmi"
    path.write_text("#!/bin/sh\necho '{}'\n")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert error_of(make([str(path)])).reason == PERMISSION_DENIED


@pytest.mark.parametrize("make", COMMAND_PROBES)
def test_hanging_dcgmi_is_killed_at_the_deadline(make: Any, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = write_script(tmp_path, f"echo $$ > '{pids}'\nsleep 60 &\necho $! >> '{pids}'\nwait\n")
    started = time.monotonic()
    err = error_of(make([str(script)]), deadline=0.5)
    assert err.reason == TIMEOUT
    assert time.monotonic() - started < 5
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2  # the shell and its sleep
    give_up = time.monotonic() + 2
    while any(process_tree.alive(p) for p in children) and time.monotonic() < give_up:
        time.sleep(0.05)
    assert not any(process_tree.alive(p) for p in children)


@pytest.mark.parametrize("make", COMMAND_PROBES)
def test_garbage_output_is_bad_output(make: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path, "echo 'Segmentation fault'\necho '{{{ not json'\n")
    err = error_of(make([str(script)]))
    assert err.reason == BAD_OUTPUT
    assert "Segmentation fault" in err.message


@pytest.mark.parametrize("make", COMMAND_PROBES)
def test_failing_dcgmi_without_json_reports_first_stderr_line(make: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path, ARM_WATCHES + "echo 'Error: unable to establish a connection to the specified "
                                    "host: localhost' >&2\necho 'second line' >&2\nexit 1\n")
    err = error_of(make([str(script)]))
    assert err.reason == BAD_OUTPUT
    assert "exit 1" in err.message
    assert "unable to establish a connection to the specified host: localhost" in err.message
    assert "second line" not in err.message


@pytest.mark.parametrize("make", COMMAND_PROBES)
def test_json_that_is_not_an_object_is_bad_output(make: Any, tmp_path: Path) -> None:
    err = error_of(make(cat_dcgmi(tmp_path, "[1, 2]", None)))
    assert err.reason == BAD_OUTPUT
    assert "not an object" in err.message


# --- dcgmi health ---------------------------------------------------------------------------------


def test_health_healthy_report_gives_overall_zero_and_no_problems(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "virtualclient_DCGMIHealthCheckResults.json", "health -c -j")
    result = DcgmHealthProbe(cmd).collect(5)
    assert result.samples == [Sample(FAMILIES["gpuhealth_dcgm_health_status"], {"gpu": "", "system": ""}, 0.0)]
    assert result.problems == Problems()
    assert result.gpus is None


def test_health_failure_is_reported_per_gpu_and_system_with_only_failures_as_problems(tmp_path: Path) -> None:
    # dcgmi's own shape (Health.cpp): the GPU keyed by its bare id, the message in "overflow", cut at 54 characters.
    cmd = cat_dcgmi(tmp_path, FIXTURES / "health_failure_dcgm_source.json", "health -c -j")
    result = DcgmHealthProbe(cmd).collect(5)
    assert as_map(result) == {
        key("gpuhealth_dcgm_health_status", gpu="", system=""): 20,
        key("gpuhealth_dcgm_health_status", gpu="0", system=""): 10,
        key("gpuhealth_dcgm_health_status", gpu="0", system="pcie"): 10,
        key("gpuhealth_dcgm_health_status", gpu="1", system=""): 20,
        key("gpuhealth_dcgm_health_status", gpu="1", system="memory"): 20,
        # The messages' DCGM_FR codes: PCI_REPLAY_RATE, VOLATILE_DBE_DETECTED, PENDING_PAGE_RETIREMENTS.
        key("gpuhealth_dcgm_health_failure_code", gpu="0", system="pcie", code="3", action="cordon"): 1,
        key("gpuhealth_dcgm_health_failure_code", gpu="1", system="memory", code="4", action="reset"): 1,
        key("gpuhealth_dcgm_health_failure_code", gpu="1", system="memory", code="6", action="reset"): 1,
    }
    assert list(result.problems.gpu) == [
        "dcgmi health: GPU 1 memory failure: Detected 2 volatile double-bit ECC error(s) in GPU 1., "
        "A pending retired page has been detected in GPU 1."]


def test_health_overall_failure_without_details_is_still_a_problem() -> None:
    result = parse_health({"body": {"Overall Health": {"value": "Failure"}}})
    assert as_map(result) == {key("gpuhealth_dcgm_health_status", gpu="", system=""): 20}
    assert list(result.problems.gpu) == [
        "dcgmi health: overall health is failure (no details in the report)"]


@pytest.mark.parametrize("doc", [
    '{"body": {}, "header": ["Health Monitor Report"]}',
    '{"header": ["Health Monitor Report"]}',
    '{"body": {"Overall Health": {"value": "Splendid"}}}',
])
def test_health_report_without_overall_health_is_bad_output(doc: str, tmp_path: Path) -> None:
    err = error_of(DcgmHealthProbe(cat_dcgmi(tmp_path, doc, "health -c -j")))
    assert err.reason == BAD_OUTPUT
    assert "Overall Health" in err.message


# --- dcgmi diag -----------------------------------------------------------------------------------

R1_TESTS = {"Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
            "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"}


def diag_results(result: ProbeResult) -> set[tuple[str, str, str, str]]:
    found = set()
    for labels, value in values_of(result, "gpuhealth_dcgm_diag_result").items():
        assert value == 1
        d = dict(labels)
        found.add((d["category"], d["test"], d["gpu"], d["result"]))
    return found


def scalar(result: ProbeResult, name: str) -> float:
    return as_map(result)[key(name)]


def test_diag_3x_level1_passes_deployment_tests_without_gpu(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "virtualclient_DCGMIDiag_r1_results.json", "diag -r 1 -j")
    before = time.time()
    result = DcgmDiagProbe(cmd).collect(5)
    assert diag_results(result) == {("Deployment", t, "", "pass") for t in R1_TESTS}
    assert scalar(result, "gpuhealth_dcgm_diag_failed_tests") == 0
    assert before <= scalar(result, "gpuhealth_dcgm_diag_last_run_timestamp_seconds") <= time.time()
    assert result.problems == Problems()
    assert result.run_again_after is None


def test_diag_3x_level3_skip_is_normal_and_gpu_tests_carry_the_gpu(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "virtualclient_DCGMIDiag_r3_results.json", "diag -r 3 -j")
    result = DcgmDiagProbe(cmd, level=3).collect(5)
    assert diag_results(result) == {("Deployment", t, "", "pass") for t in R1_TESTS} | {
        ("Integration", "PCIe", "0", "pass"),
        ("Hardware", "GPU Memory", "0", "pass"),
        ("Hardware", "Diagnostic", "0", "pass"),
        ("Hardware", "EUD Test", "0", "skip"),
        ("Stress", "Targeted Stress", "0", "pass"),
        ("Stress", "Targeted Power", "0", "pass"),
        ("Stress", "Memory Bandwidth", "0", "pass"),
    }
    assert scalar(result, "gpuhealth_dcgm_diag_failed_tests") == 0
    assert list(result.problems.gpu) == []


def test_diag_3x_failing_test_is_reported_per_gpu_despite_non_zero_exit(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "diag3x_failing_constructed.json", "diag -r 3 -j", exit_code=226)
    result = DcgmDiagProbe(cmd, level=3).collect(5)
    assert diag_results(result) == {
        ("Deployment", "Denylist", "", "pass"),
        ("Deployment", "Page Retirement/Row Remap", "", "pass"),
        ("Integration", "PCIe", "0", "pass"), ("Integration", "PCIe", "1", "pass"),
        ("Hardware", "GPU Memory", "0", "pass"), ("Hardware", "GPU Memory", "1", "pass"),
        ("Hardware", "EUD Test", "0", "skip"), ("Hardware", "EUD Test", "1", "skip"),
        ("Stress", "Targeted Power", "0", "warn"), ("Stress", "Targeted Power", "1", "warn"),
        ("Stress", "Memory Bandwidth", "0", "fail"), ("Stress", "Memory Bandwidth", "1", "pass"),
    }
    assert scalar(result, "gpuhealth_dcgm_diag_failed_tests") == 1
    assert result.run_again_after == 300  # re-checked soon, so a GPU reset that fixed it shows quickly
    assert list(result.problems.gpu) == [
        "dcgmi diag: Memory Bandwidth failed on GPU 0: "
        "GPU 0 only achieved a memory bandwidth of 210.32 GB/s, failing to meet 250.00 GB/s for test 0"]


def _schema_errors(doc: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """The subset of JSON Schema dcgm_diag_schema.json uses: type, properties, required, items."""
    types = {"object": dict, "array": list, "string": str, "integer": int}
    kind = schema.get("type")
    if kind and (not isinstance(doc, types[kind]) or isinstance(doc, bool)):
        return [f"{path}: not {kind}"]
    errors = [f"{path}: missing {name}" for name in schema.get("required", []) if name not in doc]
    for name, sub in schema.get("properties", {}).items():
        if isinstance(doc, dict) and name in doc:
            errors += _schema_errors(doc[name], sub, f"{path}.{name}")
    if "items" in schema:
        for i, item in enumerate(doc):
            errors += _schema_errors(item, schema["items"], f"{path}[{i}]")
    return errors


def test_diag_4x_constructed_documents_validate_against_dcgm_schema() -> None:
    schema = json.loads((FIXTURES / "dcgm_diag_schema.json").read_text())
    for name in ("diag4x_passing_constructed.json", "diag4x_failing_constructed.json",
                 "diag4x_config_and_monitor_codes_dcgm_source.json"):
        assert _schema_errors(json.loads((FIXTURES / name).read_text()), schema) == [], name
    # The checker itself catches what the schema forbids.
    r3 = json.loads((FIXTURES / "virtualclient_DCGMIDiag_r3_results.json").read_text())
    assert _schema_errors(r3, schema) == ["$: missing DCGM Diagnostic"]
    broken = json.loads((FIXTURES / "diag4x_failing_constructed.json").read_text())
    del broken["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][0]["entity_id"]
    assert _schema_errors(broken, schema) == [
        "$.DCGM Diagnostic.test_categories[1].tests[0].results[0]: missing entity_id"]


def test_diag_4x_passing_document_reports_each_gpu_and_summary_only_tests(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "diag4x_passing_constructed.json", "diag -r 2 -j")
    result = DcgmDiagProbe(cmd, level=2).collect(5)
    assert diag_results(result) == {
        ("Deployment", "software", "0", "pass"), ("Deployment", "software", "1", "pass"),
        ("Hardware", "memory", "0", "pass"), ("Hardware", "memory", "1", "pass"),
        ("Hardware", "eud", "", "skip"),
    }
    assert scalar(result, "gpuhealth_dcgm_diag_failed_tests") == 0
    assert list(result.problems.gpu) == []


def test_diag_4x_failures_on_gpu_and_cpu_are_problems_and_warnings_are_not(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "diag4x_failing_constructed.json", "diag -r 3 -j", exit_code=1)
    result = DcgmDiagProbe(cmd, level=3).collect(5)
    assert diag_results(result) == {
        ("Deployment", "software", "0", "pass"), ("Deployment", "software", "1", "pass"),
        ("Hardware", "memory", "0", "fail"), ("Hardware", "memory", "1", "pass"),
        ("Stress", "memory_bandwidth", "0", "skip"), ("Stress", "memory_bandwidth", "1", "warn"),
        ("Stress", "cpu_eud", "", "fail"),
    }
    assert scalar(result, "gpuhealth_dcgm_diag_failed_tests") == 2
    assert list(result.problems.gpu) == [
        "dcgmi diag: memory failed on GPU 0: "
        "A DBE has occurred since the last time a GPU reset was run on GPU 0.",
        "dcgmi diag: cpu_eud failed: CPU EUD test failed on CPU 0",
    ]


def test_diag_4x_runtime_error_is_an_error_carrying_its_text(tmp_path: Path) -> None:
    doc = '{"DCGM Diagnostic": {"runtime_error": "Couldn\'t find the ubergemm executable which is required"}}'
    err = error_of(DcgmDiagProbe(cat_dcgmi(tmp_path, doc, "diag -r 1 -j", exit_code=1)))
    assert err.reason == ERROR
    assert "Couldn't find the ubergemm executable which is required" in err.message


@pytest.mark.parametrize("doc, words", [
    ('{"something": {}}', "DCGM Diagnostic"),
    ('{"DCGM Diagnostic": {}}', "test_categories"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "X", "tests": '
     '[{"name": "T", "results": [{"status": "Banana"}]}]}]}}', "Banana"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "T", "results": []}]}]}}', "category"),
])
def test_diag_document_of_unexpected_shape_is_bad_output(doc: str, words: str, tmp_path: Path) -> None:
    err = error_of(DcgmDiagProbe(cat_dcgmi(tmp_path, doc, "diag -r 1 -j")))
    assert err.reason == BAD_OUTPUT
    assert words in err.message


def _r1_where(change: str) -> str:
    """The real DCGM 3.x `dcgmi diag -r 1 -j` (a T4), with no test category, no result in any test, or every test's
    status Skip (what dcgmi writes for a test it did not run, DCGM 3.x nvvs NvvsJsonStrings.h)."""
    doc = json.loads((FIXTURES / "virtualclient_DCGMIDiag_r1_results.json").read_text())
    root = doc["DCGM GPU Diagnostic"]
    for category in root["test_categories"]:
        for test in category["tests"]:
            if change == "no results":
                test["results"] = []
            for result in test["results"]:
                result["status"] = "Skip"
    if change == "no categories":
        root["test_categories"] = []
    return json.dumps(doc)


@pytest.mark.parametrize("change, words", [
    ("no categories", "no test results: nothing was verified"),
    ("no results", "no test results: nothing was verified"),
    ("every test skipped", "every test was skipped (CUDA Main Library, Denylist, Environment Variables, Graphics "
                           "Processes, Inforom, ...): nothing was verified"),
])
def test_a_diag_that_verified_nothing_fails_closed(change: str, words: str, tmp_path: Path) -> None:
    err = error_of(DcgmDiagProbe(cat_dcgmi(tmp_path, _r1_where(change), "diag -r 1 -j")))
    assert err.reason == BAD_OUTPUT and err.message == f"dcgmi diag: {words}"


# --- dcgm-exporter --------------------------------------------------------------------------------


def test_exporter_file_scrape_of_real_l4_maps_fields_and_drops_hostname() -> None:
    result = DcgmExporterProbe(str(L4_SCRAPE), trust_unverified=True).collect(5)
    assert as_map(result) == {
        key("gpuhealth_gpu_temperature_celsius", **L4_GPU, sensor="gpu"): 31,
        key("gpuhealth_gpu_temperature_celsius", **L4_GPU, sensor="memory"): 0,
        key("gpuhealth_gpu_pcie_replays", **L4_GPU): 0,
        key("gpuhealth_gpu_remapped_rows", **L4_GPU, cause="uncorrectable"): 0,
        key("gpuhealth_gpu_remapped_rows", **L4_GPU, cause="correctable"): 0,
        key("gpuhealth_gpu_row_remap_failure", **L4_GPU): 0,
        key("gpuhealth_gpu_info", **L4_GPU, model="NVIDIA L4"): 1,
        key("gpuhealth_dcgm_exporter_foreign_samples"): 0,
    }
    assert result.gpus == [GpuIdentity("00000000:31:00.0", index="0",
                                       uuid="GPU-c2f76b33-7953-256e-8f33-1343419b1a1c")]
    assert result.problems == Problems()


def test_exporter_accepts_old_hostname_and_new_lowercase_hostname_labels(tmp_path: Path) -> None:
    text = L4_SCRAPE.read_text()
    assert 'Hostname="' in text
    new = tmp_path / "new.prom"
    new.write_text(text.replace('Hostname="', 'hostname="'))
    old_result = DcgmExporterProbe(str(L4_SCRAPE), trust_unverified=True).collect(5)
    new_result = DcgmExporterProbe(str(new), trust_unverified=True).collect(5)
    assert as_map(new_result) == as_map(old_result)
    assert new_result.gpus == old_result.gpus
    assert all("hostname" not in s.labels and "Hostname" not in s.labels for s in new_result.samples)


@contextmanager
def serve(body: bytes, status: int = 200, stall: threading.Event | None = None) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering every GET with body (after `stall` is set, if given)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if stall is not None:
                stall.wait(10)
            with contextlib.suppress(ConnectionError):  # a probe past its deadline has hung up: expected here
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as server:
        try:
            yield f"http://127.0.0.1:{server.server_port}/metrics"
        finally:
            if stall is not None:
                stall.set()


def test_exporter_http_scrape_maps_faults_of_two_gpus() -> None:
    with serve(FAULTS_SCRAPE.read_bytes()) as url:
        result = DcgmExporterProbe(url, trust_unverified=True).collect(5)
    samples = as_map(result)
    gpu1 = {k: v for k, v in samples.items() if ("gpu", "1") in k[1]}
    active = {"hw_slowdown", "hw_thermal_slowdown"}  # 72 = 0x48
    assert gpu1 == {
        key("gpuhealth_gpu_info", **GPU1, model=A100): 1,
        key("gpuhealth_gpu_temperature_celsius", **GPU1, sensor="gpu"): 88,
        key("gpuhealth_gpu_temperature_celsius", **GPU1, sensor="memory"): 95,
        key("gpuhealth_gpu_pcie_replays", **GPU1): 12,
        key("gpuhealth_dcgm_last_xid", **GPU1): 48,
        key("gpuhealth_gpu_violation_seconds", **GPU1, reason="power"): 2.5,
        key("gpuhealth_gpu_violation_seconds", **GPU1, reason="thermal"): 1.5,
        key("gpuhealth_gpu_clock_event_reasons", **GPU1): 72,
        **{key("gpuhealth_gpu_clock_event_active", **GPU1, reason=r): float(r in active)
           for r in CLOCK_EVENT_BITS},
        key("gpuhealth_gpu_ecc_errors", **GPU1, type="single_bit", scope="volatile"): 7,
        key("gpuhealth_gpu_ecc_errors", **GPU1, type="double_bit", scope="volatile"): 2,
        key("gpuhealth_gpu_ecc_errors", **GPU1, type="single_bit", scope="aggregate"): 7,
        key("gpuhealth_gpu_ecc_errors", **GPU1, type="double_bit", scope="aggregate"): 2,
        key("gpuhealth_gpu_retired_pages", **GPU1, cause="single_bit"): 0,
        key("gpuhealth_gpu_retired_pages", **GPU1, cause="double_bit"): 0,
        key("gpuhealth_gpu_retired_pages_pending", **GPU1): 0,
        key("gpuhealth_gpu_nvlink_errors", **GPU1, type="crc_flit"): 5,
        key("gpuhealth_gpu_nvlink_errors", **GPU1, type="crc_data"): 0,
        key("gpuhealth_gpu_nvlink_errors", **GPU1, type="replay"): 9,
        key("gpuhealth_gpu_nvlink_errors", **GPU1, type="recovery"): 1,
        key("gpuhealth_gpu_remapped_rows", **GPU1, cause="uncorrectable"): 1,
        key("gpuhealth_gpu_remapped_rows", **GPU1, cause="correctable"): 0,
        key("gpuhealth_gpu_row_remap_failure", **GPU1): 1,
        key("gpuhealth_gpu_row_remap_pending", **GPU1): 0,
    }
    assert samples[key("gpuhealth_gpu_row_remap_pending", **GPU0)] == 1
    # GPU 0 never had an Xid: the series is absent, not zero, and that is not a failure.
    assert key("gpuhealth_dcgm_last_xid", **GPU0) not in samples
    assert samples[key("gpuhealth_gpu_clock_event_active", **GPU0, reason="gpu_idle")] == 1
    assert result.gpus == [
        GpuIdentity("00000000:10:1C.0", index="0", uuid=GPU0["uuid"]),
        GpuIdentity("00000000:10:1D.0", index="1", uuid=GPU1["uuid"]),
    ]
    assert list(result.problems.gpu) == [
        f"dcgm-exporter: GPU 1 ({GPU1['uuid']}): 2 volatile double-bit ECC errors",
        f"dcgm-exporter: GPU 1 ({GPU1['uuid']}): row remapping failed",
    ]


def test_exporter_reads_newer_clocks_event_reasons_field() -> None:
    text = ('# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge\n'
            'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="2",UUID="GPU-z",pci_bus_id="0000:9b:00.0",'
            'modelName="NVIDIA H100 80GB HBM3",hostname="n1"} 128\n')
    labels = {"gpu": "2", "uuid": "GPU-z", "pci_bus_id": "00000000:9B:00.0", "source": "dcgm"}
    samples = as_map(parse_dcgm_exporter(text))
    assert samples[key("gpuhealth_gpu_clock_event_reasons", **labels)] == 128
    assert samples[key("gpuhealth_gpu_clock_event_active", **labels, reason="hw_power_brake_slowdown")] == 1
    assert samples[key("gpuhealth_gpu_clock_event_active", **labels, reason="hw_slowdown")] == 0


def _default_counters_scrape() -> str:
    """One GPU reporting every DCGM field default-counters.csv names, enabled or commented out."""
    lines = []
    for row in (FIXTURES / "default-counters.csv").read_text().splitlines():
        cols = [c.strip() for c in row.lstrip("# ").split(",")]
        if len(cols) < 3 or not cols[0].startswith("DCGM_FI_") or cols[1] not in {"gauge", "counter"}:
            continue
        lines += [f"# TYPE {cols[0]} {cols[1]}",
                  f'{cols[0]}{{gpu="0",UUID="GPU-a",pci_bus_id="00000000:01:00.0",modelName="M"}} 1']
    return "\n".join(lines) + "\n"


def test_every_health_field_of_default_counters_is_exported_and_nothing_else() -> None:
    families = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in L4_GPU)))
                for s in parse_dcgm_exporter(_default_counters_scrape()).samples}
    assert families == {
        ("gpuhealth_gpu_info", (("model", "M"),)),
        ("gpuhealth_gpu_temperature_celsius", (("sensor", "gpu"),)),
        ("gpuhealth_gpu_temperature_celsius", (("sensor", "memory"),)),
        ("gpuhealth_gpu_pcie_replays", ()),
        ("gpuhealth_dcgm_last_xid", ()),
        ("gpuhealth_gpu_violation_seconds", (("reason", "power"),)),
        ("gpuhealth_gpu_violation_seconds", (("reason", "thermal"),)),
        *{("gpuhealth_gpu_ecc_errors", (("scope", s), ("type", t)))
          for s in ("volatile", "aggregate") for t in ("single_bit", "double_bit")},
        ("gpuhealth_gpu_retired_pages", (("cause", "single_bit"),)),
        ("gpuhealth_gpu_retired_pages", (("cause", "double_bit"),)),
        ("gpuhealth_gpu_retired_pages_pending", ()),
        *{("gpuhealth_gpu_nvlink_errors", (("type", t),))
          for t in ("crc_flit", "crc_data", "replay", "recovery")},
        ("gpuhealth_gpu_remapped_rows", (("cause", "uncorrectable"),)),
        ("gpuhealth_gpu_remapped_rows", (("cause", "correctable"),)),
        ("gpuhealth_gpu_row_remap_failure", ()),
    }


def test_exporter_http_404_is_not_found_naming_the_url() -> None:
    with serve(b"nope", status=404) as url:
        err = error_of(DcgmExporterProbe(url, trust_unverified=True))
    assert err.reason == NOT_FOUND
    assert url in err.message


def test_exporter_unreachable_url_is_an_error_naming_the_url() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    err = error_of(DcgmExporterProbe(url, trust_unverified=True))
    assert err.reason == ERROR
    assert url in err.message


def test_exporter_that_never_answers_times_out_at_the_deadline() -> None:
    with serve(L4_SCRAPE.read_bytes(), stall=threading.Event()) as url:
        started = time.monotonic()
        err = error_of(DcgmExporterProbe(url, trust_unverified=True), deadline=0.5)
        assert time.monotonic() - started < 5
    assert err.reason == TIMEOUT


def test_exporter_missing_file_is_not_found(tmp_path: Path) -> None:
    err = error_of(DcgmExporterProbe(str(tmp_path / "metrics.prom"), trust_unverified=True))
    assert err.reason == NOT_FOUND
    assert "metrics.prom" in err.message


@pytest.mark.parametrize("body, words", [
    (b"", "empty"),
    (b"  \n", "empty"),
    (b"<html><body>502 Bad Gateway</body></html>", "not Prometheus text"),
    (b"DCGM_FI_DEV_GPU_TEMP{gpu=\"0\" 31\n", "not Prometheus text"),
    (b"\xff\xfe\x00garbage", "UTF-8"),
    (b'# TYPE up gauge\nup 1\nnode_load1{cpu="0"} 0.5\n', "no DCGM_ series"),
])
def test_exporter_empty_or_unparsable_scrape_is_bad_output(body: bytes, words: str, tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    path.write_bytes(body)
    err = error_of(DcgmExporterProbe(str(path), trust_unverified=True))
    assert err.reason == BAD_OUTPUT
    assert words in err.message


# --- the catalog contract -------------------------------------------------------------------------


def _all_fixture_results() -> Iterator[ProbeResult]:
    for name in ("virtualclient_DCGMIHealthCheckResults.json", "health_failure_dcgm_source.json"):
        yield parse_health(json.loads((FIXTURES / name).read_text()))
    for name in ("virtualclient_DCGMIDiag_r1_results.json", "virtualclient_DCGMIDiag_r3_results.json",
                 "diag3x_failing_constructed.json", "diag4x_passing_constructed.json",
                 "diag4x_failing_constructed.json", "diag3_3_3_r1_gpu_id_dcgm_source.json",
                 "diag3_3_3_r2_gpu_id_dcgm_source.json"):
        yield parse_diag(json.loads((FIXTURES / name).read_text()), 1.0)
    for text in (L4_SCRAPE.read_text(), FAULTS_SCRAPE.read_text(), _default_counters_scrape(),
                 (FIXTURES / "metrics_xid_count_dcgm_exporter_source.prom").read_text()):
        yield parse_dcgm_exporter(text)
    yield DcgmExporterProbe(str(L4_SCRAPE), node="i-030791dc5a37cd257").collect(5)


def test_every_sample_from_fixtures_is_a_catalog_family_with_its_exact_labels() -> None:
    names = set()
    for result in _all_fixture_results():
        for s in result.samples:
            assert s.name in FAMILIES, s.name
            assert set(s.labels) == set(FAMILIES[s.name].labels), (s.name, sorted(s.labels))
            assert all(isinstance(v, str) for v in s.labels.values())
            names.add(s.name)
    assert {f.name for probe in ("dcgm", "diag", "dcgm_exporter") for f in BY_NAME[probe].families} <= names


def test_health_watches_are_set_before_the_first_check_and_again_after_a_failure(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    healthy = FIXTURES / "virtualclient_DCGMIHealthCheckResults.json"
    script = write_script(tmp_path, f"echo \"$*\" >> '{calls}'\n{ARM_WATCHES}"
                                    f"[ -e '{tmp_path}/down' ] && exit 1\ncat '{healthy}'\n")
    probe = DcgmHealthProbe([str(script)])
    probe.collect(5)
    probe.collect(5)
    (tmp_path / "down").write_text("")  # nv-hostengine restarts and forgets the watches
    error_of(probe)
    (tmp_path / "down").unlink()
    probe.collect(5)
    assert calls.read_text().splitlines() == [
        "health -s a", "health -c -j", "health -c -j", "health -c -j", "health -s a", "health -c -j",
    ]


def test_failing_to_set_health_watches_is_a_probe_failure(tmp_path: Path) -> None:
    script = write_script(tmp_path, "echo 'Error: unable to establish a connection to the specified host: "
                                    "localhost' >&2\nexit 1\n")
    err = error_of(DcgmHealthProbe([str(script)]))
    assert err.reason == "error" and "cannot set health watches" in err.message and "unable to establish" in err.message
