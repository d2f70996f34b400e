"""The table of docs/simulation.md "What closing the loop is worth": each shipped scenario on the same seeded fault
traces under the shipped policy before the remediation loop was closed (examples/policies/open-loop.yaml) and after
(the built-in policy), printed as the table's Markdown rows, then the node-hours out of service by cause, before ->
after, for the list under the table.

    .venv/bin/python bench/sim_loop.py --runs 3                       # the four shipped scenarios, seeds 1-3
    .venv/bin/python bench/sim_loop.py --runs 1 --scenarios rsc1      # one scenario, one seed

The same as `gpuhealth-sim run SCENARIO --runs R [--policy examples/policies/open-loop.yaml] --json`, one simulation
at a time (about 2 minutes for the whole table with --runs 3 on one core).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sim_peers import provenance, row, summary, table_args
from gpuhealth.simulator.peers import GPUHEALTH

ROOT = Path(__file__).resolve().parent.parent
OPEN_LOOP = ROOT / "examples" / "policies" / "open-loop.yaml"
POLICIES = (("before (open-loop.yaml)", ("--policy", str(OPEN_LOOP))), ("after (shipped)", ()))
HEADER = ("| scenario | policy | node availability | GPU availability | ETTR | job success | platform failures "
          "| 1-8 GPUs | 512+ GPUs | mean outage (h) | budget deferrals, breaker trips |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def budget(s: dict[str, Any]) -> str:
    b = s["budget"]
    deferred = ", ".join(f"{k} {v:.0f}" for k, v in b["deferred"].items()) or "none"
    return f"{deferred}, {b['breaker_trips']:.0f}"


def by_cause(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Node-hours out of service by cause, mean per run, before -> after, the largest first."""
    b = before["out_of_service_node_hours"]["by_cause"]
    a = after["out_of_service_node_hours"]["by_cause"]
    causes = sorted((c for c in set(b) | set(a) if c != "remediation"), key=lambda c: -b.get(c, 0.0))
    parts = "; ".join(f"{c} {b.get(c, 0.0):,.0f} -> {a.get(c, 0.0):,.0f}" for c in causes)
    return (f"- **{after['scenario']}** (total {sum(b.values()):,.0f} -> {sum(a.values()):,.0f}): {parts}.")


def main() -> int:
    args = table_args(__doc__)
    print(provenance(args))
    print(HEADER)
    causes = []
    for scenario in args.scenarios:
        pair = []
        for label, extra in POLICIES:
            s = summary(scenario, GPUHEALTH, args.runs, args.seed, extra)
            print(row(s, label, budget(s)), flush=True)
            pair.append(s)
        causes.append(by_cause(*pair))
    print()
    print("\n".join(causes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
