"""EFA probe: which EFA devices sysfs shows, and their hw_counters.

A device is EFA when its PCI vendor is Amazon (0x1d0f) and its PCI device id is 0xefa*; other RDMA
devices (mlx5, rxe, ...) are ignored. ports/<n>/state and phys_state are not read: the efa driver
hard-codes them ACTIVE / LinkUp, so they say nothing about health.

Which hw_counters are exported is a setting (`efa_counters`): by default only the health signals
(DEFAULT_COUNTERS), all of them, or a given list. The traffic counters (bytes, packets, work
requests, admin commands sent and completed, keep-alives) are half of every device's counters and,
on a p5 node (32 devices), most of the exporter's series, and no rule or dashboard reads them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from gpuhealth.exporter import catalog
from gpuhealth.exporter.probes.base import BAD_OUTPUT, NOT_FOUND, TIMEOUT, ProbeError, classify
from gpuhealth.exporter.samples import ProbeResult

AMAZON_VENDOR = "0x1d0f"
EFA_DEVICE_PREFIX = "0xefa"
# rdma-core's counter-cache lifespan in ms: a setting, not a counter.
_NOT_COUNTERS = frozenset({"lifespan"})

# The driver's counter names (amzn-drivers efa_verbs.c, ../shared/fixtures/efa/efa_hw_counters.txt).
# Port-level: ports/1/hw_counters; device-level: hw_counters (the last two in kernel-verbs builds only).
PORT_COUNTERS = (
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes",
    "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes",
    "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes", "retrans_bytes",
    "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events",
)
DEVICE_COUNTERS = (
    "submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds", "keep_alive_rcvd", "alloc_pd_err",
    "create_qp_err", "create_cq_err", "reg_mr_err", "alloc_ucontext_err", "create_ah_err", "mmap_err",
    "alloc_mr_err", "get_dma_mr_err",
)
KNOWN_COUNTERS = frozenset(PORT_COUNTERS + DEVICE_COUNTERS)
# What the health rules (rules/alerts/network.yaml), the node dashboard and on-call read: failed RDMA
# work requests, receive drops, retransmits and their timeouts, unresponsive and impaired remotes,
# failed and never-completed admin commands, and every device-level *_err. 17 of the 34 a device has
# (19 of 36 in kernel-verbs builds); tests/exporter/probes/test_efa_probe.py checks that everything rules/ and
# dashboards/ select is here.
DEFAULT_COUNTERS = frozenset({
    "rx_drops", "rdma_read_wr_err", "rdma_write_wr_err", "retrans_bytes", "retrans_pkts", "retrans_timeout_events",
    "unresponsive_remote_events", "impaired_remote_conn_events",
    "cmds_err", "no_completion_cmds", "alloc_pd_err", "create_qp_err", "create_cq_err", "reg_mr_err",
    "alloc_ucontext_err", "create_ah_err", "mmap_err", "alloc_mr_err", "get_dma_mr_err",
})
ALL = "all"
DEFAULT = "default"


def counter_word_error(word: str) -> str | None:
    """Why `word` cannot be an item of the efa_counters setting, or None."""
    if word in (ALL, DEFAULT) or word in KNOWN_COUNTERS:
        return None
    return f"unknown EFA counter {word!r} (use {DEFAULT}, {ALL} or names from: {', '.join(sorted(KNOWN_COUNTERS))})"


def counter_selection(words: Iterable[str]) -> frozenset[str] | None:
    """The counters the efa_counters setting selects: None for all (names the driver adds later too);
    `default` stands for DEFAULT_COUNTERS and may be combined with names."""
    given = tuple(words)
    if not given:
        raise ValueError(f"name at least one counter, or {DEFAULT} or {ALL}")
    for word in given:
        why = counter_word_error(word)
        if why:
            raise ValueError(why)
    if ALL in given:
        if len(given) > 1:
            raise ValueError(f"{ALL} already means every counter: give it alone")
        return None
    selected: set[str] = set()
    for word in given:
        selected |= DEFAULT_COUNTERS if word == DEFAULT else {word}
    return frozenset(selected)


class EfaProbe:
    name = "efa"

    def __init__(self, sysfs_root: str = "/", counters: frozenset[str] | None = DEFAULT_COUNTERS) -> None:
        """counters: the hw_counters to export (None: every one the driver has)."""
        self._class_dir = Path(sysfs_root, "sys", "class", "infiniband")
        self._counters = counters

    def collect(self, deadline: float) -> ProbeResult:
        give_up_at = time.monotonic() + deadline
        devices = self._efa_devices()
        result = ProbeResult()
        result.add(catalog.EFA_DEVICES_VISIBLE, len(devices))
        for name, pci_device_id in devices:
            # Each hw_counters read is an admin command to the device: stop between devices when late.
            if time.monotonic() > give_up_at:
                raise ProbeError(TIMEOUT, f"EFA: past the deadline before {name}")
            result.add(catalog.EFA_DEVICE_INFO, 1, device=name, pci_device_id=pci_device_id)
            for port, counter, value in _device_counters(self._class_dir / name, self._counters):
                result.add(catalog.EFA_HW_COUNTER, value, device=name, port=port, counter=counter)
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


def _device_counters(device_dir: Path, wanted: frozenset[str] | None) -> list[tuple[str, str, int]]:
    """(port, counter, value) for the port-level and ("" port) device-level hw_counters in `wanted`."""
    found = [("", name, value) for name, value in _counters(device_dir / "hw_counters", wanted)]
    ports_dir = device_dir / "ports"
    ports = sorted(_listdir(ports_dir), key=_port_order) if ports_dir.is_dir() else []
    for port in ports:
        found.extend((port, name, value) for name, value in _counters(ports_dir / port / "hw_counters", wanted))
    return found


def _port_order(port: str) -> tuple[int, str]:
    return (int(port), "") if port.isdigit() else (1 << 30, port)


def _counters(hw_counters: Path, wanted: frozenset[str] | None) -> list[tuple[str, int]]:
    """Only the wanted files are read: each read of a hw_counters file may query the device."""
    if not hw_counters.is_dir():
        return []
    return [(name, _read_counter(hw_counters / name)) for name in sorted(_listdir(hw_counters))
            if name not in _NOT_COUNTERS and (wanted is None or name in wanted)]


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
