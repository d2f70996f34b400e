"""EFA probe: which EFA devices sysfs shows, and their hw_counters.

A device is EFA when its PCI vendor is Amazon (0x1d0f) and its PCI device id is 0xefa*; other RDMA
devices (mlx5, rxe, ...) are ignored. ports/<n>/state and phys_state are not read: the efa driver
hard-codes them ACTIVE / LinkUp, so they say nothing about health.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from exporter.probes.base import BAD_OUTPUT, NOT_FOUND, TIMEOUT, ProbeError, classify
from exporter.samples import ProbeResult

AMAZON_VENDOR = "0x1d0f"
EFA_DEVICE_PREFIX = "0xefa"
# rdma-core's counter-cache lifespan in ms: a setting, not a counter.
_NOT_COUNTERS = frozenset({"lifespan"})


class EfaProbe:
    name = "efa"

    def __init__(self, sysfs_root: str = "/") -> None:
        self._class_dir = Path(sysfs_root, "sys", "class", "infiniband")

    def collect(self, deadline: float) -> ProbeResult:
        give_up_at = time.monotonic() + deadline
        devices = self._efa_devices()
        result = ProbeResult(facts={"efa_devices": [name for name, _ in devices]})
        result.add("gpuhealth_efa_devices_visible", len(devices))
        for name, pci_device_id in devices:
            # Each hw_counters read is an admin command to the device: stop between devices when late.
            if time.monotonic() > give_up_at:
                raise ProbeError(TIMEOUT, f"EFA: past the deadline before {name}")
            result.add("gpuhealth_efa_device_info", 1, device=name, pci_device_id=pci_device_id)
            for port, counter, value in _device_counters(self._class_dir / name):
                result.add("gpuhealth_efa_hw_counter", value, device=name, port=port, counter=counter)
        return result

    def _efa_devices(self) -> list[tuple[str, str]]:
        """(name, PCI device id) of each EFA device, sorted by name."""
        if not self._class_dir.is_dir():
            return []  # no RDMA devices at all: zero EFA devices, compared with the expected count elsewhere
        devices = []
        for entry in sorted(_listdir(self._class_dir)):
            pci = self._class_dir / entry / "device"
            vendor = _read_optional(pci / "vendor")
            device_id = _read_optional(pci / "device")
            if vendor is None or device_id is None:
                continue  # not a PCI device (e.g. soft-RoCE rxe): not EFA
            if vendor.lower() == AMAZON_VENDOR and device_id.lower().startswith(EFA_DEVICE_PREFIX):
                devices.append((entry, device_id.lower()))
        return devices


def _device_counters(device_dir: Path) -> list[tuple[str, str, int]]:
    """(port, counter, value) for the port-level and ("" port) device-level hw_counters."""
    found = [("", name, value) for name, value in _counters(device_dir / "hw_counters")]
    ports_dir = device_dir / "ports"
    ports = sorted(_listdir(ports_dir), key=_port_order) if ports_dir.is_dir() else []
    for port in ports:
        found.extend((port, name, value) for name, value in _counters(ports_dir / port / "hw_counters"))
    return found


def _port_order(port: str) -> tuple[int, str]:
    return (int(port), "") if port.isdigit() else (1 << 30, port)


def _counters(hw_counters: Path) -> list[tuple[str, int]]:
    if not hw_counters.is_dir():
        return []
    return [(name, _read_counter(hw_counters / name))
            for name in sorted(_listdir(hw_counters)) if name not in _NOT_COUNTERS]


def _read_counter(path: Path) -> int:
    text = _read(path)
    if not text.isdigit():
        raise ProbeError(BAD_OUTPUT, f"{path}: not a counter value: {text[:40]!r}")
    return int(text)


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError as exc:
        raise classify(exc) from exc


def _read_optional(path: Path) -> str | None:
    """The stripped text of a file that may legitimately be absent."""
    try:
        return _read(path)
    except ProbeError as exc:
        if exc.reason == NOT_FOUND:
            return None
        raise


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except UnicodeDecodeError as exc:
        raise ProbeError(BAD_OUTPUT, f"{path}: not text") from exc
    except OSError as exc:
        raise classify(exc) from exc
