"""Recording webhooks after answering them: a bounded queue and a few worker threads.

Writing 40 alerts onto 40 Nodes takes 40 PATCHes, longer than Alertmanager should wait (the target is
a p99 under 50 ms). So the receiver validates a post, checks its nodes against the watch cache,
queues it and answers 202; the workers record it on the Nodes (Remediator.record, resourceVersion-
guarded) and retry what failed a few times. The trade: a crash between the answer and the write
loses that post. Alertmanager sends a group's firing alerts again (at the latest every
repeat_interval), so a lost firing alert comes back; a lost resolution does not, and the episode goes
quiet after episode.quiet_timeout with the node left out of service (never returned by mistake).
While recording fails (the API answers errors), the receiver answers 503 at once, so Alertmanager
retries as before; `hold_off` seconds after the last failure it accepts again, to see whether the API
is back. A node always goes to the same worker, so one replica never races itself on a Node.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from remediator.webhook import Batch, NodeAlert

log = logging.getLogger("gpuhealth.remediator")

EXIT_FLUSH_SECONDS = 10.0  # within gunicorn's graceful timeout (30 s)


@dataclass(frozen=True)
class Outcome:
    recorded: list[str]
    failed: list[tuple[str, str]]  # (node, error)
    api_failing: bool = False  # some failure was the API's (5xx, no answer), not a node's own 4xx


class Intake:
    def __init__(self, record: Callable[[Batch, datetime], Outcome], clock: Callable[[], datetime], *,
                 workers: int = 2, max_pending: int = 1000, retry: Sequence[float] = (0.5, 1.0, 2.0, 5.0),
                 on_drop: Callable[[str, str], None] | None = None, hold_off: float = 5.0) -> None:
        self.record, self.clock, self.retry, self.on_drop = record, clock, tuple(retry), on_drop
        self.workers = workers
        # a node always goes to the same worker: one replica never races itself on a Node (409s)
        self.queues: list[queue.Queue[tuple[Batch, datetime]]] = [queue.Queue(max_pending) for _ in range(workers)]
        self.hold_off = hold_off
        self._failure: tuple[float, str] | None = None  # (monotonic time, error) of the last failed attempt
        self._stop = threading.Event()
        self._started = False
        self._lock = threading.Lock()

    def start(self, stop: threading.Event | None = None) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        if stop is not None:
            threading.Thread(target=self._stop_with, args=(stop,), name="intake-stop", daemon=True).start()
        for i, q in enumerate(self.queues):
            threading.Thread(target=self._work, args=(q,), name=f"intake-{i}", daemon=True).start()
        atexit.register(self.flush_at_exit)

    def flush_at_exit(self, timeout: float = EXIT_FLUSH_SECONDS) -> bool:
        """A clean shutdown (gunicorn's worker exits on SIGTERM, e.g. a rolling update) records what it has
        already answered before the process ends: a resolution answered and then lost would leave its node
        out of service until someone releases it."""
        if self._stop.is_set() or not any(q.unfinished_tasks for q in self.queues):
            return True
        if self.join(timeout):
            log.info("recorded every answered webhook before exiting")
            return True
        left = sum(q.unfinished_tasks for q in self.queues)
        log.warning("exiting with %d answered webhook(s) not recorded: Alertmanager's repeats bring back their "
                    "firing alerts, not their resolutions", left)
        return False

    def stop(self) -> None:
        self._stop.set()

    def _stop_with(self, stop: threading.Event) -> None:
        stop.wait()
        self._stop.set()

    @property
    def failing(self) -> str | None:
        """The last recording error, if it is recent and nothing has been recorded since."""
        failure = self._failure
        if failure is None or time.monotonic() - failure[0] > self.hold_off:
            return None
        return failure[1]

    def submit(self, batch: Batch) -> bool:
        """Queue a post, stamped with the time it was received; False when the queue is full."""
        self.start()
        received = self.clock()
        parts: dict[int, list[NodeAlert]] = {}
        for a in batch.alerts:
            parts.setdefault(zlib.crc32(a.node.encode()) % self.workers, []).append(a)
        with self._lock:
            if any(self.queues[i].full() for i in parts):
                return False
            for i, alerts in parts.items():
                self.queues[i].put_nowait((Batch(alerts=alerts), received))
        return True

    def join(self, timeout: float = 10.0) -> bool:
        """Wait until every queued post has been recorded, or given up (tests; a clean shutdown)."""
        deadline = time.monotonic() + timeout
        while any(q.unfinished_tasks for q in self.queues):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def _work(self, q: queue.Queue[tuple[Batch, datetime]]) -> None:
        while not self._stop.is_set():
            try:
                batch, received = q.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._record(batch, received)
            except Exception:
                log.exception("recording a webhook failed")
            finally:
                q.task_done()

    def _record(self, batch: Batch, received: datetime) -> None:
        for attempt in range(len(self.retry) + 1):
            outcome = self.record(batch, received)
            if not outcome.failed:
                self._failure = None
                return
            if outcome.api_failing:  # refuse webhooks so Alertmanager retries; one node's 4xx (an admission
                # webhook's 403, a 422) is that node's, not a reason to refuse the rest
                self._failure = (time.monotonic(), "; ".join(f"{n}: {e}" for n, e in outcome.failed[:3]))
            failed = {n for n, _ in outcome.failed}
            batch = Batch(alerts=[a for a in batch.alerts if a.node in failed])
            if attempt == len(self.retry) or self._stop.wait(self.retry[attempt]):
                break
        for node, error in outcome.failed:
            log.warning("alerts for %s not recorded (%s): the next repeat from Alertmanager brings them", node,
                        error)
            if self.on_drop is not None:
                self.on_drop(node, error)
