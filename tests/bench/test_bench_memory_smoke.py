"""bench/remediator_memory.py runs end to end at a tiny size: the real `serve` against the fake API server filled with
Nodes and Pods of real size, a relist of everything, and the peak RSS of the remediator's processes as its last line.
No figure is judged here (docs/benchmarks.md has them)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import paths

ROOT = paths.REPO


def test_memory_bench_runs_tiny_and_ends_with_the_peak_rss_of_both_processes() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "remediator_memory.py"), "--nodes", "30", "--pods",
                             "90", "--pod-kib", "6", "--node-kib", "12", "--timeout", "120"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "30 Nodes of 12.1 KiB, 90 Pods of 6.0 KiB" in lines[0]  # the sizes asked for, within 0.1 KiB
    for figure in ("RSS after the first list and pass", "RSS after the relist", "peak RSS of each process (VmHWM)"):
        assert any(line.startswith(figure) for line in lines), figure
    name, value = lines[-1].split(" ")
    peaks = next(line for line in lines if line.startswith("peak RSS of each process"))
    each = [float(v) for v in peaks.removeprefix("peak RSS of each process (VmHWM)").split(" MiB")[0].split(" + ")]
    assert name == "peak_rss_mib" and len(each) >= 2 and all(v > 0 for v in each)
    assert abs(float(value) - sum(each)) <= len(each)  # the sum of the processes' peaks (each rounded to 1 MiB)
