"""Fleet simulator speed: how long gpuhealth-sim takes per run against fleet size and simulated days.

Runs the Llama 3 rates and causes (simulator/scenarios/llama3.yaml's failure model, lemon nodes included) with one
synchronous training job on 15/16 of the fleet and no small jobs, through the remediator's real decide, one run
per point on one core (no parallelism), and prints wall seconds, faults, remediator passes and the cost per
pass. Target (issue 15): a fleet-year of 2,048 nodes under 60 s.

    .venv/bin/python bench/sim_speed.py --quick   # 512 / 1,024 / 2,048 nodes x 90 days, 2,048 x 30 / 180 days
    .venv/bin/python bench/sim_speed.py           # 512 / 1,024 / 2,048 nodes x 365 days, 2,048 x 90 / 180 days
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remediator.policy import Policy
from simulator.detection import load_pipeline
from simulator.engine import Simulation
from simulator.scenario import load_scenario

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="90-day points (under a minute)")
    args = ap.parse_args()
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
