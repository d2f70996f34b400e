"""`gpuhealth-exporter` as on-call runs it (the real console script, in a subprocess, with no Node to talk to), and
the recorded node of tests/fixtures as its --once reads it: the kernel-log samples, a p4d.24xlarge's EFA sysfs
tree, a real dcgm-exporter scrape and a `dcgmi` stand-in that prints the recorded `dcgmi health` and `dcgmi diag`
JSON (sources in each fixture folder's README)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

EXPORTER = shutil.which("gpuhealth-exporter", path=str(Path(sys.executable).parent)) or "gpuhealth-exporter"


def run_exporter(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXPORTER, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NODE_NAME": ""})


def fixture_node_args(fixtures: Path, workdir: Path) -> list[str]:
    """The flags that point --once at the recorded node; the `dcgmi` stand-in is written into `workdir`."""
    dcgmi = workdir / "dcgmi"
    dcgmi.write_text(f"""#!/bin/sh
case "$*" in
  "health -s a") echo "Health monitor systems set successfully." ;;
  "health -c -j") cat '{fixtures}/dcgm/virtualclient_DCGMIHealthCheckResults.json' ;;
  "diag -r 1 -j") cat '{fixtures}/dcgm/virtualclient_DCGMIDiag_r1_results.json' ;;
  *) exit 64 ;;
esac
""")
    dcgmi.chmod(0o755)
    return ["--kmsg-file", str(fixtures / "kmsg" / "samples.txt"), "--sysfs-root", str(fixtures / "sysfs" / "p4d"),
            "--instance-type", "p4d.24xlarge", "--dcgmi", str(dcgmi),
            "--dcgm-exporter-url", str(fixtures / "dcgm" / "metrics_kops_aws_L4_580.105.08.prom"),
            "--dcgm-exporter-trust-unverified"]  # no node name here: nothing to check its Hostname against
