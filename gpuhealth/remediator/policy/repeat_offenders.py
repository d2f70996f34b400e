"""The `repeat_offenders:` section: when a node's past hardware episodes (its gpuhealth.io/history annotation,
decide/history.py) make the ladder retire it instead of repairing it again (decide/offenders.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.policy.keys import setting
from gpuhealth.remediator.policy.readings import boolean, checked, duration, integer


@dataclass(frozen=True)
class RepeatOffenderSettings:
    """The `repeat_offenders:` section (docs/remediation.md, Repeat offenders)."""

    enabled: bool = field(default=True, metadata=setting(
        boolean, "Whether a node's past hardware episodes can escalate its current one to replace (the history is "
        "kept either way)."))
    episodes: int = field(default=3, metadata=setting(
        integer(2), "This many hardware episodes started within `window`, the current one counted (3: the third "
        "in a week), escalate the current one to replace."))
    window: timedelta = field(default=timedelta(days=7), metadata=setting(
        checked(duration, lambda d: d > timedelta(0), "expected a duration above 0"),
        "How far back episodes count; the history keeps no episode that started longer ago than this."))
    same_gpu_after_reset: bool = field(default=True, metadata=setting(
        boolean, "A GPU an earlier episode within `window` reset (reset_gpu, or a reboot) failing again escalates "
        "the current episode to replace, whatever the count."))
