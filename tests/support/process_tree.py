"""Every process a test starts ends with the test, and so does the whole tree under it: on failure, and when
pytest-timeout stops the test, too. A `serve` left behind by a test that timed out was found reparented an hour
later (issue 34, item 6); killing only the process a test started leaves its children (serve's loop process, a
bench's fake API server and remediator) running.

`spawn` starts a process as the leader of a session of its own (its children share its process group) and records
it; `run` is subprocess.run with the same care (a timeout or an exception ends the whole group, where
subprocess.run kills only its child). The autouse fixture `_end_process_trees` (tests/conftest.py) ends, at each
test's end, every group the test (or its function-scoped fixtures) started and left; `end_all` at the session's
end ends the rest (module- and session-scoped fixtures)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

_started: list[subprocess.Popen[Any]] = []


def spawn(argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen in a session of its own, recorded so that its whole group ends with the test."""
    kwargs.setdefault("start_new_session", True)
    proc: subprocess.Popen[Any] = subprocess.Popen(argv, **kwargs)
    _started.append(proc)
    return proc


def run(argv: Sequence[str | os.PathLike[str]], *, timeout: float, capture_output: bool = False,
        check: bool = False, input: str | bytes | None = None, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run whose timeout (or any exception, pytest-timeout's among them) kills the whole process tree,
    and which ends whatever the command left running in its group when it returns."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = spawn(argv, **kwargs)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    finally:
        end_group(proc)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def end_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL to the process group `proc` leads, whether or not `proc` itself has ended, then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def alive(pid: int) -> bool:
    """Whether process `pid` runs: a zombie is dead, only its parent has not reaped it yet."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "\nState:\tZ" not in status.read()
    except FileNotFoundError:
        return False


def mark() -> int:
    return len(_started)


def end_since(index: int) -> None:
    """End every group started after `mark()` returned `index`, newest first."""
    while len(_started) > index:
        end_group(_started.pop())


def end_all() -> None:
    end_since(0)
