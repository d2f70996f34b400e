"""Burn-in of new nodes in the simulation (gpuhealth/simulator/burn_in.py; the remediator's decide/burn_in.py, run as it
is): with the NodePool's startup taint (`fleet.burn_in`), a new node is held out of work until the diagnostic passes, so
a faulty new node is caught before its first job, within the diagnostic's coverage; without it, the first job meets
the fault. The time in burn-in is counted apart, not as time out of service."""

from __future__ import annotations

from functools import cache

from gpuhealth.remediator.policy import parse_policy
from gpuhealth.simulator.results import RunResult
from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import run

# every new node arrives with a dead GPU; its alert sees half of them (the rest only a job or the diagnostic finds)
_HALF_SEEN = ("Dead GPU: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {replace: 1.0}, "
              "detection: {coverage: 0.5}}")


@cache
def _runs(burn_in: bool, faulty: float = 1.0) -> tuple[RunResult, ...]:
    return tuple(run(parse_scenario(f"""
days: 30
fleet: {{pools: {{p: 60}}, new_node_faulty: {faulty}, burn_in: {str(burn_in).lower()}}}
failures: {{rate: 30, mix: {{Dead GPU: 1}}, lemon: {{fraction: 0}}}}
causes:
  {_HALF_SEEN}
detection: {{false_positives: {{}}}}
jobs:
  small: {{nodes: 1, duration: 2h, utilization: 0.95, app_bug_fraction: 0}}
""", "burn-in.yaml"), runs=2))


def _sum(runs: tuple[RunResult, ...], key: str) -> float:
    return sum(r.replacement[key] for r in runs)


def test_without_burn_in_the_first_job_meets_a_faulty_new_nodes_fault() -> None:
    off = _runs(False)
    faulty, met = _sum(off, "new_nodes_faulty"), _sum(off, "new_node_faults_met_by_a_job")
    assert _sum(off, "burn_ins") == 0 and _sum(off, "burn_in_caught") == 0
    # the half no alert sees all fail a job first; some of the seen half too (a job lands before the alert fires)
    assert faulty > 40 and met >= 0.45 * faulty, (met, faulty)


def test_with_burn_in_a_faulty_new_node_is_caught_before_its_first_job_within_the_diagnostics_coverage() -> None:
    on = _runs(True)
    faulty, caught = _sum(on, "new_nodes_faulty"), _sum(on, "burn_in_caught")
    through, met = _sum(on, "burn_in_passed_faulty"), _sum(on, "new_node_faults_met_by_a_job")
    assert _sum(on, "burn_ins") == _sum(on, "spares_used")  # every new node was burnt in
    assert faulty > 40 and caught >= 0.7 * faulty, (caught, faulty)
    # what a job still meets is only what the diagnostic let through: its coverage (0.8 of the faults no alert saw)
    assert met <= through
    failed = _sum(on, "burn_in_failed")
    assert 0 < through < 0.5 * failed, (through, failed)


def test_time_in_burn_in_is_counted_apart_not_as_time_out_of_service() -> None:
    on, off = _runs(True, 0.0), _runs(False, 0.0)
    hours = _sum(on, "burn_in_hours")
    assert _sum(on, "burn_ins") > 30 and hours > 0.5
    out_on = sum(r.out_node_seconds for r in on) / 3600.0
    out_off = sum(r.out_node_seconds for r in off) / 3600.0
    # sound new nodes: burn-in changes no outage; counted as out of service it would add all its hours
    assert abs(out_on - out_off) < 0.5 * hours, (out_on, out_off, hours)


def test_without_a_diagnostic_the_burn_in_taint_comes_off_untested_at_once() -> None:
    # the real code's BurnInSkipped: gpuhealth never keeps new capacity out for its own configuration
    sc = parse_scenario(f"""
days: 30
fleet: {{pools: {{p: 60}}, new_node_faulty: 1.0}}
failures: {{rate: 30, mix: {{Dead GPU: 1}}, lemon: {{fraction: 0}}}}
causes:
  {_HALF_SEEN}
detection: {{false_positives: {{}}}}
""", "skipped.yaml")
    r = run(sc, parse_policy("alertmanager: {url: none}\ndiagnose: {enabled: false}\n"))[0]
    assert r.replacement["burn_ins"] > 10
    assert r.replacement["burn_in_failed"] == 0 and r.replacement["burn_in_hours"] < 0.5
