"""The tool supervisor: a diagnostic tool (dcgmi) run under a hard deadline and a bound on its output, and nothing of
it left running: its process group, descendants that left the group, and leftovers that re-parented to the exporter
(which makes itself their reaper at start-up, `adopt_tool_orphans`) are killed and reaped; `stop_tools` at exit."""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import threading
import time

from gpuhealth.exporter.probes.base import ERROR, MISSING_TOOL, OUTPUT_TOO_LARGE, PERMISSION_DENIED, TIMEOUT, ProbeError

log = logging.getLogger(__name__)

# The largest real dcgmi output is a few hundred kB (`dcgmi diag -r 4 -j` on 8 GPUs; the recorded
# `-r 3` report is 3 kB). 4 MiB is far above that and, parsed, still far below the chart's 160Mi limit.
MAX_OUTPUT_BYTES = 4 * 1024 * 1024
# How long cleanup may wait for killed processes to go: it must fit inside the runner's grace second.
_REAP_WAIT_SECONDS = 0.5
_SWEEP_SECONDS = 0.2
_STOP_SECONDS = 2.0  # at exit: the pod's termination grace period is far longer
# In each tool's environment, so that a descendant that left its process group is still known as ours.
TOOL_MARKER = "GPUHEALTH_TOOL_RUN"

_lock = threading.Lock()  # held while spawning and while sweeping, so a sweep never sees a half-started tool
_running: dict[int, str] = {}  # pid of each running tool -> its run's marker value
_runs = 0
_adopted = False
_stopping = False


def adopt_tool_orphans() -> bool:
    """Make this process the reaper of its tools' descendants (PR_SET_CHILD_SUBREAPER).

    A tool's child that calls setsid() leaves the tool's process group, and when the tool exits it
    would re-parent to init and outlive the exporter. As a subreaper (or as PID 1 in a container)
    the exporter gets it back and kills it at the end of the run. Call it from the exporter's main
    only: from then on every child of this process that is not a running tool is taken to be a
    tool's leftover, killed and reaped.
    """
    global _adopted
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.warning("cannot become the reaper of tool processes (%s): a tool's escaped children may outlive it",
                    exc)
        return False
    _adopted = True
    return True


def stop_tools() -> None:
    """Kill every running tool and every leftover of one; tools asked for later are refused."""
    global _stopping
    _stopping = True
    with _lock:
        for pid, run in list(_running.items()):
            _kill_tree(pid)
            if not _adopted:
                _kill_marked(run)
    _sweep(None, _STOP_SECONDS)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(p) for p in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, parent) of every process below pid, found through /proc/PID/task/TID/children."""
    found: list[tuple[int, int]] = []
    todo = [pid]
    while todo and len(found) < 10_000:
        parent = todo.pop()
        for child in _children(parent):
            found.append((child, parent))
            todo.append(child)
    return found


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0].decode(), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def _kill(pid: int, parent: int) -> None:
    """SIGKILL pid if it is still parent's child: a pidfd pins the process, so a reused pid is never hit."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        stat = _stat(pid)
        if stat is not None and stat[1] == parent:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return
    try:
        stat = _stat(pid)
        if stat is not None and stat[1] == parent:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)


def _kill_tree(pid: int) -> None:
    """A child of this process (a tool, or a leftover of one), its process group if it leads one, and its
    descendants that left the group (setsid, setpgid)."""
    below = _descendants(pid)  # before the group dies: then its members' children re-parent
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)  # pid is not reaped yet, so its group id cannot have been reused
    _kill(pid, os.getpid())  # a leftover need not lead a group: one whose group leader exited leads none
    for child, parent in below:
        _kill(child, parent)


