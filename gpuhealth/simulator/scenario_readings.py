"""The readings (gpuhealth.remediator.policy.keys.Reading) a scenario file's keys take beyond the policy's own
(readings.py): numbers and probabilities, mappings of free names (pools, causes, alerts), and a key that must be there.
Each raises the reader's PolicyError naming the key and its line, as a bad policy does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gpuhealth.remediator.policy.keys import Reading
from gpuhealth.remediator.policy.reader import YamlReader
from gpuhealth.remediator.policy.readings import checked, seconds

T = TypeVar("T")


def number(lo: float = 0.0, hi: float | None = None, lo_open: bool = False) -> Reading[float]:
    """A number (not a boolean) >= lo (> lo when lo_open) and <= hi, as a float."""
    bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi is not None else "")

    def read(r: YamlReader, key: str, value: object) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or value < lo or (lo_open and value == lo) or (hi is not None and value > hi):  # type: ignore[operator]
            raise r.fail(key, f"expected a number {bound}, got {value!r}")
        return float(value)  # type: ignore[arg-type]

    return read


probability = number(0, 1)
# A duration that must pass: a wait of 0 would make an exponential draw or a checkpoint loop meaningless
positive_seconds = checked(seconds, lambda s: s > 0, "expected a duration above 0")


def required(read: Reading[T], why: str = "required") -> Reading[T]:
    """`read`, except that a key left out (or null) fails with `why`."""

    def read_required(r: YamlReader, key: str, value: object) -> T:
        if value is None:
            raise r.fail(key, why)
        return read(r, key, value)

    return read_required


def mapping_of(read: Reading[T], allowed: Callable[[dict[Any, Any]], set[str]] = set) -> Reading[tuple[tuple[str, T],
                                                                                                           ...]]:
    """A mapping of names (the keys `allowed` takes: any, by default) to values each read by `read` under
    `<key>.<name>`, in the file's order; null: none."""

    def read_mapping(r: YamlReader, key: str, value: object) -> tuple[tuple[str, T], ...]:
        raw = r.section(key, allowed(value) if isinstance(value, dict) else set(), value)
        return tuple((str(name), read(r, f"{key}.{name}", v)) for name, v in raw.items())

    return read_mapping
