"""Rules sharded by node (docs/scaling.md): what one shard's node groups and the global ruler's fleet groups cost,
for a fleet of N nodes x 8 GPUs split over S shards. `bench/rules_scale.py --shards S` runs it.

1. One shard: the fleet's nodes whose name hashes to shard 0 (Prometheus' hashmod of the node label, as the chart's
   PodMonitor makes the Prometheus Operator's shards split them), about N / S nodes, every family the rules read
   (bench/fleet_series.py, as rules_scale.py writes it) and a training rank on every GPU (the raw step times the
   node group gpuhealth-training-ranks reduces), backfilled; Prometheus evaluates the node groups of
   rules/sets.yaml. Cost per node per shard: a round of every node group (the medians) over the shard's nodes.
2. The global ruler: what docs/scaling.md's remote write sends it for the whole fleet (`up`, the ALERTS of the nodes
   whose alerts fire or are pending, and the node groups' records the fleet groups read: every GPU's training rank
   as its 5-minute record, each node's count of its ranks, the failing probes as theirs), served live to its scrape
   (into its head, as remote write appends it); the SLO's 30 days of fleet counts and the remediator's leader series,
   backfilled; Prometheus evaluates the fleet groups of rules/sets.yaml.
   Left out: the remediator's workload counters (per namespace: their cost follows namespaces, not nodes).

Target: every group under 1 s per evaluation, on the shard and on the global ruler.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from fleet_series import H_5M, H_KMSG, FleetWriter, Node, write_slo_history
from prom_rules import TARGET_SECONDS, Prometheus, PromRun, fmt_seconds, merge_blocks, rule_sets, time_rules_alone
from rules_backfill import backfill, promtool_blocks
from static_answer import StaticAnswer

# The alert each synthetic fault fires (rules/), with its remediation label: what the shards' ALERTS carry.
FAULT_ALERTS = {
    "n_app_xid": ("GPUXidApplication", "none"), "n_fatal_xid": ("GPUXidFatal", "reset_gpu"),
    "n_kernel_fatal": ("HostMachineCheck", "reboot"), "n_sxid": ("NVSwitchFatalSXid", "reboot"),
    "n_recovery_action": ("GPURecoveryActionReset", "reset_gpu"),
    "n_exporter_down": ("GpuhealthExporterDown", "cordon"),
    "n_target_missing": ("GpuhealthExporterTargetMissing", "cordon"),
    "n_probe_failing": ("GpuhealthProbeFailing", "cordon"),
    "n_gpu_missing": ("GPUsMissing", "reboot"), "n_efa_missing": ("EFADevicesMissing", "drain"),
    "n_dcgm_fail": ("GPUDCGMHealthFailure", "reset_gpu"), "n_diag_fail": ("GPUDiagFailed", "replace"),
    "n_kmsg_missed": ("GpuhealthKmsgRecordsMissed", "none"), "g_hot": ("GPUTemperatureHigh", "none"),
    "g_hw_slowdown": ("GPUHardwareSlowdown", "drain"), "g_nvlink_down": ("NVLinkDown", "reset_gpu"),
    "g_ecc_dbe": ("GPUECCDoubleBitErrors", "reset_gpu"), "g_remap_pending": ("GPURowRemapPending", "reset_gpu"),
    "g_pcie_replays": ("GPUPCIeReplayRateHigh", "cordon"), "g_nvlink_errors": ("NVLinkReplayRecoveryErrors", "drain"),
    "g_thermal_violation": ("GPUThermalViolation", "cordon"), "g_lost": ("GPULost", "reboot"),
}
RANKS_PER_JOB = 1024


def hashmod(value: str, modulus: int) -> int:
    """Prometheus' relabel action hashmod: the MD5 of the value, its last 8 bytes as a big-endian integer, modulo."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus


