"""The diagnostic Job's checks, judged from what its `collect` step wrote
(gpuhealth/remediator/act/templates/diagnose_collect.sh) and from sysfs: each returns its failures and, where it could
not run for a reason that is no fault, why it skipped.

The collect step writes, per tool, `<name>.out` (stdout), `<name>.err` (stderr) and `<name>.rc` (its exit status;
124 when `timeout` stopped it), or `<name>.absent` when the image lacks the tool. Anything else (a file missing, an
output that does not parse, a status we do not know) is a tool_error: fails closed, never passes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuhealth.contract.diagnosis import Check, Failure
from gpuhealth.exporter import catalog
from gpuhealth.exporter.diagnose.nccl import floor_for, parse_all_reduce
from gpuhealth.exporter.instance_types import lookup
from gpuhealth.exporter.probes.base import ProbeError
from gpuhealth.exporter.probes.dcgm.diag import diag_problem, diag_results
from gpuhealth.exporter.probes.dcgm.failure_codes import Action, code_name, failed_test_action
from gpuhealth.exporter.probes.dcgm.tool_output import MALFORMED, first_line
from gpuhealth.exporter.probes.efa import EfaProbe

TIMED_OUT = 124  # coreutils timeout's status
NOT_FOUND = (126, 127)  # the shell's: not executable, not found
GPU_ROW = re.compile(r"^\s*(\d+),\s*(GPU-[0-9a-fA-F-]+),\s*([^,]+),\s*([0-9A-Fa-f:.]+)\s*$")


@dataclass
class Findings:
    failures: list[Failure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def fail(self, category: Check, detail: str, gpus: tuple[str, ...] = (), codes: tuple[int, ...] = ()) -> None:
        self.failures.append(Failure(category, detail, gpus, codes))


@dataclass(frozen=True)
class ToolRun:
    """One tool's run as the collect step recorded it."""

    name: str
    out: str
    err: str
    rc: int | None  # None: no status recorded (the step died first)
    absent: bool

    @classmethod
    def read(cls, directory: Path, name: str) -> ToolRun:
        def text(suffix: str) -> str:
            path = directory / f"{name}.{suffix}"
            return path.read_text(errors="replace") if path.is_file() else ""
        rc_text = text("rc").strip()
        rc = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        return cls(name, text("out"), text("err"), rc, (directory / f"{name}.absent").exists())

    def trouble(self) -> str | None:
        """Why this run gives no evidence (it did not run, was stopped, or its tool is missing), or None."""
        if self.absent or self.rc in NOT_FOUND:
            return f"{self.name}: the tool is not in the image"
        if self.rc is None:
            return f"{self.name}: no exit status recorded (the collect step did not finish it)"
        if self.rc == TIMED_OUT:
            return f"{self.name}: timed out"
        return None

    def said(self) -> str:
        return first_line(self.err) or first_line(self.out) or "no output"


@dataclass(frozen=True)
class Gpu:
    index: str
    uuid: str
    name: str


def gpus_seen(run: ToolRun, findings: Findings) -> list[Gpu] | None:
    """The GPUs `nvidia-smi --query-gpu=index,uuid,name,pci.bus_id --format=csv,noheader` listed (None: it gave no
    evidence: a tool_error). A GPU nvidia-smi cannot reach prints an error line instead of a row, and it exits
    non-zero: the rows it did print are the GPUs there."""
    trouble = run.trouble()
    if trouble:
        findings.fail(Check.TOOL_ERROR, trouble)
        return None
    rows = [GPU_ROW.match(line) for line in run.out.splitlines() if line.strip()]
    return [Gpu(m.group(1), m.group(2), m.group(3).strip()) for m in rows if m]


def check_gpu_count(run: ToolRun, gpus: list[Gpu] | None, expected: int | None, findings: Findings) -> None:
    if gpus is None:
        return
    if expected is None:
        findings.fail(Check.TOOL_ERROR, "gpu_count: the node's provisioned GPU count is not known")
        return
    if len(gpus) < expected:
        findings.fail(Check.GPU_COUNT, f"{len(gpus)} of {expected} GPUs visible to nvidia-smi (exit {run.rc}: "
                      f"{run.said()})" if run.rc else f"{len(gpus)} of {expected} GPUs visible to nvidia-smi")
    elif run.rc:
        findings.fail(Check.TOOL_ERROR, f"nvidia-smi exit {run.rc}: {run.said()}")


def expected_gpus(instance_type: str | None, given: int | None) -> int | None:
    """What the node was provisioned with: its instance type's GPUs (fixed by the hardware), else the count the
    remediator read off the Node (nvidia.com/gpu capacity or the nvidia.com/gpu.count label)."""
    known = lookup(instance_type) if instance_type else None
    return known.gpus if known is not None and known.gpus else given


