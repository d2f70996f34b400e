"""Scenario files: the fleet, its failure rates, the rung durations and the jobs, validated with file:line errors.

Read with the policy's own YAML reader (remediator.policy.YamlReader: each key's line, duplicate keys refused,
unknown keys refused, durations as the policy writes them), so a bad scenario fails as a bad policy does:
`llama3.yaml:7: fleet.pools.train: expected an integer >= 1, got 'many'`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from remediator.decide.nodestate import RUNGS
from remediator.policy import PolicyError, YamlReader, read_utf8
from simulator.failure_data import (
    Cause,
    DetectionModel,
    default_causes_yaml,
    default_false_positives,
    llama3_counts,
    model_parameters,
    named_rate,
)

DAY = 86400.0
FIX_RUNGS = ("reset_gpu", "reboot", "replace", "external")
# Table 5 rows that are not the infrastructure's (Kokolis et al. count infra failures only in r_f): `llama3-infra`
NOT_INFRA = ("Software Bug", "Dependency", "NCCL Watchdog Timeouts")


class ScenarioError(ValueError):
    """A scenario file that cannot be used: `file:line: key: reason`."""

    def __init__(self, source: str, key: str, line: int | None, reason: str) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {key}: {reason}")
        self.source, self.key, self.line, self.reason = source, key, line, reason


@dataclass(frozen=True)
class RungModel:
    duration_s: float
    success: float  # probability the rung's own work succeeds (the Job, the reboot, the replacement)


@dataclass(frozen=True)
class TrainingJobSpec:
    name: str
    nodes: int
    checkpoint_interval_s: float
    checkpoint_cost_s: float
    restart_overhead_s: float
    pool: str | None = None
    work_s: float | None = None  # compute to finish; None: runs for the whole simulation
    resume: bool = True  # the job's own fault tolerance: a failed attempt resumes from its checkpoint (else it fails)
    repeat: bool = False  # when the job ends (done or failed), the next job of this spec is submitted
    localize_s: float = 1800.0  # after a fault no rule acts on: time the job needs to find the node and exclude it


@dataclass(frozen=True)
class SmallJobSpec:
    nodes: int = 1
    duration_s: float = 4 * 3600.0  # mean run time (exponential)
    utilization: float = 0.8  # share of the nodes no training job holds that small jobs keep busy
    app_bug_fraction: float = 0.17  # model_parameters.csv app_failure_fraction_of_jobs (mid)
    app_failure_mean_s: float = 9 * 60.0  # exponential: 67% of failures within 10 min (early_app_failures_under_10min)
    misclassification: float = 0.05  # with the classifier on: infra failures it calls app (count to the loop guard)
    max_retries: int = 6  # the job's own retry budget (a Kubernetes Job's backoffLimit, default 6); evictions are free
    restart_overhead_s: float = 120.0
    pool: str | None = None


@dataclass(frozen=True)
class LemonModel:
    fraction: float = 0.012  # Kokolis: 1.2% of RSC-1 nodes
    multiplier: tuple[float, float] = (5.0, 10.0)
    kept: bool = False  # a lemon stays with its slot through a replacement (repaired in place and returned)


@dataclass(frozen=True)
class SwitchModel:
    nodes_per_switch: int = 16
    rate_per_1000_days: float = 0.0  # failures per 1,000 switch-days
    repair_s: float = 2 * 3600.0
    alert: str = "NetdevTransmitTimeout"


@dataclass(frozen=True)
class ReplacementModel:
    """Where new nodes come from (simulator/spares.py, cluster.py's replacement): each pool's spares (a pool not
    named has as many as it needs), how long a removed node takes to come back as a spare (its RMA repair), and the
    share of new nodes that arrive with a fault."""

    spares: tuple[tuple[str, int], ...] = ()
    spare_return_s: float = 3 * DAY  # model_parameters.csv remediation_rma_repair (mid: 3 days)
    # SuperBench (ATC'24, fleet_failure_summary.csv): 10.36% of nodes failed proactive validation in a 90-day build-out
    new_node_faulty: float = 0.10
    # the NodePool gives new nodes the burn-in startup taint (policy burn_in.taint; docs/remediation.md "Burn-in of new
    # nodes"): gpuhealth's diagnostic runs before a new node's first pod. On by default: the chart deploys the
    # remediator with a judge image (as_deployed), without which the real code takes the taint off untested at once
    burn_in: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    days: float
    pools: tuple[tuple[str, int], ...]
    gpus_per_node: int = 8
    rate_per_1000_node_days: float = 3.79
    mix: tuple[tuple[str, float], ...] = ()
    causes: dict[str, Cause] = field(default_factory=dict)
    lemon: LemonModel = LemonModel()
    switches: SwitchModel = SwitchModel()
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
    remediation: str = "gpuhealth"  # gpuhealth | none | karpenter: who repairs (simulator/peers.py; --remediation)
    description: str = ""
    # alert -> false firings per 1,000 node-days on a healthy node (data/false_positives.yaml; noise.py)
    false_positives: tuple[tuple[str, float], ...] = field(
        default_factory=lambda: tuple(default_false_positives().items()))
    replacement: ReplacementModel = ReplacementModel()
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


def default_rungs() -> dict[str, RungModel]:
    mp = model_parameters()
    return {
        "drain": RungModel(60.0, 1.0),  # pods' termination grace
        "reset_gpu": RungModel(180.0, 0.95),  # nvidia-smi -r: minutes
        "reboot": RungModel(mp["remediation_gpu_reset_or_reboot"][1] * 60 * 0.75, 0.95),  # 15 min
        "replace": RungModel(mp["remediation_node_replacement_from_spare"][1] * 60, 0.98),  # 30 min, from a spare
    }


def _fail(exc: PolicyError) -> ScenarioError:
    return ScenarioError(exc.source, exc.key, exc.line, exc.reason)


class _Scenario:
    """The reader's checks, plus numbers and probabilities."""

    def __init__(self, r: YamlReader) -> None:
        self.r = r

    def number(self, key: str, value: Any, lo: float = 0.0, hi: float | None = None, lo_open: bool = False) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and (value < lo or (lo_open and value == lo) or (hi is not None and value > hi)):
            ok = False
        if not ok:
            bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi is not None else "")
            raise self.r.fail(key, f"expected a number {bound}, got {value!r}")
        return float(value)

    def seconds(self, key: str, value: Any) -> float:
        d = self.r.duration(key, value)
        assert d is not None
        return d.total_seconds()


