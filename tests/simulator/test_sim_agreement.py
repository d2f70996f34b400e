"""The simulator against closed forms and a paper's table (issue 15): ETTR (Kokolis et al., HPCA 2025), node
availability 1 / (1 + r_f MTTR), and Llama 3's interruptions by cause. Fixed seeds; heavier runs: bench/sim_speed.py."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.results import ettr_closed_form, ettr_renewal, poisson_interval
from gpuhealth.simulator.scenario import load_scenario, parse_scenario
from tests.simulator.sim_helpers import model_job, pipeline, run

DAY = 86400.0


# (nodes, checkpoint interval in minutes, days): from 64 nodes to 2,048 (16,384 GPUs), 5 to 60 minutes, where the
# first-order closed form holds (N r_f dt small; see docs/simulation.md for the points where it does not).
@pytest.mark.parametrize(("nodes", "dt_min", "days"), [(64, 60, 365), (256, 30, 180), (1024, 15, 60), (2048, 5, 30)])
def test_ettr_agrees_with_the_closed_form(nodes: int, dt_min: int, days: int) -> None:
    sc = model_job(nodes, dt_min, days, cost_s=30)
    results = run(sc, runs=2, detection_delay_s=300)
    simulated = statistics.fmean(next(iter(r.ettr.values())) for r in results)
    closed = ettr_closed_form(nodes, sc.rate_per_node_second, 300, 300, dt_min * 60, 30)
    assert closed > 0.5
    assert abs(simulated - closed) < 0.02, (simulated, closed)
    # and the interruptions are the failures of the job's nodes: N r_f per unit time
    interruptions = statistics.fmean(sum(next(iter(r.interruptions.values())).values()) for r in results)
    expected = nodes * sc.rate_per_node_second * days * DAY
    assert abs(interruptions - expected) < 4 * (expected / 2) ** 0.5


def test_ettr_follows_the_renewal_form_where_the_closed_form_is_first_order() -> None:
    """2,048 nodes with 60-minute checkpoints: N r_f dt = 0.55, the first-order form (0.630) is pessimistic;
    the simulation follows the exact renewal expression instead (and Kokolis's reported 0.70 at 16k GPUs)."""
    sc = model_job(2048, 60, 30)
    simulated = run(sc, detection_delay_s=300)[0].ettr
    value = next(iter(simulated.values()))
    exact = ettr_renewal(2048, sc.rate_per_node_second, 300, 300, 3600, 0)
    closed = ettr_closed_form(2048, sc.rate_per_node_second, 300, 300, 3600, 0)
    assert abs(value - exact) < 0.02
    assert value - closed > 0.02


def test_more_frequent_checkpoints_raise_ettr() -> None:
    slow = run(model_job(512, 60, 60), detection_delay_s=300)[0]
    fast = run(model_job(512, 5, 60), detection_delay_s=300)[0]
    assert next(iter(fast.ettr.values())) > next(iter(slow.ettr.values())) + 0.05


def _fixed_repair(nodes: int, days: int, rate: float, repair: str) -> str:
    return f"""
days: {days}
fleet: {{pools: {{p: {nodes}}}, new_node_faulty: 0}}
failures: {{rate: {rate}, mix: {{Cable: 1}}, lemon: {{fraction: 0}}}}
causes:
  Cable: {{alert: NetdevTransmitTimeout, scope: node, job: hang, kind: external, external_repair: {repair},
           fixed_by: {{external: 1.0}}}}
detection: {{delay: 5m, perfect: true}}
"""


def test_node_availability_agrees_with_the_renewal_form() -> None:
    """A fixed repair: detection 5 min, the cable fixed 90 min after the fault, the alert resolving through
    the rule's window and keep_firing_for and Alertmanager's group_interval, the policy's healthy delay."""
    sc = parse_scenario(_fixed_repair(200, 100, 120.0, "90m"), "fixed.yaml")
    pipe = pipeline(300.0)
    rule = pipe.alerts["NetdevTransmitTimeout"]
    resolve = (pipe.scrape_interval_s / 2 + rule.window_s + rule.keep_firing_for_s + rule.evaluation_interval_s / 2
               + pipe.actionable_route.group_interval_s / 2)
    mttr = 90 * 60 + resolve + Policy().return_to_service.healthy_delay.total_seconds() + pipe.pass_interval_s / 2
    # at 120 faults a node-year, three land within a week on most nodes: repeat offenders would replace them,
    # which is no fixed repair (tests/remediator/decide/test_repeat_offenders.py tests that)
    no_offenders = replace(Policy(), repeat_offenders=replace(Policy().repeat_offenders, enabled=False))
    r = run(sc, no_offenders, detection_delay_s=300)[0]
    assert r.outages > 2000
    assert abs(r.mean_outage_h * 3600 - mttr) < 60
    expected = 1 / (1 + sc.rate_per_node_second * mttr)
    assert abs(r.node_availability - expected) < 0.0005, (r.node_availability, expected)
    # the alert asks for cordon and its max_rung is drain (no node action fixes a cable): the persisting fault climbs
    # to the drain and no further ("none": faults the run's end caught undetected)
    assert set(r.out_hours_by_rung) <= {"cordon", "drain", "none"}
    assert r.out_hours_by_rung.get("none", 0) < 0.01 * (r.out_hours_by_rung["cordon"] + r.out_hours_by_rung["drain"])


def test_llama3_interruptions_by_cause_within_the_papers_poisson_interval() -> None:
    sc = replace(load_scenario("llama3"), small=None)
    results = run(sc, runs=3)
    counts = [next(iter(r.interruptions.values())) for r in results]
    from gpuhealth.simulator.failure_data import llama3_counts

    paper = llama3_counts()
    total = statistics.fmean(sum(c.values()) for c in counts)
    lo, hi = poisson_interval(sum(paper.values()))
    assert lo <= total <= hi, (total, lo, hi)
    for cause, k in paper.items():
        mean = statistics.fmean(c.get(cause, 0) for c in counts)
        lo, hi = poisson_interval(k)
        assert lo <= mean <= hi, (cause, mean, k, lo, hi)