def check_dcgm(run: ToolRun, findings: Findings) -> None:
    """`dcgmi diag -r N -j`: every failed test a failure naming its GPUs and its DCGM failure codes, as its strongest
    code asks (failure_codes.failed_test_action, as the GPUDiagFailed* alerts): gpu_config when that is config (the
    node's software, not the GPU), gpu_diag otherwise (no code, an unknown one: fail closed); a test whose codes all
    take no action is listed as skipped, not failed. dcgmi exits non-zero when a test fails, so its status is not
    read; its JSON is."""
    trouble = run.trouble()
    if trouble:
        findings.fail(Check.TOOL_ERROR, f"dcgmi diag: {trouble.split(': ', 1)[1]}")
        return
    try:
        doc = json.loads(run.out)
        if not isinstance(doc, dict):
            raise TypeError(f"JSON is a {type(doc).__name__}")
        results = diag_results(doc)
    except ProbeError as exc:
        findings.fail(Check.TOOL_ERROR, exc.message)
        return
    except MALFORMED as exc:
        findings.fail(Check.TOOL_ERROR, f"dcgmi diag: unreadable output (exit {run.rc}: {run.said()}; {exc!r})")
        return
    failed = [r for r in results if r.result == "fail"]
    for test in dict.fromkeys(r.test for r in failed):
        mine = [r for r in failed if r.test == test]
        codes = tuple(sorted({code for r in mine for code in r.codes}))
        named = ", ".join(f"{code_name(code)} ({code})" for code in codes)
        action = failed_test_action(codes)
        if action == Action.NONE:
            findings.skipped.append(f"gpu_diag: {diag_problem(mine[0])} [{named}: no action, not counted]")
            continue
        category = Check.GPU_CONFIG if action == Action.CONFIG else Check.GPU_DIAG
        detail = f"{diag_problem(mine[0])} [{named}]" if codes else diag_problem(mine[0])
        findings.fail(category, detail, tuple(sorted({r.gpu for r in mine if r.gpu})), codes)


def check_efa(sysfs_root: str, expected: int | None, instance_type: str | None, findings: Findings) -> None:
    """EFA devices sysfs shows against what the node was given (gpuhealth/exporter/efa_expected.py): the count the
    remediator read off the Node (label gpuhealth.io/efa-expected, else vpc.amazonaws.com/efa capacity), cut to the
    instance type's maximum. None or 0: the node was given none, nothing can be missing."""
    known = lookup(instance_type) if instance_type else None
    if known is not None and expected is not None:
        expected = min(expected, known.efa_devices)
    if not expected:
        findings.skipped.append("efa_count: the node was provisioned with no EFA device")
        return
    try:
        result = EfaProbe(sysfs_root, counters=frozenset()).collect(30.0)
    except ProbeError as exc:
        findings.fail(Check.TOOL_ERROR, f"efa: {exc.message}")
        return
    visible = int(next(s.value for s in result.samples if s.family is catalog.EFA_DEVICES_VISIBLE))
    if visible < expected:
        findings.fail(Check.EFA_COUNT, f"{visible} of {expected} EFA devices in sysfs")


def check_nccl(run: ToolRun, gpus: list[Gpu] | None, floor: float | None, findings: Findings) -> None:
    """all_reduce_perf over every GPU: wrong results, or bus bandwidth under the product's floor, fail."""
    if run.absent:
        findings.skipped.append("nccl_bandwidth: all_reduce_perf is not in the image")
        return
    if gpus is not None and len(gpus) < 2:
        findings.skipped.append("nccl_bandwidth: fewer than two GPUs, nothing to all-reduce")
        return
    trouble = run.trouble()
    try:
        if trouble:
            raise ValueError(trouble)
        measured = parse_all_reduce(run.out)
    except ValueError as exc:
        findings.fail(Check.TOOL_ERROR, f"all_reduce_perf: {exc} (exit {run.rc}: {run.said()})")
        return
    if measured.wrong or measured.out_of_bounds_failed:
        findings.fail(Check.NCCL_BANDWIDTH, f"all_reduce_perf: {measured.wrong} wrong results")
        return
    product = gpus[0].name if gpus else ""
    floor = floor if floor is not None else floor_for(product)
    if floor is None:
        findings.skipped.append(f"nccl_bandwidth: no floor for {product or 'an unknown product'}")
        return
    best = measured.largest
    if best.busbw < floor:
        findings.fail(Check.NCCL_BANDWIDTH, f"all-reduce bus bandwidth {best.busbw:g} GB/s at {best.size} bytes, "
                      f"under the floor of {floor:g} GB/s for {product or 'this product'}")
