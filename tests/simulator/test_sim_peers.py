"""The peers on the same fault traces (gpuhealth/simulator/peers.py): no automated remediation (people only), and
Karpenter's node repair alone (the EKS agent's conditions, their tolerations, the 20% guard), and what each did in the
run's figures."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.cli import main
from gpuhealth.simulator.engine import Simulation
from gpuhealth.simulator.fleet import SimNode
from gpuhealth.simulator.peers import GPUHEALTH, KARPENTER, NONE, Karpenter
from gpuhealth.simulator.remediation import to_seconds
from gpuhealth.simulator.scenario import Scenario, parse_scenario
from tests.simulator.sim_helpers import pipeline, run

_XID = "GPU fault: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {reboot: 1.0}}"
_THERMAL = "Hot GPU: {alert: GPUThermalViolation, scope: gpu, job: crash, kind: hardware, fixed_by: {reboot: 1.0}}"


def _scenario(cause: str = _XID, mix: str = "{GPU fault: 1}", rate: float = 20.0, switches: str = "") -> Scenario:
    return parse_scenario(f"""
days: 20
fleet: {{pools: {{p: 32}}, new_node_faulty: 0}}
failures: {{rate: {rate}, mix: {mix}, lemon: {{fraction: 0}}{switches}}}
causes:
  {cause}
detection: {{perfect: true}}
""", "peers.yaml")


def test_no_remediation_runs_no_pass_and_its_outages_last_until_a_person_repairs() -> None:
    sc = _scenario()
    shipped = run(sc)[0]
    people = run(replace(sc, remediation=NONE))[0]
    assert shipped.decisions and shipped.passes > 0
    assert people.decisions == {} and people.passes == 0  # no decide() at all
    assert people.faults == shipped.faults  # the same trace
    assert shipped.mean_outage_h < 2
    assert people.mean_outage_h > 20  # out from the fault to a person's repair a day later
    assert people.node_availability < shipped.node_availability


def _karpenter(sc: Scenario) -> tuple[Simulation, list[tuple[str, float]]]:
    """The run, and each Karpenter replacement: the alert it was for and how long its condition had been False."""
    sim = Simulation(replace(sc, remediation=KARPENTER), Policy(), pipeline(), 1)
    peer = sim.peer
    assert isinstance(peer, Karpenter)
    seen: list[tuple[str, float]] = []
    provision = sim.faults.provision

    def watched(node: SimNode, rng: random.Random) -> None:
        fp, starts = min(node.fired.items(), key=lambda kv: kv[1])
        seen.append((fp.split("/")[0], sim.queue.now - to_seconds(starts)))
        provision(node, rng)

    sim.faults.provision = watched  # type: ignore[method-assign]
    sim.run()
    return sim, seen


def test_karpenter_replaces_a_gpu_fault_ten_minutes_after_its_condition_turns_false() -> None:
    sim, seen = _karpenter(_scenario())
    assert len(seen) > 10
    assert all(alert == "GPUXidFatal" and abs(waited - 600.0) < 1.0 for alert, waited in seen)
    assert not sim.passes.passes


def _replacement_waits(sc: Scenario) -> list[float]:
    """Each replacement's wait: from the repairer's ask (Karpenter's, or gpuhealth's replace rung) to the new
    node's arrival in the slot."""
    sim = Simulation(sc, Policy(), pipeline(), 1)
    asked: dict[int, float] = {}
    waits: list[float] = []
    provision, arrives = sim.cluster.provision, sim.cluster.node_arrives

    def ask(node: SimNode, rng: random.Random) -> None:
        asked[node.slot] = sim.queue.now
        provision(node, rng)

    def arrived(node: SimNode) -> None:
        if node.slot in asked:  # not a person's swap of a node that never came back from a reboot
            waits.append(sim.queue.now - asked.pop(node.slot))
        arrives(node)

    sim.faults.provisioner = sim.cluster.provision = ask  # type: ignore[method-assign]
    sim.cluster.node_arrives = arrived  # type: ignore[method-assign]
    sim.run()
    return waits


_REPLACE = "GPU fault: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {replace: 1.0}}"


def _slow_provisioning(success: float, mode: str, manual: str = "3d", nodes: int = 32) -> Scenario:
    return replace(parse_scenario(f"""
days: 20
fleet: {{pools: {{p: {nodes}}}, new_node_faulty: 0, burn_in: false}}
failures: {{rate: 20, mix: {{GPU fault: 1}}, lemon: {{fraction: 0}}}}
causes:
  {_REPLACE}
detection: {{perfect: true}}
remediation: {{replace: {{duration: 2h, success: {success}}}, manual_repair: {manual}}}
""", "provisioning.yaml"), remediation=mode)


def test_a_karpenter_replacement_takes_the_replace_rungs_provisioning_time() -> None:
    waits = _replacement_waits(_slow_provisioning(1.0, KARPENTER))
    assert len(waits) > 10
    assert all(abs(w - 7200.0) < 1.0 for w in waits)  # not at once: the 2 h a new node takes to come up


