"""Karpenter's pod-level karpenter.sh/do-not-disrupt, read as Karpenter reads it, so gpuhealth's drain leaves the pods
Karpenter's own drain would leave (policy drain.honor_pod_do_not_disrupt).

kubernetes-sigs/karpenter pkg/utils/pod/scheduling.go, IsDoNotDisruptActive: "true" protects for good; a positive Go
duration ("30m", "1h30m") protects until that long after the pod started (status.startTime), and a pod not yet started
is protected; any other value is ignored (as if the annotation were not there). Karpenter's drain does not evict a
protected pod and waits for it (IsEvictable, IsDrainable); only its terminationGracePeriod ends the wait.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from remediator.decide.nodestate import DO_NOT_DISRUPT_ANNOTATION

POD_ANNOTATION = DO_NOT_DISRUPT_ANNOTATION  # the same key on a pod as on a Node

# Go's time.ParseDuration: an optional sign, then one or more decimal numbers each with a unit
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$")


def go_duration(text: str) -> timedelta | None:
    """A duration as Go's time.ParseDuration reads it, or None when it is not one ("0" reads as zero)."""
    if text in ("0", "+0", "-0"):
        return timedelta(0)
    if not _GO_DURATION.match(text):
        return None
    seconds = sum(float(number) * _GO_UNITS[unit] for number, unit in _GO_TERM.findall(text))
    return timedelta(seconds=-seconds if text.startswith("-") else seconds)


def protects(value: str | None, started: datetime | None, now: datetime) -> bool:
    """Whether an annotation value keeps the pod from being evicted now."""
    if value is None:
        return False
    if value == "true":
        return True
    duration = go_duration(value)
    if duration is None or duration <= timedelta(0):
        return False  # Karpenter ignores a value it cannot read (and says so in an Event on the pod)
    return started is None or now - started < duration
