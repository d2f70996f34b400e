"""The table of docs/simulation.md "Side by side: no remediation, Karpenter's node repair, gpuhealth": each shipped
scenario on the same seeded fault traces under the three repairers (`gpuhealth-sim run SCENARIO --runs R
--remediation none|karpenter|gpuhealth`, gpuhealth/simulator/peers.py), printed as the table's Markdown rows, then what
Karpenter and people did in each (the "peer" figures of `--json`), for the paragraphs under the table.

    .venv/bin/python bench/sim_peers.py --runs 3                       # the four shipped scenarios, seeds 1-3
    .venv/bin/python bench/sim_peers.py --runs 1 --scenarios rsc1      # one scenario, one seed

Each repairer's row also gives node availability with people's repair (remediation.manual_repair) at 4 h and 3 days
besides the shipped day, and Karpenter and gpuhealth each get a row with a finite shelf of spares (2% of each pool,
a removed node back after 3 days); then issue 38's targets as ratios (T1, T2, T4, T5, T6). Runs one simulation at a
time: 11 rows' worth per scenario.
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


# people's repair time (remediation.manual_repair): the shipped 1 day, and the two ends the table also reports
REPAIR_TIMES = ("4h", "3d")
# a finite shelf of spares: 2% of each pool, a removed node back on it after its 3-day repair (fleet.spares)
SHELF = ("--spares", "0.02", "--spare-return", "3d")
PEERS_HEADER = ("| scenario | repairer | node availability, people's repair 1 d | 4 h | 3 d | GPU availability | ETTR "
                "| job success | platform failures | 512+ GPUs | mean outage (h) | spares used |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|")


def peers_row(s: dict[str, Any], label: str, at: dict[str, dict[str, Any]]) -> str:
    """A row of the side-by-side table: node availability at each repair time (`at`: time -> its summary)."""
    platform = "n/a" if s["platform_failure_rate"] is None else f"{s['platform_failure_rate']:.5f}"
    cells = [f"{s['scenario']} ({s['nodes']} x {s['days']:g} d)", label, with_interval(s, "node_availability", 5),
             *(f"{at[t]['node_availability']:.5f}" if t in at else "" for t in REPAIR_TIMES),
             with_interval(s, "gpu_availability", 5), with_interval(s, "ettr", 4),
             with_interval(s, "job_success_rate", 4), platform, by_size(s, "512+"), f"{s['mttr_hours']:.2f}",
             f"{s['replacement'].get('spares_used', 0.0):.0f}"]
    return "| " + " | ".join(cells) + " |"


def _unavailability(s: dict[str, Any]) -> float:
    return 1.0 - float(s["node_availability"])


def _platform_512(s: dict[str, Any]) -> float | None:
    e = s["by_size"].get("512+")
    return None if e is None or e["platform_failure_rate"] is None else float(e["platform_failure_rate"][0])


def targets(scenario: str, by: dict[str, dict[str, Any]]) -> str:
    """Issue 38's targets as ratios against the baselines of the same run (T1, T2, T4, T5, T6)."""
    g, k, n, gs, ks = by[GPUHEALTH], by[KARPENTER], by[NONE], by["gpuhealth-shelf"], by["karpenter-shelf"]
    lost = {m: 1.0 - float(by[m]["ettr"]) for m in (GPUHEALTH, KARPENTER, NONE) if by[m]["ettr"] is not None}
    spares = k["replacement"].get("spares_used", 0.0)
    parts = [f"T1 U gpuhealth / U karpenter {_unavailability(g) / _unavailability(k):.2f}",
             f"T2 U gpuhealth / U none {_unavailability(g) / _unavailability(n):.2f}",
             f"T4 spares {g['replacement'].get('spares_used', 0.0) / spares if spares else float('nan'):.2f} x "
             f"karpenter's; with the 2% shelf gpuhealth {gs['node_availability'] - g['node_availability']:+.5f}, "
             f"karpenter {ks['node_availability'] - k['node_availability']:+.5f}"]
    if len(lost) == 3 and lost[KARPENTER] > 0 and lost[NONE] > 0:
        parts.append(f"T5 lost ETTR {lost[GPUHEALTH] / lost[KARPENTER]:.2f} x karpenter's, "
                     f"{lost[GPUHEALTH] / lost[NONE]:.2f} x none's")
    pg, pk, pn = (_platform_512(by[m]) for m in (GPUHEALTH, KARPENTER, NONE))
    if pg is not None and pk and pn:
        parts.append(f"T6 512+ platform failures {pg / pk:.2f} x karpenter's, {pg / pn:.2f} x none's")
    return f"- {scenario}: " + "; ".join(parts)


def main() -> int:
    args = table_args(__doc__)
    print(provenance(args))
    print(PEERS_HEADER)
    notes, lines = [], []
    for scenario in args.scenarios:
        by: dict[str, dict[str, Any]] = {}
        for mode, label in REPAIRERS:
            s = by[mode] = summary(scenario, mode, args.runs, args.seed)
            at = {t: summary(scenario, mode, args.runs, args.seed, ("--manual-repair", t)) for t in REPAIR_TIMES}
            print(peers_row(s, label, at), flush=True)
            notes.append(peer_line(s, mode))
        for mode, label in REPAIRERS[1:]:
            s = by[f"{mode}-shelf"] = summary(scenario, mode, args.runs, args.seed, SHELF)
            print(peers_row(s, f"{label}, spares: a shelf of 2%, 3-day return", {}), flush=True)
        lines.append(targets(scenario, by))
    print()
    print("\n".join(notes))
    print()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
