"""The state annotation's JSON checked against the types of NodeState's and AlertRecord's fields before either is
built: a field of the wrong JSON type (a count written as text, a time as a number, a list as a string) is a damaged
state, refused on read (the node fails closed alone: decide/views.py), never a value that raises later in a pass.

The check is read off the fields' declared types (a record's fields each under its own key), so a new field is
checked as soon as it is declared; a field whose type has no JSON form below fails at import (add its form here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuhealth.remediator.decide.state_records import keys_of

# The largest count the state holds (NodeState.burn_in_restarts, bounded far below this by the ladder): a bigger or
# negative one was not written by gpuhealth
MAX_COUNT = 1_000_000


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _texts(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))


# Each declared type's JSON form: times are RFC 3339 text (parsed after this check), the vocabulary's words text
# (read into their enums after it), tuples lists. A null where a field allows none reads as its default.
_FORMS: dict[str, Callable[[Any], bool]] = {
    "str": _text, "str | None": _optional_text, "bool": _flag, "int": _count,
    "datetime": _text, "datetime | None": _optional_text,
    "tuple[str, ...]": _texts, "tuple[datetime, ...]": _texts,
    "Rung | None": _optional_text, "RungStatus | None": _optional_text, "ResetPhase | None": _optional_text,
    "EvidenceOutcome | None": _optional_text,
    "Purpose | None": _optional_text, "Scope": _optional_text,  # a null scope: an unknown word (nodestate)
    "Remediation": _text, "AlertStatus": _text,  # an alert record's words (nodestate._checked_alert)
}
WHY: dict[Callable[[Any], bool], str] = {
    _text: "text", _optional_text: "text or null", _flag: "true or false", _count: f"a count 0-{MAX_COUNT}",
    _texts: "a list of text"}


def checker(cls: type, skip: tuple[str, ...] = ()) -> Callable[[dict[str, Any], str], None]:
    """A check of a JSON object's known keys against `cls`'s fields, each under its key (a record's fields each as
    their own: decide/state_records.py; those in `skip` are checked by the caller): ValueError naming the first key of
    the wrong type, its value and what it must be."""
    forms = {k.key: _FORMS[k.type] for k in keys_of(cls, skip)}

    def check(data: dict[str, Any], where: str) -> None:
        for key, value in data.items():
            form = forms.get(key)
            if form is not None and not form(value):
                raise ValueError(f"{where}{key} is {_shown(value)}, not {WHY[form]}")

    return check


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
