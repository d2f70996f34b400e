"""torch helpers: a state dict as a healthy checkpoint, and GPU-synchronised step timing. torch is imported here
only when called, so the package works without it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from gpuhealth_training.checkpoint import Checkpoint, write_checkpoint

STATE_FILE = "state.pt"


def save_state(root: str | os.PathLike[str], step: int, state: Mapping[str, Any], loss: float, grad_norm: float,
               metadata: Mapping[str, Any] | None = None) -> Checkpoint:
    """torch.save(state) as the checkpoint of `step` (healthy only if loss and grad_norm are finite)."""
    import torch

    with write_checkpoint(root, step, loss, grad_norm, metadata) as pending:
        torch.save(dict(state), pending.path / STATE_FILE)
    assert pending.result is not None
    return pending.result


def load_state(checkpoint: Checkpoint, map_location: str = "cpu") -> dict[str, Any]:
    """The state saved by save_state (weights only: tensors and plain containers, no pickled code)."""
    import torch

    state = torch.load(checkpoint.file(STATE_FILE), map_location=map_location, weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"{checkpoint.file(STATE_FILE)}: expected a dict, found {type(state).__name__}")
    return state


def cuda_sync() -> Callable[[], None] | None:
    """torch.cuda.synchronize where CUDA is in use (pass as StepTimer's sync), else None."""
    import torch

    return torch.cuda.synchronize if torch.cuda.is_available() else None
