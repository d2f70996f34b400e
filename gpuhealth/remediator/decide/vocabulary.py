"""The words a decision is made of: actions, verdicts, rungs, scopes and severities, as StrEnums.

Each member is its own string (`Action.DRAIN == "drain"`), so the state annotation, the audit lines and the
metric labels read as before; the types keep code from inventing a value that nothing else knows.
"""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """What a decision does to a node."""

    CORDON = "cordon"
    DRAIN = "drain"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPLACE = "replace"
    UNCORDON = "uncordon"
    QUARANTINE_GPU = "quarantine_gpu"  # GPU scope: a DRA device taint on one GPU (cordon: NoSchedule; drain: NoExecute)
    RELEASE_GPU = "release_gpu"  # GPU scope's return to service: gpuhealth's device taints removed
    STOP_GPU_CLIENTS = "stop_gpu_clients"  # reset_gpu's first step: operands paused, the exporter asked to let go
    RESTORE_GPU_CLIENTS = "restore_gpu_clients"  # the reset rung ended (any way): what it paused, restored
    DIAGNOSE = "diagnose"  # the diagnostic Job (decide/diagnosis.py): a repair's validation before return to service
    # before the episode's first rung past drain: the evidence Job (decide/evidence.py), then its summary stored
    COLLECT_EVIDENCE = "collect_evidence"
    STORE_EVIDENCE = "store_evidence"
    END_BURN_IN = "end_burn_in"  # a new node's burn-in passed (decide/burn_in.py): the burn-in taint removed
    NONE = "none"


class Verdict(StrEnum):
    """Whether a decided action runs this pass."""

    EXECUTE = "execute"
    DEFERRED = "deferred"  # not now (a budget, a hold-off, pods unknown): decided again next pass
    SKIPPED = "skipped"  # not at all (held, silenced, nothing to do)


class Deferral(StrEnum):
    """Which limit of the budget (decide/budget.py) held a rung back: the metric label, the simulator's tally."""

    RATE_CAP = "rate_cap"  # budget.max_actions_per_hour
    BREAKER = "breaker"  # the pool's circuit breaker is open
    GPU_BUDGET = "gpu_budget"  # budget.max_quarantined_gpus
    CORDON_BUDGET = "cordon_budget"  # budget.max_cordoned
    DISRUPTION_BUDGET = "disruption_budget"  # budget.max_disrupted


class Rung(StrEnum):
    """The ladder, in order: each rung is more disruptive than the one before."""

    CORDON = "cordon"
    DRAIN = "drain"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPLACE = "replace"


class Remediation(StrEnum):
    """What an alert asks for (its remediation label): a rung of the ladder, or nothing."""

    NONE = "none"
    CORDON = "cordon"
    DRAIN = "drain"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPLACE = "replace"


class AlertStatus(StrEnum):
    """An alert as Alertmanager last said (or, resolved by sync, as its list no longer showed it)."""

    FIRING = "firing"
    RESOLVED = "resolved"


class RungStatus(StrEnum):
    """Where the episode's highest rung stands."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # failed or timed out


class JobStatus(StrEnum):
    """A node-action Job's outcome as listed (act/node_jobs.py job_status), or that there is none."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RUNNING = "running"  # neither done nor failed yet
    MISSING = "missing"  # no such Job: its intent is recorded, the Job not (yet) made


class ResetPhase(StrEnum):
    """The reset_gpu rung's two steps (docs/remediation.md, "The reset sequence")."""

    STOPPING = "stopping"  # the GPU's clients are being stopped
    RESETTING = "resetting"  # the Job resets the GPU


class EvidenceOutcome(StrEnum):
    """How the episode's evidence before its first rung past drain ended (decide/evidence.py)."""

    COLLECTED = "collected"  # the Job succeeded and its summary is stored
    INCOMPLETE = "incomplete"  # the Job failed, hung past evidence.max_wait or never started: what there was, stored


class Scope(StrEnum):
    """What a fault costs: the whole node, or one GPU of it."""

    NODE = "node"
    GPU = "gpu"


class TaintEffect(StrEnum):
    """A DRA device taint's effect (resource.k8s.io DeviceTaint)."""

    NO_SCHEDULE = "NoSchedule"  # no new claim gets the device
    NO_EXECUTE = "NoExecute"  # and kube-controller-manager evicts the pods whose claims use it


class Severity(StrEnum):
    """A Kubernetes Event's type."""

    NORMAL = "Normal"
    WARNING = "Warning"


RUNG_ORDER: tuple[Rung, ...] = tuple(Rung)
DISRUPTIVE: frozenset[Action] = frozenset({Action.DRAIN, Action.STOP_GPU_CLIENTS, Action.RESET_GPU, Action.REBOOT,
                                           Action.REPLACE})
NEEDS_DRAINED: frozenset[Action] = frozenset({Action.STOP_GPU_CLIENTS, Action.RESET_GPU, Action.REBOOT, Action.REPLACE})
JOB_RUNGS: frozenset[Rung] = frozenset({Rung.RESET_GPU, Rung.REBOOT})


class Purpose(StrEnum):
    """Why the diagnostic runs: its level (policy diagnose.level or validation_level) and its Job's name follow."""

    DIAGNOSE = "diagnose"  # before a node leaves for a person or is replaced: the result decides
    VALIDATE = "validate"  # after a reset, reboot or replacement, before the taint comes off
    SWEEP = "sweep"  # an idle node's scheduled check
    BURN_IN = "burn-in"  # a new node, before the burn-in taint comes off (decide/burn_in.py)
