"""A run's result (`RunResult`, with its `Sample`s over time when asked for), and the figures over R seeded runs:
means with 95% intervals (Student's t), as text or one JSON object."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuhealth.simulator.jobs.outcomes import BUCKETS, Outcomes, SizeTally, size_figures
from gpuhealth.simulator.workload import JobTally

TARGETS = {"node_availability": 0.9995, "job_success_rate": 0.995, "platform_failure_rate": 0.005}
HEADLINE = ("node_availability", "gpu_availability", "ettr", "job_success_rate", "platform_failure_rate")
# two-sided 95% quantiles of Student's t, df 1..30
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass
class Sample:
    t: float
    out_by_rung: dict[str, int]
    disrupted: dict[str, int]
    disrupted_limit: dict[str, int]
    breaker_open: dict[str, bool]
    availability: float  # node availability so far
    job_success: float | None  # small jobs so far


@dataclass
class RunResult:
    seed: int
    scenario: str
    days: float
    nodes: int
    node_seconds: float
    out_node_seconds: float
    out_gpu_seconds: float
    gpus_per_node: int
    ettr: dict[str, float]
    interruptions: dict[str, dict[str, int]]  # training job -> cause -> count
    faults: dict[str, int]  # cause -> faults that hit a node in service
    out_hours_by_cause: dict[str, float]
    out_hours_by_rung: dict[str, float]
    outages: int
    mean_outage_h: float
    jobs: JobTally
    deferred: dict[str, int]  # kind -> deferrals (per node and pass)
    breaker_trips: int
    breaker_open_hours: dict[str, float]
    max_disrupted: dict[str, int]
    passes: int
    decisions: dict[str, int]  # action/decision -> count
    samples: list[Sample] = field(default_factory=list)
    outcomes: Outcomes = field(default_factory=Outcomes)  # jobs by size (gpuhealth/simulator/jobs/outcomes.py)
    false_positives: dict[str, int] = field(default_factory=dict)  # alert -> false firings on healthy nodes
    flapped: int = 0  # alerts of persisting faults that resolved and fired again
    replacement: dict[str, float] = field(default_factory=dict)  # spares used, waits, wait hours, new nodes faulty
    gpu_hours_kept: float = 0.0  # GPU-hours a DRA quarantine of one GPU kept in service that node scope would not
    # what a peer did (gpuhealth/simulator/peers.py); {}: gpuhealth
    peer: dict[str, float] = field(default_factory=dict)

    @property
    def node_availability(self) -> float:
        return 1.0 - self.out_node_seconds / self.node_seconds

    @property
    def gpu_availability(self) -> float:
        return 1.0 - self.out_gpu_seconds / (self.node_seconds * self.gpus_per_node)


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): a 95% interval of the mean over runs (one run: no interval, low = high = the value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    t = _T95[len(values) - 2] if len(values) - 1 <= len(_T95) else 1.96
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def run_figures(r: RunResult) -> dict[str, float | None]:
    j = r.jobs
    return {
        "node_availability": r.node_availability,
        "gpu_availability": r.gpu_availability,
        "ettr": statistics.fmean(r.ettr.values()) if r.ettr else None,
        "job_success_rate": j.completed_sound / j.sound_ended if j.sound_ended else None,
        "platform_failure_rate": j.failed_platform / j.ended if j.ended else None,
        "platform_interrupted_attempts": j.attempts_by_platform / j.attempts if j.attempts else None,
        "mttr_hours": r.mean_outage_h,
        "gpu_hours_kept": r.gpu_hours_kept,
    }


def _mean_maps(maps: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for m in maps:
        for k, v in m.items():
            total[k] += v
    return {k: v / len(maps) for k, v in sorted(total.items(), key=lambda kv: -kv[1])}


def summarize(runs: list[RunResult]) -> dict[str, Any]:
    figures = [run_figures(r) for r in runs]
    out: dict[str, Any] = {"scenario": runs[0].scenario, "runs": len(runs), "seeds": [r.seed for r in runs],
                           "nodes": runs[0].nodes, "days": runs[0].days}
    intervals: dict[str, list[float] | None] = {}
    for key in (*HEADLINE, "platform_interrupted_attempts", "mttr_hours", "gpu_hours_kept"):
        values = [v for v in (f[key] for f in figures) if v is not None]
        if values:
            mean, lo, hi = interval(values)
            out[key] = mean
            intervals[key] = [lo, hi]
        else:
            out[key] = None
            intervals[key] = None
    out["intervals"] = intervals
    out["targets"] = {k: {"target": v, "met": None if out[k] is None else
                          (out[k] >= v if k != "platform_failure_rate" else out[k] <= v)} for k, v in TARGETS.items()}
    interruptions: list[dict[str, float]] = []
    for r in runs:
        merged: dict[str, float] = defaultdict(float)
        for per_job in r.interruptions.values():
            for cause, n in per_job.items():
                merged[cause] += n
        interruptions.append(dict(merged))
    out["training_interruptions"] = _mean_maps(interruptions)
    out["training_interruptions_total"] = sum(out["training_interruptions"].values())
    out["faults"] = _mean_maps([{k: float(v) for k, v in r.faults.items()} for r in runs])
    out["out_of_service_node_hours"] = {"by_cause": _mean_maps([r.out_hours_by_cause for r in runs]),
                                        "by_rung": _mean_maps([r.out_hours_by_rung for r in runs])}
    jobs = [r.jobs for r in runs]
    out["jobs"] = {k: statistics.fmean(getattr(j, k) for j in jobs) for k in (
        "submitted", "ended", "completed", "failed_app", "failed_platform", "attempts", "attempts_by_platform",
        "preempted")}
    out["budget"] = {
        "deferred": _mean_maps([{k: float(v) for k, v in r.deferred.items()} for r in runs]),
        "breaker_trips": statistics.fmean(r.breaker_trips for r in runs),
        "breaker_open_hours": _mean_maps([r.breaker_open_hours for r in runs]),
        "max_disrupted": {p: max(r.max_disrupted.get(p, 0) for r in runs) for p in runs[0].max_disrupted},
    }
    out["by_size"] = by_size(runs)
    out["detection"] = {"false_positives": _mean_maps([{k: float(v) for k, v in r.false_positives.items()}
                                                       for r in runs]),
                        "flapped": statistics.fmean(r.flapped for r in runs)}
    out["replacement"] = _mean_maps([r.replacement for r in runs])
    out["peer"] = {k: statistics.fmean(r.peer.get(k, 0.0) for r in runs) for k in runs[0].peer}
    out["remediator"] = {"passes": statistics.fmean(r.passes for r in runs),
                         "decisions": _mean_maps([{k: float(v) for k, v in r.decisions.items()} for r in runs])}
    return out


def by_size(runs: list[RunResult]) -> dict[str, dict[str, Any]]:
    """Each job size's figures (gpuhealth/simulator/jobs/outcomes.py) with their intervals over runs, and "512+"
    (Kokolis's large jobs) together."""
    sizes: list[tuple[str, list[SizeTally]]] = [
        (name, [r.outcomes.by_size[name] for r in runs if name in r.outcomes.by_size]) for name, _ in BUCKETS]
    sizes.append(("512+", [r.outcomes.large() for r in runs]))
    out: dict[str, dict[str, Any]] = {}
    for name, tallies in sizes:
        if not tallies or not any(t.attempts for t in tallies):
            continue
        figs = [size_figures(t) for t in tallies]
        entry: dict[str, Any] = {}
        for key in figs[0]:
            values = [v for v in (f[key] for f in figs) if v is not None]
            entry[key] = list(interval(values)) if values else None
        out[name] = entry
    return out


def _fmt(key: str, value: float | None, iv: list[float] | None) -> str:
    if value is None:
        return "n/a (no such jobs ended)"
    digits = 5 if "availability" in key else 1 if key == "gpu_hours_kept" else 4
    text = f"{value:.{digits}f}"
    if iv is not None and iv[0] != iv[1]:
        text += f"  [{iv[0]:.{digits}f}, {iv[1]:.{digits}f}]"
    return text


def render_text(s: dict[str, Any]) -> str:
    lines = [f"scenario {s['scenario']}: {s['nodes']} nodes, {s['days']:g} days, {s['runs']} run(s) "
             f"(seeds {s['seeds'][0]}..{s['seeds'][-1]}); 95% intervals over runs"]
    labels = {"node_availability": "node availability", "gpu_availability": "GPU availability",
              "ettr": "ETTR (training, mean)", "job_success_rate": "job success rate",
              "platform_failure_rate": "platform-caused failures", "platform_interrupted_attempts":
              "attempts ended by platform", "mttr_hours": "mean outage (h)",
              "gpu_hours_kept": "GPU-hours kept (GPU scope)"}
    for key, label in labels.items():
        line = f"  {label:<28} {_fmt(key, s[key], s['intervals'][key])}"
        target = s["targets"].get(key)
        if target and target["met"] is not None:
            line += f"   target {target['target']}: {'met' if target['met'] else 'MISSED'}"
        lines.append(line)
    if s["training_interruptions"]:
        lines.append(f"training interruptions (mean per run): {s['training_interruptions_total']:.1f}")
        lines += [f"  {c:<32} {n:8.1f}" for c, n in s["training_interruptions"].items()]
    oos = s["out_of_service_node_hours"]
    lines.append("node-hours out of service by cause:")
    lines += [f"  {c:<32} {h:10.1f}" for c, h in oos["by_cause"].items()]
    lines.append("node-hours out of service by highest rung reached:")
    lines += [f"  {c:<32} {h:10.1f}" for c, h in oos["by_rung"].items()]
    b = s["budget"]
    deferred = ", ".join(f"{k} {v:.0f}" for k, v in b["deferred"].items()) or "none"
    lines.append(f"budget: deferred decisions {deferred}; breaker trips {b['breaker_trips']:.1f}; "
                 f"max disrupted per pool {b['max_disrupted']}")
    j = s["jobs"]
    lines.append(f"small jobs per run: {j['submitted']:.0f} submitted, {j['completed']:.0f} completed, "
                 f"{j['failed_app']:.0f} failed (app), {j['failed_platform']:.1f} failed (platform), "
                 f"{j['preempted']:.0f} preempted")
    lines.append("jobs by size (GPUs), mean per run: jobs ended, job success, platform-caused job failures, failed "
                 "attempts (all causes), failed attempts (infrastructure), MTTF of an attempt (h)")
    for name, e in s.get("by_size", {}).items():
        cells = [f"{e[k][0]:.4f}" if e[k] is not None else "n/a" for k in (
            "job_success_rate", "platform_failure_rate", "attempt_failure_rate", "attempt_infra_failure_rate")]
        mttf = f"{e['mttf_hours'][0]:.1f}" if e["mttf_hours"] is not None else "n/a"
        lines.append(f"  {name:<9} {e['jobs_ended'][0]:9.0f} ended  {'  '.join(cells)}  {mttf}")
    d = s["detection"]
    fps = ", ".join(f"{k} {v:.1f}" for k, v in d["false_positives"].items()) or "none"
    lines.append(f"detection per run: false positives {fps}; flapping alerts fired again {d['flapped']:.1f}")
    lines += _replacement_lines(s["replacement"])
    lines.append(f"remediator passes per run: {s['remediator']['passes']:.0f}")
    lines += _peer_lines(s.get("peer", {}))
    return "\n".join(lines)


def _replacement_lines(rep: dict[str, float]) -> list[str]:
    """Spares, new nodes that arrived faulty, and burn-in (per run)."""
    out = [f"replacement per run: {rep.get('spares_used', 0):.1f} spares used, {rep.get('spare_waits', 0):.1f} "
           f"waited for one ({rep.get('spare_wait_hours', 0):.1f} h), {rep.get('new_nodes_faulty', 0):.1f} "
           "new nodes arrived faulty"]
    if rep.get("burn_ins", 0):
        out.append(f"burn-in per run: {rep['burn_ins']:.1f} new nodes, {rep.get('burn_in_hours', 0):.1f} node-hours "
                   f"(apart from out of service), {rep.get('burn_in_caught', 0):.1f} faulty new nodes caught, "
                   f"{rep.get('burn_in_passed_faulty', 0):.1f} let through, {rep.get('burn_in_failed', 0):.1f} "
                   "failed in all")
    return out


def _peer_lines(p: dict[str, float]) -> list[str]:
    """What a peer of gpuhealth did (`--remediation none|karpenter`), mean per run."""
    lines = []
    if "karpenter_replaced" in p:
        lines.append(f"Karpenter per run: {p['karpenter_conditions']:.1f} watched conditions turned False, "
                     f"{p['karpenter_replaced']:.1f} nodes replaced, {p['karpenter_cleared']:.1f} conditions True "
                     f"again before a replacement; its 20% guard blocked {p['karpenter_guard_blocked_checks']:.1f} "
                     f"checks, holding back {p['karpenter_guard_held']:.1f} replacements for "
                     f"{p['karpenter_guard_held_hours']:.1f} h in all")
    if "people_took_out" in p:
        lines.append(f"people per run: {p['people_took_out']:.1f} nodes taken out of work through their alerts")
    return lines


def poisson_interval(k: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Garwood) interval of a Poisson mean given one count k (above 500, where e^-mu underflows, the
    Wilson-Hilferty approximation of the same chi-square quantiles: within 0.1%)."""
    alpha = (1 - level) / 2
    if k > 500:
        z = statistics.NormalDist().inv_cdf(1 - alpha)
        return (k * (1 - 1 / (9 * k) - z / (3 * math.sqrt(k))) ** 3,
                (k + 1) * (1 - 1 / (9 * (k + 1)) + z / (3 * math.sqrt(k + 1))) ** 3)

    def cdf(n: int, mu: float) -> float:  # P(X <= n)
        term = total = math.exp(-mu)
        for i in range(1, n + 1):
            term *= mu / i
            total += term
        return total

    def solve(f: object, lo: float, hi: float) -> float:
        assert callable(f)
        for _ in range(200):
            mid = (lo + hi) / 2
            if f(mid):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    top = k + 10 * math.sqrt(k + 1) + 10
    lower = 0.0 if k == 0 else solve(lambda mu: 1 - cdf(k - 1, mu) < alpha, 0.0, top)
    upper = solve(lambda mu: cdf(k, mu) > alpha, 0.0, top)
    return lower, upper


def ettr_closed_form(nodes: int, rate_per_node_s: float, detection_s: float, restart_s: float,
                     checkpoint_interval_s: float, checkpoint_cost_s: float) -> float:
    """Kokolis et al. (HPCA 2025): E[ETTR] = (1 - N r_f (D + u0 + dt/2)) / (1 + w/dt), first order in N r_f dt."""
    lam = nodes * rate_per_node_s
    return (1 - lam * (detection_s + restart_s + checkpoint_interval_s / 2)) / (1 + checkpoint_cost_s
                                                                                 / checkpoint_interval_s)


def ettr_renewal(nodes: int, rate_per_node_s: float, detection_s: float, restart_s: float,
                 checkpoint_interval_s: float, checkpoint_cost_s: float) -> float:
    """The same model without the first-order step: failures Poisson at N r_f, a run loses its unfinished checkpoint
    interval (E[floor(X/T)] T of it is kept, T = dt + w), and a failure during the recovery (D + u0) starts it
    again: ETTR = dt e^{-lam T} e^{-lam R} lam / (1 - e^{-lam T})."""
    lam = nodes * rate_per_node_s
    cycle = checkpoint_interval_s + checkpoint_cost_s
    kept = checkpoint_interval_s * math.exp(-lam * cycle) / (1 - math.exp(-lam * cycle))
    return kept * lam * math.exp(-lam * (detection_s + restart_s))
