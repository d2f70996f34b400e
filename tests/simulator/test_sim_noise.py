"""Detection that is not perfect (gpuhealth/simulator/noise.py): a fault its alert misses is found only by jobs and
people, a false positive raises an alert on a healthy node and the remediator's own decisions act on it, a flapping
alert resolves and fires again. Each side of each threshold, on seeded runs."""

from __future__ import annotations

from gpuhealth.remediator.policy import parse_policy
from gpuhealth.simulator.failure_data import Cause, DetectionModel
from gpuhealth.simulator.noise import seen_by
from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import run


def _fleet(detection: str = "", false_positives: str = "{}", rate: float = 30.0, days: int = 30) -> str:
    return f"""
days: {days}
fleet: {{pools: {{p: 40}}, new_node_faulty: 0}}
failures: {{rate: {rate}, mix: {{Dead GPU: 1}}, lemon: {{fraction: 0}}}}
causes:
  Dead GPU: {{alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {{replace: 1.0}},
             detection: {detection or "{}"}}}
detection: {{false_positives: {false_positives}}}
"""


def test_coverage_is_the_share_of_faults_whose_alert_fires() -> None:
    cause = Cause("X", "GPUXidFatal", "gpu", "crash", "hardware", (("reboot", 1.0),), None,
                  DetectionModel(coverage=0.3))
    seen = sum(seen_by(cause, seed) is not None for seed in range(10_000))
    assert 2_800 < seen < 3_200
    full = Cause("Y", "GPUXidFatal", "gpu", "crash", "hardware", (("reboot", 1.0),))
    assert all(seen_by(full, seed) == "GPUXidFatal" for seed in range(1_000))


def test_a_fault_its_alert_misses_is_found_only_by_the_jobs_and_a_person() -> None:
    seen = run(parse_scenario(_fleet("{coverage: 1}"), "seen.yaml"))[0]
    missed = run(parse_scenario(_fleet("{coverage: 0}"), "missed.yaml"))[0]
    assert seen.decisions.get("replace:execute", 0) > 0
    # no alert: the remediator never acts; the node waits for a person (remediation.manual_repair, a day)
    assert not any(k.endswith(":execute") for k in missed.decisions)
    assert set(missed.out_hours_by_rung) == {"none"}
    assert missed.mean_outage_h > 20 > seen.mean_outage_h
    assert missed.node_availability < seen.node_availability


def test_a_false_positive_raises_the_alert_on_a_healthy_node_and_the_ladder_acts_on_it() -> None:
    quiet = run(parse_scenario(_fleet(rate=0), "quiet.yaml"))[0]
    assert quiet.false_positives == {} and quiet.node_availability == 1.0 and quiet.decisions == {}
    noisy = run(parse_scenario(_fleet(rate=0, false_positives="{GPUXidFatal: 40}"), "noisy.yaml"))[0]
    assert noisy.faults == {}  # nothing broke
    assert noisy.false_positives["GPUXidFatal"] > 20  # 40 per 1,000 node-days x 1,200 node-days: about 48
    # the remediator's own ladder takes the healthy node out (GPUXidFatal asks for a GPU reset) and returns it
    assert noisy.decisions.get("cordon:execute", 0) > 20 and noisy.decisions.get("uncordon:execute", 0) > 20
    assert set(noisy.out_hours_by_cause) == {"False positive: GPUXidFatal"}
    assert noisy.node_availability < 1.0


def test_a_flapping_alert_resolves_and_fires_again_while_the_fault_persists() -> None:
    # the ladder stops at cordon, so the fault stays until a person replaces the node a day later
    capped = parse_policy("ladder:\n  max_rung: cordon\n")
    steady = run(parse_scenario(_fleet("{flapping: 0}", rate=10.0), "steady.yaml"), capped)[0]
    flapping = run(parse_scenario(_fleet("{flapping: 1, signal: 30m, quiet: 3h}", rate=10.0), "flap.yaml"), capped)[0]
    assert steady.flapped == 0
    assert flapping.flapped > 10
    # each return of the signal is a new alert: the node is taken out again, after it went back to service
    assert flapping.decisions.get("cordon:execute", 0) > steady.decisions.get("cordon:execute", 0)


def test_a_quiet_spell_shorter_than_the_rules_resolution_does_not_resolve_the_alert() -> None:
    """GPUXidFatal's increase over 5 minutes and keep_firing_for 5m ride out a signal quiet for a minute or so."""
    capped = parse_policy("ladder:\n  max_rung: cordon\n")
    brief = run(parse_scenario(_fleet("{flapping: 1, signal: 30m, quiet: 20s}", rate=10.0), "brief.yaml"), capped)[0]
    assert brief.flapped == 0


def test_a_rate_counted_from_health_check_hits_is_not_thinned_again_by_the_alerts_coverage() -> None:
    by_interruptions = parse_scenario(_fleet("{coverage: 0}"), "interruptions.yaml")
    by_health_checks = parse_scenario(_fleet("{coverage: 0}").replace("lemon: {fraction: 0}}", "lemon: {fraction: 0}, "
                                                                      "counted_by: health_checks}"), "checks.yaml")
    assert not by_interruptions.rate_seen and by_health_checks.rate_seen
    missed, seen = run(by_interruptions)[0], run(by_health_checks)[0]
    assert sum(seen.faults.values()) > 10
    assert not any(k.endswith(":execute") for k in missed.decisions)  # coverage 0: no alert, for a rate of faults
    # counted from health-check hits, each fault was seen: its alert fires and the remediator replaces the node
    assert seen.decisions.get("replace:execute", 0) > 0
