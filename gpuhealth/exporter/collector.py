"""The prometheus_client Collector: builds fresh metrics from the snapshot on every scrape.

A scrape never touches hardware and never waits on a probe; it only reads the snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuhealth.exporter import __version__, catalog
from gpuhealth.exporter.catalog import Family
from gpuhealth.exporter.efa_expected import EfaExpectation
from gpuhealth.exporter.kubelet.allocations import info_samples, mig_parents
from gpuhealth.exporter.kubelet.reader import PodResourcesReader
from gpuhealth.exporter.probes.base import STALE
from gpuhealth.exporter.probes.registry import filled_by, gpu_counters
from gpuhealth.exporter.samples import GpuIdentity, Sample
from gpuhealth.exporter.snapshot import ProbeState, Snapshot

# Which probe's GPU list is gpuhealth_gpus_visible, in order of preference.
VISIBLE_GPU_SOURCES = gpu_counters()


@dataclass(frozen=True)
class Expectations:
    gpus: int | None = None
    # What this node was given (gpuhealth/exporter/efa_expected.py); one object for the collector and the conditions, as
    # it remembers the most devices seen.
    efa: EfaExpectation = field(default_factory=EfaExpectation)


def trusted(states: dict[str, ProbeState], now: float) -> dict[str, ProbeState]:
    """Probes whose last run succeeded and is recent enough to believe, and that are not paused for a GPU reset."""
    return {n: st for n, st in states.items()
            if st.success and st.result is not None and not st.paused and not st.is_stale(now)}


def gpu_inventory(states: dict[str, ProbeState]) -> dict[str, GpuIdentity]:
    """What every source knows about each GPU, by PCI bus id (index from NVML/DCGM, UUID from any)."""
    merged: dict[str, GpuIdentity] = {}
    for st in states.values():
        if st.result is None:
            continue
        if st.result.kernel is not None:  # the kernel log knows UUIDs by PCI bus id (NVRM's "GPU at" lines)
            for pci, uuid in st.result.kernel.gpu_uuids.items():
                old = merged.get(pci, GpuIdentity(pci))
                merged[pci] = GpuIdentity(pci, old.index, old.uuid or uuid)
        for gpu in st.result.gpus or []:
            old = merged.get(gpu.pci_bus_id, GpuIdentity(gpu.pci_bus_id))
            merged[gpu.pci_bus_id] = GpuIdentity(gpu.pci_bus_id, old.index or gpu.index, old.uuid or gpu.uuid)
    return merged


def visible_gpus(states: dict[str, ProbeState]) -> int | None:
    for name in VISIBLE_GPU_SOURCES:
        st = states.get(name)
        if st is not None and st.result is not None and st.result.gpus is not None:
            return len(st.result.gpus)
    return None


def efa_devices_visible(states: dict[str, ProbeState]) -> float | None:
    """The EFA devices the probe that counts them saw in its latest result."""
    for name in filled_by(catalog.EFA_DEVICES_VISIBLE.name):
        st = states.get(name)
        if st is not None and st.result is not None:
            return next((s.value for s in st.result.samples if s.family is catalog.EFA_DEVICES_VISIBLE), None)
    return None


def _enrich(sample: Sample, inventory: dict[str, GpuIdentity]) -> Sample:
    """Kernel-log samples know only the PCI bus id: add the GPU index and UUID where a source knows them."""
    labels = sample.labels
    if "pci_bus_id" not in labels or "gpu" not in labels or labels["gpu"]:
        return sample
    known = inventory.get(labels["pci_bus_id"])
    if known is None:
        return sample
    return Sample(sample.family, {**labels, "gpu": known.index, "uuid": labels.get("uuid") or known.uuid},
                  sample.value)


def own_samples(config_error: bool) -> list[Sample]:
    """The exporter's version, and whether it refused its settings."""
    return [Sample(catalog.EXPORTER_BUILD_INFO, {"version": __version__}, 1),
            Sample(catalog.EXPORTER_CONFIG_ERROR, {}, 1 if config_error else 0)]


class RefusedSettingsCollector(Collector):
    """All that an exporter which refused its settings serves: no probe ran, so no probe or GPU series (a node
    fault alert must not fire on gpuhealth's own mistake), its version and gpuhealth_exporter_config_error 1."""

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from build_families(own_samples(config_error=True))


