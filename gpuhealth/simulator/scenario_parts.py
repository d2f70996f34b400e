"""The parts of a scenario that a scenario file writes as a mapping of their own (a rung's model, a training job, the
small jobs, lemon nodes, switches), each field one key: its metadata (gpuhealth.remediator.policy.keys) says the key and
how it is read, as the policy's sections do, and the policy's reader (gpuhealth.remediator.policy.load.read_section)
reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuhealth.remediator.policy.keys import setting
from gpuhealth.remediator.policy.reader import YamlReader
from gpuhealth.remediator.policy.readings import boolean, integer, null_as, optional_string, seconds, string
from gpuhealth.simulator.failure_data import model_parameters
from gpuhealth.simulator.scenario_readings import number, positive_seconds, probability, required

DAY = 86400.0


@dataclass(frozen=True)
class RungModel:
    """A rung under `remediation:` (drain, reset_gpu, reboot, replace); the keys left out keep default_rungs()'."""

    duration_s: float = field(metadata=setting(seconds, "How long the rung's own work takes.", "duration"))
    # probability the rung's own work succeeds (the Job, the reboot, the replacement)
    success: float = field(metadata=setting(probability, "The probability that the rung's own work succeeds."))


def default_rungs() -> dict[str, RungModel]:
    mp = model_parameters()
    return {
        "drain": RungModel(60.0, 1.0),  # pods' termination grace
        "reset_gpu": RungModel(180.0, 0.95),  # nvidia-smi -r: minutes
        "reboot": RungModel(mp["remediation_gpu_reset_or_reboot"][1] * 60 * 0.75, 0.95),  # 15 min
        "replace": RungModel(mp["remediation_node_replacement_from_spare"][1] * 60, 0.98),  # 30 min, from a spare
    }


@dataclass(frozen=True)
class TrainingJobSpec:
    """An item of `jobs.training`."""

    name: str = field(metadata=setting(string, "The job's name (default training-<its index>)."))
    nodes: int = field(metadata=setting(required(integer(1)), "The nodes it runs on (required)."))
    checkpoint_interval_s: float = field(metadata=setting(
        required(positive_seconds), "Time between checkpoints (required).", "checkpoint_interval"))
    checkpoint_cost_s: float = field(default=0.0, metadata=setting(
        seconds, "The blocking time of a checkpoint.", "checkpoint_cost"))
    restart_overhead_s: float = field(default=600.0, metadata=setting(
        seconds, "The time a restart takes before work goes on.", "restart_overhead"))
    pool: str | None = field(default=None, metadata=setting(optional_string, "The pool it runs in (default: any)."))
    # compute to finish; None: runs for the whole simulation
    work_s: float | None = field(default=None, metadata=setting(
        null_as(None, seconds), "Compute to finish (null: it runs for the whole simulation).", "work"))
    # the job's own fault tolerance: a failed attempt resumes from its checkpoint (else it fails)
    resume: bool = field(default=True, metadata=setting(boolean, "A failed attempt resumes from its checkpoint."))
    # when the job ends (done or failed), the next job of this spec is submitted
    repeat: bool = field(default=False, metadata=setting(boolean, "When it ends, the next such job is submitted."))
    # after a fault no rule acts on: time the job needs to find the node and exclude it
    localize_s: float = field(default=1800.0, metadata=setting(
        seconds, "After a fault no rule acts on: the time the job takes to find the node and exclude it.",
        "localize"))


