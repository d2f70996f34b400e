"""The exporter's whole /metrics for one recorded node, diffed against a golden file, as node_exporter's
end-to-end test diffs its collector fixtures: one diff shows any drift in a family's name, help, type, labels or
value, whichever probe or parser caused it.

The node is the recorded one of tests/fixtures (kernel log samples, a p4d's EFA sysfs tree, recorded `dcgmi health`
and `dcgmi diag` JSON, a real dcgm-exporter scrape; tests/fixtures/golden/README.md). NVML is off: a machine with
a driver would answer it. Only what no recording can fix is masked: durations, timestamps (the time the file was
read, the host's boot time) and the build's version. After an intended change, regenerate the file and read the
diff before committing it: `make golden-metrics`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.exporter.recorded_node import fixture_node_args, run_exporter
from tests.support import paths

ROOT = paths.REPO
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "once_fixture_node.prom"
VARIES = re.compile(r"^(gpuhealth_\w+_(duration|timestamp)_seconds|gpuhealth_node_boot_time_seconds)({| )")
MASK = "<varies>"


def normalise(text: str) -> str:
    """Masked where a run cannot repeat itself, and each family's samples sorted (sysfs lists in no set order)."""
    out: list[str] = []
    samples: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            out += sorted(samples)
            samples = []
            out.append(line)
            continue
        line = re.sub(r'version="[^"]*"', f'version="{MASK}"', line)
        if VARIES.match(line):
            name, _, value = line.rpartition(" ")
            assert float(value) > 0, line  # masked, but still a real time or duration
            line = f"{name} {MASK}"
        samples.append(line)
    return "\n".join([*out, *sorted(samples)]) + "\n"


def scrape_the_fixture_node(fixtures: Path, workdir: Path) -> str:
    proc = run_exporter("--once", "--disable", "nvml", *fixture_node_args(fixtures, workdir))
    assert proc.returncode == 0, proc.stderr
    return normalise(proc.stdout)


def test_the_fixture_nodes_metrics_are_the_golden_file(fixtures: Path, tmp_path: Path) -> None:
    got = scrape_the_fixture_node(fixtures, tmp_path)
    if os.environ.get("GPUHEALTH_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "the exporter's /metrics drifted from tests/fixtures/golden/; if intended, " \
                                      "run `make golden-metrics` and read the diff"


def test_the_mask_hides_only_what_cannot_repeat() -> None:
    text = ("# HELP a b\n# TYPE a gauge\ngpuhealth_probe_duration_seconds{probe=\"kmsg\"} 0.01\n"
            "gpuhealth_xid_errors_total{xid=\"79\"} 1.0\ngpuhealth_exporter_build_info{version=\"9.9.9\"} 1.0\n")
    assert normalise(text).splitlines()[2:] == [
        'gpuhealth_exporter_build_info{version="<varies>"} 1.0',
        'gpuhealth_probe_duration_seconds{probe="kmsg"} <varies>',
        'gpuhealth_xid_errors_total{xid="79"} 1.0']
