"""Reading Alertmanager's API v2: the alerts active now (for the sync and the silence checks).

One client for every call the remediator makes to Alertmanager. An HA Alertmanager is a list of
members. They gossip silences and the notification log, not alerts: each holds the alerts the
Prometheus servers sent it, so one member may lack an alert another has (Prometheus could not reach
it). So `alerts_everywhere` asks every member at once and the sync uses what they say together, while
a silence check (silences are shared) takes the first member that answers, starting from the last one
that did. Authentication (a bearer token read from its file at each call, so a rotated token is picked
up) and TLS (a CA file) are configured once, in the policy.

Every call ends within alertmanager.timeout, whatever the member does (a total deadline: clients/bounded_http.py),
and within the deadline of the pass that makes it (`pass_deadline`); an answer longer than
alertmanager.max_answer_bytes is refused once that much is read, and one that would parse into more than a value per
BYTES_PER_VALUE of those bytes is refused unparsed (clients/bounded_json.py). Each is counted (`on_cut`).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from gpuhealth.remediator.clients import bounded_json
from gpuhealth.remediator.clients.bounded_http import AnswerTooLarge, DeadlinePassed
from gpuhealth.remediator.clients.bounded_http import get as bounded_get
from gpuhealth.remediator.decide.nodestate import parse_time

MAX_ANSWER_BYTES = 8 << 20  # policy alertmanager.max_answer_bytes' default
# What one member's answer may make when parsed: one JSON value per this many bytes of max_answer_bytes (699,050 at
# 8 MiB). A real alert is 17-31 bytes a value (the fewest labels to the chart's); 8 MiB of `{},` is 2.8 million
# empty dicts, ~290 MiB a member (clients/bounded_json.py; docs/benchmarks.md has the figures).
BYTES_PER_VALUE = 12

_pass = threading.local()  # .until: the deadline (time.monotonic()) of the pass this thread runs, if any


@contextmanager
def pass_deadline(seconds: float) -> Iterator[None]:
    """Every call to Alertmanager this thread makes inside ends within `seconds` from now, as well as within its own
    timeout: a pass's deadline bounds its calls (a nested deadline can only be shorter)."""
    outer: float | None = getattr(_pass, "until", None)
    until = time.monotonic() + max(0.0, seconds)
    _pass.until = until if outer is None else min(outer, until)
    try:
        yield
    finally:
        _pass.until = outer


class AlertmanagerUnavailable(Exception):
    """No member gave a usable answer; the message names each member and why."""


@dataclass(frozen=True)
class Answer:
    member: str
    data: Any
    date: datetime | None = None  # the member's own clock (its Date header), when it sent one


