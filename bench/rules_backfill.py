"""A synthetic fleet's series written as OpenMetrics and backfilled with `promtool tsdb create-blocks-from
openmetrics` into a Prometheus data dir: the data both rules benches time the rules over (bench/rules_scale.py for
the whole fleet, bench/rules_shards.py for a shard's nodes and the global ruler's). Here so that neither imports
the other for it."""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fleet_series import H_KMSG, FleetWriter, Node, write_slo_history

SLO_DAYS = 30  # the SLO's period: days of recorded fleet counts before the rest of the data


def promtool_blocks(path: Path, out: Path, block: str) -> None:
    # GOGC=50: promtool holds every series of its input in memory; a smaller heap margin keeps a part under ~5 GiB
    result = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                             f"--max-block-duration={block}", str(path), str(out)], capture_output=True, text=True,
                            env={**os.environ, "GOGC": "50"})
    if result.returncode != 0:
        raise RuntimeError(f"promtool failed on {path.name}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


def backfill(nodes: int, end: int, work: Path, data: Path, per_part: int,
             slo_days: int = SLO_DAYS, keep: Callable[[Node], bool] | None = None) -> tuple[int, int, float, float]:
    """Writes and backfills the fleet (its nodes that `keep` keeps: a shard's); returns (series, samples, generation
    s, wall s). Each part file is deleted once promtool has read it, so the disk holds at most two."""
    writer = FleetWriter(nodes, end)
    started = time.monotonic()
    generating = 0.0
    slo = work / "slo.om"
    t0 = time.monotonic()
    with slo.open("w") as out:
        samples = write_slo_history(out, nodes, end - slo_days * 86400 - 3600, end - H_KMSG)
    generating += time.monotonic() - t0
    # Large blocks: promtool reads its input once per block range. The SLO history gets 6-day blocks (what
    # Prometheus compacts to with a 60-day retention), the dense data one 24 h range (two across midnight UTC).
    errors: list[BaseException] = []

    def run(path: Path, block: str = "24h") -> None:
        try:
            promtool_blocks(path, data, block)
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)
        finally:
            path.unlink(missing_ok=True)

    pending = threading.Thread(target=run, args=(slo, "144h"))
    pending.start()
    parts = math.ceil(nodes / per_part)
    for part in range(parts):
        path = work / f"part-{part}.om"
        t0 = time.monotonic()
        with path.open("w", buffering=1 << 20) as out:
            writer.write(out, part * per_part, (part + 1) * per_part, fleet_series=part == 0, keep=keep)
        generating += time.monotonic() - t0
        pending.join()
        if errors:
            raise errors[0]
        pending = threading.Thread(target=run, args=(path,))
        pending.start()
    pending.join()
    if errors:
        raise errors[0]
    return writer.counts.series + 2, writer.counts.samples + samples, generating, time.monotonic() - started
