"""Karpenter's pod-level karpenter.sh/do-not-disrupt, read as Karpenter reads it, so gpuhealth's drain leaves the pods
Karpenter's own drain would leave (policy drain.honor_pod_do_not_disrupt).

kubernetes-sigs/karpenter pkg/utils/pod/scheduling.go, IsDoNotDisruptActive: "true" protects for good; a positive Go
duration ("30m", "1h30m") protects until that long after the pod started (status.startTime), and a pod not yet started
is protected; any other value is ignored (as if the annotation were not there). Karpenter's drain does not evict a
protected pod and waits for it (IsEvictable, IsDrainable); only its terminationGracePeriod ends the wait.

"Any other value" includes a duration Go cannot hold: Karpenter reads the value with time.ParseDuration
(parseDoNotDisrupt), which refuses one longer than the largest time.Duration, 2^63-1 ns (2562047h47m16.854775807s), with
"time: invalid duration"; the error makes IsDoNotDisruptActive return false. So "100000000000h" protects nothing, and
a tenant's value is read here in integer nanoseconds with Go's bounds: no value a pod can carry makes the read raise.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from gpuhealth.remediator.decide.nodestate import DO_NOT_DISRUPT_ANNOTATION

POD_ANNOTATION = DO_NOT_DISRUPT_ANNOTATION  # the same key on a pod as on a Node

# Go's time.Duration: an int64 of nanoseconds; time.ParseDuration refuses a value past its largest
MAX_GO_DURATION_NS = (1 << 63) - 1
# Go's leadingInt refuses a whole number past 1<<63 whatever its unit: more significant digits than this never fit
_MAX_WHOLE_DIGITS = 19
# Go's leadingFraction reads every digit but keeps only those that fit: nanoseconds of an hour need 13
_FRACTION_DIGITS = 20
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "m": 60_000_000_000, "h": 3_600_000_000_000}
# time.ParseDuration's grammar: an optional sign, then one or more decimal numbers each with a unit. ASCII digits only
# (Go's), where Python's \d would also take other scripts' digits.
_GO_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+")


def go_duration_ns(text: str) -> int | None:
    """A duration in nanoseconds as Go's time.ParseDuration reads it, or None where Go refuses it: not a duration, or
    past MAX_GO_DURATION_NS either way ("0" reads as zero)."""
    if text in ("0", "+0", "-0"):
        return 0
    if not _GO_DURATION.fullmatch(text):
        return None
    total = 0
    for whole, fraction, unit in _GO_TERM.findall(text):
        digits = whole.lstrip("0")
        if len(digits) > _MAX_WHOLE_DIGITS:
            return None
        kept = fraction[:_FRACTION_DIGITS]
        total += int(digits or "0") * _UNIT_NS[unit] + int(kept or "0") * _UNIT_NS[unit] // 10 ** len(kept)
        if total > MAX_GO_DURATION_NS + 1:  # Go allows exactly 1<<63 only as a negative duration
            return None
    if not text.startswith("-") and total > MAX_GO_DURATION_NS:
        return None
    return -total if text.startswith("-") else total


def go_duration(text: str) -> timedelta | None:
    """A duration as Go's time.ParseDuration reads it (to the microsecond), or None when Go refuses it."""
    nanoseconds = go_duration_ns(text)
    return None if nanoseconds is None else timedelta(microseconds=nanoseconds // 1000)


def protects(value: str | None, started: datetime | None, now: datetime) -> bool:
    """Whether an annotation value keeps the pod from being evicted now."""
    if value is None:
        return False
    if value == "true":
        return True
    duration = go_duration_ns(value)
    if duration is None or duration <= 0:
        return False  # Karpenter ignores a value it cannot read (and says so in an Event on the pod)
    if started is None:
        return True
    return (now - started) // timedelta(microseconds=1) * 1000 < duration
