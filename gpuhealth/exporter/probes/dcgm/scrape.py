"""A local dcgm-exporter's /metrics, read within a byte bound and mapped onto gpuhealth's families (the
dcgm_exporter probe)."""

from __future__ import annotations

import http.client
import logging
import math
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import BinaryIO

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample as PromSample

from gpuhealth.contract.pci import normalize_bus_id
from gpuhealth.exporter import catalog
from gpuhealth.exporter.catalog import Family
from gpuhealth.exporter.clock_events import clock_event_samples
from gpuhealth.exporter.probes.base import (
    BAD_OUTPUT,
    ERROR,
    NOT_FOUND,
    OUTPUT_TOO_LARGE,
    TIMEOUT,
    PausingProbe,
    ProbeError,
    classify,
)
from gpuhealth.exporter.probes.dcgm.tool_output import MALFORMED
from gpuhealth.exporter.samples import GpuIdentity, ProbeResult, Problems, Sample

log = logging.getLogger(__name__)

# DCGM field (sample name) -> (gpuhealth family, extra labels, scale)
_FIELDS: dict[str, tuple[Family, dict[str, str], float]] = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (catalog.GPU_ECC_ERRORS, {"type": "double_bit", "scope": "volatile"}, 1),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (catalog.GPU_ECC_ERRORS, {"type": "double_bit", "scope": "aggregate"}, 1),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (catalog.GPU_ECC_ERRORS, {"type": "single_bit", "scope": "volatile"}, 1),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (catalog.GPU_ECC_ERRORS, {"type": "single_bit", "scope": "aggregate"}, 1),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (catalog.GPU_ROW_REMAP_FAILURE, {}, 1),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": (catalog.GPU_ROW_REMAP_PENDING, {}, 1),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (catalog.GPU_REMAPPED_ROWS, {"cause": "uncorrectable"}, 1),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (catalog.GPU_REMAPPED_ROWS, {"cause": "correctable"}, 1),
    "DCGM_FI_DEV_RETIRED_DBE": (catalog.GPU_RETIRED_PAGES, {"cause": "double_bit"}, 1),
    "DCGM_FI_DEV_RETIRED_SBE": (catalog.GPU_RETIRED_PAGES, {"cause": "single_bit"}, 1),
    "DCGM_FI_DEV_RETIRED_PENDING": (catalog.GPU_RETIRED_PAGES_PENDING, {}, 1),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (catalog.GPU_NVLINK_ERRORS, {"type": "crc_flit"}, 1),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (catalog.GPU_NVLINK_ERRORS, {"type": "crc_data"}, 1),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (catalog.GPU_NVLINK_ERRORS, {"type": "replay"}, 1),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (catalog.GPU_NVLINK_ERRORS, {"type": "recovery"}, 1),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (catalog.GPU_PCIE_REPLAYS, {}, 1),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (catalog.GPU_VIOLATION_SECONDS, {"reason": "thermal"}, 1e-9),
    "DCGM_FI_DEV_POWER_VIOLATION": (catalog.GPU_VIOLATION_SECONDS, {"reason": "power"}, 1e-9),
    "DCGM_FI_DEV_GPU_TEMP": (catalog.GPU_TEMPERATURE_CELSIUS, {"sensor": "gpu"}, 1),
    "DCGM_FI_DEV_MEMORY_TEMP": (catalog.GPU_TEMPERATURE_CELSIUS, {"sensor": "memory"}, 1),
    "DCGM_FI_DEV_XID_ERRORS": (catalog.DCGM_LAST_XID, {}, 1),
}
_CLOCK_EVENT_FIELDS = {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
# dcgm-exporter's own count of each Xid within its window (xid_collector.go): a series per GPU and Xid with
# the Xid in the `xid` label; one without `xid` (value 0) for a GPU that had none.
_XID_WINDOW_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
# The catalog defines these as 0/1 flags; DCGM_FI_DEV_RETIRED_PENDING is a page count.
_FLAG_FAMILIES = {catalog.GPU_ROW_REMAP_FAILURE, catalog.GPU_ROW_REMAP_PENDING,
                  catalog.GPU_RETIRED_PAGES_PENDING}


# A real scrape is 8 kB for one L4 (the recorded page) and a few hundred kB for 8 GPUs with every
# field dcgm-exporter knows (8 x ~100 fields x a few hundred bytes a line); MIG instances multiply it
# by at most 7. 4 MiB is above that with headroom; parsing a 4 MiB page costs about 46 MiB of peak RSS
# (measured: 38 -> 83 MiB), inside the chart's 160Mi limit, which an unbounded 20 MB page nearly
# reached (157 MiB). Past the bound nothing is parsed.
MAX_SCRAPE_BYTES = 4 * 1024 * 1024
_READ_CHUNK = 64 * 1024


def _too_large(source: str) -> ProbeError:
    return ProbeError(OUTPUT_TOO_LARGE, f"{source}: more than {MAX_SCRAPE_BYTES // 1048576} MiB, not parsed")


def _read_bounded(stream: BinaryIO, source: str) -> bytes:
    """All of stream, read in chunks; a ProbeError(output_too_large) as soon as it passes MAX_SCRAPE_BYTES."""
    body = bytearray()
    while chunk := stream.read(min(_READ_CHUNK, MAX_SCRAPE_BYTES + 1 - len(body))):
        body += chunk
        if len(body) > MAX_SCRAPE_BYTES:
            raise _too_large(source)
    return bytes(body)


def _fetch(url: str, deadline: float) -> bytes:
    # urllib's timeout bounds each socket operation, which is what a local exporter can stall on.
    try:
        with urllib.request.urlopen(url, timeout=deadline) as resp:
            length = resp.headers.get("Content-Length", "")
            if length.strip().isdigit() and int(length) > MAX_SCRAPE_BYTES:
                raise _too_large(url)  # refused before any of it is read
            return _read_bounded(resp, url)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise ProbeError(NOT_FOUND if exc.code == 404 else ERROR, f"{url}: HTTP {exc.code}") from exc
    except urllib.error.URLError as exc:
        reason = TIMEOUT if isinstance(exc.reason, TimeoutError) else ERROR
        raise ProbeError(reason, f"{url}: {exc.reason}") from exc
    except TimeoutError as exc:
        raise ProbeError(TIMEOUT, f"{url}: no answer within {deadline:g}s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeError(ERROR, f"{url}: {type(exc).__name__}: {exc}") from exc


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return _read_bounded(f, path)
    except OSError as exc:
        raise classify(exc) from exc


def _dcgm_series(text: str, source: str) -> list[PromSample]:
    if not text.strip():
        raise ProbeError(BAD_OUTPUT, f"{source}: empty body")
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except MALFORMED as exc:
        raise ProbeError(BAD_OUTPUT, f"{source}: not Prometheus text: {exc}") from exc
    dcgm = [_field_sample(s) for s in samples if s.name.startswith("DCGM_")]
    if not dcgm:
        raise ProbeError(BAD_OUTPUT, f"{source}: no DCGM_ series in {len(samples)} samples")
    return dcgm


def _field_sample(s: PromSample) -> PromSample:
    """The sample named by its DCGM field.

    The parser names counter families without `_total` and their samples with it, whether or not the
    exposition had it; DCGM field names are upper case, so a lower-case `_total` is never part of one.
    """
    return s._replace(name=s.name.removesuffix("_total"))


def _gpu_labels(labels: dict[str, str]) -> dict[str, str]:
    return {"gpu": labels["gpu"], "uuid": labels.get("UUID", ""),
            "pci_bus_id": normalize_bus_id(labels.get("pci_bus_id", "")), "source": "dcgm"}


def _field_samples(name: str, value: float, gpu: dict[str, str], xid: str = "") -> list[Sample]:
    if name in _CLOCK_EVENT_FIELDS:
        return clock_event_samples(int(value), gpu)
    if name == _XID_WINDOW_COUNT:
        return [Sample(catalog.DCGM_XID_ERRORS_WINDOW, {**gpu, "xid": xid}, value)] if xid else []
    family, extra, scale = _FIELDS[name]
    if family in _FLAG_FAMILIES:
        value = 1.0 if value > 0 else 0.0
    return [Sample(family, {**gpu, **extra}, value * scale)]


def _exporter_problems(name: str, value: float, gpu: dict[str, str]) -> list[str]:
    who = f"dcgm-exporter: GPU {gpu['gpu']} ({gpu['uuid'] or gpu['pci_bus_id']})"
    if name == "DCGM_FI_DEV_ROW_REMAP_FAILURE" and value > 0:
        return [f"{who}: row remapping failed"]
    if name == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" and value > 0:
        return [f"{who}: {value:g} volatile double-bit ECC errors"]
    return []


# dcgm-exporter labels each series with the host it runs on: `Hostname` (`hostname` in newer
# releases). It is the node name where the pod has NODE_NAME (dcgm-exporter's chart and the GPU
# Operator set it from spec.nodeName), else the container's hostname: the pod name, or the node's
# hostname with hostNetwork. A Service balances across nodes, so a scrape may be another node's.
_HOSTNAME_LABELS = ("Hostname", "hostname")


def _hostname(labels: dict[str, str]) -> str:
    return next((labels[k] for k in _HOSTNAME_LABELS if labels.get(k)), "")


@dataclass(frozen=True)
class _OwnSeries:
    kept: list[PromSample]
    foreign: int  # samples whose Hostname is another host's, dropped
    foreign_hosts: tuple[str, ...]  # the Hostname values dropped, sorted


def _own_series(series: list[PromSample], accepted: frozenset[str]) -> _OwnSeries:
    """The series this node may report: no Hostname label (older releases), or one in `accepted`.

    An empty `accepted` (no node name known) keeps every series.
    """
    if not accepted:
        return _OwnSeries(series, 0, ())
    kept: list[PromSample] = []
    hosts: set[str] = set()
    for s in series:
        host = _hostname(s.labels)
        if not host or host.lower() in accepted:
            kept.append(s)
        else:
            hosts.add(host)
    return _OwnSeries(kept, len(series) - len(kept), tuple(sorted(hosts)))


def accepted_hostnames(node: str, aliases: tuple[str, ...] = ()) -> frozenset[str]:
    """The Hostname values that mean this node (compared case-insensitively); empty without a node name."""
    if not node:
        return frozenset()
    return frozenset(h.strip().lower() for h in (node, *aliases) if h.strip())


def _check_some_own(series: list[PromSample], own: _OwnSeries, accepted: frozenset[str], source: str) -> None:
    """Fail closed when every GPU sample is another host's: a Service balanced to another node."""
    if own.foreign and not any("gpu" in s.labels for s in own.kept) and any("gpu" in s.labels for s in series):
        seen = ", ".join(own.foreign_hosts[:3]) + (", ..." if len(own.foreign_hosts) > 3 else "")
        raise ProbeError(BAD_OUTPUT, f"{source}: every GPU sample is another host's: Hostname {seen}, expected "
                                     f"{' or '.join(sorted(accepted))} (is the URL node-local? docs/install.md)")


def unverified(kept: list[PromSample], accepted: frozenset[str]) -> str | None:
    """Why a scrape's GPU samples cannot be told to be this node's, or None: no node name to check against, or GPU
    samples none of which carries a Hostname label (dcgm-exporter releases before the label)."""
    gpu = [s for s in kept if "gpu" in s.labels]
    if not gpu:
        return None  # no GPU sample: nothing marked healthy (the GPU count checks say what is missing)
    if not accepted:
        return "no node name (--node/NODE_NAME) to check dcgm-exporter's Hostname label against"
    if not any(_hostname(s.labels) for s in gpu):
        return "no GPU sample carries dcgm-exporter's Hostname label: which node it read cannot be told"
    return None


def parse_dcgm_exporter(text: str, source: str = "dcgm-exporter",
                        accepted: frozenset[str] = frozenset()) -> ProbeResult:
    """Map a dcgm-exporter scrape onto gpuhealth families (source="dcgm"); the host label is dropped.

    With `accepted` (accepted_hostnames()), samples of another Hostname are dropped, and a scrape whose
    every GPU sample is another host's is a ProbeError (bad_output).
    """
    series = _dcgm_series(text, source)
    own = _own_series(series, accepted)
    _check_some_own(series, own, accepted, source)
    return _map_series(own.kept)


def _map_series(series: list[PromSample]) -> ProbeResult:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], Sample] = {}
    gpus: dict[str, tuple[GpuIdentity, dict[str, str], str]] = {}
    problems: list[str] = []
    for s in series:
        if "gpu" not in s.labels or math.isnan(s.value):
            continue  # non-GPU entities (switches, CPUs) have no place in the GPU families
        gpu = _gpu_labels(s.labels)
        identity = GpuIdentity(gpu["pci_bus_id"], index=gpu["gpu"], uuid=gpu["uuid"])
        gpus.setdefault(gpu["gpu"], (identity, gpu, s.labels.get("modelName", "")))
        if s.name in _FIELDS or s.name in _CLOCK_EVENT_FIELDS or s.name == _XID_WINDOW_COUNT:
            for sample in _field_samples(s.name, s.value, gpu, s.labels.get("xid", "").strip()):
                # MIG instances repeat device fields: one series per label set.
                samples[(sample.name, frozenset(sample.labels.items()))] = sample
            problems.extend(_exporter_problems(s.name, s.value, gpu))
    result = ProbeResult(samples=list(samples.values()), gpus=[g[0] for g in gpus.values()])
    for _, labels, model in gpus.values():
        result.add(catalog.GPU_INFO, 1, **labels, model=model)
    result.problems = Problems(gpu=tuple(sorted(set(problems))))
    return result


