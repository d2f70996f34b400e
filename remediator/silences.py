"""Acknowledgement through Alertmanager: is any of this node's alerts silenced right now?

Asked before each disruptive step (GET /api/v2/alerts, filtered by the node label): starts, drain
retries and forced deletion. An alert suppressed by a silence (silencedBy) means a person took over;
one suppressed by an inhibition (inhibitedBy: a bigger alert covers it, e.g. the node is down) is
treated the same way: Alertmanager would not have told anyone about it either. When Alertmanager cannot be asked, the
answer carries the error and the policy (alertmanager.on_error) decides; by default we wait.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from remediator.ladder import SilenceAnswer


class SilenceChecker:
    def __init__(self, base_url: str, node_label: str = "node", timeout: float = 5.0) -> None:
        self.base_url, self.node_label, self.timeout = base_url.rstrip("/"), node_label, timeout

    def __call__(self, node: str, fingerprints: list[str]) -> SilenceAnswer:
        query = urllib.parse.urlencode({"filter": f'{self.node_label}="{node}"', "silenced": "true",
                                        "inhibited": "true", "active": "true"})
        try:
            with urllib.request.urlopen(f"{self.base_url}/api/v2/alerts?{query}",
                                        timeout=self.timeout) as response:
                alerts: Any = json.loads(response.read())
        except (OSError, ValueError) as exc:
            return SilenceAnswer(error=f"{type(exc).__name__}: {exc}")
        if not isinstance(alerts, list):
            return SilenceAnswer(error="unexpected answer from /api/v2/alerts")
        wanted = set(fingerprints)
        silenced: set[str] = set()
        for alert in alerts:
            if not isinstance(alert, dict):
                continue
            status = alert.get("status") or {}
            labels = alert.get("labels") or {}
            if labels.get(self.node_label) != node:
                continue
            if wanted and alert.get("fingerprint") not in wanted:
                continue
            silenced.update(status.get("silencedBy") or [])
            silenced.update(f"inhibited by {by}" for by in status.get("inhibitedBy") or [])
        return SilenceAnswer(silenced_by=tuple(sorted(silenced)))
