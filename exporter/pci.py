"""PCI bus ids in the one form every part of gpuhealth uses: NVML's `00000000:9B:00.0`."""

from __future__ import annotations

import re

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


def normalize_bus_id(text: str) -> str:
    """`0000:9b:00` (kernel log), `0000:9b:00.0`, `00000000:9B:00.0` (NVML) all become `00000000:9B:00.0`.

    Text that is not a bus id is returned stripped and unchanged, so nothing is silently lost.
    """
    raw = text.strip()
    if raw.upper().startswith("PCI:"):
        raw = raw[4:]
    m = _BUS_ID.match(raw)
    if not m:
        return raw
    domain = int(m.group("domain") or "0", 16)
    return f"{domain:08X}:{int(m.group('bus'), 16):02X}:{int(m.group('dev'), 16):02X}.{m.group('fn') or '0'}"
