"""nccl-tests' `all_reduce_perf` on one node: its output read, and the bus-bandwidth floor per GPU product.

The output is a table (nccl-tests src/common.cu): per message size, out-of-place then in-place, each `time algbw
busbw #wrong`; the columns before them are size, count, type, redop and (since 2.10) root. They are read from the
end of the row, so both layouts parse. Comment lines start with `#`; `# Out of bounds values : N OK|FAILED` says
whether any result was wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Bus bandwidth (GB/s) a healthy board reaches at the largest message size of a single-node all-reduce over all its
# GPUs, per `nvidia-smi --query-gpu=name`. Judgement, from these figures (busBw is the NVLink traffic per GPU):
# - H100 SXM and H200 (NVLink 4, NVSwitch, 450 GB/s line rate): NCCL's Ring reaches ~370 GB/s on 2 to 8 GPUs and
#   NVLink SHARP (NVLS, the default on 8) ~480 GB/s (NCCL maintainer sjeaugey, NVIDIA/nccl-tests#212; measured
#   365-370 and 480, NVIDIA/nccl#1455). A real 8 x H200 run: 476.96 GB/s at 8 GiB
#   (tests/fixtures/nccl/all_reduce_perf_8xH200.txt). Floor 300: under either algorithm's healthy figure by a
#   margin for run-to-run noise, and above what a board with a link down gives (Ring over the survivors).
# - A100 SXM4 (NVLink 3, 300 GB/s each way): at the H100's Ring efficiency (370 of 450, 82%) ~245 GB/s. Stated
#   as judgement, not a measurement we hold: floor 180, the same margin.
# Other products (PCIe boards, NVL bridges, H800's fewer links) have no floor: the run still fails on wrong
# results, and the bandwidth check is reported skipped. policy diagnose.nccl_floor_gbps overrides the table.
FLOORS: tuple[tuple[re.Pattern[str], float], ...] = (
    (re.compile(r"^NVIDIA H100 80GB HBM3$"), 300.0),
    (re.compile(r"^NVIDIA H200( \d+GB HBM3e)?$"), 300.0),
    (re.compile(r"^NVIDIA A100-SXM4-(40|80)GB$"), 180.0),
)


def floor_for(product: str) -> float | None:
    """The table's floor for a GPU product name (None: none known)."""
    return next((gbps for pattern, gbps in FLOORS if pattern.match(product.strip())), None)


@dataclass(frozen=True)
class Row:
    size: int  # bytes
    busbw: float  # GB/s: the better of out-of-place and in-place
    wrong: int  # results wrong, both runs (0 when not checked: N/A)


@dataclass(frozen=True)
class AllReduce:
    rows: tuple[Row, ...]
    out_of_bounds_failed: bool  # `# Out of bounds values : N FAILED`

    @property
    def largest(self) -> Row:
        return max(self.rows, key=lambda r: r.size)

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.rows)


_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")


def _count(text: str) -> int:
    return 0 if text == "N/A" else int(text)


def _row(line: str) -> Row | None:
    cols = line.split()
    if len(cols) < 12 or not cols[0].isdigit():
        return None
    try:  # ... time algbw busbw #wrong (out-of-place) time algbw busbw #wrong (in-place)
        return Row(int(cols[0]), max(float(cols[-6]), float(cols[-2])), _count(cols[-5]) + _count(cols[-1]))
    except ValueError:
        return None


def parse_all_reduce(text: str) -> AllReduce:
    """The measurements of an all_reduce_perf run; ValueError when it printed none (it did not run, or stopped
    before the first size: an NCCL error)."""
    rows, failed = [], False
    for line in text.splitlines():
        line = line.strip()
        bounds = _OUT_OF_BOUNDS.match(line)
        if bounds:
            failed = bounds.group(2) == "FAILED" or int(bounds.group(1)) > 0
            continue
        row = None if line.startswith("#") else _row(line)
        if row is not None:
            rows.append(row)
    if not rows:
        raise ValueError("all_reduce_perf printed no measurement")
    return AllReduce(tuple(rows), failed)
