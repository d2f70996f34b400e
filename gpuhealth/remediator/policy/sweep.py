"""The `sweep:` section: idle-node sweeps (decide/sweep.py; docs/remediation.md, "Idle-node sweeps"). On a schedule,
a node with no GPU pod is cordoned, runs the diagnostic Job at a deep level, and returns at once if it passes: the
one way to find silent corruption and latent faults before a job does."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.policy.keys import setting
from gpuhealth.remediator.policy.quota import Quota
from gpuhealth.remediator.policy.readings import boolean, checked, duration, integer, quota


@dataclass(frozen=True)
class SweepSettings:
    """The `sweep:` section. Off by default: a sweep takes a healthy node out of service for its level's time (up to
    half an hour at level 3) and spends the pool's cordon budget; a fleet turns it on knowing that."""

    enabled: bool = field(default=False, metadata=setting(
        boolean, "Sweep idle nodes on a schedule (needs diagnose.judge_image, which the chart sets)."))
    interval: timedelta = field(default=timedelta(days=7), metadata=setting(
        checked(duration, lambda d: d > timedelta(0), "expected a duration above 0"),
        "How often each node is swept: a node swept (or whose sweep was started) less than this long ago is not "
        "swept again. Remembered on the Node (gpuhealth.io/last-sweep), so a restart does not sweep again."))
    max_per_pool: Quota = field(default=Quota(count=1), metadata=setting(
        quota, "Nodes of a pool being swept at once: a count or a percentage (a sweep's cordon also counts in "
        "budget.max_cordoned)."))
    level: int = field(default=3, metadata=setting(
        checked(integer(1), lambda v: v in (2, 3), "expected 2 or 3"),
        "The sweep's dcgmi diag level (3: up to half an hour, the stress and memory tests that find what no "
        "counter shows; 2: about two minutes)."))
    idle_for: timedelta = field(default=timedelta(hours=1), metadata=setting(
        duration, "How long a node must have been idle before a sweep: no GPU pod on it (running or still listed "
        "finished) created or started within this, and the Node itself at least this old (a new node is about to "
        "get work)."))
