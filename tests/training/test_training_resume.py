"""examples/training/train_elastic.py under a real torchrun (CPU, gloo, 2 workers): a worker SIGKILLed mid-run is
restarted by torchrun, resumes from the newest healthy checkpoint (never from a planted corrupt or partial one)
and ends with exactly the parameters of an uninterrupted run."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpuhealth_training import MANIFEST, checkpoint_dir, find_latest_healthy

from tests.support import paths, process_tree

ROOT = paths.REPO
SCRIPT = ROOT / "examples" / "training" / "train_elastic.py"
STEPS, EVERY = 40, 5
KILL_AFTER = 15  # kill once this checkpoint is committed
PLANTED_CORRUPT, PLANTED_PARTIAL = 39, 44  # newer than any checkpoint the run has when it restarts


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed in this environment: run `make deps` (installs the pinned CPU build, "
                    "the `torch` extra); the elastic-resume test cannot run without it")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(run_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "NODE_NAME": "test-node", "GPUHEALTH_JOB": "resume-test",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "training"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "3",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
           str(SCRIPT), "--dir", str(run_dir), "--steps", str(STEPS), "--checkpoint-every", str(EVERY),
           "--step-sleep", "0.1"]
    with log.open("wb") as out:
        return process_tree.spawn(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> dict[str, object]:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for rank in (0, 1):  # torchrun starts each worker in a session of its own
            with contextlib.suppress(OSError, ValueError, AssertionError):
                _kill_worker(log.parent / "run", rank)
        pytest.fail(f"torchrun did not finish in {timeout}s:\n{log.read_text()[-4000:]}")
    assert rc == 0, f"torchrun exited {rc}:\n{log.read_text()[-4000:]}"
    result = json.loads((log.parent / "run" / "result.json").read_text())
    assert isinstance(result, dict)
    return result


def _wait_for(predicate: object, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before the kill point:\n{log.read_text()[-4000:]}")
        time.sleep(0.02)
    pytest.fail(f"kill point not reached in {timeout}s:\n{log.read_text()[-4000:]}")


def _committed(ckpt_dir: Path) -> set[int]:
    return {int(p.name.split("-")[1]) for p in ckpt_dir.glob("step-*") if (p / MANIFEST).is_file()}


def _plant(ckpt_dir: Path, source: int) -> None:
    """A copy of a real checkpoint renamed to a newer step, one byte of its state changed (checksum mismatch), and a
    newer directory with a state file but no manifest (a writer that died before committing)."""
    corrupt = checkpoint_dir(ckpt_dir, PLANTED_CORRUPT)
    shutil.copytree(checkpoint_dir(ckpt_dir, source), corrupt)
    manifest = json.loads((corrupt / MANIFEST).read_text())
    manifest["step"] = PLANTED_CORRUPT
    (corrupt / MANIFEST).write_text(json.dumps(manifest))
    data = bytearray((corrupt / "state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (corrupt / "state.pt").write_bytes(bytes(data))
    partial = checkpoint_dir(ckpt_dir, PLANTED_PARTIAL)
    partial.mkdir()
    shutil.copy(checkpoint_dir(ckpt_dir, source) / "state.pt", partial / "state.pt")


def _kill_worker(run_dir: Path, rank: int) -> int:
    pid = int((run_dir / "pids" / f"rank{rank}.pid").read_text())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert SCRIPT.name.encode() in cmdline, f"pid {pid} is not a worker of this run: {cmdline!r}"
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.timeout(300)
def test_killed_worker_resumes_from_newest_healthy_checkpoint_and_matches_uninterrupted_run(tmp_path: Path) -> None:
    _require_torch()
    plain_dir, killed_dir = tmp_path / "plain", tmp_path / "killed"
    plain_dir.mkdir()
    killed_dir.mkdir()
    plain_log, killed_log = plain_dir / "torchrun.log", killed_dir / "torchrun.log"
    ckpt_dir = killed_dir / "run" / "checkpoints"

    # One at a time: on 2 cores two runs side by side slow each other past the kill point.
    plain = _finish(_start(plain_dir / "run", plain_log), plain_log)
    assert plain["steps"] == STEPS and "resumed from" not in plain_log.read_text(), "the uninterrupted run resumed"

    proc = _start(killed_dir / "run", killed_log)
    _wait_for(lambda: KILL_AFTER in _committed(ckpt_dir) and (killed_dir / "run/pids/rank1.pid").is_file(), proc,
              killed_log)
    _plant(ckpt_dir, KILL_AFTER)
    newest_at_kill = max(_committed(ckpt_dir) - {PLANTED_CORRUPT})
    _kill_worker(killed_dir / "run", rank=1)
    killed = _finish(proc, killed_log)
    text = killed_log.read_text()

    assert killed["attempt"] >= 1, f"the run was not restarted (killed too late?):\n{text[-3000:]}"
    assert killed["params_sha256"] == plain["params_sha256"], "resumed run ended with different parameters"
    # The first attempt that got as far as choosing a checkpoint (a restarted attempt can also fail earlier, in
    # gloo's connection set-up, and torchrun restarts it again).
    resumed = re.search(r"\[rank 0 attempt ([1-9]\d*)\] train_elastic: resumed from \S+ \(step (\d+)\)", text)
    assert resumed, f"no resume logged:\n{text[-3000:]}"
    attempt, step = resumed.group(1), int(resumed.group(2))
    # rank 0 may commit one more checkpoint between the kill and its own end: the newest at restart time
    assert step in (newest_at_kill, newest_at_kill + EVERY), (step, newest_at_kill)
    # every checkpoint newer than the one chosen was skipped for a reason, and those are exactly the planted ones
    skipped = re.findall(rf"\[rank 0 attempt {attempt}\] gpuhealth_training\.checkpoint: skipping \S*step-(\d+): (.*)",
                         text)
    assert {int(n) for n, _ in skipped} == {PLANTED_CORRUPT, PLANTED_PARTIAL}, skipped
    reasons = {int(n): why for n, why in skipped}
    assert "sha256" in reasons[PLANTED_CORRUPT] and "no gpuhealth-manifest.json" in reasons[PLANTED_PARTIAL]
    # the planted ones stay unhealthy; the newest healthy is the run's last checkpoint
    latest = find_latest_healthy(ckpt_dir)
    assert latest is not None and latest.step == STEPS
