"""Healthy checkpoints: written to a temporary directory, fsynced, checksummed and renamed into place in one step.

A checkpoint is the directory <root>/step-<step, 8 digits>/ holding the caller's files and a manifest
(gpuhealth-manifest.json: step, loss, gradient norm, sha256 and size of every file). The manifest is written
last, inside the temporary directory, and the directory is renamed into place: a reader sees a whole checkpoint
or none. It is marked healthy only when loss and gradient norm are finite. Reading verifies every checksum, so a
checkpoint that was truncated, corrupted or never finished is skipped (with a log line saying why) and the
next older healthy one is used. Only paths and bytes here: any framework can write the files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MANIFEST = "gpuhealth-manifest.json"
FORMAT = 1
_DIR = re.compile(r"^step-(\d{8,})$")
_STAGING_PREFIX = ".tmp-step-"
_CHUNK = 1 << 20


class CheckpointError(Exception):
    """A checkpoint cannot be written, or is not a healthy, complete one (the message says why)."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    loss: float
    grad_norm: float
    healthy: bool
    reason: str  # why it is unhealthy ("" when healthy)
    files: dict[str, str]  # relative name -> sha256
    metadata: dict[str, Any] = field(default_factory=dict)

    def file(self, name: str) -> Path:
        if name not in self.files:
            raise CheckpointError(f"{self.path}: no file {name!r} in the manifest (has {sorted(self.files)})")
        return self.path / name


def checkpoint_dir(root: str | os.PathLike[str], step: int) -> Path:
    if step < 0:
        raise CheckpointError(f"step must be >= 0, got {step}")
    return Path(root) / f"step-{step:08d}"


def unhealthy_reason(loss: float, grad_norm: float) -> str:
    reasons = [f"{name} is {value}" for name, value in (("loss", loss), ("grad_norm", grad_norm))
               if not math.isfinite(value)]
    return "; ".join(reasons)


class PendingCheckpoint:
    """The staging directory of a checkpoint being written; `result` is set once it is committed."""

    def __init__(self, path: Path, step: int) -> None:
        self.path = path
        self.step = step
        self.result: Checkpoint | None = None

    def write_bytes(self, name: str, data: bytes) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return target


