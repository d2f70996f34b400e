"""What a probe's tool process may cost: bounded output, a deadline that holds, and nothing left behind.

The tools are real executables (shell scripts standing in for `dcgmi`) that misbehave the ways a
broken or hostile one does: print without end, leave their process group with setsid, hang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.probes.base import OUTPUT_TOO_LARGE, REASONS, TIMEOUT, ProbeError
from gpuhealth.exporter.probes.dcgm import DcgmDiagProbe, DcgmHealthProbe
from gpuhealth.exporter.probes.tools import run_command
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot
from tests.exporter.probes.live_processes import with_argv_word as with_marker
from tests.support import paths, process_tree
from tests.support.polling import wait_for
from tests.support.real_alertmanager import free_port

ROOT = paths.REPO
HEALTHY = '{"body": {"Overall Health": {"value": "Healthy"}}}'


def tool(tmp_path: Path, body: str) -> str:
    path = tmp_path / "dcgmi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def sleeper(marker: str, seconds: int = 30) -> str:
    """A shell command for a process that sleeps and carries `marker` in its argv."""
    return f"{sys.executable} -c 'import time; time.sleep({seconds})' {marker}"


def gone(marker: str, within: float = 5.0) -> bool:
    give_up = time.monotonic() + within
    while with_marker(marker) and time.monotonic() < give_up:
        time.sleep(0.05)
    return not with_marker(marker)


@pytest.fixture
def marker() -> Iterator[str]:
    name = f"gh-tool-test-{uuid.uuid4().hex}"
    yield name
    for pid in with_marker(name):  # only if a test failed: never leave its sleepers running
        os.kill(pid, signal.SIGKILL)


# --- bounded output -------------------------------------------------------------------------------


def test_a_tool_that_prints_without_end_is_killed_and_fails_closed_as_output_too_large(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cmd = tool(tmp_path, f"echo $$ > '{pids}'\nexec yes 'a line of dcgmi output that never ends'\n")
    with pytest.raises(ProbeError) as err:
        DcgmDiagProbe([cmd]).collect(30)
    assert err.value.reason == OUTPUT_TOO_LARGE
    assert err.value.message == f"{cmd} diag -r 1 -j: printed more than 4 MiB, killed"
    assert not Path(f"/proc/{pids.read_text().strip()}").exists()  # killed and reaped, not left running


def test_output_too_large_is_the_probe_failure_reason_the_exporter_serves(tmp_path: Path) -> None:
    snapshot = Snapshot()
    ProbeRunner(DcgmDiagProbe([tool(tmp_path, "exec yes\n")]), snapshot, interval=60, deadline=30).run_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, Expectations()))
    errors = {tuple(sorted(s.labels.items())): s.value
              for fam in text_string_to_metric_families(generate_latest(registry).decode())
              for s in fam.samples if s.name == "gpuhealth_probe_error"}
    assert errors == {(("probe", "diag"), ("reason", "output_too_large")): 1}


def test_every_probe_failure_reason_is_explained_on_the_metrics_page() -> None:
    page = (ROOT / "docs" / "metrics.md").read_text()
    assert {r for r in REASONS if f"`{r}`" not in page} == set()


def test_output_up_to_the_limit_is_read_whole_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    cmd = tool(tmp_path, 'head -c "$1" /dev/zero | tr "\\0" x\n')
    assert run_command([cmd, "1000"], 10, max_output=1000).stdout == "x" * 1000
    with pytest.raises(ProbeError) as err:
        run_command([cmd, "1001"], 10, max_output=1000)
    assert err.value.reason == OUTPUT_TOO_LARGE
    assert "printed more than 1000 bytes" in err.value.message


def test_what_a_tool_prints_on_stderr_counts_toward_the_limit(tmp_path: Path) -> None:
    cmd = tool(tmp_path, 'head -c 600 /dev/zero\nhead -c 600 /dev/zero >&2\n')
    with pytest.raises(ProbeError) as err:
        run_command([cmd], 10, max_output=1000)
    assert err.value.reason == OUTPUT_TOO_LARGE


def test_the_reason_for_a_huge_non_json_output_quotes_only_the_start_of_it(tmp_path: Path) -> None:
    cmd = tool(tmp_path, 'head -c 1000000 /dev/zero | tr "\\0" x\n')
    with pytest.raises(ProbeError) as err:
        DcgmDiagProbe([cmd]).collect(10)
    assert err.value.message.startswith(f"dcgmi diag: no JSON (exit 0): {'x' * 300}...")
    assert len(err.value.message) < 400  # it becomes a log line and a node condition's message


# --- the deadline holds ---------------------------------------------------------------------------


def test_a_tool_whose_escaped_child_holds_its_output_returns_at_the_deadline(tmp_path: Path, marker: str) -> None:
    """The tool prints a good report and exits; a child it moved to its own session keeps stdout open.
    Before, the probe waited for that child (20 s) instead of its deadline."""
    cmd = tool(tmp_path, f'[ "$1" = health ] && [ "$2" = -s ] && exit 0\n'
                         f"setsid {sleeper(marker, 20)} &\necho '{HEALTHY}'\n")
    started = time.monotonic()
    with pytest.raises(ProbeError) as err:
        DcgmHealthProbe([cmd]).collect(1.0)
    assert time.monotonic() - started < 5
    assert err.value.reason == TIMEOUT
    assert "exited, but a process it started held its output open" in err.value.message
    assert gone(marker)


def test_a_hung_tool_and_its_escaped_child_are_both_killed_at_the_deadline(tmp_path: Path, marker: str) -> None:
    cmd = tool(tmp_path, f"setsid {sleeper(marker)} &\n{sleeper(marker)}\n")
    started = time.monotonic()
    with pytest.raises(ProbeError) as err:
        run_command([cmd], 1.0)
    assert time.monotonic() - started < 5
    assert err.value.reason == TIMEOUT
    assert err.value.message == f"{cmd}: no answer within 1s, killed"
    assert gone(marker)


def test_a_tool_that_exits_and_closes_its_output_is_not_waited_for_past_that(tmp_path: Path) -> None:
    cmd = tool(tmp_path, "echo report\necho warning >&2\nexit 3\n")
    started = time.monotonic()
    proc = run_command([cmd], 30)
    assert time.monotonic() - started < 5
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "report\n", "warning\n")


# --- nothing outlives the exporter ----------------------------------------------------------------


@contextlib.contextmanager
def serve(tmp_path: Path, dcgmi: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A real exporter serving /metrics with this dcgmi; killed on the way out if the test did not stop it."""
    port = free_port()
    config = tmp_path / "exporter.yaml"
    config.write_text("probes:\n  dcgm: {interval: 1, deadline: 30}\n")
    proc = process_tree.spawn(
        [sys.executable, "-m", "gpuhealth.exporter", "--listen", f"127.0.0.1:{port}", "--config", str(config),
         "--no-conditions", "--disable", "kmsg,nvml,diag,efa", "--dcgmi", dcgmi],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "NODE_NAME": ""})
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_to_the_exporter_kills_a_hung_tool_and_the_child_that_escaped_it(
        tmp_path: Path, marker: str) -> None:
    """Before, both were left running with parent PID 1 after the exporter stopped."""
    started = tmp_path / "started"
    cmd = tool(tmp_path, f'[ "$1 $2" = "health -s" ] && exit 0\n'
                         f"setsid {sleeper(marker)} &\ntouch '{started}'\n{sleeper(marker)}\n")
    with serve(tmp_path, cmd) as (proc, _):
        assert wait_for(lambda: started.exists() and len(with_marker(marker)) == 2,
                        seconds=20), "the tool never started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    assert gone(marker), [Path(f"/proc/{p}/cmdline").read_bytes() for p in with_marker(marker)]


def test_a_child_a_tool_leaves_behind_is_killed_when_the_run_ends_while_the_exporter_runs(
        tmp_path: Path, marker: str) -> None:
    """A tool that exits with a good report but leaves a daemon (own session, output closed): the
    exporter adopts the daemon as a subreaper and kills it at the end of the run, not at exit."""
    runs = tmp_path / "runs"
    cmd = tool(tmp_path, f'[ "$1 $2" = "health -s" ] && exit 0\necho run >> \'{runs}\'\n'
                         f"setsid {sleeper(marker)} </dev/null >/dev/null 2>&1 &\necho '{HEALTHY}'\n")
    with serve(tmp_path, cmd) as (proc, port):

        def succeeded() -> bool:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                return False
            return 'gpuhealth_probe_success{probe="dcgm"} 1.0' in body

        assert wait_for(succeeded, seconds=20), "the probe never succeeded"
        assert wait_for(lambda: len(runs.read_text().split()) >= 3, seconds=20)  # several runs, each leaving a daemon
        assert wait_for(lambda: len(with_marker(marker)) <= 1, seconds=5), "daemons pile up across runs"
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    assert gone(marker)
