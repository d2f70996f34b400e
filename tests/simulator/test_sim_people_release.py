"""The simulated person hands a held node back as a person does in production: a node gpuhealth holds whatever its
alerts do (a repair whose validation failed, with the ladder stopped at its top) is repaired and released
(`gpuhealth-remediator release`, decide/validation.py released), so it returns to service instead of staying out to
the end of the run."""

from __future__ import annotations

from gpuhealth.remediator.policy import parse_policy
from gpuhealth.simulator.engine import Simulation
from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import pipeline

# A GPU fault that only a replacement fixes, whose signal comes and goes: the alert resolves while the fault is still
# there, the reboot's validation fails, and with replace off (ladder.max_rung reboot) the node waits for a person.
HELD = parse_scenario("""
days: 20
fleet: {pools: {p: 32}, new_node_faulty: 0, burn_in: false}
failures: {rate: 20, mix: {GPU fault: 1}, lemon: {fraction: 0}}
causes:
  GPU fault: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {replace: 1.0},
              detection: {flapping: 1.0, signal: 3h, quiet: 40m}}
""", "held.yaml")
NO_REPLACE = parse_policy("ladder: {max_rung: reboot}\n")


def test_a_person_who_repairs_a_node_held_after_a_failed_validation_releases_it_back_to_service() -> None:
    sim = Simulation(HELD, NO_REPLACE, pipeline(), 1)
    sim.run()
    assert sim.faults.releases > 0  # the held nodes were repaired and released
    # only a person's repair clears this fault (no rung here fixes it): a node without it, still held for its failed
    # validation at the end of the run, is one the person repaired and never handed back
    stranded = [n.name for n in sim.fleet.nodes if n.fault is None and n.state.validation_failed is not None]
    assert stranded == []
