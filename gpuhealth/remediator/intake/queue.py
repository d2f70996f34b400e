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

Retries: a node's own rejection (a 4xx: an admission webhook's 403, a 422) is final and not retried. A
server error, no answer or conflicts that outlasted the recorder's own tries are retried after
`retry` delays, but the worker never sleeps on them: the node's posts wait, in order, until their retry
is due, while the worker goes on with the other nodes' posts. One node never delays another.
"""

from __future__ import annotations

import atexit
import heapq
import logging
import queue
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpuhealth.remediator.intake.webhook import Batch, NodeAlert

log = logging.getLogger("gpuhealth.remediator")

EXIT_FLUSH_SECONDS = 10.0  # within the server's graceful stop


@dataclass(frozen=True)
class RecordSummary:
    """A recording as the queue needs it (intake/recorder.py's RecordResult, frozen): which nodes, which failed."""

    recorded: list[str]
    failed: list[tuple[str, str]]  # (node, error)
    api_failing: bool = False  # some failure was the API's (5xx, no answer), not a node's own 4xx
    rejected: frozenset[str] = frozenset()  # failed nodes whose own 4xx it was: final, not retried


@dataclass
class _Waiting:
    """One post's alerts for one node, waiting for that node's retry."""

    alerts: list[NodeAlert]
    received: datetime
    tries: int  # attempts made so far


@dataclass
class _Lane:
    """One worker's: its queue, and the nodes whose posts wait for a retry (each node's oldest first)."""

    queue: queue.Queue[tuple[Batch, datetime]]
    waiting: dict[str, deque[_Waiting]] = field(default_factory=dict)
    due: list[tuple[float, str]] = field(default_factory=list)  # heap of (monotonic time, node)
    waiting_posts: int = 0


class Intake:
    def __init__(self, record: Callable[[Batch, datetime], RecordSummary], clock: Callable[[], datetime], *,
                 workers: int = 2, max_pending: int = 1000, retry: Sequence[float] = (0.5, 1.0, 2.0, 5.0),
                 on_drop: Callable[[str, str], None] | None = None, hold_off: float = 5.0) -> None:
        self.record, self.clock, self.retry, self.on_drop = record, clock, tuple(retry), on_drop
        self.workers = workers
        self.max_pending = max_pending
        # a node always goes to the same worker: one replica never races itself on a Node (409s)
        self.lanes = [_Lane(queue.Queue(max_pending)) for _ in range(workers)]
        self.hold_off = hold_off
        self._failure: tuple[float, str] | None = None  # (monotonic time, error) of the last failed attempt
        self._stop = threading.Event()
        self._started = False
        self._lock = threading.Lock()

    @property
    def queues(self) -> list[queue.Queue[tuple[Batch, datetime]]]:
        return [lane.queue for lane in self.lanes]

    def start(self, stop: threading.Event | None = None) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        if stop is not None:
            threading.Thread(target=self._stop_with, args=(stop,), name="intake-stop", daemon=True).start()
        for i, lane in enumerate(self.lanes):
            threading.Thread(target=self._work, args=(lane,), name=f"intake-{i}", daemon=True).start()
        atexit.register(self.flush_at_exit)

    def pending(self) -> int:
        """Posts (one worker's share of each) queued or waiting for a retry."""
        # waiting first: a worker moves a post there before it marks the queue's item done
        waiting = sum(lane.waiting_posts for lane in self.lanes)
        return waiting + sum(lane.queue.unfinished_tasks for lane in self.lanes)

    def flush_at_exit(self, timeout: float = EXIT_FLUSH_SECONDS) -> bool:
        """A clean shutdown (SIGTERM, e.g. a rolling update) records what it has already answered before the
        process ends: a resolution answered and then lost would leave its node out of service until someone
        releases it."""
        if self._stop.is_set() or not self.pending():
            return True
        if self.join(timeout):
            log.info("recorded every answered webhook before exiting")
            return True
        log.warning("exiting with %d answered webhook(s) not recorded: Alertmanager's repeats bring back their "
                    "firing alerts, not their resolutions", self.pending())
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
            lanes = [self.lanes[i] for i in parts]
            if any(lane.queue.full() or lane.queue.qsize() + lane.waiting_posts >= self.max_pending
                   for lane in lanes):
                return False
            for i, alerts in parts.items():
                self.lanes[i].queue.put_nowait((Batch(alerts=alerts), received))
        return True

    def join(self, timeout: float = 10.0) -> bool:
        """Wait until every queued post has been recorded, or given up (tests; a clean shutdown)."""
        deadline = time.monotonic() + timeout
        while self.pending():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    # --- the workers ---------------------------------------------------------------------------
    def _work(self, lane: _Lane) -> None:
        while not self._stop.is_set():
            wait = 0.5
            if lane.due:
                wait = min(wait, max(0.0, lane.due[0][0] - time.monotonic()))
            try:
                batch, received = lane.queue.get(timeout=wait)
            except queue.Empty:
                pass
            else:
                try:
                    self._take(lane, batch, received)
                except Exception:
                    log.exception("recording a webhook failed")
                finally:
                    lane.queue.task_done()
            try:
                self._retry_due(lane)
            except Exception:
                log.exception("retrying a webhook's recording failed")

    def _attempt(self, batch: Batch, received: datetime) -> tuple[RecordSummary, set[str]]:
        """Record; the outcome, and the failed nodes worth another try."""
        outcome = self.record(batch, received)
        if not outcome.failed:
            self._failure = None
        elif outcome.api_failing:  # refuse webhooks so Alertmanager retries; one node's 4xx (an admission
            # webhook's 403, a 422) is that node's, not a reason to refuse the rest
            self._failure = (time.monotonic(), "; ".join(f"{n}: {e}" for n, e in outcome.failed[:3]))
        return outcome, {n for n, _ in outcome.failed if n not in outcome.rejected}

    def _take(self, lane: _Lane, batch: Batch, received: datetime) -> None:
        """A new post: its nodes that wait for a retry take it behind their earlier posts (in order); the
        others are recorded now."""
        now: list[NodeAlert] = []
        later: dict[str, list[NodeAlert]] = {}
        for a in batch.alerts:
            (later.setdefault(a.node, []) if a.node in lane.waiting else now).append(a)
        for node, alerts in later.items():
            lane.waiting[node].append(_Waiting(alerts, received, 0))
            lane.waiting_posts += 1
        if not now:
            return
        outcome, again = self._attempt(Batch(alerts=now), received)
        for node, error in outcome.failed:
            if node in again and self.retry:
                lane.waiting[node] = deque([_Waiting([a for a in now if a.node == node], received, 1)])
                lane.waiting_posts += 1
                heapq.heappush(lane.due, (time.monotonic() + self.retry[0], node))
            else:
                self._drop(node, error, node in outcome.rejected)

    def _retry_due(self, lane: _Lane) -> None:
        while lane.due and lane.due[0][0] <= time.monotonic() and not self._stop.is_set():
            _, node = heapq.heappop(lane.due)
            posts = lane.waiting[node]
            while posts and not self._stop.is_set():
                head = posts[0]
                outcome, again = self._attempt(Batch(alerts=head.alerts), head.received)
                if outcome.failed:
                    error = outcome.failed[0][1]
                    if node in again and head.tries < len(self.retry):
                        heapq.heappush(lane.due, (time.monotonic() + self.retry[head.tries], node))
                        head.tries += 1
                        break
                    self._drop(node, error, node in outcome.rejected)
                posts.popleft()
                lane.waiting_posts -= 1
            if not posts:
                del lane.waiting[node]

    def _drop(self, node: str, error: str, rejected: bool) -> None:
        if rejected:
            log.warning("alerts for %s refused by the API (%s): not retried; the next repeat from Alertmanager "
                        "tries again", node, error)
        else:
            log.warning("alerts for %s not recorded after %d tries (%s): the next repeat from Alertmanager "
                        "brings them", node, len(self.retry) + 1, error)
        if self.on_drop is not None:
            self.on_drop(node, error)
