"""The kmsg probe over a log file as a user hands it over: a copy that has settled (written a while ago)."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from pathlib import Path

from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.samples import ProbeResult


def settled_copy(source: Path, directory: Path) -> Path:
    """`source` copied into `directory` with a modification time a minute ago (nobody is writing it)."""
    target = directory / source.name
    shutil.copyfile(source, target)
    settle(target)
    return target


def settle(path: Path) -> None:
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))


def file_probe(path: Path, state: Path | None = None) -> KmsgProbe:
    return KmsgProbe.for_path(str(path), True, state_file=str(state) if state else None)


def total(result: ProbeResult, name: str) -> float:
    return sum(s.value for s in result.samples if s.name == name)


def events(result: ProbeResult) -> dict[tuple[str, str], float]:
    """(event, device) -> count, only those that happened."""
    return {(s.labels["event"], s.labels["device"]): s.value
            for s in result.samples if s.name == "gpuhealth_kernel_events" and s.value}


def event_totals(result: ProbeResult) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (event, _device), value in events(result).items():
        counts[event] += int(value)
    return counts


def xids(result: ProbeResult) -> dict[tuple[str, str, str], float]:
    """(pci_bus_id, xid, fatal) -> count."""
    return {(s.labels["pci_bus_id"], s.labels["xid"], s.labels["fatal"]): s.value
            for s in result.samples if s.name == "gpuhealth_xid_errors"}
