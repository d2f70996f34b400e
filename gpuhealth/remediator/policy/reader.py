"""A YAML file read with each key's line, and the typed reads every policy key goes through: errors are
PolicyError(file, key, line, reason). The fleet simulator reads its scenario files with it too
(gpuhealth/simulator/scenario.py), and helm/policy_schema.py records its typed reads to write the chart's schema."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from gpuhealth.contract import yaml_source
from gpuhealth.contract.yaml_source import YamlSourceError
from gpuhealth.remediator.policy.quota import Quota


class PolicyError(ValueError):
    def __init__(self, source: str, key: str, line: int | None, reason: str) -> None:
        where = f"{source}: {key}" + (f" (line {line})" if line else "")
        super().__init__(f"{where}: {reason}")
        self.source, self.key, self.line, self.reason = source, key, line, reason


# What parse_duration reads (after stripping whitespace); helm/policy_schema.py gives it to the chart's schema. ASCII
# digits only (Python's \d would take any script's, and float() reads them).
DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# The longest duration any key takes: ten years. No wait of the ladder, a budget or a sweep is longer, and a time this
# far from now stays within what a datetime holds (year 9999): "9999999d" was read, then raised OverflowError in every
# pass that added it to the clock.
MAX_DURATION = timedelta(days=3650)
MAX_DURATION_TEXT = "3650d"
# The largest integer any key takes (a count, bytes, seconds): what a Kubernetes int32 field holds, far above any
# setting, and below what a float, a timedelta or a C long would overflow on
MAX_INTEGER = 2**31 - 1


def parse_duration(text: str) -> timedelta:
    """A duration as the policy (and Prometheus' `for`, `keep_firing_for`, intervals) write it: 30s, 10m, 1.5h, at
    most MAX_DURATION. ValueError if it is not one."""
    match = DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"expected a duration like 30s, 10m, 1h, got {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{text!r} is longer than {MAX_DURATION_TEXT}, the longest duration taken")
    return timedelta(seconds=seconds)


class YamlReader:
    """A YAML document with each key's line (`ladder.reboot.timeout` -> 3); each typed read takes a key's dotted
    path and its value, and answers the value or raises the PolicyError that names the key and its line."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        try:
            read = yaml_source.parse(text)
        except YamlSourceError as exc:
            raise PolicyError(source, exc.key, exc.line, exc.reason) from exc
        self.data: Any = read.data
        self.lines: dict[str, int] = read.lines

    def fail(self, key: str, reason: str) -> PolicyError:
        return PolicyError(self.source, key, self.lines.get(key), reason)

    def section(self, key: str, allowed: set[str], value: Any = None) -> dict[str, Any]:
        data = self.data if not key else value
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise self.fail(key or "<file>", "expected a mapping")
        for k in data:
            if k not in allowed:
                full = f"{key}.{k}" if key else str(k)
                raise self.fail(full, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return data

    def duration(self, key: str, value: Any, optional: bool = False) -> timedelta | None:
        if value is None and optional:
            return None
        if isinstance(value, bool):
            raise self.fail(key, "expected a duration like 30s, 10m, 1h")
        if isinstance(value, int | float) and 0 <= value <= MAX_DURATION.total_seconds():
            return timedelta(seconds=value)
        try:
            return parse_duration(str(value))
        except ValueError:
            null = " or null" if optional else ""
            raise self.fail(key, f"expected a duration like 30s, 10m, 1h{null}, at most {MAX_DURATION_TEXT}, got "
                            f"{_shown(value)}") from None

    def quota(self, key: str, value: Any) -> Quota:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INTEGER:
            return Quota(count=value)
        text = str(value).strip()
        if text.endswith("%"):
            try:
                pct = float(text[:-1])
            except ValueError:
                pct = -1
            if 0 < pct <= 100:
                return Quota(percent=pct)
        at_most = f" at most {MAX_INTEGER}" if isinstance(value, int) and value > MAX_INTEGER else ""
        raise self.fail(key, f"expected a node count (0 or more{at_most}) or a percentage like \"10%\", got "
                        f"{_shown(value)}")

    def integer(self, key: str, value: Any, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {_shown(value)}")
        if value > MAX_INTEGER:
            raise self.fail(key, f"expected an integer at most {MAX_INTEGER}, got {_shown(value)}")
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value

    def string(self, key: str, value: Any, choices: tuple[str, ...] = (), optional: bool = False) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def percent(self, key: str, value: Any) -> float:
        text = str(value).strip()
        try:
            pct = float(text[:-1]) if text.endswith("%") else -1.0
        except ValueError:
            pct = -1.0
        if not 0 < pct <= 100:
            raise self.fail(key, f"expected a percentage like \"30%\", got {value!r}")
        return pct


def _shown(value: Any) -> str:
    """A value as an error quotes it: cut short, so that a 1,000-digit number does not make a 1,000-character error."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
