"""A client-side limit on the rate of requests to the API server: a token bucket, as client-go's
(flowcontrol.NewTokenBucketRateLimiter: `qps` tokens a second, at most `burst` saved up; each request takes one,
waiting for it when there is none).

Each caller reserves its token under the lock (the bucket may go below zero: the reservation is the caller's
place in line) and then waits outside it, so waiting callers are served in the order they asked, and the
limit holds over any window: at most `burst + qps * seconds` requests start in `seconds`. The clock and the
sleep are injectable: a test drives the bucket on its own time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1 (got qps {qps}, burst {burst})")
        self.qps, self.burst, self.clock, self.sleep = qps, burst, clock, sleep
        self._tokens = float(burst)  # a new bucket is full, as client-go's
        self._at = clock()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds callers were told to wait, in all (the metric's source)

    def reserve(self) -> float:
        """Take a token: the seconds to wait before using it (0 when one was there)."""
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited += wait
            return wait

    def take(self) -> float:
        """Take a token, waiting for it; the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            self.sleep(wait)
        return wait
