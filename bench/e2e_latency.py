"""Detection to cordon, end to end: a fatal Xid is written to a node's kernel log; how long until the
node carries gpuhealth's taint in the (fake) cluster?

Runs the e2e stack (tests/e2e/stack.py: real exporter, Debian's Prometheus and Alertmanager, the
remediator) with the test timing: 1 s scrape and rule evaluation, Alertmanager group_wait 1 s.
Each run uses a fresh node, so budgets are opened wide for the measurement. Prints one line per run
and, last, `detection_to_cordon_seconds <median>`.

    .venv/bin/python bench/e2e_latency.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.stack import Stack, wait_for

POLICY = """
budget: {max_disrupted: "100%", max_cordoned: "100%", max_actions_per_hour: 1000}
breaker: {threshold: "100%"}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="faults to inject, one node each (default 7)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with Stack(pools={"bench": args.runs}, policy=POLICY) as stack:
        latencies = []
        for i, node in enumerate(stack.nodes.values()):
            started = time.monotonic()
            node.xid(79)
            wait_for(f"cordon of {node.name}", lambda n=node.name: stack.cordoned(n), timeout=60, every=0.02)
            latency = time.monotonic() - started
            latencies.append(latency)
            print(f"run {i + 1}: {node.name} cordoned {latency:.2f} s after the Xid was logged", flush=True)
        print(f"runs {len(latencies)} min {min(latencies):.2f} max {max(latencies):.2f}")
        print(f"detection_to_cordon_seconds {statistics.median(latencies):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
