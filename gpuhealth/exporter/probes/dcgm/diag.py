"""`dcgmi diag -r N -j`: DCGM's active diagnostic, per test and GPU (the diag probe)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuhealth.exporter import catalog
from gpuhealth.exporter.probes.base import (
    BAD_OUTPUT,
    ERROR,
    PausingProbe,
    ProbeError,
)
from gpuhealth.exporter.probes.dcgm.failure_codes import Action, diag_code_action, failed_test_action
from gpuhealth.exporter.probes.dcgm.tool_output import MALFORMED, load_json
from gpuhealth.exporter.probes.tools import run_command
from gpuhealth.exporter.samples import ProbeResult, Problems

_DIAG_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
                "not run": "skip"}


@dataclass(frozen=True)
class DiagResult:
    """One test's result on one entity (a GPU id; "" for a CPU or the node)."""

    category: str
    test: str
    gpu: str
    result: str
    detail: str
    codes: tuple[int, ...] = ()  # DCGM_FR_* codes (error_id) of its warnings, 3.x and 4.x


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


def _warning_codes(warnings: object) -> tuple[int, ...]:
    """The DCGM_FR_* code of each warning (`error_id`, nvvs/include/NvvsJsonStrings.h); older dcgmi gives none."""
    if not isinstance(warnings, list):
        return ()
    codes = (w.get("error_id") for w in warnings if isinstance(w, dict))
    return tuple(sorted({c for c in codes if isinstance(c, int) and not isinstance(c, bool)}))


def _warnings(node: object) -> list[dict[str, Any]]:
    warnings = node.get("warnings") if isinstance(node, dict) else None
    return [w for w in warnings if isinstance(w, dict)] if isinstance(warnings, list) else []


def _entityless_warnings(test: dict[str, Any], results: list[Any]) -> list[dict[str, Any]]:
    """DCGM 4.x's test_summary lists every error of the test, a result only its entity's (dcgmi/Diag.cpp
    HelperJsonAddTestSummary, includeAllErrors; HelperJsonAddResult): a summary error that no result carries belongs
    to no entity (DCGM_FE_NONE: a denylisted driver, nvvs/src/Software.cpp), so it is every result's."""
    carried = {(w.get("error_id"), w.get("warning")) for r in results for w in _warnings(r)}
    return [w for w in _warnings(test.get("test_summary")) if (w.get("error_id"), w.get("warning")) not in carried]


def _result_gpus(result: dict[str, Any]) -> list[str]:
    if "entity_group" in result:  # 4.x: one entity per result
        return [str(result["entity_id"])] if str(result["entity_group"]).upper() == "GPU" else [""]
    if "gpu_id" in result:  # 3.3 on (Diag.cpp): one GPU per result, a string ("1"), a number in deployment tests
        return [str(result["gpu_id"]).strip()]
    ids = str(result.get("gpu_ids", "")).strip()  # earlier 3.x: GPUs with the same outcome share a result
    return [g.strip() for g in ids.split(",") if g.strip()] or [""]


def _test_results(category: str, test: dict[str, Any]) -> Iterator[DiagResult]:
    name = str(test["name"])
    results = test.get("results") or []
    shared: list[dict[str, Any]] = _entityless_warnings(test, results) if results else []
    if not results and isinstance(test.get("test_summary"), dict):
        results = [test["test_summary"]]
    for result in results:
        if result is None:
            continue  # 3.3 writes results[i] for the i-th GPU that ran the test: one that did not leaves a null
        status = _diag_status(result["status"], name)
        own = result.get("warnings")
        warnings = [*(own if isinstance(own, list) else []), *shared] if shared else own
        detail = _warning_text(warnings)
        codes = _warning_codes(warnings)
        for gpu in _result_gpus(result):
            yield DiagResult(category, name, gpu, status, detail, codes)


def _diag_root(doc: dict[str, Any]) -> dict[str, Any]:
    root = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))  # 4.x, 3.x
    if not isinstance(root, dict):
        raise ProbeError(BAD_OUTPUT, "dcgmi diag: no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object")
    if root.get("runtime_error"):
        raise ProbeError(ERROR, f"dcgmi diag: runtime error: {root['runtime_error']}")
    if not isinstance(root.get("test_categories"), list):
        raise ProbeError(BAD_OUTPUT, "dcgmi diag: no test_categories in output")
    return root


