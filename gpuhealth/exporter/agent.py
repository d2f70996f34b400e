"""The node agent's parts, built from its settings: the probes with their intervals and deadlines, what the node
should have (`Expectations`), the kubelet's pod-resources reader; and `run_once`, every probe run once (--once).
`serve.py` runs the same parts on their intervals."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.config import Settings
from gpuhealth.exporter.efa_expected import EFA_COUNTS_FILE, EfaExpectation, Node
from gpuhealth.exporter.instance_types import lookup
from gpuhealth.exporter.kubelet.reader import PodResourcesReader
from gpuhealth.exporter.probes.base import Probe
from gpuhealth.exporter.probes.registry import BY_NAME
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot


def expectations(s: Settings, node: Callable[[], Node | None] | None = None, *, remember: bool = False) -> Expectations:
    """node: this Node as last read, for the EFA devices it was given (gpuhealth/exporter/efa_expected.py); remember:
    keep the most EFA devices advertised and seen on the host, beside the kernel log's state (serving; never --once)."""
    known = lookup(s.instance_type) if s.instance_type else None
    gpus = s.gpus_expected if s.gpus_expected is not None else (known.gpus if known else None)
    # the most EFA devices advertised and seen, kept beside the kernel log's state: only where that is kept (the chart
    # mounts the host's state directory for the kernel log alone), else in memory
    kmsg = s.probes.get("kmsg")
    keeps_state = remember and bool(s.state_file) and kmsg is not None and kmsg.enabled
    remembered = os.path.join(os.path.dirname(s.state_file), EFA_COUNTS_FILE) if keeps_state else None
    efa = EfaExpectation(s.efa_expected, node, maximum=known.efa_devices if known else None, remembered=remembered)
    return Expectations(gpus=gpus, efa=efa)


def build_probes(s: Settings, once: bool) -> list[tuple[Probe, float, float]]:
    """The enabled probes, each with its interval and deadline, built as the registry says."""
    return [(BY_NAME[name].build(s, once), ps.interval, ps.deadline) for name, ps in s.probes.items() if ps.enabled]


def pod_resources_reader(s: Settings) -> PodResourcesReader | None:
    return PodResourcesReader(s.pod_resources_socket) if s.pod_resources else None


def run_once(s: Settings, show_conditions: bool = False) -> bytes:
    snapshot = Snapshot()
    runners = [ProbeRunner(p, snapshot, interval, deadline) for p, interval, deadline in build_probes(s, once=True)]
    threads = [threading.Thread(target=r.run_once, daemon=True) for r in runners]
    reader = pod_resources_reader(s)
    if reader is not None:
        threads.append(threading.Thread(target=reader.read_once, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    registry = CollectorRegistry(auto_describe=False)
    expect = expectations(s)
    registry.register(GpuhealthCollector(snapshot, expect, pod_resources=reader))
    if show_conditions:
        for c in evaluate(snapshot.view(), expect, s.fault_window):
            print(f"condition {c.type}={c.status} {c.reason}: {c.message}", file=sys.stderr)
    return generate_latest(registry)