class FleetInputs(FleetWriter):
    """What the shards remote-write to the global ruler for nodes [start, stop) (docs/scaling.md)."""

    def write_inputs(self, out: TextIO, start: int, stop: int, forwarded: TextIO | None = None) -> None:
        """The global ruler's inputs; the series the shards forward go to `forwarded` where given (served live)."""
        nodes = list(self.nodes(start, stop))
        for family in (self._up, self._failing_probes, self._alerts, self._rank_records, self._rank_counts):
            for node in nodes:
                family(forwarded or out, node)
        if forwarded is not None:
            forwarded.write("# EOF\n")
        if start == 0:
            self._fleet_recent(out)
            stamps = self._stamps(nodes[0], H_5M)
            self._const(out, "gpuhealth_remediator_leader", 'job="gpuhealth-remediator",instance="10.1.0.1:8080"',
                        "1", stamps)
        out.write("# EOF\n")

    def _failing_probes(self, out: TextIO, node: Node) -> None:
        """The shard's record of a failing probe (gpuhealth-probe): a series only for the probes that fail, as the
        shard evaluates it every STEP and remote write forwards it (no target labels: a record keeps its `by`)."""
        if "n_probe_failing" in node.faults:
            self._const(out, "node_probe_reason:gpuhealth_probe_success:avg10m",
                        f'node="{node.name}",pool="{node.pool}",probe="dcgm",reason="timeout"', "0",
                        self._live(node, H_5M))

    def _alerts(self, out: TextIO, node: Node) -> None:
        faults = set(node.faults) | {f for found in node.gpu_faults.values() for f in found}
        stamps = self._stamps(node, H_5M)
        for fault in sorted(faults & set(FAULT_ALERTS)):
            name, remediation = FAULT_ALERTS[fault]
            state = "pending" if random.Random(f"{node.index}{fault}").random() < 0.5 else "firing"
            labels = (f'alertname="{name}",alertstate="{state}",node="{node.name}",pool="{node.pool}",'
                      f'severity="warning",remediation="{remediation}"')
            self._const(out, "ALERTS", labels, "1", stamps)

    def training(self, out: TextIO, node: Node, name: str = "gpuhealth_training_step_seconds",
                 target: bool = True) -> None:
        """Every GPU runs a rank of a 1,024-rank job (the largest training series count per node): its raw step
        times (a shard's scrape), or with target False the shard's 5-minute record of them (`name`; what it
        forwards, with the record's labels only)."""
        stamps = self._live(node, H_5M)
        rng = random.Random(node.index)
        for g in range(self.gpus):
            rank = node.index * self.gpus + g
            slow = 1.6 if g in node.gpu_faults else 1.0
            labels = (f'job="train-{rank // RANKS_PER_JOB:03d}",rank="{rank % RANKS_PER_JOB}",node="{node.name}",'
                      f'pool="{node.pool}",namespace="ml"')
            if target:
                labels += f',instance="10.2.{node.index >> 8 & 255}.{node.index & 255}:{9100 + g}"'
            self._values(out, name, labels, [slow * (1 + 0.02 * rng.random()) for _ in stamps], stamps)

    def _rank_records(self, out: TextIO, node: Node) -> None:
        self.training(out, node, "namespace_job_rank_node:gpuhealth_training_step_seconds:avg5m", target=False)

    def _rank_counts(self, out: TextIO, node: Node) -> None:
        """The shard's count of each job's ranks on the node (gpuhealth-training-ranks): one job, a rank a GPU."""
        job = f"train-{node.index * self.gpus // RANKS_PER_JOB:03d}"
        self._const(out, "namespace_job_node:gpuhealth_training_ranks:count",
                    f'job="{job}",node="{node.name}",pool="{node.pool}",namespace="ml"', str(self.gpus),
                    self._live(node, H_5M))

    def write_ranks(self, out: TextIO, keep: Callable[[Node], bool]) -> None:
        """A shard's training ranks: the raw step times of its nodes' GPUs."""
        for node in self.nodes(0, self.n_nodes):
            if keep(node):
                self.training(out, node)
        out.write("# EOF\n")


def _global_backfill(nodes: int, end: int, work: Path, data: Path,
                     slo_days: int) -> tuple[int, int, float, bytes]:
    """Backfills what the global ruler reads over time (the SLO's fleet counts, the remediator's series); returns
    (series, samples, wall s, the forwarded series' exposition). What the shards forward is read as instant values
    only, and a global ruler has it in its head (remote write appends it): it is served to the timed Prometheus'
    scrape instead (live_exposition), not backfilled into a block, so that it is read from where a global ruler
    reads it (measured here, the head read no faster than the block: docs/benchmarks.md)."""
    started = time.monotonic()
    writer = FleetInputs(nodes, end)
    slo = work / "slo.om"
    with slo.open("w") as out:
        samples = write_slo_history(out, nodes, end - slo_days * 86400 - 3600, end - H_KMSG)
    promtool_blocks(slo, data, "144h")
    path, forwarded = work / "inputs.om", work / "forwarded.om"
    with path.open("w", buffering=1 << 20) as out, forwarded.open("w", buffering=1 << 20) as fwd:
        writer.write_inputs(out, 0, nodes, forwarded=fwd)
    promtool_blocks(path, data, "24h")
    path.unlink()
    exposition = live_exposition(forwarded, end)
    forwarded.unlink()
    return writer.counts.series + 2, writer.counts.samples + samples, time.monotonic() - started, exposition


