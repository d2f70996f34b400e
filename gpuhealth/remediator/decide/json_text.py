"""JSON that someone other than gpuhealth may have written (a Node's or a Lease's annotations): read, or ValueError.

json.loads raises RecursionError, not ValueError, on deep nesting (`[[[[...` past the interpreter's recursion limit,
well within an annotation's 256 KiB), which no caller's `except ValueError` catches: one such annotation stopped every
pass. Every reader of an annotation's JSON goes through `loads`.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """The JSON value of `text`; ValueError for anything json cannot read, nesting too deep included."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to read") from None
