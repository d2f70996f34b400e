"""The diagnostic Job's verdict (gpuhealth/contract/diagnosis.py): what the judge writes the remediator reads back,
within the 4096 bytes the kubelet keeps of a termination message, and nothing else reads as a verdict."""

from __future__ import annotations

import json

import pytest

from gpuhealth.contract.diagnosis import MAX_BYTES, Check, DiagnosticReport, Failure


def test_a_verdict_round_trips() -> None:
    verdict = DiagnosticReport((Failure(Check.GPU_DIAG, "dcgmi diag: memory failed on GPU 3: DBE", ("3",)),
                       Failure(Check.EFA_COUNT, "31 of 32 EFA devices in sysfs")),
                      ("nccl_bandwidth: all_reduce_perf is not in the image",), level=2)
    back = DiagnosticReport.from_json(verdict.to_json())
    assert back == verdict and not back.passed
    assert DiagnosticReport.from_json(DiagnosticReport(level=1).to_json()).passed


def test_a_huge_verdict_is_cut_to_the_termination_message_limit_and_stays_failed() -> None:
    many = tuple(Failure(Check.GPU_DIAG, "é" * 2000, tuple(str(g) for g in range(200))) for _ in range(300))
    text = DiagnosticReport(many, tuple("x" * 500 for _ in range(50)), level=3).to_json()
    assert len(text.encode()) <= MAX_BYTES
    back = DiagnosticReport.from_json(text)
    assert not back.passed and back.truncated > 0 and len(back.failures) + back.truncated == 300
    assert back.failures[0].category == Check.GPU_DIAG and back.failures[0].detail.endswith("...")


def test_a_verdict_that_fits_is_not_cut() -> None:
    verdict = DiagnosticReport((Failure(Check.GPU_COUNT, "7 of 8 GPUs visible to nvidia-smi"),), level=2)
    assert DiagnosticReport.from_json(verdict.to_json()) == verdict


@pytest.mark.parametrize("text", [
    "",  # an empty termination message
    '{"v": 1, "passed": true, "level": 2, "failures": [{"category": "gpu_count", "gpus": [], "detail": "x"}]',  # cut
    '{"v": 1, "passed": true, "level": 2, "failures": [{"category": "gpu_count", "gpus": [], "detail": "x"}]}',
    '{"v": 1, "passed": false, "level": 2, "failures": []}',  # failed with nothing failed
    '{"v": 2, "passed": true, "level": 2, "failures": []}',  # a version this reader does not know
    '{"v": 1, "passed": false, "level": 2, "failures": [{"category": "vibes", "detail": "x"}]}',
    '["passed"]',
    "Error: unable to establish a connection",
])
def test_anything_else_is_no_verdict(text: str) -> None:
    with pytest.raises(ValueError):
        DiagnosticReport.from_json(text)


@pytest.mark.parametrize("text, why", [
    # a valid verdict padded past what the kubelet keeps: only a writer of the pod's status could have put it there
    (json.dumps({"v": 1, "passed": False, "level": 2, "failures": [
        {"category": "gpu_count", "gpus": [], "detail": "x" * MAX_BYTES}]}), "longer than 4096 bytes"),
    ("[" * 100_000 + "]" * 100_000, "longer than 4096 bytes"),
    # deep nesting within the bound: RecursionError (no JSONDecodeError) where the recursion limit is under 2,048,
    # else a list, which is no verdict either: a ValueError both ways, never a RecursionError
    ("[" * 2048 + "]" * 2048, "not JSON|not a version 1 verdict object"),
])
def test_a_verdict_past_the_termination_message_bound_or_too_deep_is_no_verdict(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        DiagnosticReport.from_json(text)


def test_the_json_shape_is_the_documented_one() -> None:
    doc = json.loads(DiagnosticReport((Failure(Check.NCCL_BANDWIDTH, "low", ()),), level=2).to_json())
    assert doc == {"v": 1, "passed": False, "level": 2, "skipped": [],
                   "failures": [{"category": "nccl_bandwidth", "gpus": [], "detail": "low"}]}