class GpuhealthCollector(Collector):
    def __init__(self, snapshot: Snapshot, expect: Expectations,
                 pod_resources: PodResourcesReader | None = None,
                 extra: Callable[[], Iterable[Sample]] | None = None) -> None:
        self.snapshot = snapshot
        self.expect = expect
        self.pod_resources = pod_resources  # which pod holds which GPU (None: not read)
        self.extra = extra  # the exporter's own samples from outside the snapshot (the GPU reset marker's reads)
        # GPU identities once learned are kept while the process lives, so a kernel-log counter keeps
        # its gpu/uuid labels (and its series) when NVML fails, as it often does on a failing GPU.
        self._known: dict[str, GpuIdentity] = {}
        self._migs: dict[str, GpuIdentity] = {}  # MIG device UUID -> its GPU, kept likewise
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # metrics are dynamic; registering must not call collect() (it could be slow)

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        states = self.snapshot.view()
        good = trusted(states, now)
        with self._lock:
            for pci, gpu in gpu_inventory(good).items():
                old = self._known.get(pci, gpu)
                self._known[pci] = GpuIdentity(pci, gpu.index or old.index, gpu.uuid or old.uuid)
            inventory = dict(self._known)
        samples: list[Sample] = [*own_samples(config_error=False)]
        if self.extra is not None:
            samples.extend(self.extra())
        for st in states.values():
            samples.extend(self._probe_health(st, st.name in good, now))
        visible = visible_gpus(good)
        for family, value in ((catalog.GPUS_VISIBLE, visible), (catalog.GPUS_EXPECTED, self.expect.gpus),
                              (catalog.EFA_DEVICES_MAX, self.expect.efa.maximum)):
            if value is not None:
                samples.append(Sample(family, {}, value))
        efa = self.expect.efa.expected(efa_devices_visible(good))
        if efa is not None:
            samples.append(Sample(catalog.EFA_DEVICES_EXPECTED, {"source": efa.source}, efa.count))
        for st in good.values():
            assert st.result is not None
            # Only a sample with an empty gpu label can need _enrich: the test is inlined (a call per
            # sample was a fifth of the time it takes to build the families).
            samples.extend([s if s.labels.get("gpu", "-") else _enrich(s, inventory) for s in st.result.samples])
        if self.pod_resources is not None:
            samples.extend(self._pod_samples(good, inventory))
        yield from build_families(samples)

    def _pod_samples(self, good: dict[str, ProbeState], inventory: dict[str, GpuIdentity]) -> list[Sample]:
        """The pod-resources read's health, and while it reads, the GPU each pod's device is."""
        assert self.pod_resources is not None
        view = self.pod_resources.view()
        out = [Sample(catalog.POD_RESOURCES_SUCCESS, {}, 1 if view.success else 0),
               Sample(catalog.POD_RESOURCES_DURATION_SECONDS, {}, view.duration)]
        if not view.success:
            return out
        with self._lock:
            if any(a.is_mig for a in view.allocations):  # only then are the MIG devices looked for
                for st in good.values():
                    assert st.result is not None
                    self._migs.update(mig_parents(st.result.samples))
            migs = dict(self._migs)
        return out + info_samples(view.allocations, inventory.values(), migs)

    @staticmethod
    def _probe_health(st: ProbeState, ok: bool, now: float) -> list[Sample]:
        probe = {"probe": st.name}
        # Paused for a GPU reset (gpuhealth/exporter/gpu_reset.py): neither healthy (1) nor failing (0), so no success
        # or error sample while paused; gpuhealth_probe_paused says why they are absent.
        out = [] if st.paused else [Sample(catalog.PROBE_SUCCESS, probe, 1 if ok else 0)]
        out += [
            Sample(catalog.PROBE_PAUSED, probe, 1 if st.paused else 0),
            Sample(catalog.PROBE_DURATION_SECONDS, probe, st.duration),
            Sample(catalog.PROBE_INTERVAL_SECONDS, probe, st.interval),
        ]
        if not ok and not st.paused:
            reason = st.reason if not st.success else STALE
            out.append(Sample(catalog.PROBE_ERROR, {**probe, "reason": reason}, 1))
        if st.last_success is not None:
            out.append(Sample(catalog.PROBE_LAST_SUCCESS_TIMESTAMP_SECONDS, probe, st.last_success))
        out.extend(Sample(catalog.PROBE_FAILURES, {**probe, "reason": r}, n) for r, n in st.failures.items())
        return out


def build_families(samples: Iterable[Sample]) -> Iterator[Metric]:
    """Fresh prometheus_client families, built from the handles the samples carry, in the order their first samples
    come."""
    families: dict[Family, Metric] = {}
    # Per family: its add_metric and a function from a sample's labels to its label values in the family's order.
    # Looked up once per family, not once per sample.
    adders: dict[Family, tuple[Callable[..., None], Callable[[dict[str, str]], Sequence[str]]]] = {}
    for s in samples:
        spec = s.family
        entry = adders.get(spec)
        if entry is None:
            cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
            fam = families[spec] = cls(spec.name, spec.help, labels=list(spec.labels))
            entry = adders[spec] = (fam.add_metric, _label_values(spec.labels))
        add, values = entry
        add(values(s.labels), s.value)
    yield from families.values()


def _label_values(names: tuple[str, ...]) -> Callable[[dict[str, str]], Sequence[str]]:
    if len(names) >= 2:
        return itemgetter(*names)  # a tuple of the values, in this order
    if names:
        name = names[0]
        return lambda labels: (labels[name],)
    return lambda labels: ()
