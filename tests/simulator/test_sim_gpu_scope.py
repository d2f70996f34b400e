"""GPU scope under DRA (scenario fleet.dra): the remediator's own scope step quarantines the one GPU a fault names,
so GPU availability differs from node availability, and the GPU-hours the node's other GPUs stayed in service are
reported."""

from __future__ import annotations

from gpuhealth.remediator.policy import parse_policy
from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import run


def _fleet(dra: bool, cause: str) -> str:
    return f"""
days: 30
fleet: {{pools: {{p: 60}}, dra: {str(dra).lower()}, new_node_faulty: 0}}
failures: {{rate: 30, mix: {{Bad GPU: 1}}, lemon: {{fraction: 0}}}}
causes:
  Bad GPU: {cause}
detection: {{perfect: true}}
jobs:
  small: {{nodes: 1, duration: 2h}}
"""


_RESET = "{alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {reset_gpu: 1.0}}"


def test_a_gpu_fault_under_dra_quarantines_one_gpu_and_keeps_the_others_in_service() -> None:
    node = run(parse_scenario(_fleet(False, _RESET), "node.yaml"))[0]
    gpu = run(parse_scenario(_fleet(True, _RESET), "gpu.yaml"))[0]
    assert node.decisions.get("quarantine_gpu:execute", 0) == 0 and node.gpu_hours_kept == 0
    assert gpu.decisions.get("quarantine_gpu:execute", 0) > 20 and gpu.decisions.get("release_gpu:execute", 0) > 10
    # the node ladder only after a failed reset (reset_gpu succeeds 95% of the time)
    assert gpu.decisions.get("cordon:execute", 0) < 0.2 * node.decisions["cordon:execute"]
    assert gpu.gpu_hours_kept > 100
    # the node is out of service either way (it cannot take a whole-node job); its other seven GPUs are not
    assert abs(gpu.node_availability - node.node_availability) < 0.001
    assert gpu.gpu_availability - gpu.node_availability > 0.5 * (1 - gpu.node_availability)
    assert abs(node.gpu_availability - node.node_availability) < 0.2 * (1 - node.node_availability)


def test_dra_turned_off_in_the_policy_takes_the_node() -> None:
    r = run(parse_scenario(_fleet(True, _RESET), "gpu.yaml"), parse_policy("dra:\n  enabled: false\n"))[0]
    assert r.decisions.get("quarantine_gpu:execute", 0) == 0 and r.gpu_hours_kept == 0
    assert r.decisions.get("cordon:execute", 0) > 20


def test_a_gpu_alert_that_asks_for_a_reboot_takes_the_node_under_dra() -> None:
    """GPUFallenOffBus asks for reboot, above reset_gpu: the scope step gives the node ladder the fault."""
    fallen = "{alert: GPUFallenOffBus, scope: gpu, job: crash, kind: hardware, fixed_by: {reboot: 1.0}}"
    r = run(parse_scenario(_fleet(True, fallen), "fallen.yaml"))[0]
    assert r.decisions.get("quarantine_gpu:execute", 0) == 0 and r.gpu_hours_kept == 0
    assert r.decisions.get("reboot:execute", 0) > 10
