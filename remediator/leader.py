"""Leadership through a coordination.k8s.io/v1 Lease: only the holder acts.

Replicas that are not leader still accept and record webhooks. The Lease also keeps the one piece
of fleet state that is not per node: when each pool's circuit breaker last tripped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediator.nodestate import fmt_time, parse_time

log = logging.getLogger("gpuhealth.remediator")
BREAKER_ANNOTATION = "gpuhealth.io/breaker-trips"


def _lease(body: dict[str, Any]) -> client.V1Lease:
    lease = client.V1Lease.from_dict(body)
    assert lease is not None
    return lease


class LeaderElector:
    def __init__(self, coordination: client.CoordinationV1Api, namespace: str, name: str, identity: str,
                 duration: timedelta, clock: Callable[[], datetime], timeout: float = 10.0) -> None:
        self.api, self.namespace, self.name, self.identity = coordination, namespace, name, identity
        self.duration, self.clock, self.timeout = duration, clock, timeout
        self.lease: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any] | None:
        try:
            resp: Any = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False,
                                                  _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        lease: dict[str, Any] = json.loads(resp.data)
        return lease

    def try_acquire(self) -> bool:
        """Take or renew the Lease; False when another live holder has it (or on any error)."""
        now = self.clock()
        try:
            current = self._read()
            spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration.total_seconds()),
                    "renewTime": fmt_time(now)}
            if current is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": {**spec, "acquireTime": fmt_time(now), "leaseTransitions": 0}}
                self.lease = json.loads(cast(Any, self.api.create_namespaced_lease(
                    self.namespace, _lease(body), _preload_content=False,
                    _request_timeout=self.timeout)).data)
                log.info("leader: acquired lease %s/%s as %s", self.namespace, self.name, self.identity)
                return True
            held = current.get("spec") or {}
            holder = held.get("holderIdentity")
            renew = held.get("renewTime")
            expired = renew is None or now - parse_time(renew) >= timedelta(
                seconds=held.get("leaseDurationSeconds") or 15)
            if holder != self.identity and not expired:
                self.lease = None
                return False
            new_spec = {**held, **spec}
            if holder != self.identity:
                new_spec["acquireTime"] = fmt_time(now)
                new_spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
                log.info("leader: took over lease from %s (expired)", holder)
            body = {**current, "spec": new_spec}
            self.lease = json.loads(cast(Any, self.api.replace_namespaced_lease(
                self.name, self.namespace, _lease(body), _preload_content=False,
                _request_timeout=self.timeout)).data)
            return True
        except ApiException as exc:
            log.warning("leader: lease %s/%s: HTTP %s %s", self.namespace, self.name, exc.status, exc.reason)
        except Exception as exc:
            log.warning("leader: lease %s/%s: %s", self.namespace, self.name, exc)
        self.lease = None
        return False

    def breaker_trips(self) -> dict[str, str]:
        raw = ((self.lease or {}).get("metadata", {}).get("annotations") or {}).get(BREAKER_ANNOTATION)
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            value = {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def save_breaker_trips(self, trips: dict[str, str]) -> None:
        """Kept on the Lease (only the holder writes it): a restarted leader knows the breaker is open."""
        if self.lease is None:
            return
        body = dict(self.lease)
        meta = dict(body.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), BREAKER_ANNOTATION: json.dumps(trips, sort_keys=True)}
        body["metadata"] = meta
        self.lease = json.loads(cast(Any, self.api.replace_namespaced_lease(
            self.name, self.namespace, _lease(body), _preload_content=False,
            _request_timeout=self.timeout)).data)
