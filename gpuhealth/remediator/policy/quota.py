"""A budget's size: an absolute count or a percentage of a pool (budget.max_disrupted, "10%")."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Quota:
    """An absolute count or a percentage of a pool; a percentage never rounds a pool to zero."""

    count: int | None = None
    percent: float | None = None

    def limit(self, pool_size: int) -> int:
        if self.count is not None:
            return self.count
        return max(1, math.ceil((self.percent or 0.0) * pool_size / 100 - 1e-9))

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"
