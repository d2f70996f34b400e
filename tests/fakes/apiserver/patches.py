"""The API server's patches: JSON merge patch (RFC 7386) and strategic merge patch (conditions merged by type)."""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, path: str = "") -> Any:
    """Merge patch, except lists with a patch merge key (conditions by type) merge item by item."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        here = f"{path}.{key}"
        if value is None:
            out.pop(key, None)
        elif here.endswith(".conditions") and isinstance(value, list):
            by_type = {c["type"]: c for c in out.get(key) or []}
            for c in value:
                by_type[c["type"]] = merge_patch(by_type.get(c["type"], {}), c)
            out[key] = list(by_type.values())
        else:
            out[key] = strategic_merge_patch(out.get(key), value, here)
    return out
