"""Replacement is neither free nor perfect: a finite spare pool per node pool (a replacement waits for one, out of
service), new nodes that arrive faulty, and a swap that fixes only what is in the node (gpuhealth/simulator/spares.py,
cluster.py's replace_node and node_arrives)."""

from __future__ import annotations

from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import run

_DEAD = "Dead GPU: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {replace: 1.0}}"
_CABLE = ("Cable: {alert: MLX5Fatal, scope: node, job: hang, kind: external, external_repair: 1d, "
          "fixed_by: {external: 1.0}}")


def _fleet(fleet: str, cause: str = _DEAD, mix: str = "{Dead GPU: 1}", rate: float = 30.0, days: int = 30) -> str:
    return f"""
days: {days}
fleet: {{pools: {{p: 40}}, {fleet}}}
failures: {{rate: {rate}, mix: {mix}, lemon: {{fraction: 0}}}}
causes:
  {cause}
detection: {{perfect: true}}
"""


def test_a_replacement_waits_for_a_spare_and_the_wait_is_time_out_of_service() -> None:
    plenty = run(parse_scenario(_fleet("new_node_faulty: 0"), "plenty.yaml"))[0]
    none_left = run(parse_scenario(_fleet("new_node_faulty: 0, spares: {p: 1}, spare_return: 3d"), "few.yaml"))[0]
    assert plenty.replacement["spares_used"] > 10 and plenty.replacement["spare_waits"] == 0
    assert none_left.replacement["spare_waits"] > 5
    assert none_left.replacement["spare_wait_hours"] > 24
    assert none_left.node_availability < plenty.node_availability - 0.002


def test_enough_spares_never_wait() -> None:
    r = run(parse_scenario(_fleet("new_node_faulty: 0, spares: {p: 40}, spare_return: 3d"), "enough.yaml"))[0]
    assert r.replacement["spares_used"] > 10 and r.replacement["spare_waits"] == 0


def test_new_nodes_arrive_faulty_at_the_scenarios_share() -> None:
    sound = run(parse_scenario(_fleet("new_node_faulty: 0"), "sound.yaml"))[0]
    assert sound.replacement["new_nodes_faulty"] == 0
    half = run(parse_scenario(_fleet("new_node_faulty: 0.5"), "half.yaml"))[0]
    used, faulty = half.replacement["spares_used"], half.replacement["new_nodes_faulty"]
    assert 0.3 * used < faulty < 0.7 * used
    # a faulty new node goes through the ladder again: more replacements on the same trace of in-service faults
    assert used > sound.replacement["spares_used"]


def test_a_replacement_does_not_fix_a_cable_the_new_node_meets_it_until_its_outside_repair() -> None:
    """MLX5Fatal climbs past the reboot to a replacement; the cable stays with the slot, so the outage lasts until
    its outside repair (a day) whatever the ladder does. A fault in the node itself ends at the swap."""
    cable = run(parse_scenario(_fleet("new_node_faulty: 0", _CABLE, "{Cable: 1}", rate=10.0), "cable.yaml"))[0]
    assert cable.decisions.get("replace:execute", 0) > 0
    assert cable.mean_outage_h > 20
    in_node = _CABLE.replace("kind: external, external_repair: 1d, fixed_by: {external: 1.0}",
                             "kind: hardware, fixed_by: {replace: 1.0}")
    swapped = run(parse_scenario(_fleet("new_node_faulty: 0", in_node, "{Cable: 1}", rate=10.0), "nic.yaml"))[0]
    assert swapped.decisions.get("replace:execute", 0) > 0
    assert swapped.mean_outage_h < 12