def _marker(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(TOOL_MARKER.encode() + b"="):
            return item.partition(b"=")[2].decode(errors="replace")
    return None


def _sweep(run: str | None, within: float = _SWEEP_SECONDS) -> None:
    """Kill and reap leftovers that re-parented to this process: at the end of a run (run given), every
    one not marked as a run still in progress; at exit (run None), all.

    A leftover that wiped its environment (`setsid env -i ...`) carries no marker, so which run it came
    from is unknown: it is killed at the end of whichever run ends first, never left to pile up."""
    if not _adopted:
        return
    me = os.getpid()
    give_up = time.monotonic() + within
    while True:
        left = False
        with _lock:
            in_progress = set(_running.values())
            for child in _children(me):
                stat = _stat(child)
                if stat is None:
                    continue
                if child in _running:
                    # At exit the killed tools' own leftovers re-parent here only once the tools are dead.
                    left = left or (run is None and stat[0] != "Z")
                    continue
                if stat[0] == "Z":
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(child, os.WNOHANG)
                    continue
                if run is None or _marker(child) not in in_progress:
                    _kill_tree(child)
                    left = True
        if not left or time.monotonic() >= give_up:
            return
        time.sleep(0.01)


def _kill_marked(run: str) -> None:
    """Without a subreaper, a leftover whose parent died re-parented elsewhere: find it by its marker."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or _marker(int(name)) != run:
            continue
        try:
            fd = os.pidfd_open(int(name))
        except (OSError, AttributeError):
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)
            continue
        try:
            if _marker(int(name)) == run:  # still the same process: the pidfd pins it
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            os.close(fd)


def _spawn(argv: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    global _runs
    with _lock:
        if _stopping:
            raise ProbeError(ERROR, f"{argv[0]}: not started, the exporter is stopping")
        _runs += 1
        run = f"{os.getpid()}.{_runs}"
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                # Not preexec_fn (PR_SET_PDEATHSIG): Python code between fork and exec can deadlock in a
                # process with threads, as this one has. A new session is set up by subprocess's C code.
                start_new_session=True, env={**os.environ, TOOL_MARKER: run},
            )
        except FileNotFoundError as exc:
            raise ProbeError(MISSING_TOOL, f"{argv[0]}: not found") from exc
        except PermissionError as exc:
            raise ProbeError(PERMISSION_DENIED, f"{argv[0]}: permission denied") from exc
        _running[proc.pid] = run
        return proc, run


def _exited(pid: int) -> bool:
    """Whether the tool has exited, without reaping it (its pid, and so its group id, stay reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _size(n: int) -> str:
    return f"{n / 1048576:g} MiB" if n >= 1048576 else f"{n} bytes"


def _read(proc: subprocess.Popen[bytes], until: float, limit: int) -> tuple[bytes, bytes, str | None]:
    """What the tool prints until it has exited and closed its output. Stops early, returning a
    failure reason, at the deadline (timeout) or past `limit` bytes (output_too_large)."""
    assert proc.stdout is not None and proc.stderr is not None
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total = 0
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)  # readable once the tool exits: no polling for it
    except (OSError, AttributeError):
        pidfd = None
    exited = False
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        try:
            while True:
                if pidfd is None and not exited:
                    exited = _exited(proc.pid)
                if exited and not any(fd in chunks for fd in sel.get_map()):
                    break
                left = until - time.monotonic()
                if left <= 0:
                    return b"", b"", TIMEOUT
                for key, _ in sel.select(left if pidfd is not None else min(left, 0.05)):
                    if key.fd == pidfd:
                        exited = True
                        sel.unregister(pidfd)
                        continue
                    with contextlib.suppress(BlockingIOError):
                        data = os.read(key.fd, 65536)
                        if not data:
                            sel.unregister(key.fd)
                            continue
                        total += len(data)
                        if total > limit:
                            return b"", b"", OUTPUT_TOO_LARGE
                        chunks[key.fd].append(data)
        finally:
            if pidfd is not None:
                os.close(pidfd)
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()]), None


def _finish(proc: subprocess.Popen[bytes], run: str, failed: bool) -> None:
    """Leave nothing of the run behind: kill what is left of the tool, reap it, close its pipes."""
    with _lock:
        _kill_tree(proc.pid)
        if failed and not _adopted:
            _kill_marked(run)
    try:
        proc.wait(_REAP_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        # Stuck in the kernel (D state): SIGKILL is pending. The next sweep, or subprocess, reaps it.
        log.warning("%s (pid %d) did not die within %gs of SIGKILL", proc.args, proc.pid, _REAP_WAIT_SECONDS)
    finally:
        with _lock:
            _running.pop(proc.pid, None)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()  # not read to EOF: an escaped descendant may hold it open for ever
    _sweep(run)


def run_command(argv: list[str], deadline: float,
                max_output: int = MAX_OUTPUT_BYTES) -> subprocess.CompletedProcess[str]:
    """Run a diagnostic command under a hard deadline and a bound on what it prints.

    The run ends when the tool has exited and closed its output. At the deadline, or once stdout and
    stderr together pass `max_output` bytes, it is killed: its process group and every descendant,
    also one that left the group and still holds the pipes open. Nothing of it is left running.

    Raises ProbeError(missing_tool | permission_denied | timeout | output_too_large). A non-zero exit
    is returned, not raised, because tools such as `dcgmi diag` exit non-zero yet print a valid report.
    """
    until = time.monotonic() + deadline
    proc, run = _spawn(argv)
    failure: str | None = ERROR
    try:
        out, err, failure = _read(proc, until, max_output)
        tool_exited = _exited(proc.pid)
    finally:
        _finish(proc, run, failed=failure is not None)
    command = " ".join(argv)
    if failure == OUTPUT_TOO_LARGE:
        raise ProbeError(OUTPUT_TOO_LARGE, f"{command}: printed more than {_size(max_output)}, killed")
    if failure == TIMEOUT:
        if tool_exited:
            raise ProbeError(TIMEOUT, f"{command}: exited, but a process it started held its output open "
                                      f"past the {deadline:.3g}s deadline, killed")
        raise ProbeError(TIMEOUT, f"{command}: no answer within {deadline:.3g}s, killed")
    return subprocess.CompletedProcess(argv, proc.returncode if proc.returncode is not None else -9,
                                       out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