def live_exposition(history: Path, end: int) -> bytes:
    """The newest value of each series of an OpenMetrics history that still has a sample in the last 5 minutes (the
    lookback: a series that stopped before is gone), as the text a scrape reads, without timestamps."""
    newest: dict[str, tuple[int, str]] = {}
    with history.open() as lines:
        for line in lines:
            if line.startswith("#"):
                continue
            series, value, stamp = line.rsplit(" ", 2)
            newest[series] = (int(stamp), value)
    return "".join(f"{series} {value}\n" for series, (stamp, value) in newest.items()
                   if stamp > end - 300).encode()


def _timed(work: Path, data: Path, end: int, groups: set[str], args: argparse.Namespace,
           scrape: dict[str, Any] | None = None,
           scraped_series: int = 0) -> tuple[PromRun, dict[str, dict[str, float]]]:
    """The groups' live evaluations, then each rule alone. With `scrape`, the timed Prometheus scrapes it (the
    forwarded series, `scraped_series` of them, into its head), evaluations count once all can be read, and every
    scrape must succeed (a failed one would leave the fleet groups nothing to read); alone reads them at the last
    scrape, from the head the timed run's WAL leaves."""
    wait = end + 1 - time.time()
    if wait > 0:
        time.sleep(wait)
    with Prometheus(work, data, args.eval_interval, group_interval=args.group_interval, groups=groups,
                    scrape=scrape, scraped_series=scraped_series) as prom:
        run = prom.time_rules(args.evaluations, float(end))
        at = float(end)
        if scrape is not None:
            run.scrape_seconds = prom.check_scrapes()
            at = prom.last_scrape()
            # what the fleet groups made of the forwarded series: the jobs scored (the training median's series)
            run.jobs_scored = len(prom.query("namespace_job:gpuhealth_training_step_seconds:median5m")["result"])
    with Prometheus(work / "alone", data, rules=False) as prom:
        alone = time_rules_alone(prom, at, groups=groups)
    return run, alone


def run_shard(fleet: int, shards: int,
              args: argparse.Namespace) -> tuple[int, int, PromRun, dict[str, dict[str, float]]]:
    keep = lambda node: hashmod(node.name, shards) == 0  # noqa: E731
    count = sum(keep(n) for n in FleetWriter(fleet, 0).nodes(0, fleet))
    with tempfile.TemporaryDirectory(prefix="rules-shard-") as tmp:
        work, plan = Path(tmp), args.lead if args.lead is not None else 10 + 0.1 * count
        data = work / "data"
        data.mkdir()
        end = int(time.time() + plan)
        print(f"[shard 0 of {shards}, fleet {fleet}] {count} nodes: writing and backfilling", flush=True)
        series, samples, _, wall = backfill(fleet, end, work, data, args.nodes_per_part, args.slo_days, keep=keep)
        ranks = FleetInputs(fleet, end)
        with (work / "ranks.om").open("w", buffering=1 << 20) as out:
            ranks.write_ranks(out, keep)
        promtool_blocks(work / "ranks.om", data, "24h")
        series, samples = series + ranks.counts.series, samples + ranks.counts.samples
        print(f"[shard] {series} series, {samples} samples, backfilled in {wall:.0f} s", flush=True)
        if not args.no_merge:
            merge_blocks(work, data)
        run, alone = _timed(work, data, end, rule_sets()["node"], args)
    return count, series, run, alone


