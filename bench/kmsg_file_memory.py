"""The exporter's peak memory while it works through a flooded kernel-log file (issue 23, item 14).

A real `gpuhealth-exporter` follows a --kmsg-file that already holds --mb megabytes (written a minute
ago, so the last line counts): `kmsg` records from bench/synthetic_log.py (1% fault lines from the real
captures, one record in ten with continuation lines), or `short` dmesg lines of ~40 bytes, the most
lines (and so Python objects) per megabyte. Only the kmsg probe runs, at its shipped interval (1 s).
Once the state file's offset reaches the end of the file (looked at every 50 ms): VmHWM (the peak RSS)
and VmRSS of the exporter process, and how long it took. The chart's limit is exporter.resources.limits
(160Mi).

    .venv/bin/python bench/kmsg_file_memory.py                  # 200 MB of kmsg records
    .venv/bin/python bench/kmsg_file_memory.py --shape short    # 200 MB of short dmesg lines

Run from another directory with PYTHONPATH=<checkout> to measure that checkout's exporter.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from synthetic_log import SyntheticLog


def write_flood(path: Path, megabytes: int, shape: str) -> int:
    """`megabytes` MB of kernel log; the number of lines."""
    target, lines = megabytes * 1_000_000, 0
    log = SyntheticLog()
    with path.open("w", buffering=1 << 20) as f:
        written, seq = 0, 1
        while written < target:
            block = ([log.record(s) for s in range(seq, seq + 10_000)] if shape == "kmsg" else
                     [f"[{s / 1000:12.6f}] eth0: renamed from tmp{s:08x}\n" for s in range(seq, seq + 10_000)])
            seq += 10_000
            text = "".join(block)
            f.write(text)
            written += len(text)
            lines += text.count("\n")
    a_minute_ago = time.time() - 60
    os.utime(path, (a_minute_ago, a_minute_ago))
    return lines


def status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            out[name] = int(value.split()[0])
    return out


def offset(state: Path) -> int:
    try:
        return int(json.loads(state.read_text()).get("offset", 0))
    except (OSError, ValueError):
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="size of the flooded log (default 200 MB)")
    parser.add_argument("--shape", choices=("kmsg", "short"), default="kmsg")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kmsg-flood-") as tmp:
        log, state = Path(tmp) / "kern.log", Path(tmp) / "state.json"
        lines = write_flood(log, args.mb, args.shape)
        size = log.stat().st_size
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # PYTHONPATH=<a checkout from before the gpuhealth namespace (0.1.0)>: its exporter is at the top level
        old = any((Path(p) / "exporter").is_dir() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter" if old else "gpuhealth.exporter", "--listen", f"127.0.0.1:{port}",
             "--kmsg-file", str(log),
             "--state-file", str(state), "--no-conditions", "--no-pod-resources",
             "--disable", "nvml,dcgm,diag,efa", "--log-level", "warning"],
            cwd=tmp, env={**os.environ, "NODE_NAME": ""})
        started = time.monotonic()
        try:
            while offset(state) < size and proc.poll() is None and time.monotonic() - started < args.timeout:
                time.sleep(0.05)
            took = time.monotonic() - started
            final = status(proc.pid) if proc.poll() is None else {}
            read = offset(state)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"{args.shape}: {size / 1e6:.0f} MB, {lines:,} lines; read {'all' if final and read >= size else 'NOT all'} "
          f"in {took:.1f} s")
    if final:
        print(f"peak RSS (VmHWM) {final['VmHWM'] / 1024:.1f} MiB, RSS at the end {final['VmRSS'] / 1024:.1f} MiB")
        print(f"kmsg_file_peak_rss_mib {final['VmHWM'] / 1024:.1f}")
    return 0 if final and read >= size else 1


if __name__ == "__main__":
    sys.exit(main())
