"""The climb's vocabulary between its parts (decide/climb.py, decide/offenders.py): the step the climb would start
next, and whether the climb goes on within this pass."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Flow(Enum):
    AGAIN = "again"  # the state moved on within this pass: decide the next step
    STOP = "stop"  # decided (or nothing more to do) for this node this pass


@dataclass(frozen=True)
class Step:
    """The rung the climb would start next, why, and whether it is one already recorded and resumed (no budget)."""

    rung: str
    why: str
    resume: bool = False
