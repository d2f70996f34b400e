"""What the benchmarks share about the processes they start: a free port, a kubeconfig that points one at the fake
API server, waiting for it to get somewhere, and stopping its process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM to the process's group (started with start_new_session), SIGKILL after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def write_kubeconfig(path: Path, server: str, name: str) -> None:
    """A kubeconfig for `server` (a fake API server's URL; the token is not checked), its cluster, context and user
    all called `name`."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": {"token": "unused"}}]}))


def wait_until(what: str, check: Callable[[], object], timeout: float, proc: subprocess.Popen[bytes],
               log: Path) -> None:
    """Polls `check` until it is true; fails with the end of the process's log when the process exits first or
    `timeout` seconds pass."""
    started = time.monotonic()
    while not check():
        if proc.poll() is not None:
            raise RuntimeError(f"the remediator exited:\n{log.read_text()[-3000:]}")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not reached in {timeout:.0f} s\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
