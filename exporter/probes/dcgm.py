"""DCGM probes: `dcgmi health -c -j`, `dcgmi diag -r N -j` and a local dcgm-exporter's /metrics.

Each probe turns one reading into samples of exporter.catalog families, or raises ProbeError.

All three pause for a GPU reset (`pause`/`resume`, exporter/gpu_reset.py): while paused no dcgmi runs and
dcgm-exporter is not read (the reset stops nv-hostengine and dcgm-exporter too). `dcgmi health` sets its
watches again after a pause, since a restarted nv-hostengine has forgotten them.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample as PromSample

from exporter.clock_events import clock_event_samples
from exporter.probes.base import (
    BAD_OUTPUT,
    ERROR,
    NOT_FOUND,
    OUTPUT_TOO_LARGE,
    TIMEOUT,
    Pause,
    ProbeError,
    classify,
    run_command,
)
from exporter.samples import GpuIdentity, ProbeResult, Problems, Sample
from gpuhealth_contract.pci import normalize_bus_id

log = logging.getLogger(__name__)

_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


_DETAIL_CHARS = 300  # the detail goes into log lines and node conditions: a tool's output need not fit


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text[:64 * 1024].splitlines() if line.strip()), "")
    return line if len(line) <= _DETAIL_CHARS else line[:_DETAIL_CHARS] + "..."


def _load_json(proc: subprocess.CompletedProcess[str], tool: str) -> dict[str, Any]:
    """The JSON object a dcgmi command printed, whatever its exit status."""
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        # dcgmi prints some errors on stdout ("Error: unable to establish a connection ...").
        detail = _first_line(proc.stderr) or _first_line(proc.stdout) or "no output"
        raise ProbeError(BAD_OUTPUT, f"{tool}: no JSON (exit {proc.returncode}): {detail}") from exc
    if not isinstance(doc, dict):
        raise ProbeError(BAD_OUTPUT, f"{tool}: JSON is a {type(doc).__name__}, not an object")
    return doc


# --- dcgmi health -c -j ---------------------------------------------------------------------------

HEALTH_CODES = {"healthy": 0, "pass": 0, "warning": 10, "warn": 10, "failure": 20, "fail": 20}
HEALTH_FAILURE = 20
_OVERALL = "overall health"


@dataclass(frozen=True)
class _HealthEntry:
    gpu: str
    system: str
    code: int
    errors: tuple[str, ...]
    leaf: bool  # no status-bearing node below it: the most specific report of a fault


def _health_code(node: dict[str, Any]) -> int | None:
    value = node.get("value")
    return HEALTH_CODES.get(value.strip().lower()) if isinstance(value, str) else None


def _child_nodes(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key, value in node.items():
        if key == "children" and isinstance(value, dict):
            yield from ((k, v) for k, v in value.items() if isinstance(v, dict))
        elif isinstance(value, dict):
            yield key, value


def _system_name(key: str) -> str:
    """The label of a health system: dcgmi names most "<name> system" (Health.cpp): "Memory system" -> memory."""
    name = re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")
    return name.removesuffix("_system") or name


def _health_messages(node: dict[str, Any]) -> tuple[str, ...]:
    """dcgmi writes a system's message in "overflow", cut into pieces of at most 54 characters at spaces."""
    pieces = node.get("overflow")
    if not isinstance(pieces, list):
        return ()
    text = " ".join(str(piece).strip() for piece in pieces if str(piece).strip())
    return (text,) if text else ()


def _health_labels(key: str, entity: tuple[str, str] | None, is_entity: bool) -> tuple[str, str]:
    """(gpu, system) for a status node: system is the DCGM health system (memory, pcie, ...)."""
    if entity is None:
        return ("", "") if key.strip().lower() == _OVERALL else ("", _system_name(key))
    group, ident = entity
    system = "" if is_entity else _system_name(key)
    if group.strip().upper() == "GPU":
        return ident, system
    prefix = f"{_system_name(group)}_{ident}"
    return "", f"{prefix}:{system}" if system else prefix


def _walk_health(key: str, node: dict[str, Any], entity: tuple[str, str] | None,
                 out: list[_HealthEntry], is_entity: bool = False) -> None:
    start = len(out)
    for child_key, child in _child_nodes(node):
        _walk_health(child_key, child, entity, out)
    code = _health_code(node)
    if code is not None:
        gpu, system = _health_labels(key, entity, is_entity)
        out.append(_HealthEntry(gpu, system, code, _health_messages(node), leaf=len(out) == start))


