"""Prometheus exposition of a StepTimer: per-rank step time (the recent median) and step counts.

Labels job, rank and node come from the training process itself. `job` is also the label Prometheus gives every
target (the scrape job), so scrape with honor_labels: true (the PodMonitor in docs/jobs.md does); the rules
also accept the renamed `exported_job` that a scrape without it produces.
"""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server

from gpuhealth_training.identity import LOCAL_RANK_ENV, IdentityError, RankIdentity
from gpuhealth_training.steps import StepKind

STEP_SECONDS = "gpuhealth_training_step_seconds"
STEPS = "gpuhealth_training_steps"  # a counter: exposed as gpuhealth_training_steps_total
LABELS = ("job", "rank", "node")
# Every name a rule may read (the rule tests treat these as known metrics).
EXPOSED_NAMES = (STEP_SECONDS, f"{STEPS}_total")
# One port per rank on a node: DEFAULT_BASE_PORT + LOCAL_RANK (the exporter uses 9842).
DEFAULT_BASE_PORT = 9860


class StepMetrics:
    """A StepTimer observer. The step-time series appears with the first timed step: a rank in warm-up has none."""

    def __init__(self, identity: RankIdentity, registry: CollectorRegistry | None = None) -> None:
        registry = REGISTRY if registry is None else registry
        self.identity = identity
        values = (identity.job, str(identity.rank), identity.node)
        self._step_seconds = Gauge(STEP_SECONDS, "Median wall time of this rank's recent compute steps (warm-up, "
                                   "checkpoint and eval steps excluded)", LABELS, registry=registry)
        self._steps = Counter(STEPS, "Training steps completed by this rank, by kind (warm-up steps count as "
                              "compute)", (*LABELS, "kind"), registry=registry)
        self._values = values
        for kind in ("compute", "checkpoint", "eval"):
            self._steps.labels(*values, kind)

    def observe(self, kind: StepKind, seconds: float, timed: bool, median: float | None) -> None:
        self._steps.labels(*self._values, kind).inc()
        if timed and median is not None:
            self._step_seconds.labels(*self._values).set(median)


def metrics_port(base_port: int = DEFAULT_BASE_PORT, local_rank: int | None = None) -> int:
    if local_rank is None:
        raw = os.environ.get(LOCAL_RANK_ENV, "0") or "0"
        try:
            local_rank = int(raw)
        except ValueError:
            raise IdentityError(f"environment variable {LOCAL_RANK_ENV}={raw!r} is not an integer") from None
    return base_port + local_rank


def serve_metrics(registry: CollectorRegistry | None = None, port: int | None = None,
                  base_port: int = DEFAULT_BASE_PORT, addr: str = "0.0.0.0") -> int:
    """Serve /metrics in a daemon thread on `port`, or base_port + LOCAL_RANK; returns the port."""
    port = metrics_port(base_port) if port is None else port
    start_http_server(port, addr=addr, registry=REGISTRY if registry is None else registry)
    return port
