"""Drain: evict a node's pods through the Eviction API, so PodDisruptionBudgets are respected.

One call is one bounded pass: each pod gets a few eviction attempts with backoff when a PDB says
429 (the sleep is injectable, and may refuse with OutOfTime when the reconcile pass has no time left);
pods still left are retried on the next pass. Pods already terminating are not evicted again: the
drain waits for them to be gone. `guard` runs before every eviction (it raises when this replica
lost its leadership, which ends the pass). The drain rung's
timeout (policy) bounds the whole drain, across passes and restarts, because it is measured from
the start time kept on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediator.cluster import PodRef

log = logging.getLogger("gpuhealth.remediator")


class OutOfTime(Exception):
    """Raised by the sleep function when a backoff would outlast the pass: the pod is left for the next pass."""


@dataclass
class DrainResult:
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # 429: a PDB allows no disruption now
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"evicted {len(self.evicted)}, blocked by PDB {len(self.blocked)}, errors {len(self.errors)}"


def drain_pass(core: client.CoreV1Api, pods: Sequence[PodRef], backoff: Sequence[float],
               sleep: Callable[[float], None], force: bool = False, timeout: float = 10.0,
               guard: Callable[[], None] = lambda: None) -> DrainResult:
    result = DrainResult()
    for pod in pods:
        if pod.terminating:
            continue
        ref = f"{pod.namespace}/{pod.name}"
        for attempt in range(len(backoff) + 1):
            guard()
            try:
                if force:
                    core.delete_namespaced_pod(pod.name, pod.namespace, _request_timeout=timeout)
                else:
                    body = client.V1Eviction.from_dict({"apiVersion": "policy/v1", "kind": "Eviction",
                                                        "metadata": {"name": pod.name, "namespace": pod.namespace}})
                    assert body is not None
                    core.create_namespaced_pod_eviction(pod.name, pod.namespace, body, _request_timeout=timeout)
                result.evicted.append(ref)
                break
            except ApiException as exc:
                if exc.status == 404:  # already gone: that is what we wanted
                    result.evicted.append(ref)
                    break
                if exc.status == 429 and attempt < len(backoff):
                    try:
                        sleep(backoff[attempt])
                    except OutOfTime:
                        result.blocked.append(ref)
                        break
                    continue
                (result.blocked if exc.status == 429 else result.errors).append(ref)
                log.info("eviction of %s: HTTP %s %s", ref, exc.status, exc.reason)
                break
            except Exception as exc:  # timeouts, connection errors: next pass
                result.errors.append(ref)
                log.warning("eviction of %s failed: %s", ref, exc)
                break
    return result
