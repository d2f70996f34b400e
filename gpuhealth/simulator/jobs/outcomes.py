"""Job outcomes by job size, as Kokolis et al. (HPCA 2025) report them: by GPUs per job (512+ GPUs is their large
job). Every job, training or small, records its attempts (an attempt ends completed, failed by the infrastructure,
failed by another cause, or taken away by a drain or a preemption) and its end (completed, failed by the platform,
failed by its own doing), and the running time of its attempts, from which the mean time to failure of a size
follows (running time / failed attempts)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# (label, lowest GPUs) of each size, ascending: 1 node, up to 8 nodes, up to 63 nodes, Kokolis's 512+ GPUs split
# at 1,024 and 2,048 (their Fig. 7 names 1,024-GPU jobs' MTTF)
BUCKETS: tuple[tuple[str, int], ...] = (("1-8", 1), ("9-64", 9), ("65-511", 65), ("512-1023", 512),
                                        ("1024-2047", 1024), ("2048+", 2048))
LARGE_GPUS = 512  # Kokolis et al.: 512+ GPU jobs, 14% failing -> 4% after lemon nodes were removed


def bucket_of(gpus: int) -> str:
    label = BUCKETS[0][0]
    for name, low in BUCKETS:
        if gpus >= low:
            label = name
    return label


@dataclass
class SizeTally:
    """One job size's attempts and jobs. `failed_*` of attempts count every failed attempt (one a job resumed
    from too); `jobs_failed_*` the jobs that ended failed."""

    attempts: int = 0
    attempts_failed_infra: int = 0  # a node fault (crash, hang until the collective timeout)
    attempts_failed_other: int = 0  # a cause that is not the infrastructure's nor the job's own bug
    attempts_failed_app: int = 0  # the job's own bug (a user program error)
    attempts_evicted: int = 0  # a drain, a replacement, a preemption (DisruptionTarget: not counted by the Job)
    run_s: float = 0.0  # running time of the attempts (placement to their end)
    jobs_ended: int = 0
    jobs_completed: int = 0
    jobs_failed_platform: int = 0
    jobs_failed_other: int = 0  # by its own bug or another cause that is not the infrastructure's

    def add(self, other: SizeTally) -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)

    @staticmethod
    def pooled(tallies: Iterable[SizeTally]) -> SizeTally:
        """The tallies added together (one size over several runs, or several sizes)."""
        out = SizeTally()
        for t in tallies:
            out.add(t)
        return out

    @property
    def mttf_h(self) -> float | None:
        """Mean running time between failed attempts, the job's own bugs left out (Kokolis et al.'s Fig. 7 counts
        the failures a job meets, not its user errors: its 8-GPU jobs' MTTF is 47.7 days though 24% of RSC-1's jobs
        fail with an application exit)."""
        failed = self.attempts_failed_infra + self.attempts_failed_other
        return self.run_s / failed / 3600.0 if failed else None


@dataclass
class Outcomes:
    by_size: dict[str, SizeTally] = field(default_factory=dict)

    def of(self, gpus: int) -> SizeTally:
        key = bucket_of(gpus)
        t = self.by_size.get(key)
        if t is None:
            t = self.by_size[key] = SizeTally()
        return t

    def large(self) -> SizeTally:
        """The 512+ GPU jobs together."""
        return SizeTally.pooled(self.by_size[name] for name, low in BUCKETS
                                if low >= LARGE_GPUS and name in self.by_size)


def size_figures(t: SizeTally) -> dict[str, float | None]:
    """A size's figures: job success (of the jobs that ended), platform-caused job failures, failed attempts
    (all causes, and the infrastructure's), and the mean time to failure of an attempt (hours)."""
    ended, attempts = t.jobs_ended, t.attempts
    return {
        "jobs_ended": float(ended),
        "job_success_rate": t.jobs_completed / ended if ended else None,
        "platform_failure_rate": t.jobs_failed_platform / ended if ended else None,
        "attempt_failure_rate": (t.attempts_failed_infra + t.attempts_failed_other + t.attempts_failed_app) / attempts
        if attempts else None,
        "attempt_infra_failure_rate": t.attempts_failed_infra / attempts if attempts else None,
        "mttf_hours": t.mttf_h,
    }