@contextmanager
def write_checkpoint(root: str | os.PathLike[str], step: int, loss: float, grad_norm: float,
                     metadata: Mapping[str, Any] | None = None) -> Iterator[PendingCheckpoint]:
    """Write the checkpoint's files into `pending.path` inside the block; on leaving it the checkpoint is committed
    (healthy if loss and grad_norm are finite). If the block raises, nothing is committed and the staging
    directory is removed."""
    final = checkpoint_dir(root, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f"{_STAGING_PREFIX}{step:08d}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    pending = PendingCheckpoint(staging, step)
    try:
        yield pending
        pending.result = _commit(staging, final, step, float(loss), float(grad_norm), dict(metadata or {}))
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def save_checkpoint(root: str | os.PathLike[str], step: int, files: Mapping[str, bytes], loss: float,
                    grad_norm: float, metadata: Mapping[str, Any] | None = None) -> Checkpoint:
    with write_checkpoint(root, step, loss, grad_norm, metadata) as pending:
        for name, data in files.items():
            pending.write_bytes(name, data)
    assert pending.result is not None
    return pending.result


def _commit(staging: Path, final: Path, step: int, loss: float, grad_norm: float,
            metadata: dict[str, Any]) -> Checkpoint:
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(staging.rglob("*")):
        name = path.relative_to(staging).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise CheckpointError(f"{final}: {name} is not a regular file (links and devices are not checkpointed)")
        if path.is_file():
            if name == MANIFEST:
                raise CheckpointError(f"{final}: {MANIFEST} is reserved for gpuhealth_training's manifest")
            _fsync_file(path)
            files[name] = {"sha256": _sha256(path), "size": path.stat().st_size}
    if not files:
        raise CheckpointError(f"{final}: no files were written, nothing to checkpoint")
    reason = unhealthy_reason(loss, grad_norm)
    manifest = {"format": FORMAT, "step": step, "loss": loss, "grad_norm": grad_norm, "healthy": not reason,
                "reason": reason, "files": files, "metadata": metadata,
                "written_at": datetime.now(UTC).isoformat(timespec="seconds")}
    tmp = staging / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _fsync_file(tmp)
    tmp.rename(staging / MANIFEST)
    for directory in sorted({p.parent for p in staging.rglob("*")}, key=lambda p: len(p.parts), reverse=True):
        _fsync_dir(directory)
    old = None
    if final.exists():  # a leftover of the same step (an unhealthy one, or one an interrupted run wrote)
        old = final.parent / f".replaced-{final.name}-{os.getpid()}"
        final.rename(old)
    staging.rename(final)
    _fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    if reason:
        log.warning("checkpoint %s written but marked unhealthy: %s", final, reason)
    return Checkpoint(final, step, loss, grad_norm, not reason, reason,
                      {n: str(f["sha256"]) for n, f in files.items()}, metadata)


def verify_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The checkpoint at `path` if it is complete, healthy and every file matches its checksum; else
    CheckpointError saying why."""
    path = Path(path)
    m = _DIR.match(path.name)
    if not m:
        raise CheckpointError(f"{path}: not a checkpoint directory (expected step-<8 digits>)")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{path}: no {MANIFEST}: incomplete, or not written by gpuhealth_training")
    try:
        manifest = json.loads(manifest_path.read_text())
        step, loss, grad_norm = int(manifest["step"]), float(manifest["loss"]), float(manifest["grad_norm"])
        healthy, files = manifest["healthy"], manifest["files"]
        entries = {str(n): (str(f["sha256"]), int(f["size"])) for n, f in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{manifest_path}: unreadable manifest ({type(e).__name__}: {e})") from None
    if step != int(m.group(1)):
        raise CheckpointError(f"{path}: manifest says step {step}, the directory says {int(m.group(1))}")
    reason = unhealthy_reason(loss, grad_norm)
    if healthy is not True or reason:
        raise CheckpointError(f"{path}: marked unhealthy ({manifest.get('reason') or reason or 'no reason given'})")
    if not entries:
        raise CheckpointError(f"{path}: the manifest lists no files")
    for name, (digest, size) in entries.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{path}: {name} is missing")
        actual = file.stat().st_size
        if actual != size:
            raise CheckpointError(f"{path}: {name} is {actual} bytes, the manifest says {size} (truncated?)")
        if _sha256(file) != digest:
            raise CheckpointError(f"{path}: {name} does not match its sha256 in the manifest (corrupt)")
    metadata = manifest.get("metadata") or {}
    return Checkpoint(path, step, loss, grad_norm, True, "", {n: d for n, (d, _) in entries.items()},
                      metadata if isinstance(metadata, dict) else {})


def find_latest_healthy(root: str | os.PathLike[str]) -> Checkpoint | None:
    """The newest checkpoint under `root` that verifies; each newer one that does not is logged with the reason."""
    root = Path(root)
    if not root.is_dir():
        log.info("no checkpoint directory %s: starting from scratch", root)
        return None
    candidates = []
    for entry in root.iterdir():
        m = _DIR.match(entry.name)
        if m and entry.is_dir():
            candidates.append((int(m.group(1)), entry))
        elif entry.name.startswith(_STAGING_PREFIX):
            log.warning("skipping %s: partial, never committed (a writer died, or is still writing)", entry)
    for _, path in sorted(candidates, reverse=True):
        try:
            found = verify_checkpoint(path)
        except CheckpointError as e:
            log.warning("skipping %s", e)
            continue
        log.info("newest healthy checkpoint: %s (step %d, loss %g)", path, found.step, found.loss)
        return found
    log.info("no healthy checkpoint under %s", root)
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