def _causes(s: _Scenario, overrides: Any) -> dict[str, Cause]:
    r = s.r
    raw: dict[str, Any] = dict(default_causes_yaml())
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise r.fail("causes", "expected a mapping of cause name to its description")
        raw.update(overrides)
    out = {}
    for name, spec in raw.items():
        key = f"causes.{name}"
        spec = r.section(key, {"alert", "scope", "job", "kind", "fixed_by", "external_repair", "detection"}, spec)
        kind = r.string(f"{key}.kind", spec.get("kind", "hardware"), ("hardware", "application", "transient",
                                                                         "external"))
        fixed_raw = r.section(f"{key}.fixed_by", set(FIX_RUNGS), spec.get("fixed_by") or {})
        fixed = tuple((rung, s.number(f"{key}.fixed_by.{rung}", p, 0, 1)) for rung, p in fixed_raw.items())
        if kind in ("hardware", "external") and abs(sum(p for _, p in fixed) - 1.0) > 1e-6:
            raise r.fail(f"{key}.fixed_by", f"probabilities must add up to 1 for a {kind} fault, got "
                         f"{sum(p for _, p in fixed):g}")
        if kind == "external" and "external_repair" not in spec:
            raise r.fail(key, "external_repair is required for kind external (how long the outside fix takes)")
        out[str(name)] = Cause(
            name=str(name), alert=r.string(f"{key}.alert", spec.get("alert"), optional=True),
            scope=r.string(f"{key}.scope", spec.get("scope", "node"), ("gpu", "node")),
            job=r.string(f"{key}.job", spec.get("job", "crash"), ("crash", "hang")), kind=kind, fixed_by=fixed,
            external_repair_s=s.seconds(f"{key}.external_repair", spec["external_repair"])
            if "external_repair" in spec else None, detection=_cause_detection(s, key, spec.get("detection")))
    return out


