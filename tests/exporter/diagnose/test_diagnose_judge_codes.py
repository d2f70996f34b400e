"""The judge decides on DCGM's failure codes (gpuhealth/exporter/probes/dcgm/failure_codes.py): real-shaped
`dcgmi diag -j` documents (tests/fixtures/dcgm, their origin in its README) judged by the console script's main and
read back through the contract the remediator reads."""

from __future__ import annotations

import json
from pathlib import Path

from gpuhealth.contract.diagnosis import Check, Failure
from tests.exporter.diagnose.test_diagnose_judge import DCGM, collected, judged

CONFIG_AND_MONITOR = DCGM / "diag4x_config_and_monitor_codes_dcgm_source.json"
TEMPERATURE_NOTE = ("gpu_diag: dcgmi diag: targeted_stress failed on GPU 1: Temperature 93 of GPU 1 exceeded "
                    "user-specified maximum allowed temperature 87 [DCGM_FR_TEMP_VIOLATION (42): no action, "
                    "not counted]")


def test_a_denylisted_driver_fails_as_the_nodes_configuration_naming_its_code(tmp_path: Path) -> None:
    verdict = judged(tmp_path, collected(tmp_path, dcgm=CONFIG_AND_MONITOR.read_text(), dcgm_rc=226), expect_rc=1)
    assert verdict.failures == (Failure(
        Check.GPU_CONFIG, "dcgmi diag: software failed on GPU 0: Found driver on the denylist: nouveau "
        "[DCGM_FR_DENYLISTED_DRIVER (23)]", ("0", "1"), (23,)),)
    assert TEMPERATURE_NOTE in verdict.skipped


def test_a_test_whose_codes_take_no_action_is_listed_as_skipped_and_the_node_passes(tmp_path: Path) -> None:
    doc = json.loads(CONFIG_AND_MONITOR.read_text())
    software = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    assert software["name"] == "software"
    software["results"] = [{**r, "status": "Pass"} for r in software["results"]]
    software["test_summary"] = {"status": "Pass"}
    verdict = judged(tmp_path, collected(tmp_path, dcgm=json.dumps(doc), dcgm_rc=226), expect_rc=0)
    assert verdict.passed and TEMPERATURE_NOTE in verdict.skipped


def test_hardware_failures_carry_their_codes(tmp_path: Path) -> None:
    # DCGM 4.x: memory fails on GPU 0 for a DBE (57, reset), cpu_eud on a CPU (95, cordon); a warning is no failure.
    verdict = judged(tmp_path, collected(tmp_path, dcgm=(DCGM / "diag4x_failing_constructed.json").read_text(),
                                         dcgm_rc=226), expect_rc=1)
    assert [(f.category, f.gpus, f.codes) for f in verdict.failures] == [
        (Check.GPU_DIAG, ("0",), (57,)), (Check.GPU_DIAG, (), (95,))]
    assert verdict.failures[0].detail.endswith("[DCGM_FR_CUDA_DBE (57)]")


def test_a_failed_test_without_a_code_stays_a_gpu_failure(tmp_path: Path) -> None:
    # DCGM 3.x before 3.3 (gpu_ids) gives warnings as text: no code, so the failure is the GPU's (fail closed).
    doc = json.loads((DCGM / "diag3x_failing_constructed.json").read_text())
    for category in doc["DCGM GPU Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            for result in test.get("results") or []:
                for warning in result.get("warnings") or []:
                    warning.pop("error_id", None)
    verdict = judged(tmp_path, collected(tmp_path, dcgm=json.dumps(doc), dcgm_rc=226), expect_rc=1)
    assert [(f.category, f.gpus, f.codes) for f in verdict.failures] == [(Check.GPU_DIAG, ("0",), ())]
