"""The fleet simulator against its closed forms, at more points and runs than the tests take (docs/simulation.md).

ETTR of one synchronous job of N nodes with a fixed detection delay D = 5 min, restart overhead u0 = 5 min,
blocking checkpoint cost w = 30 s and spares (no budget pressure), against Kokolis et al.'s first-order form
(1 - N r_f (D + u0 + dt/2)) / (1 + w/dt) and the renewal form (gpuhealth.simulator.results.ettr_renewal); then node
availability for a fixed repair against 1 / (1 + r_f MTTR).

    .venv/bin/python bench/sim_agreement.py --runs 3    # about 2 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.cli import simulate
from gpuhealth.simulator.detection import load_pipeline
from gpuhealth.simulator.results import ettr_closed_form, ettr_renewal
from gpuhealth.simulator.scenario import parse_scenario

D = U0 = 300
W = 30
RATE = 6.5  # RSC-1, per 1,000 node-days
POINTS = [(64, 5, 365), (64, 60, 365), (256, 30, 180), (512, 15, 120), (512, 60, 120), (1024, 15, 60),
          (1024, 60, 60), (2048, 5, 30), (2048, 15, 30), (2048, 30, 30), (2048, 60, 30)]


def job(nodes: int, dt: int, days: int) -> str:
    return f"""
days: {days}
fleet: {{pools: {{p: {nodes + nodes // 10 + 8}}}, new_node_faulty: 0}}
failures: {{rate: {RATE}, mix: {{Faulty GPU: 1}}, lemon: {{fraction: 0}}}}
detection: {{delay: {D}s, perfect: true}}
jobs:
  training: [{{nodes: {nodes}, checkpoint_interval: {dt}m, checkpoint_cost: {W}s, restart_overhead: {U0}s}}]
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    pipe = load_pipeline(detection_delay_s=D)
    print("| nodes | dt (min) | days x runs | closed form | renewal form | simulated (range of runs) | sim - closed |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for nodes, dt, days in POINTS:
        sc = parse_scenario(job(nodes, dt, days), "model.yaml")
        values = [next(iter(r.ettr.values())) for r in simulate(sc, Policy(), pipe, 1, args.runs)]
        closed = ettr_closed_form(nodes, sc.rate_per_node_second, D, U0, dt * 60, W)
        exact = ettr_renewal(nodes, sc.rate_per_node_second, D, U0, dt * 60, W)
        mean = statistics.fmean(values)
        print(f"| {nodes} | {dt} | {days} x {args.runs} | {closed:.4f} | {exact:.4f} | {mean:.4f} "
              f"({min(values):.4f}-{max(values):.4f}) | {mean - closed:+.4f} |", flush=True)

    print()
    print("| rate /1000 node-days | repair | faults | MTTR (h) | 1/(1+r_f MTTR) | simulated | difference |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rate, repair in ((120.0, "90m"), (30.0, "6h"), (6.5, "12h")):
        sc = parse_scenario(f"""
days: 100
fleet: {{pools: {{p: 200}}, new_node_faulty: 0}}
failures: {{rate: {rate}, mix: {{Cable: 1}}, lemon: {{fraction: 0}}}}
causes:
  Cable: {{alert: NetdevTransmitTimeout, scope: node, job: hang, kind: external, external_repair: {repair},
           fixed_by: {{external: 1.0}}}}
detection: {{delay: 5m, perfect: true}}
remediation: {{manual_repair: 30d}}
""", "fixed.yaml")
        for r in simulate(sc, Policy(), pipe, 1, args.runs):
            mttr = r.mean_outage_h * 3600
            expected = 1 / (1 + sc.rate_per_node_second * mttr)
            print(f"| {rate:g} | {repair} | {r.outages} | {mttr / 3600:.3f} | {expected:.5f} | "
                  f"{r.node_availability:.5f} | {r.node_availability - expected:+.5f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
