"""The simulated fleet goes through the remediator's own decisions: budgets, breaker, ladder, max_rung, delays."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from gpuhealth.remediator.policy import BudgetSettings, Policy, Quota, ReturnToServiceSettings, parse_policy
from gpuhealth.simulator.fleet import Fault, SimNode
from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import run


def _fleet(extra: str, nodes: int = 40, days: int = 30, rate: float = 60.0, mix: str = "{Faulty GPU: 1}") -> str:
    return f"""
days: {days}
fleet: {{pools: {{p: {nodes}}}}}
failures: {{rate: {rate}, mix: {mix}, lemon: {{fraction: 0}}}}
{extra}
"""


def test_the_disruption_budget_defers_and_is_never_exceeded() -> None:
    sc = parse_scenario(_fleet("", nodes=40, rate=400.0), "budget.yaml")
    tight = run(sc, Policy(budget=BudgetSettings(max_disrupted=Quota(count=1))))[0]
    loose = run(sc, Policy(budget=BudgetSettings(max_disrupted=Quota(count=40))))[0]
    assert tight.max_disrupted["p"] == 1
    assert tight.deferred.get("disruption_budget", 0) > 0
    assert loose.max_disrupted["p"] > 1 and "disruption_budget" not in loose.deferred
    assert tight.node_availability < loose.node_availability


def test_a_switch_that_takes_a_third_of_the_pool_trips_the_breaker() -> None:
    text = """
days: 30
fleet: {pools: {p: 32}}
failures:
  rate: 0
  mix: {Faulty GPU: 1}
  lemon: {fraction: 0}
  switches: {nodes_per_switch: 16, rate: 300, repair: 2h, alert: MLX5Fatal}
"""
    r = run(parse_scenario(text, "switch.yaml"))[0]
    assert r.faults.get("Network switch (correlated)", 0) >= 16
    assert r.breaker_trips >= 1
    assert r.deferred.get("breaker", 0) > 0  # MLX5Fatal asks for reboot: disruptive steps wait for the cool-down


def test_the_ladder_climbs_to_replace_and_max_rung_stops_it() -> None:
    causes = ("causes:\n  Dead GPU: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, "
              "fixed_by: {replace: 1.0}}\n")
    sc = parse_scenario(_fleet(causes, nodes=20, rate=20.0, mix="{Dead GPU: 1}"), "climb.yaml")
    full = run(sc)[0]
    assert full.decisions.get("reset_gpu:execute", 0) > 0
    assert full.decisions.get("reboot:execute", 0) > 0
    assert full.decisions.get("replace:execute", 0) > 0
    capped = run(sc, parse_policy("ladder:\n  max_rung: reboot\n"))[0]
    assert capped.decisions.get("replace:execute", 0) == 0
    assert capped.node_availability < full.node_availability  # a person replaces it a day later


def test_the_healthy_delay_is_the_policys() -> None:
    sc = parse_scenario(_fleet("", nodes=50, rate=30.0), "delay.yaml")
    short = run(sc, Policy(return_to_service=ReturnToServiceSettings(healthy_delay=timedelta(minutes=5))))[0]
    long = run(sc, Policy(return_to_service=ReturnToServiceSettings(healthy_delay=timedelta(hours=2))))[0]
    assert long.mean_outage_h - short.mean_outage_h > 1.5  # 115 minutes more per outage, give or take


def test_same_seed_same_trace_and_results() -> None:
    sc = parse_scenario(_fleet("jobs:\n  small: {nodes: 1, duration: 2h}\n", nodes=30, rate=20.0), "seed.yaml")
    a, b = run(sc, seed=7)[0], run(sc, seed=7)[0]
    assert (a.faults, a.node_availability, a.jobs) == (b.faults, b.node_availability, b.jobs)
    c = run(replace(sc), seed=8)[0]
    assert c.faults != a.faults or c.node_availability != a.node_availability


def test_an_idle_node_sweep_finds_silent_data_corruption_and_the_climb_replaces_the_node() -> None:
    """Silent data corruption raises no alert: on an idle node only a sweep finds it (the diagnostic's coverage), and
    the climb from the sweep's failure (reset, reboot: validated, still failing) ends in a replacement."""
    sc = parse_scenario(_fleet("", nodes=20, days=30, rate=60.0, mix="{Silent Data Corruption: 1}"), "sdc.yaml")
    # the simulator has jobs find an alert-less fault after the scenario's job timeout, idle node or not: here a week,
    # as on a node no job lands on
    week = 7 * 86400.0
    off = run(sc, parse_policy("evidence: {enabled: false}\n"), detection_delay_s=week)[0]
    on = run(sc, parse_policy("evidence: {enabled: false}\nsweep: {enabled: true, interval: 1d}\n"),
             detection_delay_s=week)[0]
    assert off.faults.get("Silent Data Corruption", 0) > 0 and off.decisions.get("diagnose:execute", 0) == 0
    assert on.decisions.get("diagnose:execute", 0) > 0 and on.decisions.get("reset_gpu:execute", 0) > 0
    assert on.decisions.get("replace:execute", 0) > 0
    sdc = "Silent Data Corruption"
    assert on.out_hours_by_cause.get(sdc, 0.0) < off.out_hours_by_cause.get(sdc, 0.0)


def test_a_host_down_fault_leaves_the_simulated_node_not_ready_until_it_ends_and_other_faults_do_not() -> None:
    """A power supply or chassis behind GpuhealthExporterDown takes the kubelet down with the host: the Node is
    NotReady, which the remediator's ladder climbs on (on a Ready node gpuhealth's own alerts stop at cordon); a
    reboot does not bring a dead host back. A GPU fault leaves the kubelet up."""
    sc = parse_scenario(_fleet(""), "host.yaml")
    policy = Policy()
    node = SimNode(slot=0, pool="p")
    node.fault = Fault(1, sc.causes["Power Supply"], 0.0, "replace", 0, 1, "GpuhealthExporterDown")
    assert sc.causes["Power Supply"].host_down and not node.view(policy).ready
    node.ready = True  # a reboot ended
    assert not node.view(policy).ready
    node.fault = None
    assert node.view(policy).ready
    node.fault = Fault(2, sc.causes["Faulty GPU"], 0.0, "reset_gpu", 0, 2, "GPUXidFatal")
    assert not sc.causes["Faulty GPU"].host_down and node.view(policy).ready
