"""Simulated alerts carry the labels the real rules give them (gpuhealth/simulator/alerts.py): an alert of each rule
of rules/alerts/ is recorded on the simulated Node as serve's receiver records the same alert from Alertmanager's
webhook, so every gate of the policy that reads a label runs in the simulation (the diagnosis before a replacement
reads `component`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.vocabulary import Action, AlertStatus
from gpuhealth.remediator.intake.webhook import parse_listed
from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.alerts import fingerprint
from gpuhealth.simulator.engine import Simulation
from gpuhealth.simulator.failure_data import Cause
from gpuhealth.simulator.fleet import Fault
from gpuhealth.simulator.remediation import EPOCH
from gpuhealth.simulator.scenario import parse_scenario
from tests.simulator.sim_helpers import pipeline

ROOT = Path(__file__).resolve().parents[2]


def _rules() -> list[tuple[str, dict[str, str]]]:
    """Every alert rule of rules/alerts/*.yaml and its labels, read from the files here (not by the simulator)."""
    out = []
    for path in sorted((ROOT / "rules" / "alerts").glob("*.yaml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups") or []:
            for rule in group.get("rules") or []:
                if rule.get("alert"):
                    out.append((rule["alert"], {str(k): str(v) for k, v in (rule.get("labels") or {}).items()}))
    return out


_SCENARIO = parse_scenario("""
days: 1
fleet: {pools: {p: 4}}
failures: {rate: 0}
""", "labels.yaml")


@pytest.mark.parametrize(("alert", "labels"), _rules(), ids=[name for name, _ in _rules()])
def test_a_simulated_alert_carries_every_label_its_rule_gives_it(alert: str, labels: dict[str, str]) -> None:
    sim = Simulation(_SCENARIO, Policy(), pipeline(), 1)
    node = sim.fleet.nodes[0]
    fault = Fault(1, Cause("c", alert, "gpu", "crash", "hardware", (("reset_gpu", 1.0),)), 0.0, "reset_gpu", 3, 7,
                  alert)
    simulated = sim.alerts.delivered(node, fault, AlertStatus.FIRING, EPOCH)
    webhook: dict[str, Any] = {"status": "firing", "fingerprint": fingerprint(fault), "startsAt": EPOCH.isoformat(),
                               "labels": {**labels, "alertname": alert, "node": node.name, "gpu": "3"}}
    batch, _ = parse_listed([webhook], Policy())
    received = batch.alerts[0].record if batch.alerts else None
    assert simulated == received  # what serve records from the real alert, label for label
    if received is not None:
        assert received.component == labels.get("component", "")  # not vacuous: the rule's labels are read


def test_the_diagnosis_before_a_replacement_runs_on_simulated_gpu_alerts() -> None:
    sc = parse_scenario("""
days: 20
fleet: {pools: {p: 32}, new_node_faulty: 0, burn_in: false}
failures: {rate: 20, mix: {GPU fault: 1}, lemon: {fraction: 0}}
causes:
  GPU fault: {alert: GPUXidFatal, scope: gpu, job: crash, kind: hardware, fixed_by: {replace: 1.0}}
detection: {perfect: true}
""", "diagnosis.yaml")
    sim = Simulation(sc, Policy(), pipeline(), 1)
    diagnosed: set[str] = set()
    replaced: list[tuple[str, bool]] = []  # each replacement, and whether a diagnostic ran on the node before it
    apply = sim.cluster.apply

    def watched(plan: NodePlan) -> None:
        for d in plan.executes():
            if d.action == Action.DIAGNOSE:
                diagnosed.add(plan.node)
            elif d.action == Action.REPLACE:
                replaced.append((plan.node, plan.node in diagnosed))
        apply(plan)

    sim.cluster.apply = watched  # type: ignore[method-assign]
    sim.run()
    assert len(replaced) > 5
    assert all(first for _, first in replaced)  # GPUXidFatal's component is gpu: the gate diagnoses first
