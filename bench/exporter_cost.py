"""The node agent's own cost, beside Debian's prometheus-node-exporter measured in the same run.

Each synthetic node is a real `gpuhealth-exporter` process (bench/fake_gpu_exporter.py: N H100s
faked inside NVML's Python bindings, as the tests fake them), an EFA sysfs tree of M devices built
by tests/support/sysfs_tree.py (of which the exporter serves its default EFA counters, 17 a device), and a
kernel log it follows (--kmsg-file). Probes run at the shipped default intervals (kmsg 1 s, nvml
15 s, efa 15 s); dcgm and diag are off (no DCGM here, and a stand-in script would measure /bin/sh,
not dcgmi); no node conditions (no API server).
Three nodes run side by side, 1 GPU / 4 EFA, 8 / 32 (the p5.48xlarge shape: the targets apply to
it) and 16 / 64, to show how the cost grows. One prometheus-node-exporter (default collectors,
an empty textfile directory) runs beside them as the reference.

Phases, the same for every process:
  at rest   a window (--rest-seconds) with no kernel-log traffic, each process scraped every 15 s as
            Prometheus would. CPU = user + system time of the process (all threads, /proc/PID/stat)
            over the window, scrapes included, as % of one core and as CPU-seconds per minute.
  scrapes   --scrapes scrapes one after another, with Prometheus's Accept and gzip headers, new
            connection each: latency median and p99 (client side, request to last byte); CPU per
            scrape = the process's CPU during the burst, less its at-rest rate, / scrapes.
  load      the same, while a writer process appends --log-rate kernel-log records/s (1% fault
            lines from the real captures; bench/synthetic_log.py) that every gpuhealth node follows.
RSS: VmRSS at the end, and the peak (VmHWM).

Targets (DESIGN.md, for 8 GPUs / 32 EFA): median scrape < 5 ms, p99 < 20 ms, RSS < 80 MB,
< 1% of one core at default intervals. Last lines: `name value` pairs.

    .venv/bin/python bench/exporter_cost.py            # 120 s windows, 1000 scrapes (~6 min)
    .venv/bin/python bench/exporter_cost.py --quick    # 20 s / 15 s windows, 100 scrapes (~45 s, make bench)
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from processes import free_port, stop_group
from synthetic_log import append_at_rate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.sysfs_tree import build_efa_sysfs  # noqa: E402

PYTHON = sys.executable
NODE_EXPORTER = "prometheus-node-exporter"
SCRAPE_INTERVAL = 15.0  # the chart's PodMonitor interval
# What Prometheus 2.42 sends when it scrapes.
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.42.0",
}
TARGETS = {"scrape_median_ms": 5.0, "scrape_p99_ms": 20.0, "rss_mb": 80.0, "cpu_rest_percent": 1.0}
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    wall: float = 0.0
    cpu: float = 0.0
    latencies: list[float] = field(default_factory=list)
    burst_wall: float = 0.0
    burst_cpu: float = 0.0

    @property
    def cpu_percent(self) -> float:
        return 100 * self.cpu / self.wall if self.wall else float("nan")

    def cpu_per_scrape(self) -> float:
        """CPU seconds one scrape costs: the burst's CPU less what the process spends anyway."""
        background = self.cpu / self.wall * self.burst_wall if self.wall else 0.0
        return max(0.0, self.burst_cpu - background) / len(self.latencies) if self.latencies else float("nan")

    def latency_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Target:
    name: str
    key: str  # for the machine-readable lines
    argv: list[str]
    port: int
    workdir: Path
    gpus: int = 0
    proc: subprocess.Popen[bytes] | None = None
    phases: dict[str, Phase] = field(default_factory=dict)
    series: int = 0
    rss_mb: float = 0.0
    peak_rss_mb: float = 0.0

    def start(self) -> None:
        log = (self.workdir / f"{self.key}.log").open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, start_new_session=True)
        log.close()

    def stop(self) -> None:
        stop_group(self.proc, grace=5)

    def alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            tail = (self.workdir / f"{self.key}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} is not running:\n{tail}")

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rfind(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime, every thread, dead ones too

    def memory_mb(self) -> tuple[float, float]:
        assert self.proc is not None
        status = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024

    def fetch(self) -> bytes:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", "/metrics", headers=HEADERS)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{self.name}: HTTP {resp.status}")
            return gzip.decompress(body) if resp.getheader("Content-Encoding") == "gzip" else body
        finally:
            conn.close()

    def scrape(self) -> float:
        started = time.perf_counter()
        self.fetch()
        return time.perf_counter() - started


