"""The repeat-offender gauge: each node's hardware episodes within repeat_offenders.window, from the history on its
Node (decide/history.py) as each pass reads it, so a restarted remediator reports what the last one did and a
dashboard can list the worst offenders (topk). A node with none in the window has no series (removed)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from gpuhealth.remediator.decide.history import in_window
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.metrics import Metrics
from gpuhealth.remediator.policy import Policy


class OffenderGauge:
    def __init__(self, metrics: Metrics, policy: Policy) -> None:
        self.metrics, self.policy = metrics, policy
        self._series: set[tuple[str, str]] = set()  # (node, pool) the gauge holds now

    def refresh(self, views: Iterable[NodeView], now: datetime) -> None:
        since = now - self.policy.repeat_offenders.window
        values = {(v.name, v.pool): len(in_window(v.history, since)) for v in views}
        values = {k: n for k, n in values.items() if n}
        gauge = self.metrics.repeat_offender_episodes
        for labels, n in values.items():
            gauge.labels(*labels).set(n)
        for gone in self._series - set(values):
            gauge.remove(*gone)
        self._series = set(values)
