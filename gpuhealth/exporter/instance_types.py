"""Expected GPU and EFA device counts for an EC2 instance type (gpuhealth/exporter/data/instance_types.csv)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    efa_devices: int


@cache
def _table() -> dict[str, InstanceType]:
    text = (resources.files("gpuhealth.exporter") / "data" / "instance_types.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {
        r["instance_type"]: InstanceType(
            r["instance_type"], gpus=int(r["nvidia_gpu"] or 0), efa_devices=int(r["efa_max_interfaces"] or 0)
        )
        for r in rows
    }


def lookup(name: str) -> InstanceType | None:
    return _table().get(name)