def diag_results(doc: dict[str, Any]) -> list[DiagResult]:
    """Every distinct result of a `dcgmi diag -j` document, DCGM 3.x or 4.x (the diagnostic Job reads them too,
    gpuhealth/exporter/diagnose). ProbeError for a document that is no diagnosis, has a status we do not know, or
    verified nothing (no result, or every test skipped); KeyError,
    TypeError and the like (MALFORMED) for one of another shape."""
    results: dict[tuple[str, str, str, str], DiagResult] = {}
    for category in _diag_root(doc)["test_categories"]:
        for test in category["tests"]:
            for r in _test_results(str(category["category"]), test):
                results.setdefault((r.category, r.test, r.gpu, r.result), r)
    _check_something_ran(results.values())
    return list(results.values())


def _check_something_ran(results: Iterable[DiagResult]) -> None:
    """Fail closed on a diagnosis that verified nothing: no result at all, or every test skipped. A skipped test is
    normal beside others that ran (EUD without its package); alone, it is no evidence that the GPUs are healthy."""
    ran = list(results)
    if not ran:
        raise ProbeError(BAD_OUTPUT, "dcgmi diag: no test results: nothing was verified")
    if all(r.result == "skip" for r in ran):
        tests = sorted({r.test for r in ran})
        raise ProbeError(BAD_OUTPUT, f"dcgmi diag: every test was skipped ({', '.join(tests[:5])}"
                                     f"{', ...' if len(tests) > 5 else ''}): nothing was verified")


def diag_problem(r: DiagResult) -> str:
    text = f"dcgmi diag: {r.test} failed" + (f" on GPU {r.gpu}" if r.gpu else "")
    return f"{text}: {r.detail}" if r.detail else text


def parse_diag(doc: dict[str, Any], now: float) -> ProbeResult:
    results = diag_results(doc)
    out = ProbeResult()
    for r in results:
        out.add(catalog.DCGM_DIAG_RESULT, 1, category=r.category, test=r.test, gpu=r.gpu, result=r.result)
    for r in results:
        if r.result in ("fail", "warn"):
            for code in r.codes:
                out.add(catalog.DCGM_DIAG_FAILURE_CODE, 1, test=r.test, gpu=r.gpu, code=str(code),
                        action=diag_code_action(code).value)
    failed = [r for r in results if r.result == "fail"]
    out.add(catalog.DCGM_DIAG_FAILED_TESTS, len(failed))
    out.add(catalog.DCGM_DIAG_LAST_RUN_TIMESTAMP_SECONDS, now)
    # A test whose codes all take no action (failure_codes.py) is counted, not a problem of the node's condition.
    out.problems = Problems(gpu=tuple(diag_problem(r) for r in failed if failed_test_action(r.codes) != Action.NONE))
    if failed:
        # Re-check soon: after a GPU reset the hourly result would otherwise say "failed" for an hour.
        out.run_again_after = DIAG_RECHECK_AFTER_FAILURE_SECONDS
    return out


DIAG_RECHECK_AFTER_FAILURE_SECONDS = 300.0


class DcgmDiagProbe(PausingProbe):
    """`dcgmi diag -r <level> -j`, DCGM 3.x or 4.x. Skipped tests are normal, not problems."""

    name = "diag"

    def __init__(self, command: list[str], level: int = 1) -> None:
        self._command = list(command)
        self._level = level
        super().__init__()

    def _run(self, deadline: float) -> ProbeResult:
        proc = run_command([*self._command, "diag", "-r", str(self._level), "-j"], deadline)
        doc = load_json(proc, "dcgmi diag")  # it exits non-zero when a test fails: still parse
        try:
            return parse_diag(doc, time.time())
        except MALFORMED as exc:
            raise ProbeError(BAD_OUTPUT, f"dcgmi diag: unexpected document: {exc!r}") from exc
