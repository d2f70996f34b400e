"""The probe contract and the failure reasons every probe reports in the same words."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from typing import Protocol

from exporter.samples import ProbeResult

# Failure reasons, the `reason` label of gpuhealth_probe_error / gpuhealth_probe_failures_total.
TIMEOUT = "timeout"
MISSING_TOOL = "missing_tool"
PERMISSION_DENIED = "permission_denied"
NOT_FOUND = "not_found"
BAD_OUTPUT = "bad_output"
STALE = "stale"
ERROR = "error"


class ProbeError(Exception):
    """A probe run that produced no trustworthy data. The exporter reports it; it never passes silently."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Probe(Protocol):
    name: str

    def collect(self, deadline: float) -> ProbeResult:
        """Read the source once, finishing within `deadline` seconds, or raise ProbeError."""
        ...


def classify(exc: BaseException) -> ProbeError:
    """Map any exception a probe let escape to a ProbeError with a stable reason."""
    if isinstance(exc, ProbeError):
        return exc
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
        if isinstance(exc, PermissionError):
            return ProbeError(PERMISSION_DENIED, message)
        if isinstance(exc, FileNotFoundError):
            return ProbeError(NOT_FOUND, message)
        if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
            return ProbeError(BAD_OUTPUT, message)
        return ProbeError(ERROR, message)
    if isinstance(exc, (ValueError, KeyError, TypeError, IndexError, json.JSONDecodeError)):
        return ProbeError(BAD_OUTPUT, f"{type(exc).__name__}: {exc}")
    return ProbeError(ERROR, f"{type(exc).__name__}: {exc}")


def run_command(argv: list[str], deadline: float) -> subprocess.CompletedProcess[str]:
    """Run a diagnostic command with a hard deadline: on expiry its whole process group is killed.

    Raises ProbeError(missing_tool | permission_denied | timeout). A non-zero exit is returned, not
    raised, because tools such as `dcgmi diag` exit non-zero yet print a valid report.
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise ProbeError(MISSING_TOOL, f"{argv[0]}: not found") from exc
    except PermissionError as exc:
        raise ProbeError(PERMISSION_DENIED, f"{argv[0]}: permission denied") from exc
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ProbeError(TIMEOUT, f"{' '.join(argv)}: no answer within {deadline:g}s, killed") from exc
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
