"""Small jobs give their nodes back and are preempted by training jobs in the same instant: a job that is ending is
never also queued to start again (it would end twice; the run stopped with a KeyError)."""

from __future__ import annotations

from remediator.policy import parse_policy
from simulator.detection import load_pipeline
from simulator.engine import Simulation
from simulator.overrides import Overrides, apply
from simulator.scenario import load_scenario

# Tight budgets and a high failure rate keep training jobs waiting for nodes, so a small job that ends frees a node
# into a preemption. With this seed the first such moment comes on day 2 (job 14299).
TIGHT = parse_policy("alertmanager: {url: none}\nbudget: {max_disrupted: 2, max_cordoned: 4, max_actions_per_hour: 5}\n"
                     "breaker: {threshold: '3%', min_nodes: 3}\n")


def test_a_small_job_that_frees_a_node_for_a_preempting_training_job_ends_once() -> None:
    scenario = apply(load_scenario("mixed-1000"), Overrides(days=6, failure_rate=80.0))
    pipe = load_pipeline(evaluation_interval_s=scenario.evaluation_interval_s,
                         detection_delay_s=scenario.detection_delay_s)
    result = Simulation(scenario, TIGHT, pipe, 11).run()
    jobs = result.jobs
    assert jobs.preempted > 0  # the moment the test is about happened
    assert jobs.ended <= jobs.submitted  # no job ended twice
