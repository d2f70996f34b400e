"""Scenario files: the fleet, its failure rates, the rung durations and the jobs, validated with file:line errors.

Read with the policy's own reader (remediator.policy: YamlReader for each key's line, duplicate keys refused;
read_section for the keys, from the fields of gpuhealth/simulator/scenario_file.py's ScenarioFile and the parts'
dataclasses, unknown keys refused, durations as the policy writes them), so a bad scenario fails as a bad policy does:
`llama3.yaml:7: fleet.pools.train: expected an integer >= 1, got 'many'`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from gpuhealth.remediator.decide.nodestate import RUNGS
from gpuhealth.remediator.policy import PolicyError, YamlReader, read_utf8
from gpuhealth.simulator.failure_data import FIX_RUNGS, Cause, DetectionModel, default_false_positives
from gpuhealth.simulator.scenario_file import HEALTH_CHECKS, ScenarioFile, read_scenario_file
from gpuhealth.simulator.scenario_parts import (
    DAY,
    LemonModel,
    ReplacementModel,
    RungModel,
    SmallJobSpec,
    SwitchModel,
    TrainingJobSpec,
)


class ScenarioError(ValueError):
    """A scenario file that cannot be used: `file:line: key: reason`."""

    def __init__(self, source: str, key: str, line: int | None, reason: str) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {key}: {reason}")
        self.source, self.key, self.line, self.reason = source, key, line, reason


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    days: float
    pools: tuple[tuple[str, int], ...]
    gpus_per_node: int = 8
    rate_per_1000_node_days: float = 3.79
    # failures.counted_by: the rate counts only faults a health check saw (Kokolis's r_f), so each is seen by its
    # alert (coverage is not applied again); False: interruptions by root cause (Llama 3), coverage applies
    rate_seen: bool = False
    mix: tuple[tuple[str, float], ...] = ()
    causes: dict[str, Cause] = field(default_factory=dict)
    lemon: LemonModel = field(default_factory=LemonModel)
    switches: SwitchModel = field(default_factory=SwitchModel)
    evaluation_interval_s: float = 30.0
    job_timeout_s: float = 600.0  # PyTorch ProcessGroupNCCL's default collective timeout
    detection_delay_s: float | None = None
    rungs: dict[str, RungModel] = field(default_factory=dict)
    manual_repair_s: float = DAY  # a person repairs what the ladder cannot (remediation_rma_repair, low)
    exclude_after_s: float = 3600.0  # a job waiting for a sick node to be cordoned gives up and excludes it itself
    found_by_people_s: float = 4 * 3600.0  # a fault no rule sees: people take the node out this long after a job
    # first failed on it (judgement; detection.found_by_people)
    other_failure_rate: float = 0.0  # training jobs' failures of other causes than the infrastructure, per 1,000
    # node-days of a running job (jobs.other_failure_rate; Kokolis: all-cause minus infra)
    aggregate_small: bool = True  # small jobs on a healthy node are drawn in bulk, not one event each (jobs.small)
    training: tuple[TrainingJobSpec, ...] = ()
    small: SmallJobSpec | None = None
    sample_interval_s: float = 3600.0
    # gpuhealth | none | karpenter: who repairs (gpuhealth/simulator/peers.py; --remediation)
    remediation: str = "gpuhealth"
    description: str = ""
    # alert -> false firings per 1,000 node-days on a healthy node (data/false_positives.yaml; noise.py)
    false_positives: tuple[tuple[str, float], ...] = field(
        default_factory=lambda: tuple(default_false_positives().items()))
    replacement: ReplacementModel = field(default_factory=ReplacementModel)
    dra: bool = False  # the GPUs are published by a DRA driver and DeviceTaintRule is served: GPU scope (fleet.dra)

    @property
    def nodes(self) -> int:
        return sum(n for _, n in self.pools)

    @property
    def duration_s(self) -> float:
        return self.days * DAY

    @property
    def rate_per_node_second(self) -> float:
        return self.rate_per_1000_node_days / 1000.0 / DAY


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    try:
        return scenario_of(read_scenario_file(YamlReader(source, text)), source)
    except PolicyError as exc:
        raise ScenarioError(exc.source, exc.key, exc.line, exc.reason) from None


def scenario_of(f: ScenarioFile, source: str) -> Scenario:
    """The Scenario a file describes (its sections' keys gathered as the simulation reads them)."""
    sc = Scenario(
        name=f.name or Path(source).stem, source=source, description=f.description, days=f.days, pools=f.pools,
        gpus_per_node=f.gpus_per_node, rate_per_1000_node_days=f.rate, rate_seen=f.counted_by == HEALTH_CHECKS,
        mix=f.mix, causes=f.causes, lemon=f.lemon,
        switches=f.switches, evaluation_interval_s=f.evaluation_interval, job_timeout_s=f.job_timeout,
        detection_delay_s=f.delay, rungs={"drain": f.drain, "reset_gpu": f.reset_gpu, "reboot": f.reboot,
                                          "replace": f.replace},
        manual_repair_s=f.manual_repair, exclude_after_s=f.exclude_after, found_by_people_s=f.found_by_people,
        other_failure_rate=f.other_failure_rate, aggregate_small=f.aggregate_small, training=f.training,
        small=f.small, sample_interval_s=f.sample_interval,
        replacement=ReplacementModel(f.spares, f.spare_return, f.new_node_faulty, f.burn_in), dra=f.dra,
        false_positives=tuple(default_false_positives().items()) if f.false_positives is None else f.false_positives)
    return perfect(sc) if f.perfect else sc


def perfect(sc: Scenario) -> Scenario:
    """Perfect detection (detection.perfect, model checks): every fault seen, no false positive, no flapping."""
    return replace(sc, causes={n: replace(c, detection=DetectionModel()) for n, c in sc.causes.items()},
                   false_positives=())


def check_alerts(scenario: Scenario, known: set[str], rules_source: str) -> None:
    """Every alert a cause names must exist in the rules the simulation reads."""
    for cause in scenario.causes.values():
        if cause.alert is not None and cause.alert not in known:
            raise ScenarioError(scenario.source, f"causes.{cause.name}.alert", None,
                                f"no alert {cause.alert!r} in {rules_source}")
    for alert, rate in scenario.false_positives:
        if rate > 0 and alert not in known:
            raise ScenarioError(scenario.source, f"detection.false_positives.{alert}", None,
                                f"no alert {alert!r} in {rules_source}")
    if scenario.switches.rate_per_1000_days > 0 and scenario.switches.alert not in known:
        raise ScenarioError(scenario.source, "failures.switches.alert", None,
                            f"no alert {scenario.switches.alert!r} in {rules_source}")


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file, or a shipped scenario by name (llama3, rsc1, rsc2, mixed-1000)."""
    p = Path(path)
    if not p.exists() and not p.suffix:
        shipped = resources.files("gpuhealth.simulator.scenarios").joinpath(f"{path}.yaml")
        if shipped.is_file():
            return parse_scenario(shipped.read_text(), f"{path}.yaml")
    return parse_scenario(read_utf8(p, ScenarioError), str(p))


def shipped_scenarios() -> list[str]:
    shipped = resources.files("gpuhealth.simulator.scenarios").iterdir()
    return sorted(f.name[:-5] for f in shipped if f.name.endswith(".yaml"))


assert set(FIX_RUNGS) - {"external"} <= set(RUNGS)
