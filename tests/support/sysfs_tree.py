"""Builds /sys/class/infiniband trees shaped like the efa driver's (see tests/fixtures/sysfs/README.md).

Layout from ../shared/fixtures/efa/efa_sysfs_layout.txt, counter names from efa_hw_counters.txt
(amzn-drivers efa_verbs.c). As in real sysfs, /sys/class/infiniband/<dev> is a symlink into
/sys/devices/<pci path>/infiniband/<dev>, whose `device` is a symlink up to the PCI function.

Run `python -m tests.support.sysfs_tree tests/fixtures/sysfs/p4d` to regenerate the committed p4d example.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support import paths

AMAZON = "0x1d0f"
MELLANOX = "0x15b3"

COUNTER_NAMES = paths.FIXTURES / "efa" / "efa_hw_counters.txt"


def _driver_counters() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The port- and device-level names in the driver's list (the kernel-verbs-only ones left out, as in
    the usual build)."""
    sections: dict[str, list[str]] = {"port": [], "device": []}
    section = ""
    for line in COUNTER_NAMES.read_text().splitlines():
        if line.startswith("# kernel-verbs builds only"):
            break
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith("#"):
            sections[section].append(line.strip())
    return tuple(sections["port"]), tuple(sections["device"])


PORT_COUNTERS, DEVICE_COUNTERS = _driver_counters()
LIFESPAN_MS = "12"

Device = tuple[str, str, Mapping[str, int | str]]  # (ibdev name, PCI device id, counter -> value)

# p4d.24xlarge should have 4 EFA devices (efa_count_by_instance_type.csv); this one shows 3, one of them
# with RDMA read errors and retransmit timeouts. The mlx5 device is not EFA and must be ignored.
P4D_EFA: list[Device] = [
    ("rdmap16s27", "0xefa1", {"tx_pkts": 1822043, "rx_pkts": 1790211, "keep_alive_rcvd": 5321}),
    ("rdmap32s27", "0xefa1", {"tx_pkts": 1744120, "rx_pkts": 1750968, "keep_alive_rcvd": 5321,
                              "rdma_read_wr_err": 3, "retrans_timeout_events": 2}),
    ("rdmap144s27", "0xefa1", {"tx_pkts": 1802377, "rx_pkts": 1799012, "keep_alive_rcvd": 5320}),
]
P4D_OTHER: list[Device] = [("mlx5_0", "0x101b", {"out_of_buffer": 0})]


def build_efa_sysfs(root: Path, devices: Sequence[Device], *, vendor: str = AMAZON) -> None:
    """Write each device under <root>/sys; counters not given are 0. With another vendor the counters
    are written as given to ports/1/hw_counters (they are that driver's names, not EFA's)."""
    for position, (name, device_id, counters) in enumerate(devices):
        ib_dir = _pci_function(root, name, position, vendor, device_id) / "infiniband" / name
        port_dir = ib_dir / "ports" / "1"
        _write(port_dir / "state", "4: ACTIVE")
        _write(port_dir / "phys_state", "5: LinkUp")
        (ib_dir / "device").symlink_to("../..")
        if vendor == AMAZON:
            _write_efa_counters(ib_dir, counters)
        else:
            for counter, value in counters.items():
                _write(port_dir / "hw_counters" / counter, str(value))
        class_dir = root / "sys" / "class" / "infiniband"
        class_dir.mkdir(parents=True, exist_ok=True)
        (class_dir / name).symlink_to(Path("../..", ib_dir.relative_to(root / "sys")))


def _write_efa_counters(ib_dir: Path, counters: Mapping[str, int | str]) -> None:
    unknown = set(counters) - set(PORT_COUNTERS) - set(DEVICE_COUNTERS)
    if unknown:
        raise KeyError(f"not EFA hw_counters: {sorted(unknown)}")
    for directory, names in ((ib_dir / "ports" / "1" / "hw_counters", PORT_COUNTERS),
                             (ib_dir / "hw_counters", DEVICE_COUNTERS)):
        for counter in names:
            _write(directory / counter, str(counters.get(counter, 0)))
        _write(directory / "lifespan", LIFESPAN_MS)


def _pci_function(root: Path, name: str, position: int, vendor: str, device_id: str) -> Path:
    # rdmap<bus>s<slot> is rdma-core's name from the PCI address (decimal bus and slot).
    m = re.fullmatch(r"rdmap(\d+)s(\d+)", name)
    if m:
        pci_dir = _pci_dir(root, int(m.group(1)), int(m.group(2)))
    else:  # efa_N, mlx5_N: any free bus
        bus = 0xC0 + position
        while _pci_dir(root, bus, 0).exists():
            bus += 1
        pci_dir = _pci_dir(root, bus, 0)
    _write(pci_dir / "vendor", vendor)
    _write(pci_dir / "device", device_id)
    return pci_dir


def _pci_dir(root: Path, bus: int, slot: int) -> Path:
    return root / "sys" / "devices" / f"pci0000:{bus:02x}" / f"0000:{bus:02x}:{slot:02x}.0"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def build_p4d(root: Path) -> None:
    build_efa_sysfs(root, P4D_EFA)
    build_efa_sysfs(root, P4D_OTHER, vendor=MELLANOX)


if __name__ == "__main__":
    target = Path(sys.argv[1])
    shutil.rmtree(target / "sys", ignore_errors=True)
    build_p4d(target)