def _cause_detection(s: _Scenario, key: str, value: Any) -> DetectionModel:
    """A cause's `detection:` (coverage, flapping, signal, quiet): how well its alert sees it (simulator/noise.py)."""
    r, d = s.r, DetectionModel()
    det = r.section(f"{key}.detection", {"coverage", "flapping", "signal", "quiet"}, value)
    model = DetectionModel(
        coverage=s.number(f"{key}.detection.coverage", det.get("coverage", d.coverage), 0, 1),
        flapping=s.number(f"{key}.detection.flapping", det.get("flapping", d.flapping), 0, 1),
        signal_s=s.seconds(f"{key}.detection.signal", det["signal"]) if "signal" in det else d.signal_s,
        quiet_s=s.seconds(f"{key}.detection.quiet", det["quiet"]) if "quiet" in det else d.quiet_s)
    for part, seconds in (("signal", model.signal_s), ("quiet", model.quiet_s)):
        if seconds <= 0:
            raise r.fail(f"{key}.detection.{part}", "expected a duration above 0")
    return model


def _rung_models(s: _Scenario, value: Any) -> tuple[dict[str, RungModel], dict[str, float]]:
    r = s.r
    rem = r.section("remediation", {"drain", "reset_gpu", "reboot", "replace", "manual_repair", "exclude_after"},
                    value)
    rungs = default_rungs()
    for name in ("drain", "reset_gpu", "reboot", "replace"):
        if name in rem:
            spec = r.section(f"remediation.{name}", {"duration", "success"}, rem[name])
            base = rungs[name]
            rungs[name] = RungModel(
                s.seconds(f"remediation.{name}.duration", spec["duration"]) if "duration" in spec else base.duration_s,
                s.number(f"remediation.{name}.success", spec["success"], 0, 1) if "success" in spec else base.success)
    extra: dict[str, float] = {k: s.seconds(f"remediation.{k}", rem[k])
                               for k in ("manual_repair", "exclude_after") if k in rem}
    return rungs, extra


def _training(s: _Scenario, value: Any) -> tuple[TrainingJobSpec, ...]:
    r = s.r
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.fail("jobs.training", "expected a list of training jobs")
    out = []
    for i, item in enumerate(value):
        key = f"jobs.training[{i}]"
        spec = r.section(key, {"name", "nodes", "pool", "checkpoint_interval", "checkpoint_cost", "restart_overhead",
                               "work", "resume", "repeat", "localize"}, item)
        for need in ("nodes", "checkpoint_interval"):
            if need not in spec:
                raise r.fail(key, f"{need} is required")
        out.append(TrainingJobSpec(
            name=r.string(f"{key}.name", spec.get("name", f"training-{i}")),
            nodes=r.integer(f"{key}.nodes", spec["nodes"], minimum=1),
            checkpoint_interval_s=s.seconds(f"{key}.checkpoint_interval", spec["checkpoint_interval"]),
            checkpoint_cost_s=s.seconds(f"{key}.checkpoint_cost", spec.get("checkpoint_cost", 0)),
            restart_overhead_s=s.seconds(f"{key}.restart_overhead", spec.get("restart_overhead", "10m")),
            pool=r.string(f"{key}.pool", spec.get("pool"), optional=True),
            work_s=s.seconds(f"{key}.work", spec["work"]) if spec.get("work") is not None else None,
            resume=r.boolean(f"{key}.resume", spec.get("resume", True)),
            repeat=r.boolean(f"{key}.repeat", spec.get("repeat", False)),
            localize_s=s.seconds(f"{key}.localize", spec.get("localize", "30m"))))
        if out[-1].repeat and out[-1].work_s is None:
            raise r.fail(f"{key}.repeat", "a repeated job needs `work` (a job that never ends is never repeated)")
        if out[-1].checkpoint_interval_s <= 0:
            raise r.fail(f"{key}.checkpoint_interval", "expected a duration above 0")
    return tuple(out)


