"""Published failure figures, from the copies in gpuhealth/simulator/data (attribution on each file's first line):
Llama 3 Table 5 (interruptions by cause), Kokolis et al.'s RSC-1/RSC-2 rates, model_parameters.csv."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpuhealth.remediator.policy.keys import derived, section, setting
from gpuhealth.remediator.policy.readings import choice, optional_string, seconds
from gpuhealth.simulator.scenario_readings import mapping_of, positive_seconds, probability

LLAMA3_GPUS = 16384
LLAMA3_DAYS = 54
GPUS_PER_NODE = 8


def _rows(name: str) -> list[dict[str, str]]:
    text = resources.files("gpuhealth.simulator.data").joinpath(name).read_text()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


@cache
def llama3_counts() -> dict[str, int]:
    """Unexpected interruptions of the Llama 3 405B run by component (Table 5: counts, not the misprinted %)."""
    return {r["component"]: int(r["interruption_count"]) for r in _rows("llama3_table5_interruptions.csv")}


def llama3_rate_per_1000_node_days() -> float:
    """419 interruptions / (2,048 nodes x 54 days) x 1000."""
    return 1000.0 * sum(llama3_counts().values()) / (LLAMA3_GPUS / GPUS_PER_NODE * LLAMA3_DAYS)


@cache
def rsc_rates() -> dict[str, float]:
    """Kokolis et al. (HPCA 2025) failure rates per 1,000 node-days: rsc1 6.50, rsc2 2.34."""
    row = next(r for r in _rows("meta_rsc_kokolis.csv") if r["metric"] == "failure_rate_rf")
    return {"rsc1": float(row["rsc1"]), "rsc2": float(row["rsc2"])}


@cache
def model_parameters() -> dict[str, tuple[float, float, float]]:
    """parameter -> (low, mid, high) from model_parameters.csv."""
    return {r["parameter"]: (float(r["low"]), float(r["mid"]), float(r["high"])) for r in _rows("model_parameters.csv")}


def named_rate(name: str) -> float | None:
    """A rate (per 1,000 node-days) by name: llama3, rsc1, rsc2; None if unknown."""
    if name == "llama3":
        return llama3_rate_per_1000_node_days()
    return rsc_rates().get(name)


@dataclass(frozen=True)
class DetectionModel:
    """How well a cause's alert sees it (causes.yaml `detection:`): the share of its faults whose signal raises the
    alert at all (the rest only jobs and people find), and the share whose signal comes and goes while the fault
    persists (the alert resolves and fires again): there for `signal_s`, then quiet for `quiet_s`, both exponential
    means."""

    coverage: float = field(default=1.0, metadata=setting(
        probability, "The share of the cause's faults whose signal raises its alert at all."))
    flapping: float = field(default=0.0, metadata=setting(
        probability, "The share whose signal comes and goes while the fault persists."))
    signal_s: float = field(default=3600.0, metadata=setting(
        positive_seconds, "A flapping signal's mean time there.", "signal"))
    quiet_s: float = field(default=900.0, metadata=setting(
        positive_seconds, "A flapping signal's mean time quiet.", "quiet"))


# The alerts a node fault raises when it takes the whole host down (a power supply, the chassis, the host's maintenance:
# data/causes.yaml): the exporter does not answer, and the kubelet stops posting the Node's status too, so the Node
# turns NotReady. The remediator climbs on gpuhealth's own alerts only on such a node (decide/planner.py).
HOST_DOWN_ALERTS = frozenset({"GpuhealthExporterDown"})


# The rungs a cause's `fixed_by` names (the ladder's, and a fix from outside); `kind` values
FIX_RUNGS = ("reset_gpu", "reboot", "replace", "external")
KINDS = ("hardware", "application", "transient", "external")


@dataclass(frozen=True)
class Cause:
    """A cause of failure (data/causes.yaml, a scenario's `causes.<name>`): each field but its name one key."""

    name: str = field(metadata=derived("The cause's name: its key under causes."))
    alert: str | None = field(metadata=setting(optional_string, "The alert it raises (null: none)."))
    scope: str = field(metadata=setting(choice(("gpu", "node")), "What it breaks: one GPU or the node."))
    job: str = field(metadata=setting(choice(("crash", "hang")), "What it does to a job on the node."))
    kind: str = field(metadata=setting(choice(KINDS), "hardware, application, transient or external."))
    fixed_by: tuple[tuple[str, float], ...] = field(metadata=setting(  # (rung, probability)
        mapping_of(probability, lambda _: set(FIX_RUNGS)), "The probability that each rung fixes it."))
    external_repair_s: float | None = field(default=None, metadata=setting(
        seconds, "How long the outside fix of an external fault takes.", "external_repair"))
    detection: DetectionModel = field(default_factory=lambda: DetectionModel(), metadata=section(
        "How well its alert sees it."))

    @property
    def node_fault(self) -> bool:
        """The node itself is broken (not only the job that ran on it)."""
        return self.kind in ("hardware", "external")

    @property
    def host_down(self) -> bool:
        """The host itself is down (its kubelet too: the Node is NotReady until the fault ends)."""
        return self.node_fault and self.alert in HOST_DOWN_ALERTS


@cache
def default_causes_yaml() -> dict[str, Any]:
    text = resources.files("gpuhealth.simulator.data").joinpath("causes.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


@cache
def default_false_positives() -> dict[str, float]:
    """Alert -> false firings per 1,000 node-days on healthy nodes (data/false_positives.yaml)."""
    text = resources.files("gpuhealth.simulator.data").joinpath("false_positives.yaml").read_text()
    data = yaml.safe_load(text) or {}
    return {str(k): float(v) for k, v in data.items()}
