"""Reading Alertmanager's API v2: the alerts active now (for reconciliation and silence checks).

One client for every call the remediator makes to Alertmanager. An HA pair (or more) is a list of
members: each call asks them in order and takes the first answer, since any member's view is the
cluster's (they gossip alerts and silences). Authentication (a bearer token read from a file at each
call, so a rotated token is picked up) and TLS (a CA file) are configured once, in the policy.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from remediator.nodestate import parse_time

MAX_ANSWER_BYTES = 64 << 20  # 10,000 nodes' alerts are a few MB; more than this is not an Alertmanager


class AlertmanagerUnavailable(Exception):
    """No member gave a usable answer; the message names each member and why."""


@dataclass(frozen=True)
class Answer:
    member: str
    data: Any


class AlertmanagerClient:
    def __init__(self, members: Sequence[str], timeout: float = 5.0, bearer_token_file: str | None = None,
                 ca_file: str | None = None) -> None:
        if not members:
            raise ValueError("an Alertmanager client needs at least one URL")
        self.members = tuple(m.rstrip("/") for m in members)
        self.timeout, self.bearer_token_file = timeout, bearer_token_file
        self._context: ssl.SSLContext | None = None
        if ca_file is not None:
            self._context = ssl.create_default_context(cafile=ca_file)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.bearer_token_file:
            try:
                token = Path(self.bearer_token_file).read_text().strip()
            except OSError as exc:
                raise AlertmanagerUnavailable(f"bearer token file {self.bearer_token_file}: {exc.strerror}") from exc
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def get(self, path: str, query: dict[str, str | list[str]] | None = None) -> Answer:
        """GET path from the first member that answers with JSON."""
        suffix = f"?{urllib.parse.urlencode(query, doseq=True)}" if query else ""
        headers = self._headers()
        errors = []
        for member in self.members:
            request = urllib.request.Request(f"{member}{path}{suffix}", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout, context=self._context) as response:
                    body = response.read(MAX_ANSWER_BYTES + 1)
                if len(body) > MAX_ANSWER_BYTES:
                    raise ValueError(f"answer larger than {MAX_ANSWER_BYTES} bytes")
                return Answer(member, json.loads(body))
            except urllib.error.HTTPError as exc:
                errors.append(f"{member}: HTTP {exc.code} {exc.reason}")
            except (OSError, ValueError) as exc:
                errors.append(f"{member}: {type(exc).__name__}: {exc}")
        raise AlertmanagerUnavailable("; ".join(errors))

    def alerts(self, filters: Sequence[str] = (), receiver: str | None = None) -> Answer:
        """The active alerts (silenced and inhibited included, each with its status), as /api/v2/alerts
        lists them: resolved alerts are never listed."""
        query: dict[str, str | list[str]] = {"active": "true", "silenced": "true", "inhibited": "true",
                                             "unprocessed": "true"}
        if filters:
            query["filter"] = list(filters)
        if receiver:
            query["receiver"] = receiver
        answer = self.get("/api/v2/alerts", query)
        if not isinstance(answer.data, list) or not all(isinstance(a, dict) for a in answer.data):
            raise AlertmanagerUnavailable(f"{answer.member}: /api/v2/alerts: expected a list of alerts")
        return answer

    def started(self, member: str) -> datetime:
        """When this member started (/api/v2/status `uptime`, which is a start time)."""
        answer = AlertmanagerClient([member], self.timeout, self.bearer_token_file)
        answer._context = self._context
        data = answer.get("/api/v2/status").data
        uptime = data.get("uptime") if isinstance(data, dict) else None
        if not isinstance(uptime, str):
            raise AlertmanagerUnavailable(f"{member}: /api/v2/status: no uptime")
        try:
            return parse_time(uptime)
        except ValueError as exc:
            raise AlertmanagerUnavailable(f"{member}: /api/v2/status: uptime {uptime!r}: {exc}") from exc


def client_from(policy: Any) -> AlertmanagerClient | None:
    """The policy's Alertmanager (alertmanager.* keys), or None when it opted out (`url: none`)."""
    members = policy.alertmanager_members
    if not members:
        return None
    return AlertmanagerClient(members, policy.alertmanager_timeout, policy.alertmanager_token_file,
                              policy.alertmanager_ca_file)
