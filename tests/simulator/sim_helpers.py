"""Shared by the tests/simulator/test_sim_*.py files: small scenarios written inline, the repo's pipeline."""

from __future__ import annotations

from functools import cache

from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.cli import simulate
from gpuhealth.simulator.detection import Pipeline, load_pipeline
from gpuhealth.simulator.results import RunResult
from gpuhealth.simulator.scenario import Scenario, parse_scenario


@cache
def pipeline(detection_delay_s: float | None = None) -> Pipeline:
    return load_pipeline(detection_delay_s=detection_delay_s)


def model_job(nodes: int, checkpoint_min: int, days: float, rate: float = 6.5, detection_s: int = 300,
              restart_s: int = 300, cost_s: int = 0) -> Scenario:
    """One synchronous job of `nodes` nodes, 10% spares, one hardware cause, a fixed detection delay, perfect
    detection (every fault seen, no false positive, no flapping) and sound new nodes: the closed forms' model."""
    return parse_scenario(f"""
days: {days}
fleet: {{pools: {{p: {nodes + nodes // 10 + 8}}}, new_node_faulty: 0}}
failures: {{rate: {rate}, mix: {{Faulty GPU: 1}}, lemon: {{fraction: 0}}}}
detection: {{delay: {detection_s}s, perfect: true}}
jobs:
  training: [{{nodes: {nodes}, checkpoint_interval: {checkpoint_min}m, checkpoint_cost: {cost_s}s,
               restart_overhead: {restart_s}s}}]
""", "model.yaml")


def run(scenario: Scenario, policy: Policy | None = None, seed: int = 1, runs: int = 1,
        detection_delay_s: float | None = None) -> list[RunResult]:
    return simulate(scenario, policy or Policy(), pipeline(detection_delay_s), seed, runs)
