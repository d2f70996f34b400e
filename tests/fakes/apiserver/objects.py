"""What the fake API server's objects and answers are made of: JSON objects, times as the API server writes them,
and its Status object for an error (or a deletion's success)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_status(code: int, reason: str, message: str = "") -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message or reason}


TEXT_BODY = "__text__"  # a handler's answer that is text, not JSON (a pod's log): server.py sends it as text/plain
