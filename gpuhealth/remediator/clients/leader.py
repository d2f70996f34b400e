"""Leadership through a coordination.k8s.io/v1 Lease: only the holder acts.

Replicas that are not leader still accept and record webhooks. The Lease also keeps the one piece
of fleet state that is not per node: when each pool's circuit breaker last tripped.

As client-go's leader election does, expiry is measured on this replica's own clock: a candidate
takes over only when the Lease record has not changed for a whole lease duration since it last saw
it change (the holder's renewTime is never compared with our clock, so clock skew cannot hand the
Lease over early). The holder renews every third of the duration (`renew_loop`, a background
thread, independent of how long a pass takes) and counts itself leader only until two thirds of the
duration after its last successful renewal began; the executor asks `is_leader()` before every write.
Renewal shows that this replica is alive, not that its loop is: a pass that has not ended a renewal period past its
deadline (`pass_due`, stuck in a call that does not return) makes the renew loop let the Lease go (`release`), so
that a standby takes over at its next try rather than never.

`gpuhealth-remediator cleanup` stops the remediators through the same Lease (`take_over`): it takes it, whoever
holds it, marked with the annotation gpuhealth.io/cleanup, and renews it while it works. Every replica honours the
holder (the leader stops within the renew deadline), and a replica that sees another holder's Lease carrying the mark
also stops recording alerts (`stopped_by`). At the end the cleanup leaves the Lease held for a while (`hold_for`), so
that a remediator whose pod is still going away (`helm uninstall`) never acts again; once that lapses the first
replica to take the Lease over drops the mark.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.errors import Conflict, api_call
from gpuhealth.remediator.clients.kube import read_or_none
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawLease, RawLeaseSpec
from gpuhealth.remediator.decide.nodestate import fmt_time

log = logging.getLogger("gpuhealth.remediator")
BREAKER_ANNOTATION = "gpuhealth.io/breaker-trips"
CLEANUP_ANNOTATION = "gpuhealth.io/cleanup"  # on the Lease while `gpuhealth-remediator cleanup` holds it: who, when
CLEANUP_ATTEMPTS = 3  # a Lease that changed between the read and the write (409) is read again, this many times


def leader_identity(env: dict[str, str] | None = None) -> str:
    """Unique per process: processes of one pod share POD_NAME, and a restarted process must not
    pass for the one before it (which may still be mid-pass)."""
    env = dict(os.environ if env is None else env)
    base = env.get("POD_NAME") or socket.gethostname()
    return f"{base}_{os.getpid()}_{uuid.uuid4().hex[:12]}"


def breaker_trips_of(lease: RawLease | None) -> dict[str, str]:
    """Pool -> when its breaker last tripped, as kept on the Lease (also read by `plan --lease`)."""
    raw = api_objects.annotations(lease).get(BREAKER_ANNOTATION) if lease is not None else None
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        value = {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def cleanup_mark(lease: RawLease | None) -> str | None:
    """What the cleanup wrote on the Lease when it took it (None: no cleanup has it)."""
    return api_objects.annotations(lease).get(CLEANUP_ANNOTATION) if lease is not None else None


def _annotated(lease: RawLease, annotations: dict[str, str]) -> RawLease:
    """The Lease with `annotations` in place of its own."""
    return {**lease, "metadata": {**api_objects.meta(lease), "annotations": annotations}}


def _without_cleanup_mark(lease: RawLease) -> RawLease:
    return _annotated(lease, {k: v for k, v in api_objects.annotations(lease).items() if k != CLEANUP_ANNOTATION})


@dataclass(frozen=True)
class LeaseTaken:
    """The Lease as the cleanup found it: who held it (None: nobody), and how long that holder may still count
    itself leader (its lease duration; zero when nobody held it or another cleanup did)."""

    previous: str | None
    lasts: timedelta
    by_cleanup: bool = False


def _lease(body: RawLease) -> client.V1Lease:
    lease = client.V1Lease.from_dict({**body})
    assert lease is not None
    return lease


class LeaderElector:
    takes_part = True  # a dry run's Spectator takes none

    def __init__(self, coordination: client.CoordinationV1Api, namespace: str, name: str, identity: str,
                 duration: timedelta, clock: Callable[[], datetime], timeout: float = 10.0) -> None:
        self.api, self.namespace, self.name, self.identity = coordination, namespace, name, identity
        self.duration, self.clock, self.timeout = duration, clock, timeout
        self.renew_deadline = duration * 2 / 3
        self.lease: RawLease | None = None
        self._lock = threading.RLock()
        self._observed: tuple[str, datetime] | None = None  # (resourceVersion, local time first seen)
        self._leader_until: datetime | None = None
        self.stopped_by: str | None = None  # a cleanup holds the Lease (its mark): no replica records alerts
        self.pass_due: datetime | None = None  # when the pass running now must end (set by the loop; None: none runs)
        self.on_release: Callable[[], None] = lambda: None  # counted: the Lease let go because a pass overran

    # --- reading ---------------------------------------------------------------------------
    def _read(self) -> RawLease | None:
        lease: RawLease | None = read_or_none(self.api.read_namespaced_lease, self.name, self.namespace,
                                              timeout=self.timeout)
        return lease

    def _create(self, body: RawLease) -> RawLease:
        created: RawLease = json.loads(cast(Any, self.api.create_namespaced_lease(
            self.namespace, _lease(body), _preload_content=False, _request_timeout=self.timeout)).data)
        return created

    def _replace(self, body: RawLease) -> RawLease:
        replaced: RawLease = json.loads(cast(Any, self.api.replace_namespaced_lease(
            self.name, self.namespace, _lease(body), _preload_content=False, _request_timeout=self.timeout)).data)
        return replaced

    def peek(self) -> RawLease | None:
        """The Lease as it is, without taking part (dry run): for the breaker state."""
        try:
            return self._read()
        except Exception as exc:
            log.warning("leader: reading lease %s/%s: %s", self.namespace, self.name, exc)
            return None

    def _observe(self, lease: RawLease, now: datetime) -> datetime:
        rv = str((lease.get("metadata") or {}).get("resourceVersion"))
        if self._observed is None or self._observed[0] != rv:
            self._observed = (rv, now)
        return self._observed[1]

    def is_leader(self) -> bool:
        until = self._leader_until
        return until is not None and self.clock() < until

    # --- taking and renewing ---------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take or renew the Lease; False when another live holder has it (or on any error)."""
        with self._lock:
            now = self.clock()
            try:
                current = self._read()
                spec: RawLeaseSpec = {"holderIdentity": self.identity, "renewTime": fmt_time(now),
                                      "leaseDurationSeconds": int(self.duration.total_seconds())}
                if current is None:
                    body: RawLease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                      "metadata": {"name": self.name, "namespace": self.namespace},
                                      "spec": {**spec, "acquireTime": fmt_time(now), "leaseTransitions": 0}}
                    self._won(self._create(body), now)
                    log.info("leader: acquired lease %s/%s as %s", self.namespace, self.name, self.identity)
                    return True
                held = current.get("spec") or {}
                holder = held.get("holderIdentity")
                seen_since = self._observe(current, now)
                expired = now - seen_since >= timedelta(seconds=held.get("leaseDurationSeconds") or 15)
                if holder and holder != self.identity and not expired:
                    if cleanup_mark(current) and not self.stopped_by:
                        log.warning("leader: gpuhealth-remediator cleanup holds lease %s/%s (%s): acting and "
                                    "recording alerts stop", self.namespace, self.name, cleanup_mark(current))
                    self.stopped_by = cleanup_mark(current)
                    self._lost()
                    return False
                self.stopped_by = None
                new_spec: RawLeaseSpec = {**held, **spec}
                if holder != self.identity:
                    new_spec["acquireTime"] = fmt_time(now)
                    new_spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
                    log.info("leader: took over lease from %s", f"{holder} (unchanged for a lease duration)" if holder
                             else "nobody (released, or never held)")
                    current = _without_cleanup_mark(current)  # a cleanup's hold is over: its mark goes with it
                body = {**current, "spec": new_spec}
                self._won(self._replace(body), now)
                return True
            except ApiException as exc:
                log.warning("leader: lease %s/%s: HTTP %s %s", self.namespace, self.name, exc.status, exc.reason)
            except Exception as exc:
                log.warning("leader: lease %s/%s: %s", self.namespace, self.name, exc)
            return False  # a failed renewal: still leader until the renew deadline, as far as is_leader says

    # --- gpuhealth-remediator cleanup ---------------------------------------------------------
    def take_over(self, mark: str) -> LeaseTaken:
        """Take the Lease whoever holds it, marked with gpuhealth.io/cleanup (`mark`: who, when), as
        `gpuhealth-remediator cleanup` does to stop the remediators. Raises the API's errors (typed); renew it with
        renew_loop while the cleanup runs."""
        for _ in range(CLEANUP_ATTEMPTS):
            with self._lock:
                now = self.clock()
                with api_call():
                    current = self._read()
                spec: RawLeaseSpec = {"holderIdentity": self.identity, "renewTime": fmt_time(now),
                                      "leaseDurationSeconds": int(self.duration.total_seconds()),
                                      "acquireTime": fmt_time(now)}
                try:
                    if current is None:
                        body: RawLease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                          "metadata": {"name": self.name, "namespace": self.namespace,
                                                       "annotations": {CLEANUP_ANNOTATION: mark}},
                                          "spec": {**spec, "leaseTransitions": 0}}
                        with api_call():
                            self._won(self._create(body), now)
                        return LeaseTaken(None, timedelta(0))
                    held = current.get("spec") or {}
                    previous = held.get("holderIdentity") or None
                    by_cleanup = cleanup_mark(current) is not None
                    marked = _annotated(current, {**api_objects.annotations(current), CLEANUP_ANNOTATION: mark})
                    transitions = int(held.get("leaseTransitions") or 0) + (previous != self.identity)
                    body = {**marked, "spec": {**held, **spec, "leaseTransitions": transitions}}
                    with api_call():
                        self._won(self._replace(body), now)
                except Conflict:
                    continue  # a renewal (or another cleanup) got there first: read it again
                live = previous is not None and previous != self.identity and not by_cleanup
                lasts = timedelta(seconds=int(held.get("leaseDurationSeconds") or 15)) if live else timedelta(0)
                return LeaseTaken(previous, lasts, by_cleanup)
        raise Conflict(409, f"lease {self.namespace}/{self.name} kept changing ({CLEANUP_ATTEMPTS} tries)")

    def hold_for(self, duration: timedelta) -> None:
        """The cleanup's last write: the Lease stays held (and marked) for `duration` on every replica's clock."""
        with self._lock:
            if self.lease is None:
                return
            now = self.clock()
            body: RawLease = {**self.lease, "spec": {**(self.lease.get("spec") or {}), "renewTime": fmt_time(now),
                                                     "leaseDurationSeconds": max(1, int(duration.total_seconds()))}}
            with api_call():
                self.lease = self._replace(body)

    def _won(self, lease: RawLease, started: datetime) -> None:
        self.lease = lease
        self._observed = (str(api_objects.resource_version(lease)), started)
        self._leader_until = started + self.renew_deadline

    def _lost(self) -> None:
        self.lease = None
        self._leader_until = None

    def renew_loop(self, stop: threading.Event) -> None:
        """Background thread: renew (or try to take) the Lease every third of its duration; neither while a pass
        has run a period past its deadline, which lets the Lease go."""
        period = self.duration.total_seconds() / 3
        while not stop.is_set():
            due = self.pass_due
            if due is None or self.clock() < due + timedelta(seconds=period):
                self.try_acquire()
            elif self.lease is not None:
                self.release(f"the pass due at {fmt_time(due)} has not ended")
            stop.wait(period)

    def release(self, why: str) -> bool:
        """Let the Lease go now, as client-go's ReleaseOnCancel does (no holder, a one-second duration): a standby
        takes it at its next try. This replica stops counting itself leader first. False when the Lease was no
        longer ours to give (another holder, or the API refused)."""
        with self._lock:
            lease, self.lease, self._leader_until = self.lease, None, None
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            spec: RawLeaseSpec = {**(lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                                  "renewTime": fmt_time(self.clock())}
            try:
                self.api.replace_namespaced_lease(self.name, self.namespace, _lease({**lease, "spec": spec}),
                                                  _preload_content=False, _request_timeout=self.timeout)
            except Exception as exc:  # a 409: it changed (taken over) meanwhile; else it lapses a duration later
                log.warning("leader: releasing lease %s/%s: %s", self.namespace, self.name, exc)
                return False
            log.warning("leader: released lease %s/%s (%s): a standby takes over", self.namespace, self.name, why)
            audit(AuditKind.LEASE_RELEASED, identity=self.identity, reason=why)
            self.on_release()
            return True

    # --- the breaker state on the Lease ----------------------------------------------------
    def breaker_trips(self) -> dict[str, str]:
        return breaker_trips_of(self.lease)

    def save_breaker_trips(self, trips: dict[str, str]) -> None:
        """Kept on the Lease (only the holder writes it): a restarted leader knows the breaker is open."""
        with self._lock:
            if self.lease is None or not self.is_leader():
                return
            self.lease = self._replace(_annotated(self.lease, {**api_objects.annotations(self.lease),
                                                               BREAKER_ANNOTATION: json.dumps(trips, sort_keys=True)}))
            self._observed = (str(api_objects.resource_version(self.lease)), self.clock())


class Elector(Protocol):
    """What the loop asks of the Lease: a LeaderElector, or a dry run's Spectator."""

    renew_deadline: timedelta
    takes_part: bool
    stopped_by: str | None
    pass_due: datetime | None

    def try_acquire(self) -> bool: ...
    def is_leader(self) -> bool: ...
    def renew_loop(self, stop: threading.Event) -> None: ...
    def breaker_trips(self) -> dict[str, str]: ...
    def save_breaker_trips(self, trips: dict[str, str]) -> None: ...


class Spectator:
    """A dry run's place in the election: it takes no part (no Lease written, never counted as leader in the
    metrics), acts as if it led (it decides every pass), and reads the breaker state off the Lease."""

    takes_part = False
    stopped_by: str | None = None  # a dry run records into its own overlay: nothing to stop
    pass_due: datetime | None = None  # no Lease to let go

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.renew_deadline = elector.renew_deadline

    def try_acquire(self) -> bool:
        return True

    def is_leader(self) -> bool:
        return True

    def renew_loop(self, stop: threading.Event) -> None:
        return None

    def breaker_trips(self) -> dict[str, str]:
        return breaker_trips_of(self.elector.peek())

    def save_breaker_trips(self, trips: dict[str, str]) -> None:
        return None
