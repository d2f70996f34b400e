"""The suite's own hygiene: a test that starts a process ends its whole tree, on failure and on timeout too
(tests/support/process_tree.py). Before, a test that timed out left its `serve` running, found reparented an hour
later."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support import process_tree
from tests.support.paths import REPO as ROOT


def wait_gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while process_tree.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_tree.alive(pid)


def tree_script(tmp_path: Path) -> tuple[Path, Path]:
    """A shell that starts a child which outlives it (as serve's loop process would), records the child's pid, and
    then hangs."""
    pids = tmp_path / "pids"
    script = tmp_path / "tree.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > '{pids}'\nsleep 300\n")
    script.chmod(0o755)
    return script, pids


def test_a_command_that_runs_past_its_timeout_ends_with_every_process_it_started(tmp_path: Path) -> None:
    script, pids = tree_script(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        process_tree.run([str(script)], timeout=2)
    assert wait_gone(int(pids.read_text()))  # subprocess.run would have killed the shell alone


@pytest.mark.parametrize("ending", ["fails", "times out"])
def test_a_test_that_fails_or_times_out_leaves_no_process_behind(tmp_path: Path, ending: str) -> None:
    """An inner pytest run of one test that starts a process tree and then fails, or is stopped by pytest-timeout;
    once it has ended, no process of the tree is left."""
    script, pids = tree_script(tmp_path)
    body = "assert False" if ending == "fails" else "time.sleep(60)"
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(f"""
        import time
        import pytest
        from tests.support import process_tree

        @pytest.mark.timeout(3)
        def test_inner():
            process_tree.spawn([{str(script)!r}])
            while not __import__("os").path.exists({str(pids)!r}):
                time.sleep(0.05)
            {body}
        """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "-n", "0", "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), str(inner)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "1 failed" in done.stdout, done.stdout[-2000:]
    assert ending == "fails" or "Timeout" in done.stdout
    assert wait_gone(int(pids.read_text()))
