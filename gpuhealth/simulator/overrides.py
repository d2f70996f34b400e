"""The command line's what-ifs, applied to a scenario (each replaces what the scenario says)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuhealth.remediator.policy import parse_duration
from gpuhealth.simulator.scenario import Scenario, perfect
from gpuhealth.simulator.scenario_parts import TrainingJobSpec


@dataclass(frozen=True)
class Overrides:
    nodes: int | None = None
    days: float | None = None
    failure_rate: float | None = None  # per 1,000 node-days, all causes
    job_nodes: int | None = None
    checkpoint_interval: str | None = None
    checkpoint_cost: str | None = None
    restart_overhead: str | None = None
    detection_delay: str | None = None
    dra: bool = False  # fleet.dra: true
    perfect_detection: bool = False  # detection.perfect: true
    no_burn_in: bool = False  # fleet.burn_in: false
    remediation: str | None = None  # gpuhealth | none | karpenter (gpuhealth/simulator/peers.py)
    manual_repair: str | None = None  # remediation.manual_repair: people's repair time
    spares: float | None = None  # fleet.spares: a shelf of this share of each pool's nodes (rounded up)
    spare_return: str | None = None  # fleet.spare_return


def seconds(text: str) -> float:
    """A Prometheus-style duration (30m, 5m, 90s) in seconds; ValueError if it is not one."""
    return parse_duration(text).total_seconds()


def apply(sc: Scenario, o: Overrides) -> Scenario:
    if o.nodes is not None:
        total = sc.nodes
        pools = [(p, max(1, round(n * o.nodes / total))) for p, n in sc.pools]
        pools[0] = (pools[0][0], pools[0][1] + o.nodes - sum(n for _, n in pools))
        sizes = dict(pools)
        # the training jobs shrink (or grow) with their pool, keeping their share of it
        training = tuple(replace(t, nodes=max(1, min(round(t.nodes * o.nodes / total),
                                                     sizes[t.pool] if t.pool else o.nodes)))
                         for t in sc.training)
        # each pool's spares (fleet.spares) keep their share of it
        spares = tuple((p, round(n * sizes[p] / dict(sc.pools)[p])) for p, n in sc.replacement.spares)
        sc = replace(sc, pools=tuple(pools), training=training, replacement=replace(sc.replacement, spares=spares))
    if o.days is not None:
        sc = replace(sc, days=o.days)
    if o.failure_rate is not None:
        sc = replace(sc, rate_per_1000_node_days=o.failure_rate)
    if o.job_nodes is not None:
        base = sc.training[0] if sc.training else TrainingJobSpec("training", o.job_nodes, 1800.0, 0.0, 600.0)
        sc = replace(sc, training=(replace(base, name=f"job{o.job_nodes}", nodes=o.job_nodes, work_s=None,
                                           pool=None),))
    changes: dict[str, float] = {}
    if o.checkpoint_interval is not None:
        changes["checkpoint_interval_s"] = seconds(o.checkpoint_interval)
    if o.checkpoint_cost is not None:
        changes["checkpoint_cost_s"] = seconds(o.checkpoint_cost)
    if o.restart_overhead is not None:
        changes["restart_overhead_s"] = seconds(o.restart_overhead)
    if changes:
        sc = replace(sc, training=tuple(replace(t, **changes) for t in sc.training))  # type: ignore[arg-type]
    if o.detection_delay is not None:
        sc = replace(sc, detection_delay_s=seconds(o.detection_delay))
    if o.dra:
        sc = replace(sc, dra=True)
    if o.perfect_detection:
        sc = perfect(sc)
    if o.no_burn_in:
        sc = replace(sc, replacement=replace(sc.replacement, burn_in=False))
    if o.remediation is not None:
        sc = replace(sc, remediation=o.remediation)
    sc = _repair(sc, o)
    sizes = dict(sc.pools)
    too_big = [t.name for t in sc.training if t.nodes > (sizes[t.pool] if t.pool else sc.nodes)]
    if too_big:
        raise ValueError(f"training job(s) {', '.join(too_big)} need more nodes than the fleet's {sc.nodes}")
    return sc


def _repair(sc: Scenario, o: Overrides) -> Scenario:
    """People's repair time and the spares' shelf (--manual-repair, --spares, --spare-return)."""
    if o.manual_repair is not None:
        sc = replace(sc, manual_repair_s=seconds(o.manual_repair))
    if o.spares is not None:
        if not 0.0 <= o.spares <= 1.0:
            raise ValueError(f"--spares: expected a share of each pool between 0 and 1, got {o.spares:g}")
        shelf = tuple((p, math.ceil(n * o.spares - 1e-9)) for p, n in sc.pools)
        sc = replace(sc, replacement=replace(sc.replacement, spares=shelf))
    if o.spare_return is not None:
        sc = replace(sc, replacement=replace(sc.replacement, spare_return_s=seconds(o.spare_return)))
    return sc