def _small(s: _Scenario, value: Any) -> SmallJobSpec | None:
    r = s.r
    if value is None:
        return None
    spec = r.section("jobs.small", {"nodes", "duration", "utilization", "app_bug_fraction", "app_failure_mean",
                                    "misclassification", "max_retries", "restart_overhead", "pool"}, value)
    d = SmallJobSpec()
    return SmallJobSpec(
        nodes=r.integer("jobs.small.nodes", spec.get("nodes", d.nodes), minimum=1),
        duration_s=s.seconds("jobs.small.duration", spec["duration"]) if "duration" in spec else d.duration_s,
        utilization=s.number("jobs.small.utilization", spec.get("utilization", d.utilization), 0, 1),
        app_bug_fraction=s.number("jobs.small.app_bug_fraction", spec.get("app_bug_fraction", d.app_bug_fraction),
                                  0, 1),
        app_failure_mean_s=s.seconds("jobs.small.app_failure_mean", spec["app_failure_mean"])
        if "app_failure_mean" in spec else d.app_failure_mean_s,
        misclassification=s.number("jobs.small.misclassification",
                                   spec.get("misclassification", d.misclassification), 0, 1),
        max_retries=r.integer("jobs.small.max_retries", spec.get("max_retries", d.max_retries)),
        restart_overhead_s=s.seconds("jobs.small.restart_overhead", spec["restart_overhead"])
        if "restart_overhead" in spec else d.restart_overhead_s,
        pool=r.string("jobs.small.pool", spec.get("pool"), optional=True))


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    try:
        return _parse(text, source)
    except PolicyError as exc:
        raise _fail(exc) from None


def _parse(text: str, source: str) -> Scenario:
    r = YamlReader(source, text)
    s = _Scenario(r)
    top = r.section("", {"name", "description", "days", "fleet", "failures", "causes", "detection", "remediation",
                         "jobs", "sample_interval"})
    kw: dict[str, Any] = {}
    if "days" not in top:
        raise r.fail("days", "required: how many days to simulate")
    kw["days"] = s.number("days", top["days"], 0, lo_open=True)
    kw.update(_fleet(s, top.get("fleet")))
    kw["causes"] = causes = _causes(s, top.get("causes"))
    kw.update(_failures(s, causes, top.get("failures")))
    kw.update(_detection(s, top.get("detection")))
    perfect_detection = kw.pop("perfect_detection", False)
    rungs, extra = _rung_models(s, top.get("remediation"))
    kw["rungs"] = rungs
    if "manual_repair" in extra:
        kw["manual_repair_s"] = extra["manual_repair"]
    if "exclude_after" in extra:
        kw["exclude_after_s"] = extra["exclude_after"]
    kw.update(_jobs(s, top.get("jobs"), {p for p, _ in kw["pools"]}))
    if "sample_interval" in top:
        kw["sample_interval_s"] = s.seconds("sample_interval", top["sample_interval"])
    name = r.string("name", top.get("name", Path(source).stem))
    description = r.string("description", top["description"]) if "description" in top else ""
    sc = Scenario(name=name, source=source, description=description, **kw)
    return perfect(sc) if perfect_detection else sc


def perfect(sc: Scenario) -> Scenario:
    """Perfect detection (detection.perfect, model checks): every fault seen, no false positive, no flapping."""
    return replace(sc, causes={n: replace(c, detection=DetectionModel()) for n, c in sc.causes.items()},
                   false_positives=())