class DcgmExporterProbe(PausingProbe):
    """A node-local dcgm-exporter's /metrics (http:// or https:// URL) or a file holding one scrape.

    With this node's name, samples whose Hostname is another host's are dropped and counted
    (gpuhealth_dcgm_exporter_foreign_samples_total); a scrape with only other hosts' GPU samples fails.
    """

    name = "dcgm_exporter"

    def __init__(self, source: str, node: str = "", aliases: tuple[str, ...] = (),
                 trust_unverified: bool = False) -> None:
        self._source = source
        self._accepted = accepted_hostnames(node, aliases)
        self._trust_unverified = trust_unverified  # dcgm_exporter_trust_unverified: the operator's explicit opt-in
        self._foreign = 0  # since start, failed runs included; exported with each successful run
        self._warned = False
        super().__init__()

    def _check_verified(self, own: _OwnSeries) -> None:
        """Fail closed on a scrape not verified to be this node's (no node name to check against, or no GPU sample
        naming its Hostname): it is not trusted to say this node's GPUs are healthy, unless the operator opted in
        (then once a warning)."""
        why = unverified(own.kept, self._accepted)
        if why is None:
            return
        if not self._trust_unverified:
            raise ProbeError(BAD_OUTPUT, f"{self._source}: {why}: not trusted to mark this node's GPUs healthy (a "
                                         "node-local URL and NODE_NAME, or dcgm_exporter_trust_unverified: true; "
                                         "docs/install.md)")
        if not self._warned:
            self._warned = True
            log.warning("dcgm_exporter: %s: trusted all the same (dcgm_exporter_trust_unverified), so another "
                        "node's GPUs would be reported as this node's", why)

    def _run(self, deadline: float) -> ProbeResult:
        is_url = self._source.startswith(("http://", "https://"))
        body = _fetch(self._source, deadline) if is_url else _read_file(self._source)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProbeError(BAD_OUTPUT, f"{self._source}: not UTF-8 text") from exc
        series = _dcgm_series(text, self._source)
        own = _own_series(series, self._accepted)
        self._foreign += own.foreign
        _check_some_own(series, own, self._accepted, self._source)
        self._check_verified(own)
        result = _map_series(own.kept)
        result.add(catalog.DCGM_EXPORTER_FOREIGN_SAMPLES, self._foreign)
        return result
