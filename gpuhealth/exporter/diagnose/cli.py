"""gpuhealth-diagnose: the diagnostic Job's judge (gpuhealth/remediator/act/templates/diagnose.yaml.j2, container
`judge`).

It reads what the Job's collect step wrote (--dir), judges it against what the node was provisioned with, writes
the verdict (gpuhealth/contract/diagnosis.py) to the container's termination message, where the remediator reads
it, and exits 0 when the node passed, 1 when it did not. Any error of its own fails the node too (a tool_error
verdict, exit 1): a judge that breaks must not read as a pass.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuhealth.contract.diagnosis import TERMINATION_LOG, Check, DiagnosticReport, Failure
from gpuhealth.exporter.diagnose.checks import (
    Findings,
    ToolRun,
    check_dcgm,
    check_efa,
    check_gpu_count,
    check_nccl,
    expected_gpus,
    gpus_seen,
)


def _count(text: str) -> int | None:
    """A count the remediator read off the Node; "" when it found none."""
    if text == "":
        return None
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a count is 0 or more, not {text}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuhealth-diagnose", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True, help="where the collect step wrote the tools' outputs")
    p.add_argument("--level", type=int, required=True, help="the dcgmi diag level run")
    p.add_argument("--instance-type", default="", help="the node's node.kubernetes.io/instance-type")
    p.add_argument("--gpus-expected", type=_count, default=None, help="the GPUs the Node says it was given")
    p.add_argument("--efa-expected", type=_count, default=None, help="the EFA devices the Node says it was given")
    p.add_argument("--sysfs-root", default="/host", help="where the host's /sys is mounted, as <root>/sys")
    p.add_argument("--nccl-floor", type=float, default=None, help="all-reduce busbw floor, GB/s (default: table)")
    p.add_argument("--termination-log", type=Path, default=Path(TERMINATION_LOG))
    return p


def judge(args: argparse.Namespace) -> DiagnosticReport:
    findings = Findings()
    gpu_run = ToolRun.read(args.dir, "gpus")
    gpus = gpus_seen(gpu_run, findings)
    check_gpu_count(gpu_run, gpus, expected_gpus(args.instance_type or None, args.gpus_expected), findings)
    check_dcgm(ToolRun.read(args.dir, "dcgm"), findings)
    check_efa(args.sysfs_root, args.efa_expected, args.instance_type or None, findings)
    check_nccl(ToolRun.read(args.dir, "nccl"), gpus, args.nccl_floor, findings)
    return DiagnosticReport(tuple(findings.failures), tuple(findings.skipped), args.level)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        verdict = judge(args)
    except Exception as exc:  # the judge's own failure: the node does not pass on it
        verdict = DiagnosticReport((Failure(Check.TOOL_ERROR, f"gpuhealth-diagnose: {type(exc).__name__}: {exc}"),),
                          level=args.level)
    text = verdict.to_json()
    print(text)
    try:
        args.termination_log.write_text(text)
    except OSError as exc:
        print(f"gpuhealth-diagnose: cannot write {args.termination_log}: {exc}", file=sys.stderr)
        return 1
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
