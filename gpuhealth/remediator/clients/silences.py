"""Acknowledgement through Alertmanager: is any of this node's alerts silenced right now?

Asked before each disruptive step (GET /api/v2/alerts, filtered by the node label): starts, drain
retries and forced deletion. An alert suppressed by a silence (silencedBy) means a person took over;
one suppressed by an inhibition (inhibitedBy: a bigger alert covers it, e.g. the node is down) is
treated the same way: Alertmanager would not have told anyone about it either. When Alertmanager cannot be asked, the
answer carries the error and the policy (alertmanager.on_error) decides; by default we wait.
"""

from __future__ import annotations

from gpuhealth.remediator.clients.alertmanager import AlertmanagerClient, AlertmanagerUnavailable
from gpuhealth.remediator.decide.decision import SilenceAnswer


class SilenceChecker:
    def __init__(self, alertmanager: AlertmanagerClient | str, node_label: str = "node", timeout: float = 5.0) -> None:
        if isinstance(alertmanager, str):
            alertmanager = AlertmanagerClient([alertmanager], timeout)
        self.alertmanager, self.node_label = alertmanager, node_label

    def __call__(self, node: str, fingerprints: list[str]) -> SilenceAnswer:
        try:
            alerts = self.alertmanager.alerts([f'{self.node_label}="{node}"']).data
        except AlertmanagerUnavailable as exc:
            return SilenceAnswer(error=str(exc))
        wanted = set(fingerprints)
        silenced: set[str] = set()
        for alert in alerts:
            status = alert.get("status") or {}
            labels = alert.get("labels") or {}
            if labels.get(self.node_label) != node:
                continue
            if wanted and alert.get("fingerprint") not in wanted:
                continue
            silenced.update(status.get("silencedBy") or [])
            silenced.update(f"inhibited by {by}" for by in status.get("inhibitedBy") or [])
        return SilenceAnswer(silenced_by=tuple(sorted(silenced)))
