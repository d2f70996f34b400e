"""Kernel-log parsing: records per second through the kmsg probe's real code, beside `grep -cE`.

1. Throughput. A mixed log of /dev/kmsg records (bench/synthetic_log.py: 1% fault lines from the real
   captures in ../shared/fixtures/kmsg/samples.txt and tests/fixtures/kmsg/constructed.txt, the rest
   everyday kernel chatter, 2% of it from user space, one record in ten with continuation lines) is
   read by the kmsg probe exactly as the exporter reads a followed log: KmsgProbe over a FileSource,
   collect() until the end (parse every line, match every kernel record against
   gpuhealth/exporter/data/kernel_patterns.yaml, count). Best of 3 runs, wall clock and CPU time. The stages
   (read + parse, match) are timed alone too.
   Reference: `LC_ALL=C grep -cE -f PATTERNS LOG` with the same patterns (Python syntax translated to
   POSIX ERE; `^` anchored at the record's text), best of 3. The records the patterns match must be
   the same number for both, or the script fails.
2. Flood. A separate writer process appends records at --flood-rate (default 50,000/s) for
   --flood-seconds while the real probe, under the real ProbeRunner at its default interval (1 s,
   deadline 5 s), follows the file. After each run: lag (records written but not yet read). Every
   record read is checked for its sequence number: gaps (lost) and repeats must be zero.
   It keeps up when 90% of the runs end less than one interval's worth of records behind (a reader
   that falls behind ends most runs further behind; one run stalled by a busy machine is not that)
   and the backlog is gone within two intervals of the writer stopping.

Targets (docs/benchmarks.md): 300,000 records/s; the flood with no loss and no growing lag.
Last lines: `name value` pairs.

    .venv/bin/python bench/kmsg_parse.py            # 1,000,000 records, 60 s flood (~2 min)
    .venv/bin/python bench/kmsg_parse.py --quick    # 200,000 records, 10 s flood (~25 s, make bench)
    .venv/bin/python bench/kmsg_parse.py --profile  # and where the time goes (cProfile)
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import multiprocessing
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synthetic_log import SyntheticLog, append_at_rate

from gpuhealth.exporter import catalog
from gpuhealth.exporter.kernel.patterns import KernelEventMatcher, Pattern, load_patterns
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.kernel.records import KernelRecord
from gpuhealth.exporter.kernel.sources import Batch, FileSource, Position
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot

TARGET_RECORDS_PER_SECOND = 300_000
KMSG_INTERVAL, KMSG_DEADLINE = 1.0, 5.0  # the shipped defaults (gpuhealth/exporter/probes/registry.py)
_KMSG_PREFIX = "[0-9]+,[0-9]+,[0-9]+,[^;]*;"


# --- the reference: the same patterns for grep -E ---
def to_ere(regex: str) -> str:
    """A Python pattern of kernel_patterns.yaml in GNU grep -E syntax, searched in a /dev/kmsg line."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(regex):
        ch = regex[i]
        if ch == "\\" and i + 1 < len(regex):
            nxt = regex[i + 1]
            out.append(("0-9" if in_class else "[0-9]") if nxt == "d" else regex[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]" or regex[i - 1] == "["
        elif ch == "[":
            in_class = True
        elif regex.startswith("(?:", i):
            out.append("(")
            i += 3
            continue
        elif regex.startswith("(?P<", i):
            out.append("(")
            i = regex.index(">", i) + 1
            continue
        elif ch == "(" and regex.startswith("(?", i):
            raise ValueError(f"no ERE for {regex[i:i + 4]!r} in {regex!r}")
        elif ch == "^" and i == 0:
            out.append("^" + _KMSG_PREFIX)
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def grep_count(log: Path, patterns: list[Pattern], workdir: Path) -> tuple[int, float]:
    """(lines matched, wall seconds) of `grep -cE -f` over the log."""
    pattern_file = workdir / "patterns.ere"
    pattern_file.write_text("".join(to_ere(p.regex.pattern) + "\n" for p in patterns))
    started = time.perf_counter()
    result = subprocess.run(["grep", "-cE", "-f", str(pattern_file), str(log)], capture_output=True, text=True,
                            env={**os.environ, "LC_ALL": "C"}, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1) or result.stderr:
        raise RuntimeError(f"grep failed ({result.returncode}): {result.stderr.strip()}")
    return int(result.stdout), elapsed


# --- our code ---
def probe_pass(log: Path) -> tuple[KmsgProbe, int]:
    """The kmsg probe reads the whole file, as the exporter would over several runs; records handled."""
    probe = KmsgProbe(FileSource(str(log)), state_file=None)
    size = log.stat().st_size
    while probe.position.offset < size:
        probe.collect(deadline=3600)
    handled = sum(v for (family, _), v in probe.counts.items() if family is catalog.KMSG_RECORDS)
    return probe, int(handled)


def read_all(log: Path) -> list[KernelRecord]:
    source, position, records = FileSource(str(log)), Position(), []
    size = log.stat().st_size
    while position.offset < size:
        records.extend(source.read(position, time.monotonic() + 3600)[0])
    return records


def timed(fn: Callable[[], Any], runs: int) -> tuple[Any, float, float]:
    """(last result, best wall seconds, best CPU seconds of this thread) over `runs` runs."""
    best_wall = best_cpu = float("inf")
    result: Any = None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.thread_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.thread_time() - cpu)
    return result, best_wall, best_cpu


# --- the flood ---
class SeqCheckingSource(FileSource):
    """The real FileSource; every record it hands out is checked for its /dev/kmsg sequence number."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.last_seq = 0
        self.gaps = 0  # records skipped (lost)
        self.repeats = 0
        self.read_count = 0

    def read(self, position: Position, until: float) -> Batch:
        batch = super().read(position, until)
        for record in batch.records:
            if record.seq is None:
                continue
            if record.seq <= self.last_seq:
                self.repeats += 1
                continue
            self.gaps += record.seq - self.last_seq - 1
            self.last_seq = record.seq
            self.read_count += 1
        return batch


@dataclass
class FloodResult:
    rate: float
    seconds: float
    written: int = 0
    read: int = 0
    gaps: int = 0
    repeats: int = 0
    missed_metric: float = 0.0
    runs: int = 0
    failed_runs: int = 0
    lags: list[int] = field(default_factory=list)  # records behind at the end of each run
    drain_seconds: float = float("inf")
    cpu_seconds: float = 0.0

    @property
    def max_lag(self) -> int:
        return max(self.lags, default=0)

    @property
    def p90_lag(self) -> int:
        ordered = sorted(self.lags)
        return ordered[int(0.9 * (len(ordered) - 1))] if ordered else 0

    @property
    def keeps_up(self) -> bool:
        """A reader that falls behind ends most runs further behind; one stalled run (a busy machine) is not that."""
        return self.p90_lag <= self.rate * KMSG_INTERVAL and self.drain_seconds <= 2 * KMSG_INTERVAL


def flood(workdir: Path, rate: float, seconds: float) -> FloodResult:
    log = workdir / "flood.log"
    log.write_text("")
    res = FloodResult(rate, seconds)
    ctx = multiprocessing.get_context("fork")  # before any thread starts in this process
    written: Any = ctx.Value(ctypes.c_longlong, 0, lock=False)
    writer = ctx.Process(target=append_at_rate, args=(log, rate, seconds, written), daemon=True)
    source = SeqCheckingSource(str(log))
    probe = KmsgProbe(source, state_file=None)
    snapshot = Snapshot()
    runner = ProbeRunner(probe, snapshot, KMSG_INTERVAL, KMSG_DEADLINE)
    original_run = runner._run

    def run_and_measure() -> None:  # the runner's own step, with the lag noted after it
        original_run()
        res.runs += 1
        res.lags.append(max(0, int(written.value) - source.last_seq))

    runner._run = run_and_measure  # type: ignore[method-assign]
    stop = threading.Event()
    cpu_before = time.process_time()
    writer.start()
    runner.start(stop)
    writer.join(seconds + 30)
    stopped = time.monotonic()
    res.written = int(written.value)
    while source.last_seq < res.written and time.monotonic() - stopped < 10 * KMSG_INTERVAL:
        time.sleep(0.01)
    res.drain_seconds = time.monotonic() - stopped if source.last_seq >= res.written else float("inf")
    stop.set()
    res.cpu_seconds = time.process_time() - cpu_before
    time.sleep(0.05)
    res.read, res.gaps, res.repeats = source.read_count, source.gaps, source.repeats
    res.failed_runs = sum(snapshot.view()["kmsg"].failures.values())
    res.missed_metric = probe.counts.get((catalog.KMSG_RECORDS_MISSED, ()), 0.0)
    return res


def profile(log: Path) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(probe_pass, log)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200,000 records and a 10 s flood (make bench)")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that only checks the script works")
    parser.add_argument("--records", type=int, help="records in the mixed log (default 1,000,000)")
    parser.add_argument("--flood-rate", type=float, default=50_000, help="records/s the writer appends")
    parser.add_argument("--flood-seconds", type=float, help="how long the flood lasts (default 60)")
    parser.add_argument("--profile", action="store_true", help="print where the probe's time goes (cProfile)")
    args = parser.parse_args()
    records = args.records or (5_000 if args.smoke else 200_000 if args.quick else 1_000_000)
    flood_seconds = args.flood_seconds or (2 if args.smoke else 10 if args.quick else 60)
    runs = 1 if args.smoke else 3
    if shutil.which("grep") is None:
        parser.error("grep is not on PATH")

    workdir = Path(tempfile.mkdtemp(prefix="gpuhealth-kmsg-bench-"))
    try:
        log = workdir / "mixed.log"
        faults = SyntheticLog().write(log, records)
        patterns = load_patterns()
        print(f"log: {records:,} records ({faults:,} fault lines), {log.stat().st_size / 1e6:.1f} MB; "
              f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)

        (_, handled), wall, cpu = timed(lambda: probe_pass(log), runs)
        parsed, read_wall, _ = timed(lambda: read_all(log), runs)
        matcher = KernelEventMatcher(patterns)
        texts = [r.text for r in parsed if r.kernel]
        matched, match_wall, _ = timed(lambda: sum(1 for t in texts if matcher.match(t) is not None), runs)
        best_grep, grep_matched = float("inf"), -1
        for _ in range(runs):
            grep_matched, grep_wall = grep_count(log, patterns, workdir)
            best_grep = min(best_grep, grep_wall)

        ours, ours_cpu, grep_rate = records / wall, records / cpu, records / best_grep
        agree = matched == grep_matched and handled == len(parsed) == records
        print(f"{'':34s}{'gpuhealth kmsg probe':>22s}{'grep -cE (reference)':>24s}")
        print(f"{'records/s (wall, best of ' + str(runs) + ')':34s}{ours:>22,.0f}{grep_rate:>24,.0f}")
        print(f"{'records/s per CPU-second':34s}{ours_cpu:>22,.0f}{'':>24s}")
        print(f"{'records matched by the patterns':34s}{matched:>22,}{grep_matched:>24,}")
        print(f"stages: read + parse {records / read_wall:,.0f} records/s, match {len(texts) / match_wall:,.0f} "
              f"kernel records/s; probe/grep ratio {ours / grep_rate:.3f} (grep {grep_rate / ours:.1f}x faster)")
        verdict = "met" if ours >= TARGET_RECORDS_PER_SECOND else "MISSED"
        print(f"target {TARGET_RECORDS_PER_SECOND:,} records/s: {verdict}; counts agree: {'yes' if agree else 'NO'}",
              flush=True)
        if args.profile:
            print(profile(log))

        f = flood(workdir, args.flood_rate, flood_seconds)
        print(f"flood: {f.rate:,.0f} records/s for {f.seconds:g} s: written {f.written:,}, read {f.read:,}, "
              f"seq gaps {f.gaps}, repeats {f.repeats}, missed metric {f.missed_metric:g}, "
              f"probe runs {f.runs} ({f.failed_runs} failed)")
        print(f"flood: lag at the end of each run: 90th percentile {f.p90_lag:,} records ({f.p90_lag / f.rate:.2f} s), "
              f"max {f.max_lag:,} ({f.max_lag / f.rate:.2f} s), "
              f"backlog gone {f.drain_seconds:.2f} s after the writer stopped; probe CPU "
              f"{100 * f.cpu_seconds / (f.seconds + f.drain_seconds):.0f}% of one core; "
              f"keeps up: {'yes' if f.keeps_up else 'NO'}")
        lost = f.written - f.read
        pairs = {
            "kmsg_records_per_second": f"{ours:.0f}",
            "kmsg_records_per_cpu_second": f"{ours_cpu:.0f}",
            "kmsg_grep_records_per_second": f"{grep_rate:.0f}",
            "kmsg_probe_to_grep_ratio": f"{ours / grep_rate:.3f}",
            "kmsg_counts_agree": str(int(agree)),
            "kmsg_flood_records_per_second": f"{f.rate:.0f}",
            "kmsg_flood_p90_lag_records": str(f.p90_lag),
            "kmsg_flood_max_lag_records": str(f.max_lag),
            "kmsg_flood_drain_seconds": f"{f.drain_seconds:.2f}",
            "kmsg_flood_seq_gaps": str(f.gaps),
            "kmsg_flood_lost_records": str(lost),
            "kmsg_flood_keeps_up": str(int(f.keeps_up)),
        }
        for name, value in pairs.items():
            print(name, value)
        ok = agree and f.gaps == 0 and f.repeats == 0 and lost == 0
        return 0 if ok else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
