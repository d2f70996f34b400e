"""The Xid classes: which Xids mean what, the one table the exporter's conditions, the alert rules, the
dashboards and the simulator agree on.

Each class says what NVIDIA's Xid catalog makes of its Xids (../shared/DESIGN.md, "Signal facts"; NVIDIA's
Xid catalog, ../shared/fixtures/xid), whether a kernel-log match of one sets the GpuhealthGPUHealthy
condition False (gpuhealth/exporter/conditions.py), and which alerts of rules/alerts/gpu.yaml select it.
tests/contract/test_xid_classes.py holds the rules' `xid` selectors to this table: an Xid added here and not there, or
there and not here, fails it. The dashboards (dashboards/generate.py) show one panel per class, in this order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuhealth.contract.xid_catalog import BUCKETS
from gpuhealth.contract.xid_decode import Decoded


class SetsCondition(StrEnum):
    """When a kernel-log Xid of the class sets GpuhealthGPUHealthy False."""

    ALWAYS = "always"  # the GPU needs at least a reset
    WHEN_FATAL = "when_fatal"  # only when the driver prints it as Fatal (NVLink5: 144-150)
    NEVER = "never"


@dataclass(frozen=True)
class XidClass:
    name: str  # the dashboards' panel title
    xids: tuple[int, ...]
    condition: SetsCondition
    alerts: tuple[str, ...]  # the alerts of rules/alerts/gpu.yaml whose `xid` selector is this class (with others)


# Classed on their own below, so left out of the catalog-wide classes.
_OWN_CLASS = frozenset({13, 31, 43, 45, 63, 68, 94})


def _bucket(*names: str) -> tuple[int, ...]:
    """The catalog's Xids of these immediate actions that no narrower class below names."""
    return tuple(sorted(x for x, b in BUCKETS.items() if b in names and x not in _OWN_CLASS))


# The buckets whose action is a person's: contact support, the checks, update software/firmware, restart the VM
# (151, a deviation: xid_catalog.py), and "" (162-172, no action given).
PERSON_BUCKETS = ("CONTACT_SUPPORT", "CHECK_MECHANICALS", "CHECK_UVM", "UPDATE_SWFW", "RESTART_VM", "")


@dataclass(frozen=True)
class Workflow:
    """An Xid whose catalog workflow turns on other Xids of the same GPU in the same episode: its alerts select
    `xid` and, apart, `partners` (rules/alerts/gpu.yaml)."""

    xid: int
    partners: tuple[int, ...]
    alone: str  # the alert of the branch without a partner
    together: str  # the alert of the branch with one


# Xid 48: alone RESET_GPU (and field diagnostics, a person's), with 63/64 DRAIN_AND_RESET (63/64's path).
WORKFLOW_48 = Workflow(48, (63, 64), alone="GPUXidDoubleBitError", together="GPUXidDoubleBitErrorRemapped")


CLASSES: tuple[XidClass, ...] = (
    XidClass("fatal hardware", (64, 95, 119, 120, 140), SetsCondition.ALWAYS, ("GPUXidFatal",)),
    # 48's workflow: an alert per branch (WORKFLOW_48); its first, alone, is the reset NVIDIA names first.
    XidClass("double-bit ECC (48)", (WORKFLOW_48.xid,), SetsCondition.ALWAYS,
             (WORKFLOW_48.alone, WORKFLOW_48.together)),
    # 79 needs a reboot, not a reset: an alert and a panel of its own.
    XidClass("fallen off the bus (79)", (79,), SetsCondition.ALWAYS, ("GPUFallenOffBus",)),
    XidClass("needs GPU reset", (46, 62, 109, 110, 136, 143, 155, 156, 158), SetsCondition.ALWAYS,
             ("GPUXidResetRequired",)),
    # A row remap waits for the next reset; the GPU still works until then.
    XidClass("row remap pending (63)", (63,), SetsCondition.NEVER, ("GPUXidResetRequired",)),
    XidClass("contained memory error (94)", (94,), SetsCondition.NEVER, ("GPUContainedMemoryError",)),
    # 74 and 144-150 are decoded (gpuhealth/contract/xid_decode.py): their alert and the condition follow the decode;
    # a line that cannot be decoded follows its class: 74 a reset, 144-150 the printed Fatal/Nonfatal.
    XidClass("NVLink (74)", (74,), SetsCondition.ALWAYS, ("GPUNVLinkXidFatal",)),
    XidClass("NVLink5 (144-150)", tuple(range(144, 151)), SetsCondition.WHEN_FATAL, ("GPUNVLinkXidFatal",)),
    # 154 says which recovery the driver wants; the GPURecoveryAction* alerts read that gauge, not the Xid count.
    XidClass("recovery action (154)", (154,), SetsCondition.NEVER, ()),
    XidClass("usually the application", (13, 31, 43, 45, 68), SetsCondition.NEVER,
             ("GPUXidApplication", "GPUXidApplicationRepeated")),
    # The catalog's RESTART_APP: evidence for the job classifier, no node action.
    XidClass("restart the application", _bucket("RESTART_APP"), SetsCondition.NEVER, ("GPUXidApplication",)),
    # The catalog's IGNORE: counted (gpuhealth_xid_errors_total, the dashboards), no alert.
    XidClass("counted only", _bucket("IGNORE"), SetsCondition.NEVER, ()),
    # A person's: cordon and page, with the evidence support asks for.
    XidClass("contact support", _bucket(*PERSON_BUCKETS), SetsCondition.NEVER, ("GPUXidContactSupport",)),
)

KNOWN: frozenset[int] = frozenset(x for c in CLASSES for x in c.xids)
# The alert for an Xid in no class: its selector is `xid!~` every known Xid, which is every Xid of the catalog.
# An Xid the catalog does not know (a newer driver) stays fail-closed: it cordons and pages.
UNKNOWN_ALERT = "GPUXidUnknown"

_CONDITION = {x: c.condition for c in CLASSES for x in c.xids}
_DECIDED = frozenset({Decoded.RESET_GPU, Decoded.NONE, Decoded.DRIVER_RECOVERY})


def sets_gpu_condition(xid: int, fatal: bool | None, decoded: str = "") -> bool:
    """Whether a kernel-log Xid sets GpuhealthGPUHealthy False: one that needs at least a GPU reset.

    A decoded Xid (74, 144-150: gpuhealth/contract/xid_decode.py) follows its decode: reset_gpu sets it, none and
    driver_recovery do not (the driver's Xid 154 and recovery action field decide then); an undecoded one, or one
    kept by an exporter from before the decode, follows its class as below."""
    if decoded in _DECIDED:
        return decoded == Decoded.RESET_GPU
    how = _CONDITION.get(xid, SetsCondition.NEVER)
    return how is SetsCondition.ALWAYS or (how is SetsCondition.WHEN_FATAL and fatal is True)


def selector(xids: tuple[int, ...] | frozenset[int]) -> str:
    """A PromQL regex matching exactly these Xids, in the order given."""
    return "|".join(str(x) for x in xids)


def first_alert(xid: int) -> str | None:
    """The alert whose `remediation` is gpuhealth's first rung for one event of the Xid: its class's first alert,
    the unknown-Xid alert for an Xid in no class, None for a class that raises no alert (counted only, or 154's
    action read from its own gauge)."""
    for c in CLASSES:
        if xid in c.xids:
            return c.alerts[0] if c.alerts else None
    return UNKNOWN_ALERT
