"""The verdict's optional DCGM codes keep version 1 readable both ways: the first verdict reader (commit b6c7b96's
gpuhealth/contract/diagnosis.py, kept unchanged in tests/fixtures/diagnosis) reads a verdict with codes as it read
one without, and today's reader reads the first judge's verdicts. A gpu_config failure is what the first reader
cannot judge: it refuses the verdict, which its remediator reads as a failed diagnosis (tool_error, fail closed)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from tests.support import paths

FIRST_READER = paths.FIXTURES / "diagnosis" / "contract_diagnosis_v1_b6c7b96.py.txt"


@pytest.fixture(scope="module")
def first() -> ModuleType:
    """The first reader, loaded as its own module (a .py.txt, so that no tool takes it for the project's code)."""
    name = "gpuhealth_contract_diagnosis_v1_b6c7b96"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(FIRST_READER.read_text(), str(FIRST_READER), "exec"), module.__dict__)
    return module


def test_the_first_reader_reads_a_gpu_diag_failure_with_codes_as_before(first: ModuleType) -> None:
    verdict = DiagnosticReport((Failure(Check.GPU_DIAG, "dcgmi diag: memory failed on GPU 0: a DBE", ("0",), (57,)),
                                Failure(Check.EFA_COUNT, "3 of 4 EFA devices in sysfs")), level=2)
    text = verdict.to_json()
    assert '"codes":[57]' in text
    old = first.DiagnosticReport.from_json(text)
    assert not old.passed and old.level == 2
    assert [(str(f.category), f.gpus, f.detail) for f in old.failures] == [
        ("gpu_diag", ("0",), "dcgmi diag: memory failed on GPU 0: a DBE"),
        ("efa_count", (), "3 of 4 EFA devices in sysfs")]


def test_a_verdict_without_codes_is_the_first_judges_byte_for_byte(first: ModuleType) -> None:
    failures = (Failure(Check.GPU_DIAG, "dcgmi diag: memory failed on GPU 3", ("3",)),)
    ours = DiagnosticReport(failures, ("nccl_bandwidth: all_reduce_perf is not in the image",), level=1)
    theirs = first.DiagnosticReport((first.Failure(first.Check.GPU_DIAG, "dcgmi diag: memory failed on GPU 3",
                                                   ("3",)),), ours.skipped, level=1)
    assert ours.to_json() == theirs.to_json()


def test_todays_reader_reads_the_first_judges_verdicts_as_failures_without_codes(first: ModuleType) -> None:
    theirs = first.DiagnosticReport((first.Failure(first.Check.GPU_DIAG, "dcgmi diag: memory failed", ("1",)),),
                                    level=2).to_json()
    (failure,) = DiagnosticReport.from_json(theirs).failures
    assert failure == Failure(Check.GPU_DIAG, "dcgmi diag: memory failed", ("1",), ())


def test_the_first_reader_refuses_a_gpu_config_failure_so_its_remediator_fails_closed(first: ModuleType) -> None:
    verdict = DiagnosticReport((Failure(Check.GPU_CONFIG, "dcgmi diag: software failed", ("0",), (23,)),), level=1)
    with pytest.raises(ValueError, match="unknown category 'gpu_config'"):
        first.DiagnosticReport.from_json(verdict.to_json())


@pytest.mark.parametrize("codes", ['"57"', "[true]", '["57"]', "[-1]", "[5.5]"])
def test_codes_that_are_not_dcgm_codes_are_no_verdict(codes: str) -> None:
    text = ('{"v": 1, "passed": false, "level": 2, "failures": [{"category": "gpu_diag", "gpus": ["0"], '
            f'"detail": "x", "codes": {codes}}}], "skipped": []}}')
    with pytest.raises(ValueError):
        DiagnosticReport.from_json(text)
