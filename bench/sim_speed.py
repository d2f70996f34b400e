"""Fleet simulator speed: how long gpuhealth-sim takes per run against fleet size and simulated days.

Runs the Llama 3 rates and causes (gpuhealth/simulator/scenarios/llama3.yaml's failure model, lemon nodes included) with
one synchronous training job on 15/16 of the fleet and no small jobs, through the remediator's real decide, one run
per point on one core (no parallelism), and prints wall seconds, faults, remediator passes and the cost per
pass. Target (issue 15): a fleet-year of 2,048 nodes under 60 s.

`--rsc1`: the shipped RSC-1-like scenario (gpuhealth/simulator/scenarios/rsc1.yaml: small jobs at 83% utilization, the
512+-GPU job streams, other causes) scaled to 2,048 nodes for a year, small jobs aggregated (the default), and the
same scenario for 30 days per event (`jobs.aggregate_small: false`) for the cost of one event per small job.
Target (issue 26): the fleet-year under 60 s on one core.

    .venv/bin/python bench/sim_speed.py --quick   # 512 / 1,024 / 2,048 nodes x 90 days, 2,048 x 30 / 180 days
    .venv/bin/python bench/sim_speed.py           # 512 / 1,024 / 2,048 nodes x 365 days, 2,048 x 90 / 180 days
    .venv/bin/python bench/sim_speed.py --rsc1    # RSC-1-like, 2,048 nodes x 365 days (and x 30 days per event)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.detection import load_pipeline
from gpuhealth.simulator.engine import Simulation
from gpuhealth.simulator.overrides import Overrides, apply
from gpuhealth.simulator.scenario import load_scenario

TARGET_SECONDS = 60.0


def one(nodes: int, days: float, seed: int = 1) -> tuple[float, int, int, float, float]:
    base = load_scenario("llama3")
    job = replace(base.training[0], nodes=nodes * 15 // 16)
    sc = replace(base, pools=(("train", nodes),), days=days, training=(job,), small=None)
    pipe = load_pipeline(evaluation_interval_s=sc.evaluation_interval_s)
    start = time.perf_counter()
    r = Simulation(sc, Policy(), pipe, seed).run()
    wall = time.perf_counter() - start
    return wall, sum(r.faults.values()), r.passes, r.node_availability, next(iter(r.ettr.values()))


def rsc1(days: float, aggregate: bool, seed: int = 1) -> None:
    sc = replace(apply(load_scenario("rsc1"), Overrides(nodes=2048, days=days)), aggregate_small=aggregate)
    pipe = load_pipeline(evaluation_interval_s=sc.evaluation_interval_s)
    start = time.perf_counter()
    r = Simulation(sc, Policy(), pipe, seed).run()
    wall = time.perf_counter() - start
    large = r.outcomes.large()
    print(f"rsc1 2048 nodes {days:g} days {'aggregated' if aggregate else 'per event'}: {wall:.1f} s; "
          f"{r.jobs.submitted} small jobs, {sum(r.faults.values())} faults, {r.passes} passes; node availability "
          f"{r.node_availability:.5f}; 512+ GPU jobs ended {large.jobs_ended}, failed "
          f"{1 - large.jobs_completed / max(1, large.jobs_ended):.3f}", flush=True)
    if aggregate and days == 365:
        print(f"sim_rsc1_2048_nodes_fleet_year_seconds {wall:.1f} (target under {TARGET_SECONDS:.0f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="90-day points (under a minute)")
    ap.add_argument("--rsc1", action="store_true", help="the RSC-1-like fleet-year at 2,048 nodes, small jobs included")
    args = ap.parse_args()
    if args.rsc1:
        rsc1(365, aggregate=True)
        rsc1(30, aggregate=False)
        return 0
    days = 90 if args.quick else 365
    points = [(n, days) for n in (512, 1024, 2048)] + [(2048, d) for d in ((30, 180) if args.quick else (90, 180))]
    print(f"{'nodes':>6} {'days':>5} {'wall s':>8} {'faults':>7} {'passes':>7} {'ms/pass':>8} {'avail':>8} {'ettr':>6}")
    year = None
    for nodes, d in sorted(set(points)):
        wall, faults, passes, avail, ettr = one(nodes, d)
        print(f"{nodes:6d} {d:5d} {wall:8.2f} {faults:7d} {passes:7d} {1000 * wall / max(1, passes):8.3f} "
              f"{avail:8.5f} {ettr:6.3f}", flush=True)
        if nodes == 2048:
            year = wall * 365 / d
    if year is not None:
        print(f"sim_2048_nodes_fleet_year_seconds {year:.1f} (target under {TARGET_SECONDS:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
