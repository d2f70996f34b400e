"""The table of docs/simulation.md "Side by side: no remediation, Karpenter's node repair, gpuhealth": each shipped
scenario on the same seeded fault traces under the three repairers (`gpuhealth-sim run SCENARIO --runs R
--remediation none|karpenter|gpuhealth`, gpuhealth/simulator/peers.py), printed as the table's Markdown rows, then what
Karpenter and people did in each (the "peer" figures of `--json`), for the paragraphs under the table.

    .venv/bin/python bench/sim_peers.py --runs 3                       # the four shipped scenarios, seeds 1-3
    .venv/bin/python bench/sim_peers.py --runs 1 --scenarios rsc1      # one scenario, one seed

Runs one simulation at a time (about 3 minutes for the whole table with --runs 3 on one core).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuhealth.simulator.cli import main as sim_main
from gpuhealth.simulator.peers import GPUHEALTH, KARPENTER, NONE
from gpuhealth.simulator.scenario import shipped_scenarios

ROOT = Path(__file__).resolve().parent.parent

REPAIRERS = ((NONE, "no automated remediation (`--remediation none`)"),
             (KARPENTER, "Karpenter node repair alone (`--remediation karpenter`)"),
             (GPUHEALTH, "gpuhealth (shipped policy)"))
ORDER = ("llama3", "rsc1", "rsc2", "mixed-1000")  # the order of the docs' tables
HEADER = ("| scenario | repairer | node availability | GPU availability | ETTR | job success | platform failures "
          "| 1-8 GPUs | 512+ GPUs | mean outage (h) | spares used |\n|---|---|---|---|---|---|---|---|---|---|---|")


def summary(scenario: str, mode: str, runs: int, seed: int, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """`gpuhealth-sim run SCENARIO --runs R --seed S --remediation MODE --json [EXTRA]`, in this process (how long
    it took on standard error)."""
    out = io.StringIO()
    args = ["run", scenario, "--runs", str(runs), "--seed", str(seed), "--remediation", mode, "--json", *extra]
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        rc = sim_main(args)
    if rc != 0:
        raise SystemExit(f"gpuhealth-sim {' '.join(args)}: exit {rc}")
    print(f"{scenario} {mode} {' '.join(extra)}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def with_interval(s: dict[str, Any], key: str, digits: int) -> str:
    value, iv = s[key], s["intervals"][key]
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    if iv is not None and iv[0] != iv[1]:
        text += f" [{iv[0]:.{digits}f}, {iv[1]:.{digits}f}]"
    return text


def by_size(s: dict[str, Any], size: str) -> str:
    """Job success / platform-caused job failures of the jobs of that size that ended (means over runs)."""
    e = s["by_size"].get(size)
    if e is None or e["job_success_rate"] is None:
        return "n/a"
    return f"{e['job_success_rate'][0]:.4f} / {e['platform_failure_rate'][0]:.4f}"


def row(s: dict[str, Any], label: str, last: str | None = None) -> str:
    """A row of the table; `last`: the last column (default: spares used)."""
    platform = "n/a" if s["platform_failure_rate"] is None else f"{s['platform_failure_rate']:.5f}"
    node = with_interval(s, "node_availability", 5)
    cells = [f"{s['scenario']} ({s['nodes']} x {s['days']:g} d)", label,
             node if last is None else f"{node} ({target_met(s)})", with_interval(s, "gpu_availability", 5),
             with_interval(s, "ettr", 4), with_interval(s, "job_success_rate", 4), platform, by_size(s, "1-8"),
             by_size(s, "512+"), f"{s['mttr_hours']:.2f}",
             f"{s['replacement'].get('spares_used', 0.0):.0f}" if last is None else last]
    return "| " + " | ".join(cells) + " |"


def target_met(s: dict[str, Any], target: float = 0.9995) -> str:
    """Node availability against the target, as docs/simulation.md says it."""
    value, iv = s["node_availability"], s["intervals"]["node_availability"]
    if value < target:
        return "MISSED"
    if iv is None or iv[0] == iv[1]:
        return "met"
    if iv[0] <= target:
        return "met on the mean, interval not above"
    return "met, interval above"


def peer_line(s: dict[str, Any], mode: str) -> str:
    p, rep = s["peer"], s["replacement"]
    faulty = f"{rep.get('new_nodes_faulty', 0.0):.1f} new nodes arrived faulty"
    if mode == KARPENTER:
        return (f"- {s['scenario']}, karpenter, per run: {p['karpenter_conditions']:.1f} conditions turned False, "
                f"{p['karpenter_replaced']:.1f} nodes replaced ({faulty}), {p['karpenter_cleared']:.1f} conditions "
                f"True again first; the 20% guard held back {p['karpenter_guard_held']:.1f} replacements "
                f"({p['karpenter_guard_held_hours']:.1f} h, {p['karpenter_guard_blocked_checks']:.0f} checks); "
                f"people took out {p['people_took_out']:.1f} nodes")
    if mode == NONE:
        return f"- {s['scenario']}, none, per run: people took out {p['people_took_out']:.1f} nodes through alerts"
    return (f"- {s['scenario']}, gpuhealth, per run: {rep.get('spares_used', 0.0):.1f} spares used ({faulty}), "
            f"{s['remediator']['passes']:.0f} passes")


def revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table_args(doc: str | None) -> argparse.Namespace:
    """The options of the scripts that print a table of docs/simulation.md: --runs, --seed, --scenarios."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="seeded runs per row (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    shipped = shipped_scenarios()
    default = [n for n in ORDER if n in shipped] + [n for n in shipped if n not in ORDER]
    ap.add_argument("--scenarios", nargs="+", default=default, metavar="SCENARIO",
                    help="default: every shipped scenario (gpuhealth-sim list)")
    return ap.parse_args()


def provenance(args: argparse.Namespace) -> str:
    """The comment line above a table's rows: the command, the seeds and the commit."""
    return (f"<!-- python bench/{Path(sys.argv[0]).name} {' '.join(sys.argv[1:])}  (seeds {args.seed}-"
            f"{args.seed + args.runs - 1}, git {revision()}) -->")


def main() -> int:
    args = table_args(__doc__)
    print(provenance(args))
    print(HEADER)
    notes = []
    for scenario in args.scenarios:
        for mode, label in REPAIRERS:
            s = summary(scenario, mode, args.runs, args.seed)
            print(row(s, label), flush=True)
            notes.append(peer_line(s, mode))
    print()
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
