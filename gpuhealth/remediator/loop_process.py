"""The reconcile loop in a process of its own: what `gpuhealth-remediator serve` runs (`--loop process`, the default).

One process held the webhook receiver, the intake's workers and the loop with its parallel writers; a webhook's
answer (~1 ms of CPU) waited for the GIL behind the loop's writes (the kubernetes client's work is CPU) and missed
its 50 ms p99 during a storm (docs/benchmarks.md). Now the process `serve` starts serves HTTP, checks each post's
nodes against a watch cache of the Nodes and records the alerts on them (the intake); a child process, started from
the same code ('spawn'), runs the loop: leader election, passes, writes, the Alertmanager sync, the workload watcher,
with its own watch caches of Nodes and Pods and its own API client (and rate limit: kube_api.qps is per process),
at a lower CPU priority (LOOP_NICE) than the receiver.

They talk over two pipes, never through shared state:
- receiver -> loop: `wake` after each recording (with the resourceVersion written: the loop waits until its own
  watch has seen it, so the pass it wakes for reads the alert), `metrics` (a scrape), `stop`;
- loop -> receiver: every STATUS_EVERY seconds its status (ready: its API calls and watches are healthy; the
  cleanup's mark on the Lease, which stops the recording too), and the answers to `metrics`.

Fail closed: the loop's process ending while the receiver runs (a crash, the OOM killer, a signal) fails /healthz
and stops the receiver (exit 1: the kubelet restarts the container; no replica keeps answering webhooks with no one
acting on them); so does no status for STATUS_STALE_S (a frozen process), and a status saying the pass under way is
stuck (past act/reconciler.py pass_liveness_bound: a call that never returns, a loop that never ends). The receiver
ending (its pipe closes) stops the loop after the pass under way. SIGTERM (to the receiver, as the kubelet sends it,
or to both) stops both: the receiver records what it answered, then the loop ends its pass (http_server.serve).

A dry run keeps the loop in the receiver's process (a thread): its writes live in that process's memory
(clients/dry_run.py), where the loop must read them.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from gpuhealth.remediator.clients.watch_cache import newer_rv

if TYPE_CHECKING:
    from gpuhealth.remediator.serve_config import ServeConfig
    from gpuhealth.remediator.service import Remediator

log = logging.getLogger("gpuhealth.remediator")

STATUS_EVERY = 1.0  # seconds between the loop process's status messages
STATUS_POLL_S = 0.02  # a changed status (the cleanup's mark seen, readiness) is sent this soon
STATUS_STALE_S = 60.0  # no status for this long (the process frozen): /healthz fails
READY_STALE_S = 15.0  # no status for this long: /readyz fails
METRICS_TIMEOUT_S = 5.0  # a scrape waits this long for the loop's metrics, else 503
WAKE_WAIT_S = 2.0  # a wake waits this long for the loop's watch to show the recorded write
# The loop's niceness: where the two processes want more CPU than the pod has, the receiver's answer comes first (a
# webhook's ~1 ms) and the loop takes the rest. Raising one's own niceness needs no privilege.
LOOP_NICE = 5


@dataclass(frozen=True)
class LoopStatus:
    ready: bool
    stopped_by: str | None  # gpuhealth-remediator cleanup holds the Lease (its mark): nothing is recorded
    stuck: str | None = None  # the pass under way has run past its bound (Reconciler.stuck): /healthz fails


class LoopProcess:
    """The receiver's handle on the loop's process: start, wake, ask, watch, stop. `on_end(exitcode)`: called once
    when the process ends without being asked to (0: it was stopped by a signal of its own; else it died)."""

    def __init__(self, config: ServeConfig, on_end: Callable[[int], None] = lambda code: None) -> None:
        self.config = replace(config, token=None)  # the loop needs no webhook token (and a TokenFile has a lock)
        self.on_end = on_end
        self.died: int | None = None  # its exit code when it ended on its own, not asked to (fail closed)
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._commands: Connection | None = None
        # What the receiver's threads ask of the loop, sent by one thread (_sender): a request thread or an intake
        # worker never blocks on the pipe, whose buffer fills when the loop's process is frozen or not reading.
        self._outbox = threading.Condition()
        self._wake_rv: str | None = None  # a wake not sent yet: the newest resourceVersion recorded (coalesced)
        self._asks: list[int] = []  # metrics asks not sent yet
        self._stop_asked = False
        self._ended = threading.Event()  # the process has ended (reaped by _watch)
        self._status: LoopStatus | None = None
        self._status_at = time.monotonic()
        self._answers: dict[int, list[str]] = {}
        self._answered = threading.Condition()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()

    # --- life ------------------------------------------------------------------------------------------
    def start(self, stop: threading.Event | None = None) -> None:
        commands_in, commands_out = self._ctx.Pipe(duplex=False)
        reports_in, reports_out = self._ctx.Pipe(duplex=False)
        self._proc = self._ctx.Process(target=child_main, args=(self.config, commands_in, reports_out),
                                       name="gpuhealth-remediator-loop", daemon=False)
        self._proc.start()
        commands_in.close()  # the child's ends: closed here, so that its death reads as the end of the pipe
        reports_out.close()
        self._commands = commands_out
        self._status_at = time.monotonic()
        log.info("the reconcile loop runs in process %d", self._proc.pid)
        threading.Thread(target=self._read, args=(reports_in,), name="loop-reports", daemon=True).start()
        threading.Thread(target=self._watch, name="loop-watch", daemon=True).start()
        threading.Thread(target=self._sender, args=(commands_out,), name="loop-commands", daemon=True).start()
        if stop is not None:
            threading.Thread(target=self._stop_with, args=(stop,), name="loop-stop", daemon=True).start()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    def stop(self) -> None:
        """Ask the loop to end after the pass under way."""
        self._stopping.set()
        with self._outbox:
            self._stop_asked = True
            self._outbox.notify()

    def _stop_with(self, stop: threading.Event) -> None:
        stop.wait()
        self.stop()

    def join(self, timeout: float) -> None:
        """Stop it and wait `timeout` seconds; then SIGTERM, SIGKILL: never left running behind the receiver."""
        if self._proc is None:
            return
        self.stop()
        self._proc.join(timeout)
        for end in (self._proc.terminate, self._proc.kill):
            if self._proc.exitcode is not None:
                break
            log.warning("the reconcile loop's process did not stop within %g s: %s", timeout, end.__name__)
            end()
            self._proc.join(2.0)
        log.info("the reconcile loop's process ended (exit code %s)", self._proc.exitcode)

    def _watch(self) -> None:
        self._proc.join()
        self._ended.set()
        with self._outbox:
            self._outbox.notify()
        if self._stopping.is_set():  # asked to: join() says how it ended (and may have reaped it first)
            return
        exitcode = self._proc.exitcode
        code = -1 if exitcode is None else int(exitcode)
        if code == 0:
            log.warning("the reconcile loop's process stopped (a signal): stopping the receiver too")
        else:
            self.died = code
            log.error("the reconcile loop's process ended (exit code %d): stopping the receiver (fail closed: the "
                      "pod restarts, no webhook is taken with no loop to act on it)", code)
        self.on_end(code)

    # --- messages --------------------------------------------------------------------------------------
    def _sender(self, conn: Connection) -> None:
        """The one thread that writes to the loop's pipe (and the only one a full pipe holds up): a stop first, then
        the metrics asks, then one wake for every recording since the last (the newest resourceVersion)."""
        while True:
            with self._outbox:
                self._outbox.wait_for(lambda: self._ended.is_set() or self._stop_asked or bool(self._asks)
                                      or self._wake_rv is not None)
                if self._ended.is_set():
                    return
                messages: list[tuple[Any, ...]] = [("stop",)] if self._stop_asked else []
                messages += [("metrics", ask) for ask in self._asks]
                if self._wake_rv is not None:
                    messages.append(("wake", self._wake_rv))
                self._stop_asked, self._asks, self._wake_rv = False, [], None
            try:
                for message in messages:
                    conn.send(message)
            except (OSError, ValueError):  # it ended meanwhile: _watch says so
                return

    def wake(self, resource_version: str = "") -> None:
        """Something was recorded (at `resource_version`): a pass now, once the loop's watch has seen it."""
        with self._outbox:
            self._wake_rv = newer_rv(self._wake_rv or "", resource_version)
            self._outbox.notify()

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message[0] == "status":
                self._status, self._status_at = message[1], time.monotonic()
            elif message[0] == "metrics":
                with self._answered:
                    if message[1] in self._answers:
                        self._answers[message[1]].append(message[2])
                        self._answered.notify_all()

    def metrics_text(self, timeout: float = METRICS_TIMEOUT_S) -> str | None:
        """The loop's metrics (text exposition), or None when it does not answer within `timeout`."""
        ask = next(self._ids)
        with self._answered:
            self._answers[ask] = []
        try:
            if self._proc is None or self._ended.is_set():
                return None
            with self._outbox:
                self._asks.append(ask)
                self._outbox.notify()
            with self._answered:
                self._answered.wait_for(lambda: bool(self._answers[ask]), timeout)
                answer = self._answers[ask]
            return answer[0] if answer else None
        finally:
            with self._answered:
                self._answers.pop(ask, None)

    # --- what the probes and the recorder read ---------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        """(alive, why): the process runs and its status is recent."""
        if self._proc is None:
            return False, "the reconcile loop's process was not started"
        if self._proc.exitcode is not None:
            return False, f"the reconcile loop's process ended (exit code {self._proc.exitcode})"
        quiet = time.monotonic() - self._status_at
        if quiet > STATUS_STALE_S:
            return False, f"no word from the reconcile loop's process for {quiet:.0f} s"
        status = self._status
        if status is not None and status.stuck:
            return False, status.stuck
        return True, "running"

    def ready(self) -> bool:
        status = self._status
        return (status is not None and status.ready and self.health()[0]
                and time.monotonic() - self._status_at <= READY_STALE_S)

    @property
    def stopped_by(self) -> str | None:
        status = self._status
        return status.stopped_by if status is not None else None


