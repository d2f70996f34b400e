"""A probe whose behaviour each test sets: the stand-in for hardware that cannot exist here."""

from __future__ import annotations

import threading

from gpuhealth.exporter.samples import ProbeResult


class FakeProbe:
    """Stands in for hardware: what it does on each call is set by the test."""

    def __init__(self, name: str, behaviour: object) -> None:
        self.name = name
        self.behaviour = behaviour
        self.calls = 0
        self.release = threading.Event()

    def collect(self, deadline: float) -> ProbeResult:
        self.calls += 1
        if self.behaviour == "hang":
            self.release.wait(30)
            return ProbeResult()
        if isinstance(self.behaviour, BaseException):
            raise self.behaviour
        assert isinstance(self.behaviour, ProbeResult)
        return self.behaviour
