"""gpuhealth_training checkpoints: committed whole or not at all, healthy only with finite loss and gradient norm,
and found newest-healthy-first with every checksum verified."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import ModuleType

import pytest
from gpuhealth_training import (
    MANIFEST,
    CheckpointError,
    checkpoint_dir,
    find_latest_healthy,
    save_checkpoint,
    verify_checkpoint,
    write_checkpoint,
)

FILES = {"model.bin": b"weights" * 100, "optim/state.bin": b"moments" * 50}


def _save(root: Path, step: int, loss: float = 0.5, grad_norm: float = 1.0) -> Path:
    return save_checkpoint(root, step, FILES, loss=loss, grad_norm=grad_norm, metadata={"lr": 0.1}).path


def test_complete_checkpoint_records_every_file_checksum_and_is_healthy(tmp_path: Path) -> None:
    ckpt = save_checkpoint(tmp_path, 100, FILES, loss=0.5, grad_norm=1.5, metadata={"lr": 0.1})
    assert ckpt.healthy and ckpt.path == tmp_path / "step-00000100"
    manifest = json.loads((ckpt.path / MANIFEST).read_text())
    assert set(manifest["files"]) == set(FILES)
    assert manifest["files"]["model.bin"]["size"] == len(FILES["model.bin"])
    found = verify_checkpoint(ckpt.path)
    assert (found.step, found.loss, found.grad_norm, found.metadata) == (100, 0.5, 1.5, {"lr": 0.1})
    assert found.file("optim/state.bin").read_bytes() == FILES["optim/state.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000100"]  # no staging directory left behind


@pytest.mark.parametrize(("loss", "grad_norm", "reason"), [
    (float("nan"), 1.0, "loss is nan"),
    (0.5, float("inf"), "grad_norm is inf"),
    (float("-inf"), float("nan"), "loss is -inf; grad_norm is nan"),
])
def test_non_finite_loss_or_grad_norm_is_written_but_marked_unhealthy(tmp_path: Path, loss: float, grad_norm: float,
                                                                      reason: str) -> None:
    ckpt = save_checkpoint(tmp_path, 7, FILES, loss=loss, grad_norm=grad_norm)
    assert not ckpt.healthy and ckpt.reason == reason
    with pytest.raises(CheckpointError, match=f"marked unhealthy \\({reason}\\)"):
        verify_checkpoint(ckpt.path)
    assert find_latest_healthy(tmp_path) is None


def test_failure_while_writing_commits_nothing(tmp_path: Path) -> None:
    with pytest.raises(OSError), write_checkpoint(tmp_path, 5, loss=0.1, grad_norm=0.1) as pending:
        pending.write_bytes("model.bin", b"half")
        raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_without_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no files"), write_checkpoint(tmp_path, 5, loss=0.1, grad_norm=0.1):
        pass
    assert list(tmp_path.iterdir()) == []


def test_rewriting_a_step_replaces_the_old_directory(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, 5, {"model.bin": b"old", "stale.bin": b"x"}, loss=float("nan"), grad_norm=1.0)
    ckpt = save_checkpoint(tmp_path, 5, {"model.bin": b"new"}, loss=0.1, grad_norm=1.0)
    assert verify_checkpoint(ckpt.path).files.keys() == {"model.bin"}
    assert sorted(p.name for p in ckpt.path.iterdir()) == [MANIFEST, "model.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000005"]


def test_newest_healthy_is_found(tmp_path: Path) -> None:
    for step in (10, 30, 20):
        _save(tmp_path, step)
    found = find_latest_healthy(tmp_path)
    assert found is not None and found.step == 30


def test_no_directory_or_no_checkpoint_means_start_from_scratch(tmp_path: Path) -> None:
    assert find_latest_healthy(tmp_path / "missing") is None
    assert find_latest_healthy(tmp_path) is None


def _corrupt_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])


def _drop_manifest(path: Path) -> None:
    os.remove(path.parent / MANIFEST)


def _garble_manifest(path: Path) -> None:
    (path.parent / MANIFEST).write_text("{not json")


def _delete_file(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize(("damage", "reason"), [
    (_corrupt_byte, "does not match its sha256"),
    (_truncate, "truncated"),
    (_drop_manifest, "no gpuhealth-manifest.json"),
    (_garble_manifest, "unreadable manifest"),
    (_delete_file, "model.bin is missing"),
])
def test_newer_damaged_checkpoint_is_skipped_with_the_reason_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                    damage: object, reason: str) -> None:
    _save(tmp_path, 10)
    newer = _save(tmp_path, 20)
    assert callable(damage)
    damage(newer / "model.bin")
    with caplog.at_level(logging.INFO, logger="gpuhealth_training.checkpoint"):
        found = find_latest_healthy(tmp_path)
    assert found is not None and found.step == 10
    assert any("skipping" in r.message and "step-00000020" in r.message and reason in r.message
               for r in caplog.records), caplog.text


def test_staging_directory_of_a_dead_writer_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _save(tmp_path, 10)
    staging = tmp_path / ".tmp-step-00000020-4242"
    staging.mkdir()
    (staging / "model.bin").write_bytes(b"partial")
    with caplog.at_level(logging.WARNING, logger="gpuhealth_training.checkpoint"):
        found = find_latest_healthy(tmp_path)
    assert found is not None and found.step == 10
    assert "partial, never committed" in caplog.text


def test_manifest_for_another_step_is_rejected(tmp_path: Path) -> None:
    path = _save(tmp_path, 10)
    moved = checkpoint_dir(tmp_path, 99)
    path.rename(moved)
    with pytest.raises(CheckpointError, match="manifest says step 10"):
        verify_checkpoint(moved)


def test_missing_file_name_is_a_clear_error(tmp_path: Path) -> None:
    found = verify_checkpoint(_save(tmp_path, 1))
    with pytest.raises(CheckpointError, match=r"no file 'other\.bin'"):
        found.file("other.bin")


@pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")
def test_torch_state_round_trips_through_a_healthy_checkpoint(tmp_path: Path) -> None:
    torch = _torch()
    from gpuhealth_training.torch_state import load_state, save_state

    state = {"model": {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, "step": 4}
    ckpt = save_state(tmp_path, 4, state, loss=0.3, grad_norm=2.0)
    loaded = load_state(verify_checkpoint(ckpt.path))
    assert loaded["step"] == 4 and torch.equal(loaded["model"]["w"], state["model"]["w"])


def _torch() -> ModuleType:
    try:
        import torch
    except ImportError:
        pytest.fail("torch is not installed: run `make deps` (installs the pinned CPU build, the `torch` extra)")
    return torch
