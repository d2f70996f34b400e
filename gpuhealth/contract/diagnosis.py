"""The diagnostic Job's verdict: written by the node side (gpuhealth/exporter/diagnose, the Job's `judge` container) to
its container's termination message, read back by the remediator (gpuhealth/remediator/decide/diagnosis.py) from the
pod's status. One JSON object, at most MAX_BYTES (the kubelet keeps no more of a termination message):

    {"v": 1, "passed": false, "level": 2,
     "failures": [{"category": "gpu_diag", "gpus": ["3"], "detail": "dcgmi diag: memory failed on GPU 3: ...",
                   "codes": [57]}],
     "skipped": ["nccl_bandwidth: all_reduce_perf is not in the image"]}

`passed` is true exactly when there is no failure. A reader takes nothing else: an object that breaks a rule here is
no verdict (ValueError), and the remediator fails closed on it.

`codes` (the DCGM_FR_* codes of a dcgmi diag failure, gpuhealth/exporter/probes/dcgm/failure_codes.py) is optional
and written only when there are codes, so the version stays 1 in both directions: a reader of the first verdicts
takes only a failure's category, gpus and detail (it ignores other keys) and reads a gpu_diag failure with codes as
before; this reader reads a verdict without codes as failures with none (hardware, as before). The category
gpu_config is newer: a reader that does not know it refuses the verdict, which the remediator reads as a failed
diagnosis (tool_error), the closed side for a failure it cannot judge (tests/contract/test_diagnosis_versions.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

VERSION = 1
MAX_BYTES = 4096  # the kubelet truncates a container's termination message to 4096 bytes
TERMINATION_LOG = "/dev/termination-log"


class Check(StrEnum):
    """What failed: each names the evidence, and so the rung that fixes it (docs/remediation.md, "Diagnostic Job")."""

    GPU_DIAG = "gpu_diag"  # a dcgmi diag test failed, for the GPU (its codes ask for a repair, or it names none)
    GPU_CONFIG = "gpu_config"  # a dcgmi diag test failed for the node's software or configuration, not the GPU
    GPU_COUNT = "gpu_count"  # fewer GPUs than the node was provisioned with
    EFA_COUNT = "efa_count"  # fewer EFA devices than it was provisioned with
    NCCL_BANDWIDTH = "nccl_bandwidth"  # all-reduce bus bandwidth under the product's floor, or wrong results
    TOOL_ERROR = "tool_error"  # a tool missing, hung or unreadable: no evidence either way (fails closed)


@dataclass(frozen=True)
class Failure:
    category: Check
    detail: str
    gpus: tuple[str, ...] = ()  # the GPUs it names (DCGM entity ids, nvidia-smi indexes); () for the node
    codes: tuple[int, ...] = ()  # the DCGM_FR_* codes of a gpu_diag or gpu_config failure (optional in the JSON)


@dataclass(frozen=True)
class DiagnosticReport:
    failures: tuple[Failure, ...] = ()
    skipped: tuple[str, ...] = ()  # checks not run, and why ("nccl_bandwidth: ...")
    level: int = 0  # the dcgmi diag level run
    truncated: int = 0  # failures left out to fit MAX_BYTES

    @property
    def passed(self) -> bool:
        return not self.failures and not self.truncated

    def to_json(self) -> str:
        """The verdict in at most MAX_BYTES of UTF-8: details cut, then GPU lists, then failures from the end
        (counted in `truncated`, which keeps a cut verdict failed)."""
        for detail_chars, max_gpus in ((400, 64), (160, 16), (60, 4)):
            text = _dumps(self._cut(detail_chars, max_gpus))
            if len(text.encode()) <= MAX_BYTES:
                return text
        verdict = self._cut(60, 4)
        verdict = replace(verdict, skipped=tuple(s[:60] for s in verdict.skipped[:8]))
        while len(_dumps(verdict).encode()) > MAX_BYTES and len(verdict.failures) > 1:
            verdict = replace(verdict, failures=verdict.failures[:-1], truncated=verdict.truncated + 1)
        return _dumps(verdict)

    def _cut(self, detail_chars: int, max_gpus: int) -> DiagnosticReport:
        return replace(self, failures=tuple(
            replace(f, detail=_short(f.detail, detail_chars), gpus=f.gpus[:max_gpus], codes=f.codes[:max_gpus])
            for f in self.failures))

    @classmethod
    def from_json(cls, text: str) -> DiagnosticReport:
        """The verdict `text` holds; ValueError when it is not one (not JSON, another version, a rule broken, or
        longer than MAX_BYTES: a pod's status is writable by more than the kubelet, which keeps no more)."""
        if len(text) > MAX_BYTES or len(text.encode()) > MAX_BYTES:
            raise ValueError(f"longer than {MAX_BYTES} bytes: no termination message the kubelet keeps")
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            raise ValueError(f"not a version {VERSION} verdict object")
        failures = tuple(_failure(f) for f in _list(doc, "failures"))
        skipped = tuple(str(s) for s in _list(doc, "skipped"))
        level, truncated = doc.get("level", 0), doc.get("truncated", 0)
        if not isinstance(level, int) or not isinstance(truncated, int) or truncated < 0:
            raise ValueError("level and truncated are whole numbers")
        verdict = cls(failures, skipped, level, truncated)
        if doc.get("passed") is not verdict.passed:
            raise ValueError(f"passed is {doc.get('passed')!r} with {len(failures) + truncated} failures")
        return verdict


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 3] + "..."


def _dumps(verdict: DiagnosticReport) -> str:
    doc: dict[str, Any] = {"v": VERSION, "passed": verdict.passed, "level": verdict.level,
                           "failures": [_failure_doc(f) for f in verdict.failures],
                           "skipped": list(verdict.skipped)}
    if verdict.truncated:
        doc["truncated"] = verdict.truncated
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _failure_doc(failure: Failure) -> dict[str, Any]:
    doc: dict[str, Any] = {"category": str(failure.category), "gpus": list(failure.gpus), "detail": failure.detail}
    if failure.codes:  # only where there are: a verdict without codes is the first version's, byte for byte
        doc["codes"] = list(failure.codes)
    return doc


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"{key} is not a list")
    return value


def _failure(item: object) -> Failure:
    if not isinstance(item, dict):
        raise ValueError(f"a failure is an object, not {item!r}")
    try:
        category = Check(str(item.get("category")))
    except ValueError as exc:
        raise ValueError(f"unknown category {item.get('category')!r}") from exc
    gpus, codes = _list(item, "gpus"), _list(item, "codes")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in codes):
        raise ValueError(f"codes are DCGM failure codes (whole numbers), not {codes!r}")
    return Failure(category, str(item.get("detail", "")), tuple(str(g) for g in gpus), tuple(codes))
