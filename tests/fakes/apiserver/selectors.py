"""Field and label selectors, as the API server matches an object against them (lists and watches)."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.apiserver.objects import Obj


def _field(obj: Obj, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


_FIELD_TERM = re.compile(r"^([^!=]+)(!=|==|=)(.*)$")


def selected(obj: Obj, field_selector: str | None, label_selector: str | None) -> bool:
    for term in filter(None, (field_selector or "").split(",")):
        match = _FIELD_TERM.match(term)
        if match is None:
            raise ValueError(f"bad field selector term {term!r}")
        key, op, want = match.groups()
        equal = str(_field(obj, key) or "") == want
        if equal != (op != "!="):
            return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, want = term.partition("=")
        if labels.get(key) != want:
            return False
    return True