def wait_ready(target: Target, check: Callable[[bytes], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        target.alive()
        try:
            if check(target.fetch()):
                return
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{target.name} not ready in {timeout:g} s")
        time.sleep(0.2)


def gpuhealth_ready(body: bytes) -> bool:
    text = body.decode()
    return all(f'gpuhealth_probe_success{{probe="{p}"}} 1.0' in text for p in ("kmsg", "nvml", "efa"))


def gpuhealth_node(workdir: Path, gpus: int, efa: int, kmsg_log: Path) -> Target:
    home = workdir / f"node-{gpus}gpu"
    build_efa_sysfs(home / "sysfs", [(f"rdmap{16 + i}s27", "0xefa1", {}) for i in range(efa)])
    port = free_port()
    argv = [PYTHON, str(ROOT / "bench" / "fake_gpu_exporter.py"), "--gpus", str(gpus), "--",
            "--listen", f"127.0.0.1:{port}", "--kmsg-file", str(kmsg_log), "--state-file", str(home / "state.json"),
            "--sysfs-root", str(home / "sysfs"), "--disable", "dcgm,diag", "--no-conditions",
            "--gpus-expected", str(gpus), "--efa-expected", str(efa), "--log-level", "warning"]
    return Target(f"{gpus} GPU/{efa} EFA", f"gpuhealth_{gpus}gpu", argv, port, workdir, gpus=gpus)


def node_exporter(workdir: Path) -> Target:
    textfiles = workdir / "textfile"
    textfiles.mkdir()
    port = free_port()
    argv = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", f"--collector.textfile.directory={textfiles}"]
    return Target("node_exporter", "node_exporter", argv, port, workdir)


def window(targets: list[Target], phase: str, seconds: float) -> None:
    """Everything idles at its default intervals, scraped every 15 s; CPU over the window."""
    start_cpu = {t.key: t.cpu_seconds() for t in targets}
    started = time.monotonic()
    next_scrape = started
    while True:
        now = time.monotonic()
        if now >= started + seconds:
            break
        if now >= next_scrape:
            for t in targets:
                t.scrape()
            next_scrape += SCRAPE_INTERVAL
        time.sleep(max(0.0, min(next_scrape, started + seconds) - time.monotonic()))
    wall = time.monotonic() - started
    for t in targets:
        t.alive()
        p = t.phases.setdefault(phase, Phase())
        p.wall, p.cpu = wall, t.cpu_seconds() - start_cpu[t.key]


def burst(targets: list[Target], phase: str, scrapes: int) -> None:
    for t in targets:
        p = t.phases[phase]
        cpu, started = t.cpu_seconds(), time.monotonic()
        p.latencies = [t.scrape() for _ in range(scrapes)]
        p.burst_wall, p.burst_cpu = time.monotonic() - started, t.cpu_seconds() - cpu


def measure(targets: list[Target], kmsg_log: Path, rest: float, load: float, scrapes: int, log_rate: float) -> None:
    for t in targets:
        t.start()
    for t in targets:
        wait_ready(t, gpuhealth_ready if t.gpus else lambda body: b"node_cpu_seconds_total" in body)
    time.sleep(1)  # start-up work (imports, first probe runs) is not the steady state
    window(targets, "rest", rest)
    burst(targets, "rest", scrapes)
    writer = multiprocessing.get_context("fork").Process(
        target=append_at_rate, args=(kmsg_log, log_rate, load + 600), daemon=True)
    writer.start()
    try:
        time.sleep(2)  # the followers reach the steady state of the flow
        window(targets, "load", load)
        burst(targets, "load", scrapes)
    finally:
        writer.terminate()
        writer.join()
    for t in targets:
        t.rss_mb, t.peak_rss_mb = t.memory_mb()
        t.series = sum(1 for line in t.fetch().decode().splitlines() if line and not line.startswith("#"))


# --- the report ---
def growth(sizes: list[int], values: list[float]) -> str:
    """Linear or worse: extrapolate the two smallest sizes' straight line to the largest."""
    if len(sizes) < 3 or any(v != v for v in values):
        return "n/a"
    slope = (values[1] - values[0]) / (sizes[1] - sizes[0])
    predicted = values[1] + slope * (sizes[2] - sizes[1])
    if slope <= 0 or predicted <= 0:
        return "flat"
    ratio = values[2] / predicted
    kind = "linear" if ratio <= 1.25 else "worse than linear"
    return f"{kind} ({values[2]:.3g} vs {predicted:.3g} on the line, {slope:.3g}/GPU)"


def report(gpuhealth: list[Target], reference: Target | None, log_rate: float) -> dict[str, str]:
    main = next(t for t in gpuhealth if t.gpus == 8) if any(t.gpus == 8 for t in gpuhealth) else gpuhealth[-1]
    columns = [*gpuhealth, *([reference] if reference else [])]
    rows: list[tuple[str, str, Callable[[Target], float], str]] = [
        ("series exposed", "series", lambda t: t.series, "%.0f"),
        ("scrape median, ms (at rest)", "scrape_median_ms", lambda t: t.phases["rest"].latency_ms(0.5), "%.2f"),
        ("scrape p99, ms (at rest)", "scrape_p99_ms", lambda t: t.phases["rest"].latency_ms(0.99), "%.2f"),
        ("scrape median, ms (log load)", "scrape_median_load_ms", lambda t: t.phases["load"].latency_ms(0.5), "%.2f"),
        ("scrape p99, ms (log load)", "scrape_p99_load_ms", lambda t: t.phases["load"].latency_ms(0.99), "%.2f"),
        ("CPU per scrape, ms", "cpu_per_scrape_ms", lambda t: 1000 * t.phases["rest"].cpu_per_scrape(), "%.2f"),
        ("CPU at rest, % of one core", "cpu_rest_percent", lambda t: t.phases["rest"].cpu_percent, "%.3f"),
        ("CPU at rest, CPU-s per minute", "cpu_rest_seconds_per_minute",
         lambda t: 0.6 * t.phases["rest"].cpu_percent, "%.3f"),
        (f"CPU with {log_rate:,.0f} log rec/s, %", "cpu_load_percent", lambda t: t.phases["load"].cpu_percent, "%.2f"),
        ("RSS, MB", "rss_mb", lambda t: t.rss_mb, "%.1f"),
        ("peak RSS, MB", "peak_rss_mb", lambda t: t.peak_rss_mb, "%.1f"),
    ]
    width = 16
    print(f"{'':32s}{'gpuhealth-exporter on a node of':>{width * len(gpuhealth)}s}"
          + (f"{'reference':>{width}s}" if reference else ""))
    header = f"{'':32s}" + "".join(f"{t.name:>{width}s}" for t in columns)
    if reference:
        header += f"{str(main.gpus) + ' GPU / ref':>{width}s}"
    header += f"  {'target':>{width - 6}s}"
    print(header)
    pairs: dict[str, str] = {}
    for label, key, get, fmt in rows:
        line = f"{label:32s}" + "".join(f"{fmt % get(t):>{width}s}" for t in columns)
        if reference:
            ref = get(reference)
            line += f"{(get(main) / ref if ref else float('nan')):>{width}.1f}"
        target = TARGETS.get(key)
        if target is not None:
            verdict = "met" if get(main) < target else "MISSED"
            line += f"  {f'< {target:g} {verdict}':>{width - 6}s}"
        print(line)
        for t in columns:
            pairs[f"{t.key}_{key}"] = fmt % get(t)
        if reference:
            pairs[f"gpuhealth_{main.gpus}gpu_to_node_exporter_{key}_ratio"] = "%.2f" % (
                get(main) / get(reference) if get(reference) else float("nan"))
    if len(gpuhealth) >= 3:
        sizes = [t.gpus for t in gpuhealth]
        print(f"growth with node size ({', '.join(t.name for t in gpuhealth)}), a straight line through the "
              "first two, extended to the third:")
        for label, key, get, _ in rows:
            if key in ("series", "cpu_per_scrape_ms", "scrape_median_ms", "cpu_rest_percent", "rss_mb"):
                print(f"  {label:32s} {growth(sizes, [get(t) for t in gpuhealth])}")
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows, 100 scrapes (make bench)")
    parser.add_argument("--smoke", action="store_true", help="one tiny node, seconds long: checks the script works")
    parser.add_argument("--rest-seconds", type=float, help="at-rest window (default 120; --quick 20)")
    parser.add_argument("--load-seconds", type=float, help="window with the busy log (default 120; --quick 15)")
    parser.add_argument("--scrapes", type=int, help="scrapes per burst (default 1000; --quick 100)")
    parser.add_argument("--log-rate", type=float, default=1000, help="busy log, records/s (default 1000)")
    args = parser.parse_args()
    rest = args.rest_seconds or (2 if args.smoke else 20 if args.quick else 120)
    load = args.load_seconds or (2 if args.smoke else 15 if args.quick else 120)
    scrapes = args.scrapes or (10 if args.smoke else 100 if args.quick else 1000)
    sizes = [(1, 2)] if args.smoke else [(1, 4), (8, 32), (16, 64)]

    workdir = Path(tempfile.mkdtemp(prefix="gpuhealth-exporter-cost-"))
    kmsg_log = workdir / "kmsg.log"
    kmsg_log.write_text("")
    gpuhealth = [gpuhealth_node(workdir, g, e, kmsg_log) for g, e in sizes]
    reference = node_exporter(workdir) if shutil.which(NODE_EXPORTER) else None
    if reference is None:
        print(f"{NODE_EXPORTER} not found (apt-get install prometheus-node-exporter): no reference column")
    targets = [*gpuhealth, *([reference] if reference else [])]
    print(f"windows: rest {rest:g} s, load {load:g} s at {args.log_rate:,.0f} records/s, {scrapes} scrapes per burst; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    try:
        measure(targets, kmsg_log, rest, load, scrapes, args.log_rate)
    finally:
        for t in targets:
            t.stop()
    try:
        pairs = report(gpuhealth, reference, args.log_rate)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    for name, value in pairs.items():
        print(name, value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
