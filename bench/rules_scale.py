"""Rules at scale: how long every rule group of rules/ takes to evaluate over a fleet of N nodes x 8 GPUs.

1. Synthesises the series such a fleet serves (bench/fleet_series.py: every family the rules read, with the
   labels docs/metrics.md gives, a small fraction of faults, and each family's history as long as the longest
   range a rule reads it through; the SLO's recorded fleet counts get 30 days), as OpenMetrics text.
2. Backfills it with `promtool tsdb create-blocks-from openmetrics` into a temporary data dir (in parts of
   --nodes-per-part nodes when the fleet is large, generating the next part while promtool reads one).
   The data ends at a planned time a little after the backfill should finish, so the rules evaluate over
   data that reaches "now".
3. Starts Debian's Prometheus over it with the project's rule files (every rules/alerts/*.yaml and
   rules/recording/*.yaml), waits until each group has been evaluated --evaluations times and reads each
   evaluation's duration (the figure prometheus_rule_group_last_duration_seconds reports), the failures
   (prometheus_rule_evaluation_failures_total) and Prometheus' RSS.
4. Then runs each rule's expression on its own through the query API at the data's end (a Prometheus without
   rules over the same data): "alone", what a group costs without the other groups competing for the cores.

Target: every group under 1 s at 10,000 nodes x 8 GPUs. Prints a table per size (group, rules, evaluations,
first, median and max of the later evaluations, alone, target), the slowest rules, a growth table when several
sizes run, and last `name value` lines. Figures depend on the machine's load: check `uptime`.

    .venv/bin/python bench/rules_scale.py --quick                    # 400 nodes, about a minute on 2 cores
    .venv/bin/python bench/rules_scale.py --sizes 1000,3000,10000    # the documented figures (about 45 min)

Sharded by node (bench/rules_shards.py; docs/scaling.md): one shard's node groups and the global ruler's fleet groups.

    .venv/bin/python bench/rules_scale.py --shards 4 --quick                          # make bench: 1,600 nodes
    .venv/bin/python bench/rules_scale.py --shards 10 --sizes 10000 --nodes-per-part 10000   # docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_series import exporter_series_per_node
from prom_rules import TARGET_SECONDS, Prometheus, PromRun, fmt_seconds, merge_blocks, time_rules_alone
from rules_backfill import SLO_DAYS, backfill
from rules_shards import main_sharded

# Used only to plan when the data ends, so that it reaches "now" when the timed Prometheus starts: too long a plan
# only waits, too short leaves the newest samples older than the rules' windows expect (reported as the lag of the
# first evaluation). The first size uses this rate (the 2-core development machine, busy); later sizes use the
# rate the previous size measured, with a margin.
PLAN_SECONDS_PER_NODE = 0.1
PLAN_FIXED_SECONDS = 10.0
PLAN_MARGIN = 1.3
MERGE_PLAN_SECONDS_PER_NODE = 0.03


@dataclass
class SizeResult:
    nodes: int
    series: int
    samples: int
    generate_seconds: float
    backfill_seconds: float
    merge_seconds: float
    tsdb_bytes: int
    prom: PromRun
    alone: dict[str, dict[str, float]]  # group: rule: seconds, each rule's expression run on its own


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_size(nodes: int, evaluations: int, per_part: int, plan: float, args: argparse.Namespace) -> SizeResult:
    with tempfile.TemporaryDirectory(prefix="rules-scale-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        end = int(time.time() + plan)
        print(f"[{nodes} nodes] writing and backfilling, data ends at now + {plan:.0f} s", flush=True)
        series, samples, gen_s, wall_s = backfill(nodes, end, work, data, per_part, args.slo_days)
        print(f"[{nodes} nodes] {series} series, {samples} samples: generated in {gen_s:.1f} s, "
              f"backfilled in {wall_s:.1f} s (wall, both)", flush=True)
        merge_s = 0.0 if args.no_merge else merge_blocks(work, data)
        if merge_s:
            print(f"[{nodes} nodes] overlapping part blocks merged by Prometheus in {merge_s:.0f} s", flush=True)
        tsdb = _du(data)
        wait = end + 1 - time.time()
        if wait > 0:  # rule samples older than the newest block's end would be rejected as out of bounds
            time.sleep(wait)
        with Prometheus(work, data, args.eval_interval, group_interval=args.group_interval) as prom:
            run = prom.time_rules(evaluations, float(end))
        with Prometheus(work / "alone", data, rules=False) as prom:
            alone = time_rules_alone(prom, float(end))
        return SizeResult(nodes, series, samples, gen_s, wall_s, merge_s, tsdb, run, alone)


def report(result: SizeResult) -> list[tuple[str, float]]:
    run = result.prom
    print(f"\n== {result.nodes} nodes x 8 GPUs: {result.series:,} series, {result.samples:,} samples backfilled "
          f"(a full exporter serves ~{exporter_series_per_node() * result.nodes:,} series at this size), "
          f"TSDB {result.tsdb_bytes / 2**20:.0f} MiB, Prometheus RSS {run.rss_bytes / 2**20:.0f} MiB, "
          f"first evaluation {run.first_eval_lag_seconds:.0f} s after the newest sample; alerts at the end: "
          f"{run.alerts.get('firing', 0)} firing, {run.alerts.get('pending', 0)} pending", flush=True)
    print(f"{'group':28} {'file':22} {'rules':>5} {'evals':>5} {'first':>11} {'median':>11} {'max':>11} "
          f"{'alone':>11} {'target':>8}  met  failures")
    pairs: list[tuple[str, float]] = []
    for name in sorted(run.groups):
        g = run.groups[name]
        warm = g.warm
        worst = max(warm)
        met = worst < TARGET_SECONDS
        print(f"{name:28} {g.file:22} {g.rules:5d} {len(g.durations):5d} {fmt_seconds(g.durations[0])} "
              f"{fmt_seconds(statistics.median(warm))} {fmt_seconds(worst)} "
              f"{fmt_seconds(sum(result.alone.get(name, {}).values()))} "
              f"{'< 1 s':>8}  {'yes' if met else 'NO ':3}  {g.failures:.0f}")
        pairs.append((f"rules_{result.nodes}_{name}_max_seconds", worst))
        pairs.append((f"rules_{result.nodes}_{name}_alone_seconds", sum(result.alone.get(name, {}).values())))
        pairs.append((f"rules_{result.nodes}_{name}_failures", g.failures))
    rules = sorted(((max(d[1:] or d), rule, group) for group, g in run.groups.items()
                    for rule, d in g.rule_durations.items()), reverse=True)[:8]
    alone = {rule: seconds for costs in result.alone.values() for rule, seconds in costs.items()}
    print("slowest rules (max of the later evaluations; alone: its expression run on its own):")
    for seconds, rule, group in rules:
        print(f"  {fmt_seconds(seconds)}  alone {fmt_seconds(alone.get(rule, math.nan))}  {rule} ({group})")
    worst_group = max(max(g.warm) for g in run.groups.values())
    pairs += [(f"rules_{result.nodes}_series", float(result.series)),
              (f"rules_{result.nodes}_samples", float(result.samples)),
              (f"rules_{result.nodes}_backfill_seconds", result.backfill_seconds),
              (f"rules_{result.nodes}_merge_seconds", result.merge_seconds),
              (f"rules_{result.nodes}_tsdb_mib", result.tsdb_bytes / 2**20),
              (f"rules_{result.nodes}_prometheus_rss_mib", run.rss_bytes / 2**20),
              (f"rules_{result.nodes}_worst_group_seconds", worst_group),
              (f"rules_{result.nodes}_groups_over_target",
               float(sum(max(g.warm) >= TARGET_SECONDS for g in run.groups.values()))),
              (f"rules_{result.nodes}_evaluation_failures", sum(g.failures for g in run.groups.values()))]
    return pairs


def growth(results: list[SizeResult]) -> None:
    base = results[0]
    print(f"\n== growth (x = ratio to {base.nodes} nodes)")
    print(f"{'nodes':>7} {'series':>11} {'backfill s':>11} {'merge s':>8} {'TSDB MiB':>9} {'RSS MiB':>8} "
          f"{'worst group':>12}")
    for r in results:
        worst = max(max(g.warm) for g in r.prom.groups.values())
        print(f"{r.nodes:7d} {r.series:11,d} {r.backfill_seconds:11.1f} {r.merge_seconds:8.0f} "
              f"{r.tsdb_bytes / 2**20:9.0f} "
              f"{r.prom.rss_bytes / 2**20:8.0f} {fmt_seconds(worst):>12}")
    print(f"{'group':28} " + " ".join(f"{r.nodes:>9d}n" for r in results) + "   growth per x nodes")
    for name in sorted(base.prom.groups):
        values = [statistics.median(r.prom.groups[name].warm) if name in r.prom.groups else float("nan")
                  for r in results]
        ratio = (values[-1] / values[0]) / (results[-1].nodes / base.nodes) if values[0] > 0 else float("nan")
        print(f"{name:28} " + " ".join(f"{v * 1000:8.1f}ms" for v in values) + f"   {ratio:.2f} of linear")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000", help="comma-separated fleet sizes in nodes (default 10000)")
    parser.add_argument("--quick", action="store_true",
                        help="one size of 400 nodes, 2 evaluations 5 s apart: under 90 s on 2 cores (make bench)")
    parser.add_argument("--evaluations", type=int, default=4, help="evaluations of every group to wait for")
    parser.add_argument("--nodes-per-part", type=int, default=2500,
                        help="nodes per promtool run: promtool holds a part's series in memory (~2 GiB per 1,000 "
                             "nodes); parts overlap in time, so Prometheus merges them before the timing")
    parser.add_argument("--eval-interval", default="15s",
                        help="global evaluation_interval, for groups without their own (default 15s)")
    parser.add_argument("--lead", type=float, default=None,
                        help="seconds from now to the end of the data (default: planned from the size)")
    parser.add_argument("--group-interval", default=None,
                        help="evaluate every group at this interval instead of the rule files' own (smoke test)")
    parser.add_argument("--slo-days", type=int, default=SLO_DAYS,
                        help=f"days of SLO history before the rest of the data (default {SLO_DAYS}, the SLO period)")
    parser.add_argument("--no-merge", action="store_true",
                        help="time at once, without letting a Prometheus first merge the overlapping backfilled "
                             "blocks (it starts a minute after it opens them): the smoke tests' mode; the timed "
                             "Prometheus may then compact while the rules run, so the figures are not comparable")
    parser.add_argument("--shards", type=int, default=0,
                        help="sharded by node (bench/rules_shards.py): one shard of a fleet of --sizes nodes split "
                             "over this many shards, with the node groups, and the global ruler with the fleet groups")
    parser.add_argument("--part", choices=("both", "shard", "global"), default="both",
                        help="with --shards: time one shard, the global ruler, or both (default)")
    return parser


def main() -> int:
    parser = _parser()
    args = parser.parse_args()
    if args.shards:
        return main_sharded(args)
    sizes = [400] if args.quick else [int(s) for s in args.sizes.split(",")]
    evaluations = 2 if args.quick else args.evaluations
    if args.quick:  # a group's cost does not depend on its interval; a short one just ends the wait sooner
        args.group_interval = args.group_interval or "5s"
        args.eval_interval = "5s"
    if evaluations < 2 or any(n < 1 for n in sizes):
        parser.error("need at least 2 evaluations and 1 node")
    results: list[SizeResult] = []
    pairs: list[tuple[str, float]] = []
    per_node, merge_per_node = PLAN_SECONDS_PER_NODE, MERGE_PLAN_SECONDS_PER_NODE
    for n in sizes:
        plan = PLAN_FIXED_SECONDS + per_node * n
        if n > args.nodes_per_part:  # Prometheus merges the parts' blocks first, starting a minute after it opens
            plan += 60 + merge_per_node * n
        results.append(run_size(n, evaluations, args.nodes_per_part, args.lead if args.lead is not None else plan,
                                args))
        per_node = PLAN_MARGIN * results[-1].backfill_seconds / n
        if results[-1].merge_seconds:
            merge_per_node = PLAN_MARGIN * max(0.0, results[-1].merge_seconds - 60) / n
        pairs += report(results[-1])
    if len(results) > 1:
        growth(results)
    print()
    for name, value in pairs:
        print(f"{name} {value:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
