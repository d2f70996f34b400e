"""One rank of a simulated training job, for the e2e dashboard scenario: gpuhealth_training's real step timer
and metrics endpoint, fed a fixed step time (there is no model to train here)."""

from __future__ import annotations

import argparse
import time

from gpuhealth_training import instrument
from prometheus_client import CollectorRegistry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--job", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--step-seconds", type=float, required=True, help="the time every compute step takes")
    args = ap.parse_args()
    timer = instrument(job=args.job, rank=args.rank, node=args.node, warmup_steps=3, window=10,
                       registry=CollectorRegistry(), serve=True, port=args.port)
    while True:
        timer.record(args.step_seconds)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
