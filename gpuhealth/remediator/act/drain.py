"""Drain: evict a node's pods through the Eviction API, so PodDisruptionBudgets are respected.

One call is one bounded pass: each pod gets a few eviction attempts with backoff when a PDB says
429 (the sleep is injectable, and may refuse with OutOfTime when the reconcile pass has no time left);
pods still left are retried on the next pass. Pods already terminating are not evicted again: the
drain waits for them to be gone, and for the pods `spare` keeps (an active karpenter.sh/do-not-disrupt, which
Karpenter's own drain does not evict either; decide/do_not_disrupt.py). `guard` runs before every eviction (it
raises when this replica lost its leadership, which ends the pass). `stop` runs before every round after the first
(they follow a backoff sleep, long enough for a person to act): a reason from it (a hold set on the node meanwhile,
`held_now`) ends the pass with no further eviction. The drain rung's
timeout (policy) bounds the whole drain, across passes and restarts, because it is measured from
the start time kept on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuhealth.remediator.clients.errors import NotFound, Rejected
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.nodestate import DO_NOT_DISRUPT_ANNOTATION, hold_of
from gpuhealth.remediator.decide.views import PodRef

log = logging.getLogger("gpuhealth.remediator")


class OutOfTime(Exception):
    """Raised by the sleep function when a backoff would outlast the pass: the pod is left for the next pass."""


@dataclass
class DrainResult:
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # 429: a PDB allows no disruption now
    errors: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)  # not evicted: karpenter.sh/do-not-disrupt (the drain waits)
    stopped: str = ""  # why the pass ended before a later round (a hold set meanwhile): nothing evicted after it

    def summary(self) -> str:
        text = f"evicted {len(self.evicted)}, blocked by PDB {len(self.blocked)}, errors {len(self.errors)}"
        text += f", not evicted ({DO_NOT_DISRUPT_ANNOTATION}) {', '.join(self.spared)}" if self.spared else ""
        return text + (f"; stopped before the next eviction round: {self.stopped}" if self.stopped else "")


def drain_pass(kube: Kube, pods: Sequence[PodRef], backoff: Sequence[float], sleep: Callable[[float], None],
               force: bool = False, guard: Callable[[], None] = lambda: None,
               spare: Callable[[PodRef], bool] | None = None,
               stop: Callable[[], str] = lambda: "") -> DrainResult:
    """Evict (or, forced, delete) the pods in rounds: every pod once, then those a PodDisruptionBudget
    refused (429) again after each backoff step. The sleeping is per node, not per pod, so a pass over
    a node full of PDB-protected pods stays short. Pods `spare` picks are left alone (and named)."""
    result = DrainResult()
    pending = [pod for pod in pods if not pod.terminating]
    if spare is not None:
        result.spared = [f"{pod.namespace}/{pod.name}" for pod in pending if spare(pod)]
        pending = [pod for pod in pending if not spare(pod)]
    for attempt in range(len(backoff) + 1):
        if attempt and (why := stop()):
            result.stopped = why
            log.info("drain pass stopped before eviction round %d (%d pod(s) left): %s", attempt + 1, len(pending),
                     why)
            break
        refused: list[PodRef] = []
        for pod in pending:
            guard()
            outcome = _evict(kube, pod, force)
            if outcome == "refused":
                refused.append(pod)
            else:
                (result.evicted if outcome == "evicted" else result.errors).append(f"{pod.namespace}/{pod.name}")
        pending = refused
        if not pending or attempt == len(backoff):
            break
        try:
            sleep(backoff[attempt])
        except OutOfTime:
            break
    for pod in pending:
        result.blocked.append(f"{pod.namespace}/{pod.name}")
        log.info("eviction of %s/%s: HTTP 429 Too Many Requests (a PodDisruptionBudget)", pod.namespace, pod.name)
    return result


def held_now(kube: Kube, node: str) -> str:
    """Why a drain pass must evict no more on `node` ("" when nothing says so): a hold a person set since the pass
    read the Node. Read fresh from the API server, not from the watch cache: the cache lags by however long its watch
    takes to deliver (unbounded under load), and a hold set a moment ago is exactly what this is for; one GET per round
    is cheap beside an eviction. A Node that cannot be read stops the pass too (the next pass decides again)."""
    try:
        annotations = api_objects.annotations(kube.get_node(node))
    except Exception as exc:
        return f"the node could not be read to check for a hold ({exc})"
    hold = hold_of(annotations)
    if hold is None:
        return ""
    who = f" by {hold['by']}" if hold.get("by") else ""
    return f"held{who}: {hold.get('reason', '')}".rstrip(": ")


def _evict(kube: Kube, pod: PodRef, force: bool) -> str:
    """evicted | refused (429) | error"""
    try:
        kube.evict(pod.namespace, pod.name, force)
        return "evicted"
    except NotFound:  # already gone: that is what we wanted
        return "evicted"
    except Rejected as exc:
        if exc.throttled:
            return "refused"
        log.info("eviction of %s/%s: %s", pod.namespace, pod.name, exc)
        return "error"
    except Exception as exc:  # forbidden, the API's trouble, no answer, a call the client refused: this pod, next pass
        log.warning("eviction of %s/%s failed: %s", pod.namespace, pod.name, exc)
        return "error"
