"""The restart-loop guard's count: pure. The same workload failing N times in a row with the same app
cause and no progress is in a restart loop.

The count lives on the owning Job (annotation `gpuhealth.io/restart-loop`), so a restarted or newly
elected remediator carries on counting. What "in a row" means:
- an app failure with the same cause (reason, and exit code where there is one) as the last one, with
  no progress between them, adds one; any other app cause starts again at 1;
- progress is the Job's succeeded count growing (a completion, or an index of an indexed Job);
- infra and unknown failures neither add nor break the run: they are not the job's doing;
- a Job a person resumed after gpuhealth suspended it starts again at 0 (they have looked at it);
- the same pod counted twice (a re-delivered watch event, a second pass) changes nothing;
- one attempt is one failure: a pod that started before the last counted failure ended is a sibling
  of that attempt (the other ranks of a parallel or indexed Job failing on the same bad flag), not a
  restart, so it adds nothing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime

from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawPod
from gpuhealth.remediator.decide.nodestate import fmt_time, parse_time

LOOP_ANNOTATION = "gpuhealth.io/restart-loop"
KEEP_PODS = 5  # pods remembered (idempotency, and what on-call reads)


@dataclass(frozen=True)
class LoopState:
    cause: str = ""
    count: int = 0
    succeeded: int = 0  # the Job's status.succeeded at the last counted failure
    pods: tuple[str, ...] = ()
    suspended: bool = False  # gpuhealth suspended the Job for this loop
    last_failed_at: str = ""  # when the last counted failure ended (RFC 3339)

    def to_json(self) -> str:
        data = asdict(self)
        data["pods"] = list(self.pods)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> LoopState:
        """A missing or unreadable annotation starts afresh (it only ever delays a suspension)."""
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        try:
            return cls(cause=str(data.get("cause") or ""), count=int(data.get("count") or 0),
                       succeeded=int(data.get("succeeded") or 0), pods=tuple(str(p) for p in data.get("pods") or ()),
                       suspended=bool(data.get("suspended")), last_failed_at=str(data.get("last_failed_at") or ""))
        except (TypeError, ValueError):
            return cls()


def count_failure(state: LoopState, pod: str, cls: str, cause: str, succeeded: int,
                  suspended_now: bool, started: datetime | None = None, failed_at: datetime | None = None) -> LoopState:
    """The state after one classified failure of the workload (started/failed_at: the pod's, when known)."""
    if pod in state.pods:
        return state
    if state.suspended and not suspended_now:  # a person resumed the Job
        state = LoopState(succeeded=succeeded)
    if cls != "app":
        return state
    pods = (*state.pods, pod)[-KEEP_PODS:]
    last = parse_time(state.last_failed_at) if state.last_failed_at else None
    if state.count and state.cause == cause and started is not None and last is not None and started < last:
        return replace(state, pods=pods)  # a sibling of the attempt already counted
    ended = fmt_time(failed_at) if failed_at is not None else ""
    if state.count and state.cause == cause and succeeded <= state.succeeded:
        return replace(state, count=state.count + 1, succeeded=succeeded, pods=pods, last_failed_at=ended)
    return LoopState(cause=cause, count=1, succeeded=succeeded, pods=pods, suspended=False, last_failed_at=ended)


def in_loop(state: LoopState, threshold: int) -> bool:
    return state.count >= threshold


def job_of(pod: RawPod) -> str | None:
    """The name of the pod's owning batch/v1 Job, if any."""
    for ref in api_objects.owners(pod):
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return str(ref.get("name"))
    return None
