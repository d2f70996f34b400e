"""gpuhealth for training loops: per-rank step timing for slow-rank alerts, and healthy checkpoints.

    from gpuhealth_training import instrument, find_latest_healthy, write_checkpoint

    timer = instrument(serve=True)          # job/rank/node from GPUHEALTH_JOB, RANK, NODE_NAME
    for step in range(start, steps):
        with timer.step():                  # compute steps only
            loss = train_step(step)
        if step % 100 == 0:
            with timer.step("checkpoint"):  # counted, never timed into the median
                ...

torch is optional: gpuhealth_training.torch_state imports it when called.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gpuhealth_training.checkpoint import (
    MANIFEST,
    Checkpoint,
    CheckpointError,
    PendingCheckpoint,
    checkpoint_dir,
    find_latest_healthy,
    save_checkpoint,
    verify_checkpoint,
    write_checkpoint,
)
from gpuhealth_training.identity import IdentityError, RankIdentity
from gpuhealth_training.metrics import (
    DEFAULT_BASE_PORT,
    EXPOSED_NAMES,
    STEP_SECONDS,
    StepMetrics,
    metrics_port,
    serve_metrics,
)
from gpuhealth_training.steps import KINDS, StepKind, StepObserver, StepTimer

__all__ = [
    "DEFAULT_BASE_PORT",
    "EXPOSED_NAMES",
    "KINDS",
    "MANIFEST",
    "STEP_SECONDS",
    "Checkpoint",
    "CheckpointError",
    "IdentityError",
    "PendingCheckpoint",
    "RankIdentity",
    "StepKind",
    "StepMetrics",
    "StepObserver",
    "StepTimer",
    "checkpoint_dir",
    "find_latest_healthy",
    "instrument",
    "metrics_port",
    "save_checkpoint",
    "serve_metrics",
    "verify_checkpoint",
    "write_checkpoint",
]


def instrument(job: str | None = None, rank: int | None = None, node: str | None = None, *,
               warmup_steps: int = 20, window: int = 100, registry: CollectorRegistry | None = None,
               serve: bool = False, port: int | None = None, base_port: int = DEFAULT_BASE_PORT) -> StepTimer:
    """A StepTimer exporting gpuhealth_training_step_seconds{job,rank,node} into `registry` (default: the global
    one), served on `port` (default base_port + LOCAL_RANK) when serve is true. Identity from the arguments, else
    GPUHEALTH_JOB (or JOB_NAME, TORCHELASTIC_RUN_ID), RANK and NODE_NAME."""
    identity = RankIdentity.resolve(job=job, rank=rank, node=node)
    timer = StepTimer(warmup_steps=warmup_steps, window=window, observers=[StepMetrics(identity, registry)])
    if serve:
        serve_metrics(registry, port=port if port is not None else base_port + identity.local_rank)
    return timer
