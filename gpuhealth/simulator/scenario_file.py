"""A scenario file as it is written: `ScenarioFile`, one field per key (`fleet.pools` is the field `pools`, whose
metadata names the key), read by the policy's own field-driven reader (gpuhealth.remediator.policy.load.read_section:
each key's line, unknown keys refused, durations as the policy writes them), then the rules that span keys (check).
gpuhealth/simulator/scenario.py turns it into the Scenario the simulation runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gpuhealth.remediator.policy.keys import Reading, setting
from gpuhealth.remediator.policy.load import read_section
from gpuhealth.remediator.policy.reader import YamlReader
from gpuhealth.remediator.policy.readings import boolean, checked, choice, integer, null_as, seconds, string
from gpuhealth.simulator.failure_data import (
    Cause,
    default_causes_yaml,
    llama3_counts,
    llama3_rate_per_1000_node_days,
    named_rate,
)
from gpuhealth.simulator.scenario_parts import (
    DAY,
    LemonModel,
    RungModel,
    SmallJobSpec,
    SwitchModel,
    TrainingJobSpec,
    default_rungs,
)
from gpuhealth.simulator.scenario_readings import mapping_of, number, probability, required

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

S = TypeVar("S", bound="DataclassInstance")

# How a scenario's failure rate was counted (failures.counted_by): from interruptions by root cause (Llama 3's Table
# 5: every fault, whether any check saw it), or from failures a health check saw (Kokolis et al.'s r_f counts job
# failures with a critical health check within 10 min before or 5 min after: every counted fault was seen)
INTERRUPTIONS, HEALTH_CHECKS = "interruptions", "health_checks"
COUNTED_BY = (INTERRUPTIONS, HEALTH_CHECKS)

# Table 5 rows that are not the infrastructure's (Kokolis et al. count infra failures only in r_f): `llama3-infra`
NOT_INFRA = ("Software Bug", "Dependency", "NCCL Watchdog Timeouts")
NO_POOLS = "required: a mapping of pool name to its node count"


def _part(cls: type[S], base: Callable[[], S | None] = lambda: None) -> Reading[S]:
    """A mapping read into `cls` by its fields' metadata, over `base()` (None: the class's defaults)."""
    return lambda r, key, value: read_section(r, cls, key, value, base())


def _rung(name: str) -> Reading[RungModel]:
    return _part(RungModel, lambda: default_rungs()[name])


def _causes(r: YamlReader, key: str, value: object) -> dict[str, Cause]:
    """data/causes.yaml's causes, each replaced whole by the one of the same name the file gives, and the file's own."""
    raw: dict[str, Any] = dict(default_causes_yaml())
    if value is not None:
        if not isinstance(value, dict):
            raise r.fail(key, "expected a mapping of cause name to its description")
        raw.update(value)
    return {str(name): _cause(r, f"{key}.{name}", str(name), spec) for name, spec in raw.items()}


def _cause(r: YamlReader, key: str, name: str, spec: object) -> Cause:
    cause = read_section(r, Cause, key, spec, Cause(name, None, "node", "crash", "hardware", ()))
    total = sum(p for _, p in cause.fixed_by)
    if cause.node_fault and abs(total - 1.0) > 1e-6:
        raise r.fail(f"{key}.fixed_by", f"probabilities must add up to 1 for a {cause.kind} fault, got {total:g}")
    if cause.kind == "external" and cause.external_repair_s is None:
        raise r.fail(key, "external_repair is required for kind external (how long the outside fix takes)")
    return cause


def _rate(r: YamlReader, key: str, value: object) -> float:
    """Failures per 1,000 node-days, or a published rate by name."""
    if not isinstance(value, str):
        return number()(r, key, value)
    named = named_rate(value)
    if named is None:
        raise r.fail(key, f"expected failures per 1,000 node-days or one of llama3, rsc1, rsc2, got {value!r}")
    return named


def _named_mix(name: str) -> tuple[tuple[str, float], ...]:
    """Llama 3's Table 5 counts as weights: all of them (llama3), or the infrastructure's (llama3-infra)."""
    return tuple((k, float(v)) for k, v in llama3_counts().items() if name == "llama3" or k not in NOT_INFRA)


def _mix(r: YamlReader, key: str, value: object) -> tuple[tuple[str, float], ...]:
    if value in ("llama3", "llama3-infra"):
        return _named_mix(str(value))
    return mapping_of(number())(r, key, value)


def _training(r: YamlReader, key: str, value: object) -> tuple[TrainingJobSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.fail(key, "expected a list of training jobs")
    return tuple(_training_job(r, f"{key}[{i}]", i, item) for i, item in enumerate(value))


def _training_job(r: YamlReader, key: str, i: int, item: object) -> TrainingJobSpec:
    job = read_section(r, TrainingJobSpec, key, {"name": f"training-{i}", **item} if isinstance(item, dict) else item)
    if job.repeat and job.work_s is None:
        raise r.fail(f"{key}.repeat", "a repeated job needs `work` (a job that never ends is never repeated)")
    return job


def _small(r: YamlReader, key: str, value: object) -> SmallJobSpec | None:
    return None if value is None else read_section(r, SmallJobSpec, key, value)


@dataclass(frozen=True, kw_only=True)
class ScenarioFile:
    """The keys of a scenario file (docs/simulation.md), in the order they are read (the first error wins)."""

    days: float = field(metadata=setting(required(number(0, lo_open=True), "required: how many days to simulate"),
                                         "How many days to simulate (required)."))
    pools: tuple[tuple[str, int], ...] = field(metadata=setting(
        checked(required(mapping_of(integer(1)), NO_POOLS), bool, NO_POOLS), "Pool name: its node count.",
        "fleet.pools"))
    gpus_per_node: int = field(default=8, metadata=setting(integer(1), "GPUs per node.", "fleet.gpus_per_node"))
    spares: tuple[tuple[str, int], ...] = field(default=(), metadata=setting(
        mapping_of(integer()), "Pool name: its spare nodes (a pool not named has as many as it needs).",
        "fleet.spares"))
    spare_return: float = field(default=3 * DAY, metadata=setting(
        seconds, "How long a removed node takes to come back as a spare.", "fleet.spare_return"))
    new_node_faulty: float = field(default=0.10, metadata=setting(
        probability, "The share of new nodes that arrive with a fault.", "fleet.new_node_faulty"))
    dra: bool = field(default=False, metadata=setting(boolean, "GPU scope: a DRA driver publishes the GPUs.",
                                                   "fleet.dra"))
    burn_in: bool = field(default=True, metadata=setting(
        boolean, "New nodes carry the burn-in taint.", "fleet.burn_in"))
    # no default: read from null when left out (data/causes.yaml's causes)
    causes: dict[str, Cause] = field(metadata=setting(_causes, "Causes added to or replacing data/causes.yaml's."))
    rate: float = field(default_factory=llama3_rate_per_1000_node_days, metadata=setting(
        _rate, "Failures per 1,000 node-days, or llama3, rsc1, rsc2.", "failures.rate"))
    counted_by: str = field(default=INTERRUPTIONS, metadata=setting(
        choice(COUNTED_BY), "How the rate was counted: interruptions (every fault, whether an alert saw it or not) or "
        "health_checks (only faults a health check saw: each one is seen, coverage is not applied again).",
        "failures.counted_by"))
    mix: tuple[tuple[str, float], ...] = field(default_factory=lambda: _named_mix("llama3"), metadata=setting(
        _mix, "Cause: its weight, or llama3 (Table 5), llama3-infra.", "failures.mix"))
    lemon: LemonModel = field(default_factory=LemonModel, metadata=setting(_part(LemonModel), "Lemon nodes.",
                                                                  "failures.lemon"))
    switches: SwitchModel = field(default_factory=SwitchModel, metadata=setting(
        _part(SwitchModel), "Switch failures.", "failures.switches"))
    evaluation_interval: float = field(default=30.0, metadata=setting(
        seconds, "Prometheus' rule evaluation interval.", "detection.evaluation_interval"))
    job_timeout: float = field(default=600.0, metadata=setting(  # PyTorch ProcessGroupNCCL's collective timeout
        seconds, "A job's collective timeout.", "detection.job_timeout"))
    delay: float | None = field(default=None, metadata=setting(
        null_as(None, seconds), "A fixed detection delay (model checks).", "detection.delay"))
    found_by_people: float = field(default=4 * 3600.0, metadata=setting(
        seconds, "A fault no rule sees: people take the node out this long after a job failed.",
        "detection.found_by_people"))
    # None: data/false_positives.yaml's
    false_positives: tuple[tuple[str, float], ...] | None = field(default=None, metadata=setting(
        mapping_of(number()), "Alert: false firings per 1,000 node-days.", "detection.false_positives"))
    perfect: bool = field(default=False, metadata=setting(boolean, "Perfect detection.", "detection.perfect"))
    drain: RungModel = field(default_factory=lambda: default_rungs()["drain"], metadata=setting(
        _rung("drain"), "The drain's model.", "remediation.drain"))
    reset_gpu: RungModel = field(default_factory=lambda: default_rungs()["reset_gpu"], metadata=setting(
        _rung("reset_gpu"), "The GPU reset's model.", "remediation.reset_gpu"))
    reboot: RungModel = field(default_factory=lambda: default_rungs()["reboot"], metadata=setting(
        _rung("reboot"), "The reboot's model.", "remediation.reboot"))
    replace: RungModel = field(default_factory=lambda: default_rungs()["replace"], metadata=setting(
        _rung("replace"), "The replacement's model.", "remediation.replace"))
    manual_repair: float = field(default=DAY, metadata=setting(  # remediation_rma_repair, low
        seconds, "A person repairs what the ladder cannot in this long.", "remediation.manual_repair"))
    exclude_after: float = field(default=3600.0, metadata=setting(
        seconds, "A job waiting for a sick node to be cordoned excludes it itself after this long.",
        "remediation.exclude_after"))
    training: tuple[TrainingJobSpec, ...] = field(default=(), metadata=setting(
        _training, "The training jobs.", "jobs.training"))
    small: SmallJobSpec | None = field(default=None, metadata=setting(_small, "The small jobs.", "jobs.small"))
    other_failure_rate: float = field(default=0.0, metadata=setting(
        number(), "Training jobs' failures of other causes, per 1,000 node-days.", "jobs.other_failure_rate"))
    aggregate_small: bool = field(default=True, metadata=setting(
        boolean, "Small jobs on a healthy node drawn in bulk.", "jobs.aggregate_small"))
    sample_interval: float = field(default=3600.0, metadata=setting(seconds, "How often the results sample."))
    name: str | None = field(default=None, metadata=setting(string, "The scenario's name (default: the file's)."))
    description: str = field(default="", metadata=setting(string, "One line about it."))


def read_scenario_file(r: YamlReader) -> ScenarioFile:
    """The scenario in a reader's document, its keys each read as its field says, then the rules across keys."""
    f = read_section(r, ScenarioFile, "", r.data)
    check(r, f)
    return f


def check(r: YamlReader, f: ScenarioFile) -> None:
    """The rules that span keys: a pool, a cause or detection setting named must exist."""
    pools = {p for p, _ in f.pools}
    known = ", ".join(sorted(pools))
    unknown = sorted(p for p, _ in f.spares if p not in pools)
    if unknown:
        raise r.fail("fleet.spares", f"no such pool {', '.join(unknown)} (pools: {known})")
    r.section("failures.mix", set(f.causes), dict(f.mix))  # unknown key (allowed: the causes)
    if sum(w for _, w in f.mix) <= 0:
        raise r.fail("failures.mix", "expected at least one cause with a weight above 0")
    if f.perfect and f.false_positives is not None:
        raise r.fail("detection.false_positives", "perfect detection has none (detection.perfect is true)")
    for i, t in enumerate(f.training):
        if t.pool is not None and t.pool not in pools:
            raise r.fail(f"jobs.training[{i}].pool", f"no such pool (pools: {known})")
    if f.small is not None and f.small.pool is not None and f.small.pool not in pools:
        raise r.fail("jobs.small.pool", f"no such pool (pools: {known})")
