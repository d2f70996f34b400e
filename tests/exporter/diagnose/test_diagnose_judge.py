"""gpuhealth-diagnose, the diagnostic Job's judge: real tool outputs (tests/fixtures/dcgm, tests/fixtures/nccl, the p4d
sysfs tree) laid out as the Job's collect step writes them, judged by the console script's main, read back through the
contract the remediator reads (gpuhealth/contract/diagnosis.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.contract.diagnosis import Check, DiagnosticReport
from gpuhealth.exporter.diagnose.cli import main
from gpuhealth.exporter.diagnose.nccl import floor_for, parse_all_reduce
from tests.support import paths

DCGM = paths.FIXTURES / "dcgm"
NCCL = (paths.FIXTURES / "nccl" / "all_reduce_perf_8xH200.txt").read_text()
P4D = paths.FIXTURES / "sysfs" / "p4d"  # 3 EFA devices of a p4d.24xlarge's 4
H200_ROWS = "".join(f"{i}, GPU-{i:08x}-1111-2222-3333-444455556666, NVIDIA H200, 00000000:{i + 10:02X}:00.0\n"
                    for i in range(8))


def collected(tmp_path: Path, gpus: str = H200_ROWS, gpus_rc: int = 0, dcgm: str | None = None, dcgm_rc: int = 0,
              nccl: str | None = NCCL, nccl_rc: int = 0) -> Path:
    """A collect step's output directory: nccl None is an image without all_reduce_perf."""
    d = tmp_path / "diag"
    d.mkdir()
    (d / "gpus.out").write_text(gpus)
    (d / "gpus.rc").write_text(f"{gpus_rc}\n")
    (d / "dcgm.out").write_text(dcgm if dcgm is not None else (DCGM / "diag4x_passing_constructed.json").read_text())
    (d / "dcgm.rc").write_text(f"{dcgm_rc}\n")
    if nccl is None:
        (d / "nccl.absent").write_text("")
    else:
        (d / "nccl.out").write_text(nccl)
        (d / "nccl.rc").write_text(f"{nccl_rc}\n")
    return d


def judged(tmp_path: Path, directory: Path, *extra: str, expect_rc: int | None = None) -> DiagnosticReport:
    log = tmp_path / "termination-log"
    rc = main(["--dir", str(directory), "--level", "2", "--sysfs-root", str(P4D), "--gpus-expected", "8",
               "--termination-log", str(log), *extra])
    verdict = DiagnosticReport.from_json(log.read_text())
    assert rc == (0 if verdict.passed else 1)
    if expect_rc is not None:
        assert rc == expect_rc
    return verdict


def categories(verdict: DiagnosticReport) -> list[Check]:
    return [f.category for f in verdict.failures]


def test_a_healthy_node_passes_and_exits_0(tmp_path: Path) -> None:
    verdict = judged(tmp_path, collected(tmp_path), expect_rc=0)
    assert verdict.passed and verdict.level == 2
    assert verdict.skipped == ("efa_count: the node was provisioned with no EFA device",)


@pytest.mark.parametrize(("fixture", "test", "gpus"), [
    ("diag3_3_3_r2_gpu_id_dcgm_source.json", "GPU Memory", ("1",)),  # DCGM 3.3 layout
    ("diag3x_failing_constructed.json", "Memory Bandwidth", ("0",)),  # earlier 3.x (gpu_ids)
    ("diag4x_failing_constructed.json", "memory", ("0",)),  # DCGM 4.x (entity_group / entity_id)
])
def test_a_failed_dcgm_test_fails_the_node_naming_its_gpu(tmp_path: Path, fixture: str, test: str,
                                                          gpus: tuple[str, ...]) -> None:
    verdict = judged(tmp_path, collected(tmp_path, dcgm=(DCGM / fixture).read_text(), dcgm_rc=226), expect_rc=1)
    diag = [f for f in verdict.failures if f.category == Check.GPU_DIAG]
    assert diag[0].gpus == gpus and f"{test} failed" in diag[0].detail


def test_a_warning_or_a_skipped_dcgm_test_is_no_failure(tmp_path: Path) -> None:
    # r3 on a T4: EUD skipped (real, DCGM 3.x); the constructed 3.x file's Targeted Power warns on both GPUs
    assert judged(tmp_path, collected(tmp_path, dcgm=(DCGM / "virtualclient_DCGMIDiag_r3_results.json").read_text())
                  ).passed


