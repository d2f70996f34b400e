"""Jobs against Kokolis et al. (HPCA 2025, "Revisiting Reliability in Large-Scale Machine Learning Research
Clusters"; gpuhealth/simulator/data/meta_rsc_kokolis.csv): on an RSC-1-like fleet, the infrastructure's failure rate r_f
(6.50 per 1,000 node-days) and the all-cause 7.9 h MTTF of 1,024-GPU jobs (Fig. 7) both come out of the model,
and the 512+-GPU job failure rate before lemon-node removal (14%). The published 4% after removal does NOT come out
of it (docs/simulation.md, "Calibration of jobs"): that test pins the model's figure, so a better lemon model
shows up here. Fixed seeds; each check is a count against its exact Poisson interval, as the ETTR agreement is.

These checks calibrate the job model alone, under perfect detection (`detection: {perfect: true}`): Kokolis's r_f,
Fig. 7's MTTF and the 14% are what RSC-1 observed, its own detection's misses (jobs failing again on a node no rule
saw) already inside them. The model's `rate` is the rate faults arrive at; only with every fault seen is the rate of
failed jobs that rate, so only then is the published figure the one to reproduce. The shipped detection
(causes.yaml's coverage and flapping) adds the failures of jobs landing on unseen faults on top: the same 512+-GPU
runs give 15.2% [14.2%, 16.2%] failing over seeds 1-3 (17.1% with seed 1 alone) instead of 14%
(docs/simulation.md "Calibration of jobs"; bench/sim_calibration.py prints both)."""

from __future__ import annotations

from gpuhealth.remediator.policy import Policy, parse_policy
from gpuhealth.simulator.engine import Simulation
from gpuhealth.simulator.failure_data import rsc_rates
from gpuhealth.simulator.jobs.outcomes import SizeTally
from gpuhealth.simulator.results import poisson_interval
from gpuhealth.simulator.scenario import Scenario, parse_scenario
from tests.simulator.sim_helpers import pipeline, run

FIG7_MTTF_1024_H = 7.9  # Kokolis Fig. 7 (meta_rsc_kokolis.csv mttf_1024gpu_jobs_empirical)
OTHER_RATE = 1000.0 / (128 * FIG7_MTTF_1024_H / 24.0) - rsc_rates()["rsc1"]  # 17.2: all causes minus r_f
LARGE_BEFORE, LARGE_AFTER = 0.14, 0.04  # 512+ GPU jobs failing, before and after lemon nodes were removed
REPEAT_OFFENDERS_OFF = parse_policy("alertmanager: {url: none}\nrepeat_offenders: {enabled: false}\n")


RSC1_FAILURES = "rate: rsc1, mix: llama3-infra, lemon: {fraction: 0.012, multiplier: [5, 10]}"  # as rsc1.yaml


def rsc1_like(days: int, training: str, perfect: bool = True, failures: str = RSC1_FAILURES) -> Scenario:
    """rsc1.yaml's failure model (infra at r_f by Table 5's infrastructure rows, lemons, other causes; `failures`:
    the scenario's failures mapping) and the given training jobs, no small jobs; perfect detection unless `perfect`
    is False (the shipped causes.yaml's)."""
    return parse_scenario(f"""
days: {days}
detection: {{perfect: {str(perfect).lower()}}}
fleet: {{pools: {{rsc1: 2000}}}}
failures: {{{failures}}}
jobs:
  other_failure_rate: {OTHER_RATE:.2f}
  training: {training}
""", "rsc1-like.yaml")


def test_the_other_causes_rate_is_fig7_all_causes_minus_r_f() -> None:
    assert abs(OTHER_RATE - 17.2) < 0.05


def test_a_1024_gpu_job_meets_r_f_from_the_infrastructure_and_fig7_mttf_from_all_causes() -> None:
    results = run(rsc1_like(90, "[{name: fig7, nodes: 128, checkpoint_interval: 30m, checkpoint_cost: 30s, "
                                "restart_overhead: 10m}]"), runs=2)
    t = SizeTally.pooled([r.outcomes.by_size["1024-2047"] for r in results])
    node_days = t.run_s * 128 / 86400.0
    lo, hi = poisson_interval(t.attempts_failed_infra)
    assert lo <= rsc_rates()["rsc1"] / 1000.0 * node_days <= hi, (t.attempts_failed_infra, node_days)
    failures = t.attempts_failed_infra + t.attempts_failed_other
    lo, hi = poisson_interval(failures)
    expected = t.run_s / 3600.0 / FIG7_MTTF_1024_H
    assert lo <= expected <= hi, (failures, expected, t.mttf_h)
    # the infrastructure alone would give 28.9 h: the check above could not pass on r_f alone
    assert t.mttf_h is not None and t.mttf_h < 10.0


def _large_jobs(policy: Policy) -> SizeTally:
    sc = rsc1_like(60, "[{name: j512, nodes: 64, checkpoint_interval: 30m, work: 90m, resume: false, repeat: true}, "
                       "{name: j1024, nodes: 128, checkpoint_interval: 30m, work: 90m, resume: false, repeat: true}]")
    return SizeTally.pooled([r.outcomes.large() for r in run(sc, policy, seed=1, runs=2)])  # seeds 1-2 pooled


def test_512_gpu_jobs_fail_as_often_as_before_lemon_removal_and_the_repeat_offender_policy_does_not_reach_4pc() -> None:
    before, after = _large_jobs(REPEAT_OFFENDERS_OFF), _large_jobs(Policy())
    failed_before = before.jobs_ended - before.jobs_completed
    lo, hi = poisson_interval(failed_before)
    assert lo <= LARGE_BEFORE * before.jobs_ended <= hi, (failed_before, before.jobs_ended)
    # what the model gives with the repeat-offender policy on: about the same, nowhere near Kokolis's 4% (the
    # model's lemons, 1.2% of nodes at 5-10x, carry under a tenth of the failures; see docs/simulation.md)
    share_after = 1 - after.jobs_completed / after.jobs_ended
    assert share_after > 2 * LARGE_AFTER, share_after
    assert abs(share_after - failed_before / before.jobs_ended) < 0.03


def _lemon_slots(kept: bool) -> tuple[set[int], set[int], int]:
    """Lemons at the start and at the end of a month on 100 nodes whose every fault is fixed by a new node."""
    sc = parse_scenario(f"""
days: 30
fleet: {{pools: {{p: 100}}}}
failures: {{rate: 30, mix: {{Dead GPU: 1}}, lemon: {{fraction: 0.3, multiplier: [5, 10], kept: {str(kept).lower()}}}}}
causes:
  Dead GPU: {{alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {{replace: 1.0}}}}
""", "lemons.yaml")
    first = Simulation(sc, Policy(), pipeline(), 1)
    first.faults.start()  # the first nodes only: the same draws as the run's
    sim = Simulation(sc, Policy(), pipeline(), 1)
    sim.run()
    return ({n.slot for n in first.fleet.nodes if n.lemon}, {n.slot for n in sim.fleet.nodes if n.lemon},
            sum(n.generation > 0 for n in sim.fleet.nodes))


def test_a_replacement_draws_a_new_node_unless_lemons_are_kept_with_their_slot() -> None:
    before, after, replaced = _lemon_slots(kept=False)
    assert replaced > 20 and before and after != before  # new nodes are lemons 30% of the time, not where they were
    before, after, replaced = _lemon_slots(kept=True)
    assert replaced > 20 and after == before  # failures.lemon.kept: the slot's lemon comes back repaired
