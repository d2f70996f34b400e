"""The readings of the policy's keys (keys.Reading) that any key may use: the scalars, which hand over to
YamlReader's typed reads (helm/policy_schema.py records those), lists, and the combinators that add a check or a
meaning of null. formats.py has the ones tied to one kind of value (a Kubernetes name, a URL, a quantity)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

from gpuhealth.remediator.policy.keys import Reading
from gpuhealth.remediator.policy.quota import Quota
from gpuhealth.remediator.policy.reader import YamlReader

T = TypeVar("T")
E = TypeVar("E")
W = TypeVar("W", bound=StrEnum)


def string(r: YamlReader, key: str, value: object) -> str:
    text: str = r.string(key, value)
    return text


def optional_string(r: YamlReader, key: str, value: object) -> str | None:
    text: str | None = r.string(key, value, optional=True)
    return text


def boolean(r: YamlReader, key: str, value: object) -> bool:
    return r.boolean(key, value)


def duration(r: YamlReader, key: str, value: object) -> timedelta:
    return r.duration(key, value) or timedelta(0)  # None only when optional


def optional_duration(r: YamlReader, key: str, value: object) -> timedelta | None:
    """A duration, or null (no limit)."""
    return r.duration(key, value, optional=True)


def seconds(r: YamlReader, key: str, value: object) -> float:
    """A duration, in seconds."""
    return duration(r, key, value).total_seconds()


def quota(r: YamlReader, key: str, value: object) -> Quota:
    return r.quota(key, value)


def percent(r: YamlReader, key: str, value: object) -> float:
    return r.percent(key, value)


def integer(minimum: int = 0) -> Reading[int]:
    return lambda r, key, value: r.integer(key, value, minimum=minimum)


def choice(values: Iterable[str]) -> Reading[str]:
    """One of `values` (a StrEnum's members, or strings)."""
    allowed = tuple(values)

    def read(r: YamlReader, key: str, value: object) -> str:
        word: str = r.string(key, value, allowed)
        return word

    return read


def member(kind: type[W]) -> Reading[W]:
    """One of a StrEnum's words, read once into its member (the words as choice(kind) allows them)."""
    allowed = tuple(kind)

    def read(r: YamlReader, key: str, value: object) -> W:
        return kind(r.string(key, value, allowed))

    return read


def checked(read: Reading[T], ok: Callable[[T], bool], why: str | Callable[[T], str]) -> Reading[T]:
    """`read`, and then `ok` on what it read: the key fails with `why` (or `why(value)`) when it is not."""

    def read_checked(r: YamlReader, key: str, value: object) -> T:
        got = read(r, key, value)
        if not ok(got):
            raise r.fail(key, why if isinstance(why, str) else why(got))
        return got

    return read_checked


def null_as(empty: E, read: Reading[T]) -> Reading[T | E]:
    """`read`, except that null is `empty` (none)."""
    return lambda r, key, value: empty if value is None else read(r, key, value)


def names(pattern: re.Pattern[str], what: str, unique: bool = False) -> Reading[tuple[str, ...]]:
    """A list of strings that each match `pattern` ("expected a list of <what>" otherwise); `unique`: each once."""

    def read(r: YamlReader, key: str, value: object) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and pattern.match(v) for v in value):
            raise r.fail(key, f"expected a list of {what}, got {value!r}")
        return tuple(dict.fromkeys(value)) if unique else tuple(value)

    return read


def list_of(read: Reading[T], why: str | Callable[[object], str], unique: bool = False) -> Reading[tuple[T, ...]]:
    """A list, each item read by `read` under the list's key; `why` (or `why(value)`) when it is not a list."""

    def read_list(r: YamlReader, key: str, value: object) -> tuple[T, ...]:
        if not isinstance(value, list):
            raise r.fail(key, why if isinstance(why, str) else why(value))
        items = tuple(read(r, key, item) for item in value)
        return tuple(dict.fromkeys(items)) if unique else items

    return read_list


def duration_or_off(r: YamlReader, key: str, value: object) -> timedelta | None:
    """A duration, or off (also null or false): None."""
    off = value in (None, "off") or value is False
    return None if off else duration(r, key, value)


def regular_expression(r: YamlReader, key: str, value: object) -> str | None:
    """A regular expression, or null (none)."""
    text = optional_string(r, key, value)
    try:
        re.compile(text or "")
    except re.error as exc:
        raise r.fail(key, f"not a regular expression: {exc}") from exc
    return text


def regular_expressions(r: YamlReader, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise r.fail(key, "expected a list of regular expressions")
    for p in value:
        try:
            re.compile(p)
        except re.error as exc:
            raise r.fail(key, f"{p!r} is not a regular expression: {exc}") from exc
    return tuple(value)


def exit_codes(r: YamlReader, key: str, value: object) -> tuple[int, ...]:
    """Process exit codes (1-255), sorted, each once."""
    if not isinstance(value, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255 for c in value):
        raise r.fail(key, f"expected a list of exit codes 1-255, got {value!r}")
    return tuple(sorted(set(value)))
