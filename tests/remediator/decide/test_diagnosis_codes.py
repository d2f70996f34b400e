"""The diagnostic's DCGM codes decide (decide/diagnosis.py, diagnose_step.py, validation.py, sweep.py): a diagnosis that
failed only for the node's software or configuration (gpu_config) confirms no hardware fault, so the node is neither
replaced nor climbed on it and waits for a person, the Event naming the codes; a GPU failure beside it (a replace code)
confirms. The real remediator against the fake API server, the verdicts through the judge's own contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuhealth.contract.diagnosis import Check, DiagnosticReport, Failure
from gpuhealth.remediator.decide.diagnosis import Diagnosis
from gpuhealth.remediator.decide.sweep import sweep_rung
from gpuhealth.remediator.decide.vocabulary import Rung
from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.remediator.scenarios.test_diagnose_before_replace import NODE, climb_to_the_replace, fire
from tests.remediator.scenarios.test_diagnose_before_replace import POLICY as REPLACE_POLICY
from tests.remediator.scenarios.test_validation_before_return import POLICY as VALIDATE_POLICY
from tests.remediator.scenarios.test_validation_before_return import jobs, judge_ends, reset_then_resolve
from tests.support import chart_rbac
from tests.support.remediator_harness import Harness

DENYLISTED = Failure(Check.GPU_CONFIG, "dcgmi diag: software failed on GPU 0: Found driver on the denylist: nouveau "
                     "[DCGM_FR_DENYLISTED_DRIVER (23)]", ("0", "1"), (23,))
ROW_REMAP = Failure(Check.GPU_DIAG, "dcgmi diag: memory failed on GPU 1: row remapping failed "
                    "[DCGM_FR_ROW_REMAP_FAILURE (80)]", ("1",), (80,))


def _cluster(policy: str) -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for i in range(4):
            c.add_node(f"gpu-{i}")
        chart_rbac.enforce(c, chart_rbac.policy_values(parse_policy(policy)))
        yield c


@pytest.fixture
def replacing() -> Iterator[FakeCluster]:
    yield from _cluster(REPLACE_POLICY)


@pytest.fixture
def validating() -> Iterator[FakeCluster]:
    yield from _cluster(VALIDATE_POLICY)


def test_a_diagnosis_that_finds_only_the_nodes_configuration_does_not_replace_it(replacing: FakeCluster) -> None:
    h = Harness(replacing, REPLACE_POLICY)
    climb_to_the_replace(h, replacing)
    (diag,) = jobs(replacing, "diagnose")
    judge_ends(replacing, diag, DiagnosticReport((DENYLISTED,), level=2))
    for _ in range(3):  # the alert keeps firing: the node waits for a person, the Event is said once
        h.advance(minutes=10)
        fire(h)
        assert h.decisions(h.step()) == [(NODE, "none", "skipped")]
    (event,) = [e for e in replacing.events if e["reason"] == "DiagnosticFoundConfiguration"]
    assert "DCGM failure codes 23" in event["message"] and "DCGM_FR_DENYLISTED_DRIVER" in event["message"]
    assert "no hardware fault is confirmed" in event["message"] and event["type"] == "Warning"
    assert "DiagnosticFailed" not in replacing.reasons(NODE) and "Replace" not in replacing.reasons(NODE)
    assert h.state(NODE).diagnostic.result == "failed for the node's configuration only"
    assert h.metric("gpuhealth_remediator_diagnostics_total", result="configuration") == 1


def test_a_replace_code_beside_the_configuration_confirms_the_fault(replacing: FakeCluster) -> None:
    h = Harness(replacing, REPLACE_POLICY)
    climb_to_the_replace(h, replacing)
    (diag,) = jobs(replacing, "diagnose")
    judge_ends(replacing, diag, DiagnosticReport((DENYLISTED, ROW_REMAP), level=2))
    h.advance(minutes=1)
    fire(h)
    assert h.decisions(h.step()) == [(NODE, "replace", "execute")]
    failed = next(e for e in replacing.events if e["reason"] == "DiagnosticFailed")
    assert "confirms the fault (gpu_config, gpu_diag" in failed["message"] and "(80)" in failed["message"]


def test_a_sweep_that_finds_only_the_configuration_keeps_the_node_cordoned_for_a_person() -> None:
    assert sweep_rung(("gpu_config",)) == Rung.CORDON
    assert sweep_rung(("gpu_config", "gpu_diag")) == Rung.RESET_GPU


def test_only_a_complete_verdict_of_configuration_failures_is_configuration_only() -> None:
    assert Diagnosis.of(DiagnosticReport((DENYLISTED,), level=1)).configuration_only
    assert not Diagnosis.of(DiagnosticReport((DENYLISTED, ROW_REMAP), level=1)).configuration_only
    assert not Diagnosis.of(DiagnosticReport((DENYLISTED,), level=1, truncated=2)).configuration_only
    assert not Diagnosis.of(DiagnosticReport(level=1)).configuration_only
    old_judge = DiagnosticReport((Failure(Check.GPU_DIAG, "dcgmi diag: memory failed", ("1",)),), level=1)
    assert Diagnosis.of(old_judge).codes == () and not Diagnosis.of(old_judge).configuration_only


def test_a_validation_that_finds_only_the_configuration_holds_the_node_and_climbs_nothing(
        validating: FakeCluster) -> None:
    h = Harness(validating, VALIDATE_POLICY)
    reset_then_resolve(h, validating)
    h.step()  # the validation's Job, named in the state
    judge_ends(validating, str(h.state("gpu-1").diagnostic.job), DiagnosticReport((DENYLISTED,), level=1))
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-1", "none", "skipped")]
    assert "DiagnosticFoundConfiguration" in validating.reasons("gpu-1")
    h.advance(hours=2)
    assert h.decisions(h.step()) == [("gpu-1", "none", "skipped")]
    assert h.state("gpu-1").rung == "reset_gpu" and not jobs(validating, "reboot")
    assert validating.node("gpu-1")["spec"]["unschedulable"] is True