def _health_problem(entry: _HealthEntry) -> str:
    where = " ".join(part for part in (f"GPU {entry.gpu}" if entry.gpu else "", entry.system) if part)
    text = f"dcgmi health: {where or 'node'} failure"
    return f"{text}: {'; '.join(entry.errors)}" if entry.errors else text


def _health_entries(body: dict[str, Any]) -> list[_HealthEntry]:
    """Every status in the report.

    dcgmi (Health.cpp, DCGM 2.4 on) writes body -> "Overall Health", and per entity group ("GPU", "Switch",
    "CPU", "ConnectX", ...) -> children -> the entity's bare id ("1") -> children -> "Errors" -> children ->
    the system ("Memory system") with its status in "value" and its message in "overflow".
    """
    entries: list[_HealthEntry] = []
    for key, node in _child_nodes(body):
        if key.strip().lower() == _OVERALL:
            _walk_health(key, node, None, entries)
            continue
        for ident, entity_node in _child_nodes(node):
            _walk_health(ident, entity_node, (key, ident.strip()), entries, is_entity=True)
    return entries


def parse_health(doc: dict[str, Any]) -> ProbeResult:
    body = doc.get("body")
    overall = body.get("Overall Health") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(overall, dict) or _health_code(overall) is None:
        raise ProbeError(BAD_OUTPUT, "dcgmi health: no 'Overall Health' status in the report")
    entries = _health_entries(body)
    worst: dict[tuple[str, str], int] = {}
    for entry in entries:
        labels = (entry.gpu, entry.system)
        worst[labels] = max(worst.get(labels, 0), entry.code)
    result = ProbeResult()
    for (gpu, system), code in worst.items():
        result.add("gpuhealth_dcgm_health_status", code, gpu=gpu, system=system)
    failing = [e for e in entries if e.code >= HEALTH_FAILURE and e.leaf and (e.gpu or e.system)]
    problems = [_health_problem(e) for e in failing]
    if not problems and worst[("", "")] >= HEALTH_FAILURE:
        problems.append("dcgmi health: overall health is failure (no details in the report)")
    result.problems = Problems(gpu=tuple(problems))
    return result


class DcgmHealthProbe:
    """`dcgmi health -c -j`: DCGM's background health watches.

    A check reports nothing until watches are set, and nv-hostengine forgets them when it restarts,
    so the probe sets all watches (`dcgmi health -s a`) before its first check and after any failure.
    """

    name = "dcgm"

    def __init__(self, command: list[str]) -> None:
        self._command = list(command)
        self._watching = False
        self._pause = Pause(self.name, self._forget_watches)

    def pause(self, wait: float) -> bool:
        return self._pause.pause(wait)

    def resume(self) -> None:
        self._pause.resume()

    def _forget_watches(self) -> None:
        self._watching = False

    def _watch(self, deadline: float) -> None:
        proc = run_command([*self._command, "health", "-s", "a"], deadline)
        if proc.returncode != 0:
            detail = _first_line(proc.stderr) or _first_line(proc.stdout) or "no output"
            raise ProbeError(ERROR, f"dcgmi health -s a: cannot set health watches (exit {proc.returncode}): {detail}")
        self._watching = True

    def collect(self, deadline: float) -> ProbeResult:
        with self._pause.running():
            return self._check(deadline)

    def _check(self, deadline: float) -> ProbeResult:
        until = time.monotonic() + deadline
        try:
            if not self._watching:
                self._watch(deadline)
            proc = run_command([*self._command, "health", "-c", "-j"], max(0.1, until - time.monotonic()))
            doc = _load_json(proc, "dcgmi health")
            try:
                return parse_health(doc)
            except _MALFORMED as exc:
                raise ProbeError(BAD_OUTPUT, f"dcgmi health: unexpected report: {exc!r}") from exc
        except ProbeError:
            self._watching = False
            raise


# --- dcgmi diag -r N -j ---------------------------------------------------------------------------

_DIAG_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
                "not run": "skip"}


@dataclass(frozen=True)
class _DiagResult:
    category: str
    test: str
    gpu: str
    result: str
    detail: str


def _diag_status(raw: object, test: str) -> str:
    status = _DIAG_STATUS.get(str(raw).strip().lower())
    if status is None:  # fail closed: a status we do not know must not read as a pass
        raise ProbeError(BAD_OUTPUT, f"dcgmi diag: unknown status {raw!r} for test {test!r}")
    return status


def _warning_text(warnings: object) -> str:
    """3.x and 4.x give a list of {"warning": ...} (3.3's deployment tests: {"warnings": ...}); older a string."""
    if isinstance(warnings, str):
        return warnings.strip()
    if not isinstance(warnings, list):
        return ""
    texts = [str(w.get("warning", w.get("warnings", ""))) if isinstance(w, dict) else str(w) for w in warnings]
    return "; ".join(t.strip() for t in texts if t.strip())


