"""The reasons of the Events the remediator writes on Nodes, in one place, and what a pass observed about a rung.

An action that starts writes its action's reason (Cordoned, Draining, GPUReset, Reboot, Replace,
ReturnedToService) and `<reason>Failed` when it fails; a rung's outcome is a Note (GPUResetSucceeded,
RebootSucceeded, <Rung>TimedOut, ...). A Note carries what the Event and the metrics need as fields, so no
caller has to read them back out of the reason's text. The workload classifier reads the reasons of past
Events back into rungs with `rung_of_reason`.
"""

from __future__ import annotations

from dataclasses import dataclass

# The rung's name in its outcome reasons (GPUResetSucceeded, DrainTimedOut, ...)
RUNG_REASON = {"drain": "Drain", "reset_gpu": "GPUReset", "reboot": "Reboot", "replace": "Replace"}
# The Event an action writes when it starts
ACTION_REASON = {"cordon": "Cordoned", "drain": "Draining", "reset_gpu": "GPUReset", "reboot": "Reboot",
                 "replace": "Replace", "uncordon": "ReturnedToService"}


def action_reason(action: str) -> str:
    return ACTION_REASON.get(action, action.title())


def action_failed_reason(action: str) -> str:
    return f"{action_reason(action)}Failed"


@dataclass(frozen=True)
class Note:
    """What a pass observed about a node (a rung finished, failed or timed out; an episode went quiet): an
    Event and an audit line. `timed_out`: the rung whose timeout passed (counted in rung_timeouts)."""

    reason: str
    message: str
    warning: bool = False
    timed_out: str | None = None

    @classmethod
    def timeout(cls, rung: str, message: str) -> Note:
        return cls(f"{RUNG_REASON.get(rung, rung)}TimedOut", message, warning=True, timed_out=rung)


# Longest first: "Draining" (drain started) before "Drain" (DrainFinished, DrainTimedOut).
_PREFIXES = sorted({**{r: a for a, r in ACTION_REASON.items() if a in RUNG_REASON},
                    **{r: a for a, r in RUNG_REASON.items()}}.items(), key=lambda kv: -len(kv[0]))


def rung_of_reason(reason: str) -> str | None:
    """The rung an Event of ours is about, from its reason (None: not a rung's, e.g. Cordoned)."""
    return next((rung for prefix, rung in _PREFIXES if reason.startswith(prefix)), None)