def test_an_unknown_dcgm_status_fails_closed(tmp_path: Path) -> None:
    doc = json.loads((DCGM / "diag4x_passing_constructed.json").read_text())
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "Mostly fine"
    verdict = judged(tmp_path, collected(tmp_path, dcgm=json.dumps(doc)), expect_rc=1)
    assert categories(verdict) == [Check.TOOL_ERROR] and "unknown status" in verdict.failures[0].detail


@pytest.mark.parametrize(("dcgm", "rc", "why"), [
    ((DCGM / "diag4x_passing_constructed.json").read_text()[:700], 0, "unreadable output"),  # truncated JSON
    ("Error: unable to establish a connection to the specified host: localhost\n", 255, "unreadable output"),
    ("", 124, "timed out"),  # the collect step's timeout stopped it: a hang fails closed
    ("", 127, "not in the image"),
])
def test_a_dcgm_run_that_gives_no_verdict_fails_closed(tmp_path: Path, dcgm: str, rc: int, why: str) -> None:
    verdict = judged(tmp_path, collected(tmp_path, dcgm=dcgm, dcgm_rc=rc), expect_rc=1)
    assert categories(verdict) == [Check.TOOL_ERROR] and why in verdict.failures[0].detail


@pytest.mark.parametrize("everything", ["skipped", "absent"])
def test_a_dcgm_run_that_verified_nothing_fails_closed(tmp_path: Path, everything: str) -> None:
    doc = json.loads((DCGM / "diag4x_passing_constructed.json").read_text())
    for category in doc["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            if everything == "absent":
                test["results"] = []
                test.pop("test_summary", None)
            for result in test.get("results") or []:
                result["status"] = "Skip"
            if isinstance(test.get("test_summary"), dict):
                test["test_summary"]["status"] = "Skip"
    verdict = judged(tmp_path, collected(tmp_path, dcgm=json.dumps(doc)), expect_rc=1)
    assert categories(verdict) == [Check.TOOL_ERROR] and "nothing was verified" in verdict.failures[0].detail


def test_a_dcgm_run_with_no_exit_status_recorded_fails_closed(tmp_path: Path) -> None:
    d = collected(tmp_path)
    (d / "dcgm.rc").unlink()
    assert categories(judged(tmp_path, d)) == [Check.TOOL_ERROR]


def test_fewer_gpus_than_provisioned_fails_gpu_count_and_as_many_passes(tmp_path: Path) -> None:
    seven = "".join(H200_ROWS.splitlines(keepends=True)[:7]) + \
        "Unable to determine the device handle for GPU0000:11:00.0: Unknown Error\n"
    verdict = judged(tmp_path, collected(tmp_path, gpus=seven, gpus_rc=255), expect_rc=1)
    assert categories(verdict) == [Check.GPU_COUNT] and verdict.failures[0].detail.startswith("7 of 8 GPUs")
    (tmp_path / "b").mkdir()
    assert judged(tmp_path / "b", collected(tmp_path / "b", gpus=seven), "--gpus-expected", "7").passed


def test_the_instance_types_gpu_count_wins_over_the_nodes(tmp_path: Path) -> None:
    # a p4d.24xlarge is built with 8 GPUs: a Node whose capacity already dropped to 7 does not lower the bar
    seven = "".join(H200_ROWS.splitlines(keepends=True)[:7])
    verdict = judged(tmp_path, collected(tmp_path, gpus=seven), "--gpus-expected", "7",
                     "--instance-type", "p4d.24xlarge")
    assert categories(verdict) == [Check.GPU_COUNT]


def test_no_known_gpu_count_fails_closed(tmp_path: Path) -> None:
    verdict = judged(tmp_path, collected(tmp_path), "--gpus-expected", "")
    assert categories(verdict) == [Check.TOOL_ERROR] and "provisioned GPU count" in verdict.failures[0].detail


def test_fewer_efa_devices_than_provisioned_fails_efa_count_and_as_many_passes(tmp_path: Path) -> None:
    verdict = judged(tmp_path, collected(tmp_path), "--efa-expected", "4")
    assert categories(verdict) == [Check.EFA_COUNT] and verdict.failures[0].detail == "3 of 4 EFA devices in sysfs"
    (tmp_path / "b").mkdir()
    assert judged(tmp_path / "b", collected(tmp_path / "b"), "--efa-expected", "3").passed


def test_an_efa_count_above_the_instance_types_maximum_is_cut_to_it(tmp_path: Path) -> None:
    # a typo in the label (40) on a p4d.24xlarge (4 at most) asks for 4: the p4d tree's 3 still fail
    verdict = judged(tmp_path, collected(tmp_path), "--efa-expected", "40", "--instance-type", "p4d.24xlarge",
                     "--gpus-expected", "8")
    assert [f.detail for f in verdict.failures] == ["3 of 4 EFA devices in sysfs"]


def test_nccl_tests_absent_is_skipped_not_failed(tmp_path: Path) -> None:
    verdict = judged(tmp_path, collected(tmp_path, nccl=None), expect_rc=0)
    assert "nccl_bandwidth: all_reduce_perf is not in the image" in verdict.skipped


def test_the_real_h200_run_is_above_its_floor_and_the_same_run_below_it_fails(tmp_path: Path) -> None:
    run = parse_all_reduce(NCCL)
    assert (run.largest.size, run.largest.busbw, run.wrong) == (8589934592, 476.98, 0)
    assert floor_for("NVIDIA H200") == 300.0
    # built from the real capture: only the two busbw figures replaced (a board with an NVLink down)
    slow = NCCL.replace("476.96", "251.30").replace("476.98", "251.33")
    verdict = judged(tmp_path, collected(tmp_path, nccl=slow), expect_rc=1)
    assert categories(verdict) == [Check.NCCL_BANDWIDTH]
    assert "251.33 GB/s" in verdict.failures[0].detail and "floor of 300 GB/s" in verdict.failures[0].detail


def test_the_floor_is_compared_on_both_sides(tmp_path: Path) -> None:
    at_floor = NCCL.replace("476.96", "299.00").replace("476.98", "300.00")
    assert judged(tmp_path, collected(tmp_path, nccl=at_floor)).passed
    (tmp_path / "b").mkdir()
    under = NCCL.replace("476.96", "299.00").replace("476.98", "299.99")
    assert categories(judged(tmp_path / "b", collected(tmp_path / "b", nccl=under))) == [Check.NCCL_BANDWIDTH]


def test_the_policys_floor_overrides_the_table(tmp_path: Path) -> None:
    verdict = judged(tmp_path, collected(tmp_path), "--nccl-floor", "500")
    assert categories(verdict) == [Check.NCCL_BANDWIDTH]


def test_wrong_all_reduce_results_fail_whatever_the_bandwidth(tmp_path: Path) -> None:
    # built from the real capture: the #wrong columns and the out-of-bounds line set
    wrong = NCCL.replace("476.96      0", "476.96     12").replace("0 OK", "12 FAILED")
    verdict = judged(tmp_path, collected(tmp_path, nccl=wrong), expect_rc=1)
    assert categories(verdict) == [Check.NCCL_BANDWIDTH] and "wrong results" in verdict.failures[0].detail


def test_an_all_reduce_that_stopped_before_its_first_size_fails_closed(tmp_path: Path) -> None:
    # built from the real capture: cut before the table (what an NCCL error at init leaves)
    cut = NCCL.split("NCCL version")[0] + "test-h200-deb: Test NCCL failure common.cu:1005 'unhandled system error'\n"
    verdict = judged(tmp_path, collected(tmp_path, nccl=cut, nccl_rc=2), expect_rc=1)
    assert categories(verdict) == [Check.TOOL_ERROR] and "no measurement" in verdict.failures[0].detail


def test_a_product_without_a_floor_skips_the_bandwidth_check(tmp_path: Path) -> None:
    pcie = H200_ROWS.replace("NVIDIA H200", "NVIDIA H100 PCIe")
    verdict = judged(tmp_path, collected(tmp_path, gpus=pcie))
    assert verdict.passed and "nccl_bandwidth: no floor for NVIDIA H100 PCIe" in verdict.skipped


def test_every_failure_is_reported_at_once(tmp_path: Path) -> None:
    seven = "".join(H200_ROWS.splitlines(keepends=True)[:7])
    verdict = judged(tmp_path, collected(tmp_path, gpus=seven, nccl="",
                                         dcgm=(DCGM / "diag4x_failing_constructed.json").read_text()),
                     "--efa-expected", "4")
    assert set(categories(verdict)) == {Check.GPU_COUNT, Check.GPU_DIAG, Check.EFA_COUNT, Check.TOOL_ERROR}
