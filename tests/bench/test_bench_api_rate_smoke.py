"""bench/remediator_api_rate.py runs end to end on a small fleet: the real `serve` against the fake API server, and
it prints its figures. No rate is judged here but what the design promises: a fleet at rest reads no DRA objects,
one quarantined GPU makes the passes read them."""

from __future__ import annotations

import sys

from tests.support import paths, process_tree

ROOT = paths.REPO


def test_api_rate_bench_runs_and_reads_dra_only_while_a_gpu_is_quarantined() -> None:
    result = process_tree.run([sys.executable, str(ROOT / "bench" / "remediator_api_rate.py"), "--nodes", "40",
                             "--seconds", "11"], capture_output=True, text=True, timeout=330, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    pairs = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.count(" ") == 1)
    assert float(pairs["remediator_rest_requests_per_second"]) > 0  # the Lease is renewed
    assert float(pairs["remediator_rest_dra_requests_per_second"]) == 0
    assert float(pairs["remediator_one_gpu_dra_requests_per_second"]) > 0
    assert "at rest:" in result.stdout and "one GPU quarantined:" in result.stdout