def _result_gpus(result: dict[str, Any]) -> list[str]:
    if "entity_group" in result:  # 4.x: one entity per result
        return [str(result["entity_id"])] if str(result["entity_group"]).upper() == "GPU" else [""]
    if "gpu_id" in result:  # 3.3 on (Diag.cpp): one GPU per result, a string ("1"), a number in deployment tests
        return [str(result["gpu_id"]).strip()]
    ids = str(result.get("gpu_ids", "")).strip()  # earlier 3.x: GPUs with the same outcome share a result
    return [g.strip() for g in ids.split(",") if g.strip()] or [""]


def _test_results(category: str, test: dict[str, Any]) -> Iterator[_DiagResult]:
    name = str(test["name"])
    results = test.get("results") or []
    if not results and isinstance(test.get("test_summary"), dict):
        results = [test["test_summary"]]
    for result in results:
        if result is None:
            continue  # 3.3 writes results[i] for the i-th GPU that ran the test: one that did not leaves a null
        status = _diag_status(result["status"], name)
        detail = _warning_text(result.get("warnings"))
        for gpu in _result_gpus(result):
            yield _DiagResult(category, name, gpu, status, detail)


def _diag_root(doc: dict[str, Any]) -> dict[str, Any]:
    root = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))  # 4.x, 3.x
    if not isinstance(root, dict):
        raise ProbeError(BAD_OUTPUT, "dcgmi diag: no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object")
    if root.get("runtime_error"):
        raise ProbeError(ERROR, f"dcgmi diag: runtime error: {root['runtime_error']}")
    if not isinstance(root.get("test_categories"), list):
        raise ProbeError(BAD_OUTPUT, "dcgmi diag: no test_categories in output")
    return root


def _diag_problem(r: _DiagResult) -> str:
    text = f"dcgmi diag: {r.test} failed" + (f" on GPU {r.gpu}" if r.gpu else "")
    return f"{text}: {r.detail}" if r.detail else text


def parse_diag(doc: dict[str, Any], now: float) -> ProbeResult:
    results: dict[tuple[str, str, str, str], _DiagResult] = {}
    for category in _diag_root(doc)["test_categories"]:
        for test in category["tests"]:
            for r in _test_results(str(category["category"]), test):
                results.setdefault((r.category, r.test, r.gpu, r.result), r)
    out = ProbeResult()
    for r in results.values():
        out.add("gpuhealth_dcgm_diag_result", 1, category=r.category, test=r.test, gpu=r.gpu, result=r.result)
    failed = [r for r in results.values() if r.result == "fail"]
    out.add("gpuhealth_dcgm_diag_failed_tests", len(failed))
    out.add("gpuhealth_dcgm_diag_last_run_timestamp_seconds", now)
    out.problems = Problems(gpu=tuple(_diag_problem(r) for r in failed))
    if failed:
        # Re-check soon: after a GPU reset the hourly result would otherwise say "failed" for an hour.
        out.run_again_after = DIAG_RECHECK_AFTER_FAILURE_SECONDS
    return out


DIAG_RECHECK_AFTER_FAILURE_SECONDS = 300.0


class DcgmDiagProbe:
    """`dcgmi diag -r <level> -j`, DCGM 3.x or 4.x. Skipped tests are normal, not problems."""

    name = "diag"

    def __init__(self, command: list[str], level: int = 1) -> None:
        self._command = list(command)
        self._level = level
        self._pause = Pause(self.name)

    def pause(self, wait: float) -> bool:
        return self._pause.pause(wait)

    def resume(self) -> None:
        self._pause.resume()

    def collect(self, deadline: float) -> ProbeResult:
        with self._pause.running():
            return self._diagnose(deadline)

    def _diagnose(self, deadline: float) -> ProbeResult:
        proc = run_command([*self._command, "diag", "-r", str(self._level), "-j"], deadline)
        doc = _load_json(proc, "dcgmi diag")  # it exits non-zero when a test fails: still parse
        try:
            return parse_diag(doc, time.time())
        except _MALFORMED as exc:
            raise ProbeError(BAD_OUTPUT, f"dcgmi diag: unexpected document: {exc!r}") from exc


# --- dcgm-exporter /metrics -----------------------------------------------------------------------

