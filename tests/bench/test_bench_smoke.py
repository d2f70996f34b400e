"""The node-agent benchmarks still run end to end (tiny sizes) and print their figures; speed is not judged here."""

from __future__ import annotations

import sys

from tests.support import paths, process_tree

BENCH = paths.REPO / "bench"


def run_bench(script: str) -> dict[str, str]:
    result = process_tree.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    pairs = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.count(" ") == 1)
    return pairs


def test_the_kmsg_parse_bench_reports_throughput_beside_grep_and_a_flood_without_loss() -> None:
    pairs = run_bench("kmsg_parse.py")
    assert float(pairs["kmsg_records_per_second"]) > 0 and float(pairs["kmsg_grep_records_per_second"]) > 0
    assert pairs["kmsg_counts_agree"] == "1"
    assert pairs["kmsg_flood_seq_gaps"] == "0" and pairs["kmsg_flood_lost_records"] == "0"


def test_the_exporter_cost_bench_reports_scrape_latency_cpu_and_memory() -> None:
    pairs = run_bench("exporter_cost.py")
    for figure in ("scrape_median_ms", "scrape_p99_ms", "cpu_per_scrape_ms", "cpu_rest_percent", "rss_mb", "series"):
        assert float(pairs[f"gpuhealth_1gpu_{figure}"]) >= 0, figure
    assert float(pairs["gpuhealth_1gpu_series"]) > 100  # the node's GPU and EFA series were scraped


def test_the_api_requests_bench_counts_the_node_agents_requests_before_and_after_the_watch() -> None:
    pairs = run_bench("api_requests.py")
    before = float(pairs["api_before_requests_per_second_2000_nodes"])
    after = float(pairs["api_after_requests_per_second_2000_nodes"])
    assert before > 100  # a GET of every Node every 10 s: ~200/s at 2,000 nodes
    assert after < 20 and pairs["api_after_2000_nodes_target_met"] == "1"  # a watch each, renewed every 5-10 min
    for way in ("before", "after"):
        assert float(pairs[f"api_{way}_marker_seen_max_seconds"]) >= 0