def _fleet(s: _Scenario, value: Any) -> dict[str, Any]:
    r = s.r
    kw: dict[str, Any] = {}
    fleet = r.section("fleet", {"pools", "gpus_per_node", "spares", "spare_return", "new_node_faulty", "dra",
                                   "burn_in"}, value)
    pools_raw = r.section("fleet.pools", set(fleet.get("pools") or {}), fleet.get("pools"))
    if not pools_raw:
        raise r.fail("fleet.pools", "required: a mapping of pool name to its node count")
    kw["pools"] = tuple((str(p), r.integer(f"fleet.pools.{p}", n, minimum=1)) for p, n in pools_raw.items())
    if "gpus_per_node" in fleet:
        kw["gpus_per_node"] = r.integer("fleet.gpus_per_node", fleet["gpus_per_node"], minimum=1)
    if "dra" in fleet:
        kw["dra"] = r.boolean("fleet.dra", fleet["dra"])
    kw["replacement"] = _replacement(s, fleet, {p for p, _ in kw["pools"]})
    return kw


def _replacement(s: _Scenario, fleet: dict[str, Any], pools: set[str]) -> ReplacementModel:
    r, d = s.r, ReplacementModel()
    spares_raw = r.section("fleet.spares", set(fleet.get("spares") or {}), fleet.get("spares"))
    unknown = sorted(str(p) for p in spares_raw if p not in pools)
    if unknown:
        raise r.fail("fleet.spares", f"no such pool {', '.join(unknown)} (pools: {', '.join(sorted(pools))})")
    return ReplacementModel(
        spares=tuple((str(p), r.integer(f"fleet.spares.{p}", n)) for p, n in spares_raw.items()),
        spare_return_s=s.seconds("fleet.spare_return", fleet["spare_return"]) if "spare_return" in fleet
        else d.spare_return_s,
        new_node_faulty=s.number("fleet.new_node_faulty", fleet.get("new_node_faulty", d.new_node_faulty), 0, 1),
        burn_in=r.boolean("fleet.burn_in", fleet["burn_in"]) if "burn_in" in fleet else d.burn_in)


def _failures(s: _Scenario, causes: dict[str, Any], value: Any) -> dict[str, Any]:
    r = s.r
    kw: dict[str, Any] = {}
    failures = r.section("failures", {"rate", "mix", "lemon", "switches"}, value)
    rate = failures.get("rate", "llama3")
    if isinstance(rate, str):
        named = named_rate(rate)
        if named is None:
            raise r.fail("failures.rate", f"expected failures per 1,000 node-days or one of llama3, rsc1, rsc2, "
                         f"got {rate!r}")
        kw["rate_per_1000_node_days"] = named
    else:
        kw["rate_per_1000_node_days"] = s.number("failures.rate", rate)
    kw["mix"] = _mix(s, causes, failures.get("mix", "llama3"))
    lemon = r.section("failures.lemon", {"fraction", "multiplier", "kept"}, failures.get("lemon"))
    if lemon:
        mult = lemon.get("multiplier", [5, 10])
        if not (isinstance(mult, list) and len(mult) == 2):
            raise r.fail("failures.lemon.multiplier", f"expected [low, high], got {mult!r}")
        lo, hi = (s.number("failures.lemon.multiplier", m, 1) for m in mult)
        if hi < lo:
            raise r.fail("failures.lemon.multiplier", f"expected [low, high] with low <= high, got {mult!r}")
        kept = lemon.get("kept", False)
        if not isinstance(kept, bool):
            raise r.fail("failures.lemon.kept", f"expected true or false, got {kept!r}")
        kw["lemon"] = LemonModel(s.number("failures.lemon.fraction", lemon.get("fraction", 0.012), 0, 1), (lo, hi),
                                 kept)
    sw = r.section("failures.switches", {"nodes_per_switch", "rate", "repair", "alert"}, failures.get("switches"))
    if sw:
        d = SwitchModel()
        kw["switches"] = SwitchModel(
            nodes_per_switch=r.integer("failures.switches.nodes_per_switch", sw.get("nodes_per_switch", 16), 1),
            rate_per_1000_days=s.number("failures.switches.rate", sw.get("rate", 0.0)),
            repair_s=s.seconds("failures.switches.repair", sw["repair"]) if "repair" in sw else d.repair_s,
            alert=r.string("failures.switches.alert", sw.get("alert", d.alert)))
    return kw


