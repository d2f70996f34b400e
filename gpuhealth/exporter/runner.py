"""Runs each probe on its own interval under a hard deadline. A hung probe never hangs the exporter."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from gpuhealth.exporter.catalog import FAMILIES, Family
from gpuhealth.exporter.probes.base import BAD_OUTPUT, TIMEOUT, Probe, ProbeError, ProbePaused, classify
from gpuhealth.exporter.samples import ProbeResult
from gpuhealth.exporter.snapshot import Snapshot

log = logging.getLogger(__name__)

# Extra time the runner allows beyond a probe's deadline, so a probe that enforces its own deadline
# (and kills its subprocess) reports that itself, before the runner gives up on it.
GRACE_SECONDS = 1.0
# A failed probe is tried again this soon (or at its interval, if shorter): an hourly diagnostic that
# failed once should not hold the node's probe condition False for an hour.
RETRY_AFTER_FAILURE_SECONDS = 60.0
# How often a runner waiting for its next run looks at the stop event (it waits on its own wake-up event).
STOP_CHECK_SECONDS = 1.0


def validate(result: Any) -> ProbeResult:
    """A result that does not fit the catalog is garbage, and garbage is a failure, not data."""
    if not isinstance(result, ProbeResult):
        raise ProbeError(BAD_OUTPUT, f"probe returned {type(result).__name__}, not a ProbeResult")
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in result.samples:
        family: object = s.family
        # Only a handle of the catalog: a family made elsewhere is declared nowhere, whatever its name.
        if not isinstance(family, Family) or FAMILIES.get(family.name) is not family:
            raise ProbeError(BAD_OUTPUT, f"unknown metric {getattr(family, 'name', family)}")
        key = (family.name, tuple(sorted(s.labels.items())))
        if key in seen:  # one duplicate makes Prometheus reject the whole scrape
            raise ProbeError(BAD_OUTPUT, f"duplicate sample {s.name}{s.labels}")
        seen.add(key)
        if set(s.labels) != set(family.labels):
            raise ProbeError(BAD_OUTPUT, f"{s.name}: labels {sorted(s.labels)} != {sorted(family.labels)}")
        if not math.isfinite(s.value):
            raise ProbeError(BAD_OUTPUT, f"{s.name}{s.labels}: value {s.value}")
    return result


class ProbeRunner:
    def __init__(self, probe: Probe, snapshot: Snapshot, interval: float, deadline: float) -> None:
        self.probe = probe
        self.snapshot = snapshot
        self.interval = interval
        self.deadline = deadline
        self._hung: threading.Thread | None = None
        self._wake = threading.Event()
        snapshot.register(probe.name, interval, deadline)

    def wake(self) -> None:
        """Run now rather than at the end of the wait (a probe resumed after a GPU reset)."""
        self._wake.set()

    def run_once(self) -> bool:
        """One run under the deadline; True if it succeeded."""
        self._run()
        return self.snapshot.view()[self.probe.name].success

    def _run(self) -> None:
        name = self.probe.name
        started = time.monotonic()
        if self._hung is not None:
            if self._hung.is_alive():
                # No age in the message: it becomes a node condition, written only when it changes.
                self.snapshot.record_failure(name, TIMEOUT, "a previous run is still hung", 0.0, started)
                return
            self._hung = None
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = self.probe.collect(self.deadline)
            except BaseException as exc:  # everything a probe lets escape is a failure, never a crash
                box["error"] = exc

        worker = threading.Thread(target=work, name=f"probe-{name}", daemon=True)
        worker.start()
        worker.join(self.deadline + GRACE_SECONDS)
        duration = time.monotonic() - started
        if worker.is_alive():
            self._hung = worker
            self.snapshot.record_failure(name, TIMEOUT, f"no result within {self.deadline:g}s", duration, started)
            log.warning("probe %s: no result within %gs (fail closed)", name, self.deadline)
            return
        if isinstance(box.get("error"), ProbePaused):
            return  # paused for a GPU reset: it did not run, and nothing is recorded (the pause is, by its owner)
        try:
            if "error" in box:
                raise classify(box["error"])
            result = validate(box.get("result"))
        except ProbeError as err:
            self.snapshot.record_failure(name, err.reason, err.message, duration, started)
            log.warning("probe %s failed (%s): %s", name, err.reason, err.message)
            return
        self.snapshot.record_success(name, result, duration, started)

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            ok = self.run_once()
            wait = self.interval if ok else min(self.interval, RETRY_AFTER_FAILURE_SECONDS)
            result = self.snapshot.view()[self.probe.name].result
            if ok and result is not None and result.run_again_after is not None:
                wait = min(wait, max(1.0, result.run_again_after))
            # As stop.wait(), but wake() ends the wait too; a stop is seen within STOP_CHECK_SECONDS.
            until = started + wait
            while not stop.is_set() and not self._wake.is_set() and time.monotonic() < until:
                self._wake.wait(min(STOP_CHECK_SECONDS, until - time.monotonic()))
            self._wake.clear()

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.loop, args=(stop,), name=f"runner-{self.probe.name}", daemon=True)
        thread.start()
        return thread
