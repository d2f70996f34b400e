"""The reasons of the Events the remediator writes, as one StrEnum, and what a pass observed about a rung.

An action that starts writes its action's reason (Cordoned, Draining, GPUReset, Reboot, Replace,
ReturnedToService) and `<reason>Failed` when it fails; a rung's outcome is a Note (GPUResetSucceeded,
RebootSucceeded, <Rung>TimedOut, ...). A Note carries its rung and severity as fields, so no caller reads them
back out of the reason's text. The workload classifier reads the reasons of past Events (strings from the API)
back into rungs with `rung_of_reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuhealth.remediator.decide.vocabulary import Action, Rung, Severity


class EventReason(StrEnum):
    # an action starts (ACTION_REASON) or fails (ACTION_FAILED_REASON)
    CORDONED = "Cordoned"
    DRAINING = "Draining"
    GPU_RESET = "GPUReset"
    REBOOT = "Reboot"
    REPLACE = "Replace"
    RETURNED_TO_SERVICE = "ReturnedToService"
    GPU_QUARANTINED = "GPUQuarantined"
    GPU_RETURNED_TO_SERVICE = "GPUReturnedToService"
    GPU_CLIENTS_STOPPING = "GPUClientsStopping"
    GPU_CLIENTS_RESTORED = "GPUClientsRestored"
    CORDONED_FAILED = "CordonedFailed"
    DRAINING_FAILED = "DrainingFailed"
    GPU_RESET_FAILED = "GPUResetFailed"  # also the reset Job's outcome
    REBOOT_FAILED = "RebootFailed"
    REPLACE_FAILED = "ReplaceFailed"
    RETURNED_TO_SERVICE_FAILED = "ReturnedToServiceFailed"
    GPU_QUARANTINED_FAILED = "GPUQuarantinedFailed"
    GPU_RETURNED_TO_SERVICE_FAILED = "GPUReturnedToServiceFailed"
    GPU_CLIENTS_STOPPING_FAILED = "GPUClientsStoppingFailed"
    GPU_CLIENTS_RESTORED_FAILED = "GPUClientsRestoredFailed"
    EVIDENCE_COLLECTING = "EvidenceCollecting"  # the evidence Job made, before reset, reboot or replace
    EVIDENCE_COLLECTING_FAILED = "EvidenceCollectingFailed"
    # the evidence's summary stored (the Event names its ConfigMap); incomplete: the Job failed, hung past
    # evidence.max_wait or never started, or the summary could not be read or written (decide/evidence.py)
    EVIDENCE_COLLECTED = "EvidenceCollected"
    EVIDENCE_INCOMPLETE = "EvidenceIncomplete"
    NODE_SCOPE = "NodeScope"  # a GPU-scoped fault taken to the node ladder (why: the Event's message)
    # a rung's outcome (Notes)
    DRAIN_FINISHED = "DrainFinished"
    GPU_RESET_SUCCEEDED = "GPUResetSucceeded"
    GPU_RESET_SKIPPED = "GPUResetSkipped"
    # the alerts stopped asking for a reset before its Job began (while the GPU's clients stopped): ended as not
    # needed, never failed; the ladder is back at its drain
    GPU_RESET_NOT_NEEDED = "GPUResetNotNeeded"
    GPU_CLIENTS_STOPPED = "GPUClientsStopped"  # nothing holds the GPU any more: the reset Job starts
    REBOOT_SUCCEEDED = "RebootSucceeded"
    DRAIN_TIMED_OUT = "DrainTimedOut"
    GPU_RESET_TIMED_OUT = "GPUResetTimedOut"
    REBOOT_TIMED_OUT = "RebootTimedOut"
    REPLACE_TIMED_OUT = "ReplaceTimedOut"
    # a reset or reboot Job that never ran its container (its image, RuntimeClass, ...): gpuhealth's own breakage,
    # not the GPU's; the ladder does not climb for it (decide/job_start.py)
    NODE_ACTION_JOB_NOT_STARTED = "NodeActionJobNotStarted"
    EPISODE_QUIET = "EpisodeQuiet"
    # the fleet and people
    CIRCUIT_BREAKER_OPEN = "CircuitBreakerOpen"
    # gpuhealth's own alerts on many nodes of a pool at once: its own failure, no node action (policy monitoring_fault)
    MONITORING_FAULT = "MonitoringFault"
    # a node the pass cannot read (a damaged state annotation, an object it cannot read or decide): left alone
    UNREADABLE_STATE = "UnreadableState"
    # the same alert on nodes behind one switch or rack at once: one fault, no climb (policy correlation)
    CORRELATED_FAULT = "CorrelatedFault"
    # the diagnostic Job (decide/validation.py): started (DiagnoseFailed: it could not be made), and its outcome
    DIAGNOSE = "Diagnose"
    DIAGNOSE_FAILED = "DiagnoseFailed"
    DIAGNOSTIC_PASSED = "DiagnosticPassed"
    DIAGNOSTIC_FAILED = "DiagnosticFailed"
    DIAGNOSTIC_NOT_STARTED = "DiagnosticNotStarted"
    DIAGNOSTIC_CONTRADICTS_ALERT = "DiagnosticContradictsAlert"  # passed while the alerts fire: not replaced
    # on probation after that pass, the alerts still fired diagnose.probation later (or the validation failed): replaced
    DIAGNOSTIC_PROBATION_FAILED = "DiagnosticProbationFailed"
    DIAGNOSTIC_FOUND_CONFIGURATION = "DiagnosticFoundConfiguration"  # failed for the node's software only: a person
    # an idle-node sweep (decide/sweep.py): started, and how it ended (abandoned: GPU work came to the node)
    SWEEP_STARTED = "SweepStarted"
    SWEEP_PASSED = "SweepPassed"
    SWEEP_FAILED = "SweepFailed"
    SWEEP_NOT_STARTED = "SweepNotStarted"
    SWEEP_ABANDONED = "SweepAbandoned"
    # a new node's burn-in (decide/burn_in.py): started, and how it ended (skipped: no diagnostic can be made)
    BURN_IN_STARTED = "BurnInStarted"
    BURN_IN_PASSED = "BurnInPassed"
    BURN_IN_FAILED = "BurnInFailed"
    BURN_IN_NOT_STARTED = "BurnInNotStarted"
    BURN_IN_SKIPPED = "BurnInSkipped"
    BURN_IN_ENDED = "BurnInEnded"  # the burn-in taint removed (Action.END_BURN_IN)
    BURN_IN_ENDED_FAILED = "BurnInEndedFailed"
    HOLD_SET = "HoldSet"
    HOLD_RELEASED = "HoldReleased"
    # gpuhealth-remediator cleanup (gpuhealth/remediator/act/cleanup.py): what it undid on a Node, or why it left a Node
    # alone
    CLEANED_UP = "CleanedUp"
    CLEANUP_SKIPPED = "CleanupSkipped"
    # another agent set a Karpenter-watched condition False on a node gpuhealth is working on (policy karpenter_repair)
    KARPENTER_REPAIR_CONFLICT = "KarpenterRepairConflict"
    # a node's past hardware episodes escalated the current one to replace, or to a person (policy repeat_offenders)
    REPEAT_OFFENDER = "RepeatOffender"
    # workloads (gpuhealth/remediator/workloads/)
    WORKLOAD_FAILURE_CLASSIFIED = "WorkloadFailureClassified"
    RESTART_LOOP = "RestartLoop"
    RESTART_LOOP_SUSPENDED = "RestartLoopSuspended"


ACTION_REASON: dict[Action, EventReason] = {
    Action.CORDON: EventReason.CORDONED, Action.DRAIN: EventReason.DRAINING, Action.RESET_GPU: EventReason.GPU_RESET,
    Action.REBOOT: EventReason.REBOOT, Action.REPLACE: EventReason.REPLACE,
    Action.UNCORDON: EventReason.RETURNED_TO_SERVICE, Action.QUARANTINE_GPU: EventReason.GPU_QUARANTINED,
    Action.RELEASE_GPU: EventReason.GPU_RETURNED_TO_SERVICE, Action.STOP_GPU_CLIENTS: EventReason.GPU_CLIENTS_STOPPING,
    Action.RESTORE_GPU_CLIENTS: EventReason.GPU_CLIENTS_RESTORED, Action.DIAGNOSE: EventReason.DIAGNOSE,
    Action.COLLECT_EVIDENCE: EventReason.EVIDENCE_COLLECTING, Action.STORE_EVIDENCE: EventReason.EVIDENCE_COLLECTED,
    Action.END_BURN_IN: EventReason.BURN_IN_ENDED}
ACTION_FAILED_REASON: dict[Action, EventReason] = {
    **{action: EventReason(f"{reason}Failed") for action, reason in ACTION_REASON.items()
       if action != Action.STORE_EVIDENCE},
    Action.STORE_EVIDENCE: EventReason.EVIDENCE_INCOMPLETE}
TIMED_OUT_REASON: dict[Rung, EventReason] = {
    Rung.DRAIN: EventReason.DRAIN_TIMED_OUT, Rung.RESET_GPU: EventReason.GPU_RESET_TIMED_OUT,
    Rung.REBOOT: EventReason.REBOOT_TIMED_OUT, Rung.REPLACE: EventReason.REPLACE_TIMED_OUT}
# The rung each reason of ours is about (the workload classifier's evidence); Cordoned and the rest: none.
RUNG_OF_REASON: dict[EventReason, Rung] = {
    **{ACTION_REASON[Action(r)]: r for r in TIMED_OUT_REASON},
    **{ACTION_FAILED_REASON[Action(r)]: r for r in TIMED_OUT_REASON},
    **{reason: rung for rung, reason in TIMED_OUT_REASON.items()},
    EventReason.DRAIN_FINISHED: Rung.DRAIN, EventReason.GPU_RESET_SUCCEEDED: Rung.RESET_GPU,
    EventReason.GPU_RESET_SKIPPED: Rung.RESET_GPU, EventReason.GPU_RESET_NOT_NEEDED: Rung.RESET_GPU,
    EventReason.REBOOT_SUCCEEDED: Rung.REBOOT,
    EventReason.GPU_CLIENTS_STOPPING: Rung.RESET_GPU, EventReason.GPU_CLIENTS_STOPPED: Rung.RESET_GPU}


def action_reason(action: Action) -> EventReason:
    return ACTION_REASON[action]


def action_failed_reason(action: Action) -> EventReason:
    return ACTION_FAILED_REASON[action]


@dataclass(frozen=True)
class Note:
    """What a pass observed about a node (a rung finished, failed or timed out; an episode went quiet): an
    Event and an audit line. `rung`: the rung it is about; `timed_out`: that rung passed its timeout (counted
    in rung_timeouts)."""

    reason: EventReason
    message: str
    severity: Severity = Severity.NORMAL
    rung: Rung | None = None
    timed_out: bool = False

    @property
    def warning(self) -> bool:
        return self.severity is Severity.WARNING

    @classmethod
    def timeout(cls, rung: Rung, message: str) -> Note:
        return cls(TIMED_OUT_REASON[rung], message, Severity.WARNING, rung, timed_out=True)


def rung_of_reason(reason: str) -> Rung | None:
    """The rung an Event of ours is about, from its reason as the API returns it (None: not a rung's, e.g.
    Cordoned, or not ours)."""
    try:
        return RUNG_OF_REASON.get(EventReason(reason))
    except ValueError:
        return None