def _mix(s: _Scenario, causes: dict[str, Any], mix: Any) -> tuple[tuple[str, float], ...]:
    r = s.r
    if mix in ("llama3", "llama3-infra"):
        weights: dict[str, float] = {k: float(v) for k, v in llama3_counts().items()
                                     if mix == "llama3" or k not in NOT_INFRA}
    else:
        raw_mix = r.section("failures.mix", set(causes), mix)
        weights = {c: s.number(f"failures.mix.{c}", w) for c, w in raw_mix.items()}
    if sum(weights.values()) <= 0:
        raise r.fail("failures.mix", "expected at least one cause with a weight above 0")
    missing = [c for c in weights if c not in causes]
    if missing:
        raise r.fail("failures.mix", f"unknown cause(s) {', '.join(missing)} (add them under causes:)")
    return tuple(weights.items())


def _detection(s: _Scenario, value: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    det = s.r.section("detection", {"evaluation_interval", "job_timeout", "delay", "found_by_people",
                                    "false_positives", "perfect"}, value)
    if "found_by_people" in det:
        kw["found_by_people_s"] = s.seconds("detection.found_by_people", det["found_by_people"])
    if "perfect" in det and s.r.boolean("detection.perfect", det["perfect"]):
        kw["perfect_detection"] = True
        if "false_positives" in det:
            raise s.r.fail("detection.false_positives", "perfect detection has none (detection.perfect is true)")
    if "false_positives" in det:
        raw = s.r.section("detection.false_positives", set(det["false_positives"] or {}), det["false_positives"])
        kw["false_positives"] = tuple((str(a), s.number(f"detection.false_positives.{a}", v))
                                      for a, v in raw.items())
    if "evaluation_interval" in det:
        kw["evaluation_interval_s"] = s.seconds("detection.evaluation_interval", det["evaluation_interval"])
    if "job_timeout" in det:
        kw["job_timeout_s"] = s.seconds("detection.job_timeout", det["job_timeout"])
    if det.get("delay") is not None:
        kw["detection_delay_s"] = s.seconds("detection.delay", det["delay"])
    return kw


def _jobs(s: _Scenario, value: Any, pools: set[str]) -> dict[str, Any]:
    r = s.r
    jobs = r.section("jobs", {"training", "small", "other_failure_rate", "aggregate_small"}, value)
    training, small = _training(s, jobs.get("training")), _small(s, jobs.get("small"))
    extra: dict[str, Any] = {}
    if "other_failure_rate" in jobs:
        extra["other_failure_rate"] = s.number("jobs.other_failure_rate", jobs["other_failure_rate"])
    if "aggregate_small" in jobs:
        extra["aggregate_small"] = r.boolean("jobs.aggregate_small", jobs["aggregate_small"])
    for i, t in enumerate(training):
        if t.pool is not None and t.pool not in pools:
            raise r.fail(f"jobs.training[{i}].pool", f"no such pool (pools: {', '.join(sorted(pools))})")
    if small is not None and small.pool is not None and small.pool not in pools:
        raise r.fail("jobs.small.pool", f"no such pool (pools: {', '.join(sorted(pools))})")
    return {"training": training, "small": small, **extra}


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
        shipped = resources.files("simulator.scenarios").joinpath(f"{path}.yaml")
        if shipped.is_file():
            return parse_scenario(shipped.read_text(), f"{path}.yaml")
    return parse_scenario(read_utf8(p, ScenarioError), str(p))


def shipped_scenarios() -> list[str]:
    return sorted(f.name[:-5] for f in resources.files("simulator.scenarios").iterdir() if f.name.endswith(".yaml"))


assert set(FIX_RUNGS) - {"external"} <= set(RUNGS)