def test_a_failed_karpenter_replacement_waits_for_a_person_as_a_failed_replace_rung_does() -> None:
    for mode in (KARPENTER, GPUHEALTH):
        waits = _replacement_waits(_slow_provisioning(0.0, mode))
        assert len(waits) > 5, mode
        assert all(abs(w - 3 * 86400.0) < 1.0 for w in waits), mode  # remediation.manual_repair, for both


def test_karpenter_and_the_replace_rung_fail_their_replacements_at_the_same_rate() -> None:
    shares = []
    for mode in (KARPENTER, GPUHEALTH):
        waits = _replacement_waits(_slow_provisioning(0.5, mode, manual="3h", nodes=160))
        assert len(waits) > 40, mode
        shares.append(sum(w > 7201.0 for w in waits) / len(waits))
    assert all(0.35 < s < 0.65 for s in shares), shares


def test_karpenter_leaves_a_fault_the_agent_sets_no_condition_for_to_people() -> None:
    sim, seen = _karpenter(_scenario(_THERMAL, "{Hot GPU: 1}"))
    assert sim.faults.counts["Hot GPU"] > 10
    assert seen == []


def _storm(nodes_per_switch: int) -> str:
    return f", switches: {{nodes_per_switch: {nodes_per_switch}, rate: 300, repair: 2h, alert: NetdevTransmitTimeout}}"


def test_karpenter_replaces_nothing_while_more_than_a_fifth_of_the_pool_is_unhealthy() -> None:
    storm, seen = _karpenter(_scenario(rate=0.0, switches=_storm(16)))  # a switch takes half of the pool
    assert storm.faults.counts["Network switch (correlated)"] >= 16
    assert isinstance(storm.peer, Karpenter) and storm.peer.guarded > 0
    # none while the switch is down (2 h); the guard lifts as the pool's conditions turn True again
    assert all(waited >= 7200.0 for _, waited in seen)
    _, seen = _karpenter(_scenario(rate=0.0, switches=_storm(4)))  # 4 of 32: 12.5%, under the guard
    assert seen and all(alert == "NetdevTransmitTimeout" for alert, _ in seen)
    assert min(waited for _, waited in seen) < 1801.0  # NetworkingReady's 30 minutes


def _switches(nodes_per_switch: int) -> str:
    """Ten nodes, no fault but their switches' (50 per 1,000 switch-days, 2 h each): an outage makes 2 or 3 of the
    ten nodes unhealthy at once, 20% (not more than the guard) or 30%."""
    return f"""
days: 30
fleet: {{pools: {{p: 10}}, new_node_faulty: 0}}
failures: {{rate: 0, mix: {{GPU fault: 1}}, lemon: {{fraction: 0}},
            switches: {{nodes_per_switch: {nodes_per_switch}, rate: 50, repair: 2h, alert: NetdevTransmitTimeout}}}}
causes:
  {_XID}
detection: {{perfect: true}}
"""


def _run_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str) -> dict[str, Any]:
    path = tmp_path / "switches.yaml"
    path.write_text(body)
    assert main(["run", str(path), "--runs", "1", "--remediation", KARPENTER, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_karpenter_counts_its_replacements_and_what_its_guard_held_back(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    under = _run_json(capsys, tmp_path, _switches(2))["peer"]  # 2 of 10: not more than 20%
    assert under["karpenter_conditions"] > 10
    assert under["karpenter_replaced"] == under["karpenter_conditions"]  # each replaced at its toleration
    assert under["karpenter_guard_blocked_checks"] == under["karpenter_guard_held"] == 0
    over = _run_json(capsys, tmp_path, _switches(3))["peer"]  # 3 of 10: the guard holds
    assert over["karpenter_guard_held"] >= 3 and over["karpenter_guard_blocked_checks"] > over["karpenter_guard_held"]
    # held until the switch's repair (2 h) ends: then the condition clears, or the last ones are replaced
    assert 0 < over["karpenter_guard_held_hours"] <= 2.0 * over["karpenter_guard_held"]
    assert over["karpenter_replaced"] + over["karpenter_cleared"] == over["karpenter_conditions"]
    assert over["karpenter_cleared"] > 0
    assert over["people_took_out"] == 0  # perfect detection, every fault's alert mapped: nothing left to people


def test_karpenters_replacements_in_the_figures_are_the_nodes_it_replaced() -> None:
    sim, seen = _karpenter(_scenario())
    assert sim.peer is not None and sim.peer.figures()["karpenter_replaced"] == len(seen) > 10


def test_the_text_report_says_what_karpenter_and_people_did(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    path = tmp_path / "switches.yaml"
    path.write_text(_switches(3))
    assert main(["run", str(path), "--runs", "1", "--remediation", KARPENTER]) == 0
    text = capsys.readouterr().out
    assert "Karpenter per run:" in text and "its 20% guard blocked" in text and "people per run:" in text
    assert main(["run", str(path), "--runs", "1", "--remediation", NONE]) == 0
    text = capsys.readouterr().out
    assert "Karpenter per run:" not in text and "people per run:" in text
    assert main(["run", str(path), "--runs", "1"]) == 0
    assert "people per run:" not in capsys.readouterr().out