def run_global(fleet: int, args: argparse.Namespace) -> tuple[int, PromRun, dict[str, dict[str, float]]]:
    with tempfile.TemporaryDirectory(prefix="rules-global-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        end = int(time.time() + (args.lead if args.lead is not None else 10 + 0.02 * fleet))
        print(f"[global ruler, fleet {fleet}] writing and backfilling what the shards send", flush=True)
        series, samples, wall, exposition = _global_backfill(fleet, end, work, data, args.slo_days)
        forwarded = exposition.count(b"\n")
        print(f"[global] {series} series, {samples} samples, backfilled in {wall:.0f} s; the forwarded series "
              f"served live ({forwarded:,} series, {len(exposition) / 2**20:.0f} MiB a scrape)", flush=True)
        # what a shard's remote write would keep appending, served to the timed Prometheus' scrape
        with StaticAnswer(exposition, "text/plain; version=0.0.4") as shards:
            scrape = {"job_name": "shards-remote-write", "honor_labels": True, "scrape_interval": "15s",
                      "scrape_timeout": "14s", "static_configs": [{"targets": [shards.address]}]}
            run, alone = _timed(work, data, end, rule_sets()["fleet"], args, scrape=scrape,
                                scraped_series=forwarded)
    return series, run, alone


def _table(title: str, run: PromRun, alone: dict[str, dict[str, float]], prefix: str) -> list[tuple[str, float]]:
    print(f"\n== {title}: Prometheus RSS {run.rss_bytes / 2**20:.0f} MiB; alerts at the end: "
          f"{run.alerts.get('firing', 0)} firing, {run.alerts.get('pending', 0)} pending")
    print(f"{'group':28} {'rules':>5} {'evals':>5} {'median':>11} {'max':>11} {'alone':>11}  met  failures")
    pairs: list[tuple[str, float]] = []
    for name in sorted(run.groups):
        g = run.groups[name]
        worst, cost = max(g.warm), sum(alone.get(name, {}).values())
        print(f"{name:28} {g.rules:5d} {len(g.durations):5d} {fmt_seconds(statistics.median(g.warm))} "
              f"{fmt_seconds(worst)} "
              f"{fmt_seconds(cost)}  {'yes' if worst < TARGET_SECONDS else 'NO ':3}  {g.failures:.0f}")
        pairs += [(f"{prefix}_{name}_max_seconds", worst), (f"{prefix}_{name}_alone_seconds", cost),
                  (f"{prefix}_{name}_failures", g.failures)]
    pairs += [(f"{prefix}_worst_group_seconds", max(max(g.warm) for g in run.groups.values())),
              (f"{prefix}_evaluation_failures", sum(g.failures for g in run.groups.values()))]
    return pairs


def main_sharded(args: argparse.Namespace) -> int:
    fleet = 1600 if args.quick else int(args.sizes.split(",")[0])
    shards = 4 if args.quick else args.shards
    if args.quick:
        args.group_interval, args.eval_interval = args.group_interval or "5s", "5s"
    args.evaluations = 2 if args.quick else args.evaluations
    pairs: list[tuple[str, float]] = []
    if args.part in ("both", "shard"):
        pairs += _shard_report(fleet, shards, args)
    if args.part in ("both", "global"):
        global_series, grun, galone = run_global(fleet, args)
        pairs += _table(f"global ruler: fleet {fleet} nodes, {global_series:,} series", grun, galone, "global")
        pairs += [("global_series", float(global_series)), ("global_jobs_scored", float(grun.jobs_scored)),
                  ("global_scrape_seconds", grun.scrape_seconds)]
    print()
    for name, value in pairs:
        print(f"{name} {value:.6g}")
    return 0


def _shard_report(fleet: int, shards: int, args: argparse.Namespace) -> list[tuple[str, float]]:
    count, series, run, alone = run_shard(fleet, shards, args)
    pairs = _table(f"one shard: {count} of {fleet} nodes (1/{shards}), {series:,} series", run, alone, "shard")
    per_round = sum(statistics.median(g.warm) for g in run.groups.values())
    per_node_alone = sum(sum(c.values()) for c in alone.values()) / count
    print(f"a round of the node groups: {per_round:.2f} s live ({per_round / count * 1000:.2f} ms per node), "
          f"{per_node_alone * count:.2f} s alone ({per_node_alone * 1000:.2f} ms per node)")
    print(f"first evaluation {run.first_eval_lag_seconds:.0f} s after the newest sample (over ~60 s, the live "
          "figures read windows that ended before it: raise --lead)")
    return [*pairs, ("shard_nodes", float(count)), ("shard_round_seconds", per_round),
            ("shard_ms_per_node", per_round / count * 1000), ("shard_alone_ms_per_node", per_node_alone * 1000),
            ("shard_first_eval_lag_seconds", run.first_eval_lag_seconds)]