# DCGM field (sample name) -> (gpuhealth family, extra labels, scale)
_ECC = "gpuhealth_gpu_ecc_errors"
_FIELDS: dict[str, tuple[str, dict[str, str], float]] = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (_ECC, {"type": "double_bit", "scope": "volatile"}, 1),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (_ECC, {"type": "double_bit", "scope": "aggregate"}, 1),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (_ECC, {"type": "single_bit", "scope": "volatile"}, 1),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (_ECC, {"type": "single_bit", "scope": "aggregate"}, 1),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gpuhealth_gpu_row_remap_failure", {}, 1),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gpuhealth_gpu_row_remap_pending", {}, 1),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("gpuhealth_gpu_remapped_rows", {"cause": "uncorrectable"}, 1),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("gpuhealth_gpu_remapped_rows", {"cause": "correctable"}, 1),
    "DCGM_FI_DEV_RETIRED_DBE": ("gpuhealth_gpu_retired_pages", {"cause": "double_bit"}, 1),
    "DCGM_FI_DEV_RETIRED_SBE": ("gpuhealth_gpu_retired_pages", {"cause": "single_bit"}, 1),
    "DCGM_FI_DEV_RETIRED_PENDING": ("gpuhealth_gpu_retired_pages_pending", {}, 1),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("gpuhealth_gpu_nvlink_errors", {"type": "crc_flit"}, 1),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("gpuhealth_gpu_nvlink_errors", {"type": "crc_data"}, 1),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("gpuhealth_gpu_nvlink_errors", {"type": "replay"}, 1),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("gpuhealth_gpu_nvlink_errors", {"type": "recovery"}, 1),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("gpuhealth_gpu_pcie_replays", {}, 1),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("gpuhealth_gpu_violation_seconds", {"reason": "thermal"}, 1e-9),
    "DCGM_FI_DEV_POWER_VIOLATION": ("gpuhealth_gpu_violation_seconds", {"reason": "power"}, 1e-9),
    "DCGM_FI_DEV_GPU_TEMP": ("gpuhealth_gpu_temperature_celsius", {"sensor": "gpu"}, 1),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gpuhealth_gpu_temperature_celsius", {"sensor": "memory"}, 1),
    "DCGM_FI_DEV_XID_ERRORS": ("gpuhealth_dcgm_last_xid", {}, 1),
}
_CLOCK_EVENT_FIELDS = {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
# dcgm-exporter's own count of each Xid within its window (xid_collector.go): a series per GPU and Xid with
# the Xid in the `xid` label; one without `xid` (value 0) for a GPU that had none.
_XID_WINDOW_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
_XID_WINDOW_FAMILY = "gpuhealth_dcgm_xid_errors_window"
# The catalog defines these as 0/1 flags; DCGM_FI_DEV_RETIRED_PENDING is a page count.
_FLAG_FAMILIES = {"gpuhealth_gpu_row_remap_failure", "gpuhealth_gpu_row_remap_pending",
                  "gpuhealth_gpu_retired_pages_pending"}


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
    except _MALFORMED as exc:
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
        return [Sample(_XID_WINDOW_FAMILY, {**gpu, "xid": xid}, value)] if xid else []
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
FOREIGN_SAMPLES = "gpuhealth_dcgm_exporter_foreign_samples"


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
        result.add("gpuhealth_gpu_info", 1, **labels, model=model)
    result.problems = Problems(gpu=tuple(sorted(set(problems))))
    return result


class DcgmExporterProbe:
    """A node-local dcgm-exporter's /metrics (http:// or https:// URL) or a file holding one scrape.

    With this node's name, samples whose Hostname is another host's are dropped and counted
    (gpuhealth_dcgm_exporter_foreign_samples_total); a scrape with only other hosts' GPU samples fails.
    """

    name = "dcgm_exporter"

    def __init__(self, source: str, node: str = "", aliases: tuple[str, ...] = ()) -> None:
        self._source = source
        self._accepted = accepted_hostnames(node, aliases)
        self._foreign = 0  # since start, failed runs included; exported with each successful run
        self._warned = False
        self._pause = Pause(self.name)

    def pause(self, wait: float) -> bool:
        return self._pause.pause(wait)

    def resume(self) -> None:
        self._pause.resume()

    def collect(self, deadline: float) -> ProbeResult:
        with self._pause.running():
            return self._scrape(deadline)

    def _scrape(self, deadline: float) -> ProbeResult:
        if not self._accepted and not self._warned:
            self._warned = True
            log.warning("dcgm_exporter: no node name (--node/NODE_NAME): samples cannot be checked against "
                        "dcgm-exporter's Hostname label, so another node's would be reported as this node's")
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
        result = _map_series(own.kept)
        result.add(FOREIGN_SAMPLES, self._foreign)
        return result
