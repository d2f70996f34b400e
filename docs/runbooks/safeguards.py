"""What the default policy does around the ladder's rungs, for the runbooks' shared block (docs/runbooks/generate.py):
evidence before a reset, a reboot or a replacement, validation before return to service, the diagnosis before a
replacement, and repeat offenders. Each line is said only where the alert's climb reaches the rungs it is about, and
every value comes from the policy (remediator.policy's loader) or the remediator's own code."""

from __future__ import annotations

from datetime import timedelta

from gpuhealth.remediator.decide.diagnose_step import DIAGNOSED_COMPONENTS
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION, NOT_HARDWARE_COMPONENTS
from gpuhealth.remediator.decide.nodestate import rung_index
from gpuhealth.remediator.policy import Policy

DESTROYING = ("reset_gpu", "reboot", "replace")  # the rungs that destroy what a vendor's RMA asks for
REPAIRS = ("reset_gpu", "reboot")  # the rungs a validation checks before the node returns
DIAGNOSTIC = ("needs `diagnose.enabled` and `diagnose.judge_image`, which the chart sets to its own image; "
              "[docs/remediation.md](../remediation.md#diagnostic-job)")


def dur(value: timedelta) -> str:
    """A duration as the policy file writes it (30s, 10m, 1h, 7d)."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{value.total_seconds():g}s"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _evidence(policy: Policy, rungs: list[str]) -> str | None:
    e = policy.evidence
    if not e.enabled or not set(rungs) & set(DESTROYING):
        return None
    return (f"**Evidence first:** before the episode's first reset, reboot or replacement, a bounded Job on the node "
            "collects what a vendor's RMA asks for (nvidia-smi, dcgmi where its image has it, the last "
            f"{e.kernel_log_lines} kernel-log lines: `evidence.kernel_log_lines`), once per episode; the rung waits "
            f"for it at most {dur(e.max_wait)} (`evidence.max_wait`) and then goes on whatever it did. Its summary "
            f"is a ConfigMap in the Jobs' namespace, named by the `{EventReason.EVIDENCE_COLLECTED}` Event "
            f"(`{EventReason.EVIDENCE_INCOMPLETE}` when cut short); {e.keep_per_node} are kept per node "
            f"(`evidence.keep_per_node`), none older than {dur(e.max_age)} (`evidence.max_age`). "
            "[docs/remediation.md](../remediation.md#evidence-before-destruction).")


def _validation(policy: Policy, rungs: list[str]) -> str | None:
    if not policy.diagnose.enabled or not set(rungs) & set(REPAIRS):
        return None
    return ("**Validated before it returns:** after a reset or a reboot, the diagnostic Job (`dcgmi diag -r "
            f"{policy.diagnose.validation_level}`, `diagnose.validation_level`, and the node's GPU and EFA counts) "
            "runs before gpuhealth takes its taint off. Passed, the node returns as below; failed, the repair failed "
            "and the ladder climbs from it as from a failed rung; a diagnostic that never started keeps the node out "
            f"for a person, and the ladder does not climb for it ({DIAGNOSTIC}).")


def _diagnosis(policy: Policy, remediation: str, component: str, rungs: list[str]) -> str | None:
    if not policy.diagnose.enabled or "replace" not in rungs or remediation == "replace":
        return None
    if component not in DIAGNOSED_COMPONENTS:
        return (f"**Replaced without a diagnosis:** `dcgmi diag` does not test a fault of component `{component}`, "
                "so a pass would say nothing about it.")
    return (f"**Diagnosed before it is replaced:** before the replacement, the drained node runs the diagnostic Job "
            f"(`dcgmi diag -r {policy.diagnose.level}`, `diagnose.level`). Failed, the replacement goes on "
            f"(`{EventReason.DIAGNOSTIC_FAILED}`); passed while the alert still fires, the signal is suspect: the node "
            f"is not replaced and stays drained for a person (`{EventReason.DIAGNOSTIC_CONTRADICTS_ALERT}`, alert "
            "GpuhealthDiagnosticContradictsAlert); never started, the replacement goes on "
            f"(`{EventReason.DIAGNOSTIC_NOT_STARTED}`). Not for a repeat offender: its history is the evidence "
            f"({DIAGNOSTIC}).")


def _offenders(policy: Policy, remediation: str, component: str, ceiling: str) -> str | None:
    r = policy.repeat_offenders
    if not r.enabled or remediation == "none" or component in NOT_HARDWARE_COMPONENTS:
        return None
    if rung_index(ceiling) < rung_index("replace"):
        return (f"**Repeat offenders:** the episode counts in the node's history (`{HISTORY_ANNOTATION}`), but this "
                f"alert never climbs past {ceiling}, so no history makes it replace the node.")
    same_gpu = (" or a GPU an earlier episode within that window reset (a reset or a reboot) fails again "
                "(`repeat_offenders.same_gpu_after_reset`)" if r.same_gpu_after_reset else "")
    top = policy.ladder.max_rung
    stop = ("" if top == "replace" else
            f"; with `ladder.max_rung` {top}, the node is drained and left for a person instead")
    return ("**Repeat offenders are replaced, not repaired again:** when this is the node's "
            f"{ordinal(r.episodes)} hardware episode started within {dur(r.window)} (`repeat_offenders.episodes`, "
            f"`repeat_offenders.window`; the node's `{HISTORY_ANNOTATION}` annotation){same_gpu}, the episode's "
            "target becomes replace: the ladder "
            f"climbs to it through cordon and drain under the same budgets (`{EventReason.REPEAT_OFFENDER}` Event)"
            f"{stop}. [docs/remediation.md](../remediation.md#repeat-offenders).")


def safeguards(policy: Policy, remediation: str, component: str, rungs: list[str], ceiling: str) -> list[str]:
    """The lines for an actionable node alert whose climb goes through `rungs` and may go up to `ceiling` (the lower of
    its max_rung and ladder.max_rung)."""
    lines = [_evidence(policy, rungs), _validation(policy, rungs), _diagnosis(policy, remediation, component, rungs),
             _offenders(policy, remediation, component, ceiling)]
    return [line for line in lines if line is not None]
