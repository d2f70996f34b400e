"""What every dcgmi command prints, read the same way: its JSON object whatever the exit status, and a line of its
output short enough for a log line or a node condition."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from gpuhealth.exporter.probes.base import (
    BAD_OUTPUT,
    ProbeError,
)

MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


DETAIL_CHARS = 300  # the detail goes into log lines and node conditions: a tool's output need not fit


def first_line(text: str) -> str:
    line = next((line.strip() for line in text[:64 * 1024].splitlines() if line.strip()), "")
    return line if len(line) <= DETAIL_CHARS else line[:DETAIL_CHARS] + "..."


def load_json(proc: subprocess.CompletedProcess[str], tool: str) -> dict[str, Any]:
    """The JSON object a dcgmi command printed, whatever its exit status."""
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        # dcgmi prints some errors on stdout ("Error: unable to establish a connection ...").
        detail = first_line(proc.stderr) or first_line(proc.stdout) or "no output"
        raise ProbeError(BAD_OUTPUT, f"{tool}: no JSON (exit {proc.returncode}): {detail}") from exc
    if not isinstance(doc, dict):
        raise ProbeError(BAD_OUTPUT, f"{tool}: JSON is a {type(doc).__name__}, not an object")
    return doc