@dataclass(frozen=True)
class SmallJobSpec:
    """`jobs.small`: the short jobs that keep the nodes no training job holds busy."""

    nodes: int = field(default=1, metadata=setting(integer(1), "Nodes per job."))
    duration_s: float = field(default=4 * 3600.0, metadata=setting(  # mean run time (exponential)
        seconds, "Mean run time (exponential).", "duration"))
    utilization: float = field(default=0.8, metadata=setting(  # share of the nodes no training job holds kept busy
        probability, "The share of the nodes no training job holds that small jobs keep busy."))
    app_bug_fraction: float = field(default=0.17, metadata=setting(  # model_parameters.csv app_failure_fraction (mid)
        probability, "The share of jobs that fail of their own bug."))
    # exponential: 67% of failures within 10 min (early_app_failures_under_10min)
    app_failure_mean_s: float = field(default=9 * 60.0, metadata=setting(
        seconds, "Mean time to an application failure.", "app_failure_mean"))
    # with the classifier on: infra failures it calls app (count to the loop guard)
    misclassification: float = field(default=0.05, metadata=setting(
        probability, "With the classifier on: the share of infrastructure failures it calls the application's."))
    # the job's own retry budget (a Kubernetes Job's backoffLimit, default 6); evictions are free
    max_retries: int = field(default=6, metadata=setting(integer(), "The job's own retry budget (backoffLimit)."))
    restart_overhead_s: float = field(default=120.0, metadata=setting(
        seconds, "The time a retry takes to start.", "restart_overhead"))
    pool: str | None = field(default=None, metadata=setting(optional_string, "The pool they run in (default: any)."))


def multiplier(r: YamlReader, key: str, value: object) -> tuple[float, float]:
    """[low, high]: how many times the mean rate a lemon node fails, drawn between the two."""
    if not (isinstance(value, list) and len(value) == 2):
        raise r.fail(key, f"expected [low, high], got {value!r}")
    lo, hi = (number(1)(r, key, m) for m in value)
    if hi < lo:
        raise r.fail(key, f"expected [low, high] with low <= high, got {value!r}")
    return lo, hi


@dataclass(frozen=True)
class LemonModel:
    """`failures.lemon`: nodes that fail far more often than the rest."""

    fraction: float = field(default=0.012, metadata=setting(  # Kokolis: 1.2% of RSC-1 nodes
        probability, "The share of nodes that are lemons."))
    multiplier: tuple[float, float] = field(default=(5.0, 10.0), metadata=setting(
        multiplier, "[low, high]: how many times the mean rate a lemon fails."))
    kept: bool = field(default=False, metadata=setting(  # a lemon stays with its slot through a replacement
        boolean, "A lemon stays with its slot through a replacement (repaired in place and returned)."))


@dataclass(frozen=True)
class SwitchModel:
    """`failures.switches`: correlated failures of the switch a block of nodes hangs off."""

    nodes_per_switch: int = field(default=16, metadata=setting(integer(1), "Nodes behind one switch."))
    rate_per_1000_days: float = field(default=0.0, metadata=setting(  # failures per 1,000 switch-days
        number(), "Failures per 1,000 switch-days.", "rate"))
    repair_s: float = field(default=2 * 3600.0, metadata=setting(seconds, "How long a repair takes.", "repair"))
    alert: str = field(default="NetdevTransmitTimeout", metadata=setting(string, "The alert a failure raises."))


@dataclass(frozen=True)
class ReplacementModel:
    """Where new nodes come from (gpuhealth/simulator/spares.py, cluster.py's replacement): each pool's spares (a pool
    not named has as many as it needs), how long a removed node takes to come back as a spare (its RMA repair), and the
    share of new nodes that arrive with a fault."""

    spares: tuple[tuple[str, int], ...] = ()
    spare_return_s: float = 3 * DAY  # model_parameters.csv remediation_rma_repair (mid: 3 days)
    # SuperBench (ATC'24, fleet_failure_summary.csv): 10.36% of nodes failed proactive validation in a 90-day build-out
    new_node_faulty: float = 0.10
    # the NodePool gives new nodes the burn-in startup taint (policy burn_in.taint; docs/remediation.md "Burn-in of new
    # nodes"): gpuhealth's diagnostic runs before a new node's first pod. On by default: the chart deploys the
    # remediator with a judge image (as_deployed), without which the real code takes the taint off untested at once
    burn_in: bool = True
