"""A busy node's kernel log as /dev/kmsg records, for the benchmarks: mostly everyday kernel chatter,
a fixed share of GPU/NIC/host fault lines taken from the real captures.

Fault lines: every kernel record of ../shared/fixtures/kmsg/samples.txt (real captures) and
tests/fixtures/kmsg/constructed.txt (from the kernel's format strings), as the exporter's own parser
reads them. Chatter: shapes seen on Kubernetes GPU nodes (container veths, apparmor audit, OOM kills,
mounts, segfaults outside NCCL), none of which the patterns should match, and a few user-space
records (facility 3) that the probe must not believe. One record in ten carries /dev/kmsg's
continuation lines (` SUBSYSTEM=...`), as `cat /dev/kmsg` prints them.

Records are `prio,seq,usec,-;text` with contiguous sequence numbers, so a reader can count gaps.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuhealth.exporter.kernel.records import iter_text_records

ROOT = Path(__file__).resolve().parents[1]
FAULT_SOURCES = (ROOT.parent / "shared" / "fixtures" / "kmsg" / "samples.txt",
                 ROOT / "tests" / "fixtures" / "kmsg" / "constructed.txt")
# Where the shared fixtures are not checked out, the project's verbatim copy of the same captures.
FALLBACK_SAMPLES = ROOT / "tests" / "fixtures" / "kmsg" / "samples.txt"

_CHATTER = (
    'audit: type=1400 audit({t}.{ms}:{n}): apparmor="ALLOWED" operation="open" class="file" '
    'profile="cri-containerd.apparmor.d" name="/proc/{pid}/status" pid={pid} comm="python3" '
    'requested_mask="r" denied_mask="r" fsuid=0 ouid=0',
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{hex}: link becomes ready",
    "cni0: port {p}(veth{hex}) entered forwarding state",
    "cni0: port {p}(veth{hex}) entered blocking state",
    "cni0: port {p}(veth{hex}) entered disabled state",
    "device veth{hex} entered promiscuous mode",
    "device veth{hex} left promiscuous mode",
    "eth0: renamed from tmp{hex}",
    "EXT4-fs (nvme{p}n1): mounted filesystem with ordered data mode. Quota mode: none.",
    "loop{p}: detected capacity change from 0 to {n}",
    "python3[{pid}]: segfault at 0 ip 00007f{hex}a1c sp 00007ffd{hex}c0 error 4 in libc.so.6[7f{hex}000+195000]",
    "Memory cgroup out of memory: Killed process {pid} (python3) total-vm:{n}kB, anon-rss:{n}kB, file-rss:0kB, "
    "shmem-rss:0kB, UID:0 pgtables:{p}kB oom_score_adj:999",
    "oom_reaper: reaped process {pid} (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    "IPVS: rr: UDP 10.100.0.10:53 - no destination available",
    "kauditd_printk_skb: {p} callbacks suppressed",
    "perf: interrupt took too long ({n} > 2500), lowering kernel.perf_event_max_sample_rate to 79800",
    "TCP: request_sock_TCP: Possible SYN flooding on port 10250. Sending cookies.  Check SNMP counters.",
    "nf_conntrack: nf_conntrack: table full, dropping packet",
    "xfs filesystem being remounted at /var/lib/kubelet/pods/{hex}-{p}/volumes supports timestamps until 2038",
    "overlayfs: fs on '/var/lib/containerd/tmpmounts/containerd-mount{n}' does not support file handles",
)
_USERSPACE = (
    "systemd[1]: Started cri-containerd-{hex}{hex}.scope - libcontainer container {hex}.",
    "systemd-journald[{pid}]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0",
)
KERNEL_WARNING = 4  # facility 0 (kernel), level 4
DAEMON_INFO = 3 << 3 | 6  # facility 3 (daemon): user space writing to /dev/kmsg
_META = "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:05.0"


def fault_texts() -> list[str]:
    """Message texts of the captured and constructed fault lines (kernel records only)."""
    sources = [p for p in FAULT_SOURCES if p.exists()] or [FALLBACK_SAMPLES]
    texts: list[str] = []
    for path in sources:
        texts.extend(r.text for r in iter_text_records(path.read_text().splitlines()) if r.kernel)
    return texts


def _chatter_pool(rng: random.Random, size: int) -> list[tuple[int, str]]:
    pool = []
    for i in range(size):
        userspace = i % 50 == 0  # 2% of the chatter
        template = rng.choice(_USERSPACE if userspace else _CHATTER)
        text = template.format(t=1_700_000_000 + i, ms=rng.randrange(1000), n=rng.randrange(1, 10**7),
                               pid=rng.randrange(2, 4_000_000), hex=f"{rng.getrandbits(32):08x}",
                               p=rng.randrange(1, 64))
        pool.append((DAEMON_INFO if userspace else KERNEL_WARNING, text))
    return pool


class SyntheticLog:
    """Kernel-log records, one in `1 / gpu_fraction` a fault line, the rest chatter; deterministic per seed."""

    def __init__(self, gpu_fraction: float = 0.01, seed: int = 8) -> None:
        if not 0 < gpu_fraction <= 1:
            raise ValueError(f"gpu_fraction must be in (0, 1], got {gpu_fraction}")
        self.every = round(1 / gpu_fraction)
        rng = random.Random(seed)
        self._faults = fault_texts()
        self._pool = _chatter_pool(rng, 20_000)
        self._picks = [rng.randrange(len(self._pool)) for _ in range(65_536)]

    def text(self, seq: int) -> tuple[int, str, bool]:
        """(prio, message text, is a fault line) of record number `seq`."""
        if seq % self.every == 0:
            return KERNEL_WARNING, self._faults[(seq // self.every) % len(self._faults)], True
        prio, text = self._pool[self._picks[seq & 0xFFFF]]
        return prio, text, False

    def record(self, seq: int) -> str:
        """Record `seq` as a line of /dev/kmsg output, newline included."""
        prio, text, _ = self.text(seq)
        meta = _META if seq % 10 == 3 else ""
        return f"{prio},{seq},{seq * 20},-;{text}{meta}\n"

    def records(self, first: int, count: int) -> Iterator[str]:
        for seq in range(first, first + count):
            yield self.record(seq)

    def write(self, path: Path, count: int, first: int = 1) -> int:
        """Writes `count` records to `path`; the number of fault lines among them."""
        with path.open("w", buffering=1 << 20) as f:
            f.writelines(self.records(first, count))
        return sum(1 for seq in range(first, first + count) if seq % self.every == 0)


def append_at_rate(path: Path, rate: float, seconds: float, written: Any = None, first: int = 1,
                   gpu_fraction: float = 0.01) -> int:
    """Appends records to `path` at `rate` records/s for `seconds` (in 10 ms steps, flushed each step).

    `written` (a multiprocessing.Value('q')), if given, holds the last sequence number flushed, so
    another process can tell how far behind it is. Returns the last sequence number written.
    """
    log = SyntheticLog(gpu_fraction)
    seq = first - 1
    started = time.monotonic()
    with path.open("a", buffering=1 << 20) as f:
        while True:
            elapsed = time.monotonic() - started
            due = first - 1 + min(int(rate * elapsed), int(rate * seconds))
            if due > seq:
                f.writelines(log.records(seq + 1, due - seq))
                f.flush()
                seq = due
                if written is not None:
                    written.value = seq
            if elapsed >= seconds:
                return seq
            time.sleep(0.01)
