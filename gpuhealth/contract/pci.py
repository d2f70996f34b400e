"""PCI bus ids, read once: the kernel log writes `0000:9b:00`, NVML and DCGM `00000000:9B:00.0`, NVIDIA's DRA driver
`0000:9b:00.0`, a driver message `PCI:0000:9b:00`. Every part of gpuhealth names a GPU by NVML's form; the
remediator compares DRA devices by the short form, which has no function and no width to disagree on."""

from __future__ import annotations

import re
from dataclasses import dataclass

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)
# An alert's `gpu` label as the rules write it (NVML's form, whatever the domain's width): anything else is refused
# before it reaches a Job's command line.
_FULL = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class BusId:
    domain: int
    bus: int
    device: int
    function: int

    def nvml(self) -> str:
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"

    def short(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}"


def _unprefixed(text: str) -> str:
    raw = text.strip()
    return raw[4:] if raw.upper().startswith("PCI:") else raw


def parse(text: str | None) -> BusId | None:
    """Any of the forms above (a missing domain is 0, a missing function .0); None for what is not a bus id."""
    m = _BUS_ID.match(_unprefixed(text or ""))
    if not m:
        return None
    return BusId(int(m.group("domain") or "0", 16), int(m.group("bus"), 16), int(m.group("dev"), 16),
                 int(m.group("fn") or "0"))


def normalize_bus_id(text: str) -> str:
    """`0000:9b:00` (kernel log), `0000:9b:00.0`, `00000000:9B:00.0` (NVML) all become `00000000:9B:00.0`.

    Text that is not a bus id is returned stripped and unchanged, so nothing is silently lost.
    """
    bus_id = parse(text)
    return bus_id.nvml() if bus_id else _unprefixed(text)


def short_bus_id(text: str | None) -> str | None:
    """domain:bus:device in lower-case hex, whatever the writer's width and function suffix; None if not a bus id."""
    bus_id = parse(text)
    return bus_id.short() if bus_id else None


def is_full_bus_id(text: str) -> bool:
    """NVML's form exactly (a 4-8 digit domain and the function): what an alert's `gpu` label may hold."""
    return bool(_FULL.match(text))
