"""A tool's child that leaves its session and wipes its environment (`setsid env -i ...`) is killed when
the run ends, whether the tool exited or was killed at its deadline, while the exporter goes on running.

Before, such a child carried no mark of the run that started it and was left alone until the exporter
exited: one more piled up with every probe run (issue 23, item 10). The tools are real shell scripts
standing in for `dcgmi`; the leftovers are real `sleep` processes found in /proc.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.probes.live_processes import with_argv_word
from tests.support import process_tree
from tests.support.polling import wait_for
from tests.support.real_alertmanager import free_port

HEALTHY = '{"body": {"Overall Health": {"value": "Healthy"}}}'
SLEEP = shutil.which("sleep") or "/bin/sleep"


@pytest.fixture
def durations() -> Iterator[dict[str, str]]:
    """A `sleep` duration per way of escaping, unique to the test, so its processes can be found by argv."""
    tag = uuid.uuid4().int % 10**9
    named = {"setsid": f"300.{tag:09d}1", "setsid env -i": f"300.{tag:09d}2",
             "setsid env -i, double fork": f"300.{tag:09d}3"}
    yield named
    for duration in named.values():  # only if the test failed: never leave its sleepers running
        for pid in with_argv_word(duration):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def escapes(durations: dict[str, str]) -> str:
    """Shell lines that start three children that leave the tool's session: one keeps the environment
    (and so the run's mark), one wipes it, one wipes it and is orphaned at once (its parent exits)."""
    quiet = "</dev/null >/dev/null 2>&1 &"
    return (f"setsid {SLEEP} {durations['setsid']} {quiet}\n"
            f"setsid env -i sh -c '{SLEEP} {durations['setsid env -i']}' {quiet}\n"
            f"setsid env -i sh -c '{SLEEP} {durations['setsid env -i, double fork']} &' {quiet}\n")


def tool(tmp_path: Path, body: str) -> str:
    path = tmp_path / "dcgmi"
    path.write_text("#!/bin/sh\n" + '[ "$1 $2" = "health -s" ] && exit 0\n' + body)
    path.chmod(0o755)
    return str(path)


@contextlib.contextmanager
def exporter(tmp_path: Path, dcgmi: str, deadline: float) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The real exporter running the dcgm probe every second with this dcgmi."""
    port = free_port()
    config = tmp_path / "exporter.yaml"
    config.write_text(f"probes:\n  dcgm: {{interval: 1, deadline: {deadline}}}\n")
    proc = process_tree.spawn(
        [sys.executable, "-m", "gpuhealth.exporter", "--listen", f"127.0.0.1:{port}", "--config", str(config),
         "--no-conditions", "--no-pod-resources", "--disable", "kmsg,nvml,diag,efa", "--dcgmi", dcgmi],
        # Not run from the checkout: the code imported is the installed one, or the one on PYTHONPATH.
        cwd=tmp_path, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "NODE_NAME": ""})
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def dcgm_succeeded(port: int) -> bool:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return False
    return 'gpuhealth_probe_success{probe="dcgm"} 1.0' in body


def left_running(durations: dict[str, str]) -> dict[str, int]:
    return {how: len(with_argv_word(d)) for how, d in durations.items() if with_argv_word(d)}


def test_children_that_escape_with_setsid_env_i_are_killed_at_the_end_of_each_run(
        tmp_path: Path, durations: dict[str, str]) -> None:
    """Three runs each leave three children behind, then the tool stops doing so: with the exporter still
    running, none of the nine is left."""
    runs = tmp_path / "runs"
    cmd = tool(tmp_path, f"echo run >> '{runs}'\n"
                         f"[ $(wc -l < '{runs}') -le 3 ] && {{\n{escapes(durations)}}}\n"
                         f"echo '{HEALTHY}'\n")
    with exporter(tmp_path, cmd, deadline=30) as (proc, port):
        assert wait_for(lambda: runs.exists() and len(runs.read_text().split()) >= 5, seconds=30), "too few runs"
        assert wait_for(lambda: dcgm_succeeded(port), seconds=10), "the probe never succeeded"
        assert wait_for(lambda: not left_running(durations), seconds=5), left_running(durations)
        assert proc.poll() is None  # killed by the runs, not by the exporter's exit


def test_children_that_escape_with_setsid_env_i_are_killed_when_a_hung_tool_is_killed_at_its_deadline(
        tmp_path: Path, durations: dict[str, str]) -> None:
    """The first run leaves three children behind and hangs until it is killed at its 1 s deadline; the
    next run succeeds. With the exporter still running, none of the three is left."""
    runs = tmp_path / "runs"
    cmd = tool(tmp_path, f"echo run >> '{runs}'\n"
                         f"[ $(wc -l < '{runs}') -eq 1 ] && {{\n{escapes(durations)}{SLEEP} 60\n}}\n"
                         f"echo '{HEALTHY}'\n")
    with exporter(tmp_path, cmd, deadline=1) as (proc, port):
        assert wait_for(lambda: dcgm_succeeded(port), seconds=30), "the probe never succeeded after the hung run"
        assert wait_for(lambda: not left_running(durations), seconds=5), left_running(durations)
        assert proc.poll() is None
        assert len(runs.read_text().split()) >= 2


def test_the_three_escapes_do_start_processes_that_outlive_the_tool_that_started_them(
        tmp_path: Path, durations: dict[str, str]) -> None:
    """Guard for the two tests above (whose pass would mean nothing if no sleeper ever started): with no
    exporter to clean up, all three are running after the tool has exited."""
    script = tmp_path / "escape.sh"
    script.write_text("#!/bin/sh\n" + escapes(durations))
    script.chmod(0o755)
    subprocess.run([str(script)], check=True, timeout=10)
    assert wait_for(lambda: len(left_running(durations)) == 3, seconds=5), left_running(durations)
