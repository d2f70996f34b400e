"""bench/remediator_storm.py runs end to end in a tiny mode: the real remediator (waitress) against the fake
API server, and it prints its figures beside their targets. No timing is asserted here."""

from __future__ import annotations

import os
import sys

from tests.support import paths, process_tree

ROOT = paths.REPO


def test_storm_bench_runs_tiny_and_reports_no_budget_violation() -> None:
    result = process_tree.run([sys.executable, str(ROOT / "bench" / "remediator_storm.py"), "--sizes", "40",
                             "--pools", "4"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for figure in ("webhook firing median / p99 (ms)", "every decision made", "budget violations",
                   "Kubernetes API calls until decided", "patch nodes"):
        assert figure in out
    assert "VIOLATION" not in out
    cpus = sorted(os.sched_getaffinity(0))
    placed = next(line for line in out.splitlines() if line.startswith("remediator processes may run on CPUs"))
    if len(cpus) > 1:  # the default: the remediator on a CPU of its own, the API server and the posts on the others
        assert f"the remediator on CPU(s) [{cpus[0]}]" in out and placed.split()[-2] == str(cpus[0]), placed
    else:
        assert "every process on every CPU" in out