class AlertmanagerClient:
    def __init__(self, members: Sequence[str], timeout: float = 5.0, bearer_token_file: str | None = None,
                 ca_file: str | None = None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        if not members:
            raise ValueError("an Alertmanager client needs at least one URL")
        self.members = tuple(m.rstrip("/") for m in members)
        self.timeout, self.bearer_token_file, self.max_answer_bytes = timeout, bearer_token_file, max_answer_bytes
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file is not None else None
        self._preferred = 0  # the member that answered last
        self._lock = threading.Lock()
        self.on_cut: Callable[[str], None] = lambda reason: None  # a call cut short: "deadline" or "too_large"

    def deadline(self) -> float:
        """When a call started now must end (time.monotonic()): its timeout, or the pass's deadline if sooner."""
        own = time.monotonic() + self.timeout
        until: float | None = getattr(_pass, "until", None)
        return own if until is None else min(own, until)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.bearer_token_file:
            try:
                token = Path(self.bearer_token_file).read_text().strip()
            except OSError as exc:
                raise AlertmanagerUnavailable(f"bearer token file {self.bearer_token_file}: {exc.strerror}") from exc
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def get_from(self, member: str, path: str, query: dict[str, str | list[str]] | None = None,
                 deadline: float | None = None) -> Answer:
        """GET path from one member, done by `deadline` (time.monotonic(); None: self.deadline() from now);
        AlertmanagerUnavailable names the member and why."""
        suffix = f"?{urllib.parse.urlencode(query, doseq=True)}" if query else ""
        until = self.deadline() if deadline is None else deadline
        try:
            reply = bounded_get(f"{member}{path}{suffix}", self._headers(), until, self.max_answer_bytes,
                                self._context)
        except DeadlinePassed as exc:
            self.on_cut("deadline")
            raise AlertmanagerUnavailable(f"{member}: {exc}") from exc
        except AnswerTooLarge as exc:
            self.on_cut("too_large")
            raise AlertmanagerUnavailable(f"{member}{path}: {exc} (alertmanager.max_answer_bytes): not read") from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:  # ValueError: a URL with a bad port
            raise AlertmanagerUnavailable(f"{member}: {type(exc).__name__}: {exc}") from exc
        if reply.status != 200:
            raise AlertmanagerUnavailable(f"{member}: HTTP {reply.status} {reply.reason}")
        try:
            data = bounded_json.loads(reply.body, self.max_answer_bytes // BYTES_PER_VALUE)
        except bounded_json.TooManyValues as exc:
            self.on_cut("too_large")
            raise AlertmanagerUnavailable(f"{member}{path}: {exc} (one per {BYTES_PER_VALUE} bytes of "
                                          "alertmanager.max_answer_bytes): not parsed") from exc
        except ValueError as exc:
            raise AlertmanagerUnavailable(f"{member}: {type(exc).__name__}: {exc}") from exc
        date = None
        date_header = reply.headers.get("Date")
        if date_header:
            try:
                date = parsedate_to_datetime(date_header)
            except (TypeError, ValueError):
                date = None
        return Answer(member, data, date)

    def get(self, path: str, query: dict[str, str | list[str]] | None = None) -> Answer:
        """GET path from the first member that answers, starting with the one that answered last."""
        errors = []
        start = self._preferred
        for i in range(len(self.members)):
            index = (start + i) % len(self.members)
            try:
                answer = self.get_from(self.members[index], path, query)
            except AlertmanagerUnavailable as exc:
                errors.append(str(exc))
                continue
            with self._lock:
                self._preferred = index
            return answer
        raise AlertmanagerUnavailable("; ".join(errors))

    @staticmethod
    def _alerts_query(filters: Sequence[str], receiver: str | None) -> dict[str, str | list[str]]:
        query: dict[str, str | list[str]] = {"active": "true", "silenced": "true", "inhibited": "true",
                                             "unprocessed": "true"}
        if filters:
            query["filter"] = list(filters)
        if receiver:
            query["receiver"] = receiver
        return query

    @staticmethod
    def _check_alerts(answer: Answer) -> Answer:
        if not isinstance(answer.data, list) or not all(isinstance(a, dict) for a in answer.data):
            raise AlertmanagerUnavailable(f"{answer.member}: /api/v2/alerts: expected a list of alerts")
        return answer

    def alerts(self, filters: Sequence[str] = (), receiver: str | None = None) -> Answer:
        """The active alerts (silenced and inhibited included, each with its status) from one member, as
        /api/v2/alerts lists them: resolved alerts are never listed."""
        return self._check_alerts(self.get("/api/v2/alerts", self._alerts_query(filters, receiver)))

    def alerts_everywhere(self, filters: Sequence[str] = (),
                          receiver: str | None = None) -> tuple[list[Answer], list[str]]:
        """Every member's active alerts, asked at once (a member that does not answer costs one timeout, not
        one per member): the answers, and an error per member that gave none."""
        query = self._alerts_query(filters, receiver)
        until = self.deadline()  # the workers do not see this thread's pass deadline: it is handed to them

        def ask(member: str) -> Answer | str:
            try:
                return self._check_alerts(self.get_from(member, "/api/v2/alerts", query, until))
            except AlertmanagerUnavailable as exc:
                return str(exc)

        if len(self.members) == 1:
            results = [ask(self.members[0])]
        else:
            pool = ThreadPoolExecutor(len(self.members), thread_name_prefix="alertmanager")
            futures = [pool.submit(ask, member) for member in self.members]
            # a worker still in its DNS lookup at the deadline is not waited for
            wait_for_futures(futures, timeout=max(0.0, until - time.monotonic()) + 0.5)
            pool.shutdown(wait=False, cancel_futures=True)
            results = [f.result() if f.done() else f"{member}: no answer by the deadline"
                       for f, member in zip(futures, self.members, strict=True)]
        return [r for r in results if isinstance(r, Answer)], [r for r in results if isinstance(r, str)]

    @staticmethod
    def addresses(member: str) -> list[str]:
        """The addresses the member's host name stands for now ([] when it cannot be resolved): more than one, and
        the member is several Alertmanagers behind one name (a headless Service), each call answered by any."""
        parts = urllib.parse.urlsplit(member)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            found = socket.getaddrinfo(parts.hostname or "", port, type=socket.SOCK_STREAM)
        except OSError:
            return []
        return sorted({str(sockaddr[0]) for *_, sockaddr in found})

    def age(self, member: str) -> timedelta:
        """How long this member has been up, on its own clock (its Date header less /api/v2/status's start
        time), so a remediator whose clock is off cannot take a fresh Alertmanager for an old one."""
        answer = self.get_from(member, "/api/v2/status")
        uptime = answer.data.get("uptime") if isinstance(answer.data, dict) else None
        if not isinstance(uptime, str):
            raise AlertmanagerUnavailable(f"{member}: /api/v2/status: no uptime")
        try:
            started = parse_time(uptime)
        except ValueError as exc:
            raise AlertmanagerUnavailable(f"{member}: /api/v2/status: uptime {uptime!r}: {exc}") from exc
        if answer.date is None:
            raise AlertmanagerUnavailable(f"{member}: /api/v2/status: no Date header to measure its uptime by")
        # the Date header has whole seconds: round in favour of "younger"
        return answer.date - started - timedelta(seconds=1)

    def receivers(self, member: str) -> list[str]:
        data = self.get_from(member, "/api/v2/receivers").data
        if not isinstance(data, list):
            raise AlertmanagerUnavailable(f"{member}: /api/v2/receivers: expected a list")
        return [str(r.get("name")) for r in data if isinstance(r, dict)]


def client_from(policy: Any) -> AlertmanagerClient | None:
    """The policy's Alertmanager (alertmanager.* keys), or None when it opted out (`url: none`)."""
    members = policy.alertmanager.members
    if not members:
        return None
    return AlertmanagerClient(members, policy.alertmanager.timeout, policy.alertmanager.bearer_token_file,
                              policy.alertmanager.ca_file, policy.alertmanager.max_answer_bytes)
