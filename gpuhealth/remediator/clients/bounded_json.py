"""JSON parsed within a bound on the values it makes, checked before parsing.

A byte cap does not bound what a parse holds: Python makes an object of every value, and the smallest values cost the
most per byte. 8 MiB of `{},` is 2.8 million empty dicts, ~290 MiB; three members of an HA Alertmanager answering that
at once took the remediator to 814 MiB, over the chart's limit (issue 35, item 12). An upper bound on the values a
document holds is read off its bytes without parsing it: every value but the top one is the first of its array or
object, or follows a comma, so values <= 1 + '[' + '{' + ','. Counted in the raw bytes first (a C loop per
character); only when that is over the bound are the strings taken out (a bracket or comma inside one is no value)
and counted again. Deep nesting, which json refuses with RecursionError, is refused the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

# A JSON string, escapes included, matched without backtracking (possessive): linear in its length
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)


class TooManyValues(ValueError):
    """The document holds more values than allowed, or nests deeper than json can read: not parsed."""


def _values_at_most(body: bytes | bytearray, limit: int) -> int:
    """An upper bound on the values `body` holds: exact but for strings' own brackets and commas, which the second
    count (over `limit` only) takes out."""
    rough = 1 + body.count(b"[") + body.count(b"{") + body.count(b",")
    if rough <= limit:
        return rough
    bare = _STRING.sub(b'""', body)
    return 1 + bare.count(b"[") + bare.count(b"{") + bare.count(b",")


def loads(body: bytes | bytearray, max_values: int) -> Any:
    """json.loads(body), or TooManyValues before any parsing when it would make more than `max_values` values;
    ValueError (json's) for what is not JSON."""
    values = _values_at_most(body, max_values)
    if values > max_values:
        raise TooManyValues(f"{values} JSON values, more than {max_values}")
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise TooManyValues("JSON nested too deep to read") from exc