# --- the child ---------------------------------------------------------------------------------------------
class _Child:
    """The loop process's side of the pipes."""

    def __init__(self, rem: Remediator, stop: threading.Event, reports: Connection) -> None:
        self.rem, self.stop, self.reports = rem, stop, reports
        self._lock = threading.Lock()
        self._wanted = threading.Condition()
        self._wake_rv: str | None = None  # a wake waiting for the watch to show this resourceVersion

    def report(self, message: tuple[Any, ...]) -> None:
        try:
            with self._lock:
                self.reports.send(message)
        except (OSError, ValueError):  # the receiver is gone
            self.end("the receiver's process is gone")

    def end(self, why: str) -> None:
        if not self.stop.is_set():
            log.info("reconcile loop: %s: stopping after the pass under way", why)
        self.stop.set()
        self.rem.wake.set()

    def commands(self, conn: Connection) -> None:
        from prometheus_client import generate_latest

        while not self.stop.is_set():
            try:
                message = conn.recv()
            except (EOFError, OSError):
                self.end("the receiver's process is gone")
                return
            if message[0] == "wake":
                with self._wanted:
                    self._wake_rv = newer_rv(self._wake_rv or "", message[1])
                    self._wanted.notify()
            elif message[0] == "metrics":
                self.report(("metrics", message[1], generate_latest(self.rem.metrics.registry).decode()))
            elif message[0] == "stop":
                self.end("asked to stop")

    def wakes(self) -> None:
        """Wake the loop once its watch has seen the write it is woken for (at most WAKE_WAIT_S later)."""
        while not self.stop.is_set():
            with self._wanted:
                self._wanted.wait_for(lambda: self._wake_rv is not None or self.stop.is_set(), 1.0)
                rv, self._wake_rv = self._wake_rv, None
            if rv is None:
                continue
            cache = self.rem.kube.cache
            if cache is not None and rv:
                cache.nodes.wait_for(rv, WAKE_WAIT_S)
            self.rem.wake.set()

    def statuses(self) -> None:
        """Every STATUS_EVERY seconds, and within STATUS_POLL_S of a change: the receiver stops recording as soon as
        this process has seen the cleanup's mark, not up to a period later."""
        sent: LoopStatus | None = None
        sent_at = 0.0
        while not self.stop.is_set():
            status = LoopStatus(self.rem.ready(), self.rem.elector.stopped_by, self.rem.loop.stuck())
            if status != sent or time.monotonic() - sent_at >= STATUS_EVERY:
                self.report(("status", status))
                sent, sent_at = status, time.monotonic()
            self.stop.wait(STATUS_POLL_S)


def child_main(config: ServeConfig, commands: Connection, reports: Connection) -> None:
    """The loop process: the watches of Nodes and Pods, the loop (and the workload watcher), until told to stop."""
    from gpuhealth.remediator.serve_config import build_remediator

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.nice(LOOP_NICE)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, _frame: stop.set())
    rem = build_remediator(config)
    child = _Child(rem, stop, reports)
    signal.signal(signal.SIGTERM, lambda signum, _frame: child.end(f"signal {signum}"))
    signal.signal(signal.SIGINT, lambda signum, _frame: child.end(f"signal {signum}"))
    if stop.is_set():
        return
    rem.kube.start_cache(stop)  # before the first status: ready once the watches have listed the fleet
    for target in (child.statuses, child.wakes):
        threading.Thread(target=target, name=f"loop-{target.__name__}", daemon=True).start()
    threading.Thread(target=child.commands, args=(commands,), name="loop-commands", daemon=True).start()
    if rem.policy.workloads.enabled:  # classify failed workload pods (docs/jobs.md); only the leader writes
        rem.start_workload_watcher(stop, config.interval)
    log.info("reconcile loop: process %d, pass every %g s", os.getpid(), config.interval)
    rem.run_forever(stop, config.interval)
    rem.flush_events()
