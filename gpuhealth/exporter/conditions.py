"""Node conditions from the snapshot: gpuhealth's own types, True = healthy, reason and message say why.

These are detection signals for people and schedulers. The health policy (thresholds, `for`
durations, what to do) lives in rules/; the remediator alone writes the Karpenter-watched types.
A condition clears when its fault clears: current-state faults clear on the next probe run, and
kernel-log faults once `fault_window` seconds pass without the fault being seen again. A fault a
probe reported is kept while that probe is failing (its last result stands), and a condition whose
sources are failing and show no fault is Unknown, never True: a probe that dies cannot make a node
look healthy. The driver's recovery action clears where NVML reports its field (the field reading NONE
again is the all-clear); on a driver without the field an Xid 154 announcement stands for the boot.
A probe paused for a GPU reset (gpuhealth/exporter/gpu_reset.py) is frozen as it was: its last result stands,
and it counts as good or failing as its last run left it, so no condition turns True for want of data.

Which condition a kernel-log fault sets is the data's: each pattern in kernel_patterns.yaml names it
(`condition:`). Which probes a condition is built from is the probe registry's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuhealth.contract.xids import sets_gpu_condition
from gpuhealth.exporter import catalog
from gpuhealth.exporter.collector import Expectations, efa_devices_visible, trusted, visible_gpus
from gpuhealth.exporter.condition_types import EFA, FAULTS, GPU, KERNEL, NVLINK, PROBES
from gpuhealth.exporter.probes.registry import feeding
from gpuhealth.exporter.samples import KernelFault, ProbeResult
from gpuhealth.exporter.snapshot import ProbeState

MAX_MESSAGE = 1024


# The probes each condition is built from (those that are enabled).
SOURCES = {ctype: feeding(ctype) for ctype in FAULTS}

# How a kernel-log event says what is wrong, by the condition its pattern sets: (reason, message).
_EVENT_WORDS: dict[str, tuple[str, Callable[[KernelFault], str]]] = {
    NVLINK: ("NVLinkError", lambda f: "NVLink training/discovery failure in kernel log"),
    EFA: ("EFADriverError", lambda f: f"efa driver error on {f.device or 'unknown device'}"),
}
_ANY_EVENT: tuple[str, Callable[[KernelFault], str]] = ("KernelFault", lambda f: f"{f.event} {f.device}".strip())


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" (healthy), "False", or "Unknown" (its probes are failing and show no fault)
    reason: str
    message: str


def _recent(results: Iterable[ProbeResult], window: float, now: float) -> list[KernelFault]:
    """The kernel-log faults seen within the window, oldest first."""
    return [f for r in results if r.kernel is not None for f in r.kernel.recent if now - f.time <= window]


def _is_node_fault(f: KernelFault) -> bool:
    return sets_gpu_condition(int(f.xid), f.fatal, f.decoded)


def _kernel_log_problems(faults: list[KernelFault], ctype: str) -> list[tuple[str, str]]:
    """What the kernel log says against one condition: its fatal Xids, then fatal SXids, then events."""
    mine = [f for f in faults if f.condition == ctype]
    problems = [("FatalXid", f"Xid {f.xid} on GPU {f.pci_bus_id or 'unknown'}")
                for f in mine if f.kind == "xid" and _is_node_fault(f)]
    problems += [("FatalSXid", f"SXid {f.sxid} on NVSwitch {f.pci_bus_id}")
                 for f in mine if f.kind == "sxid" and f.fatal is True]
    reason, words = _EVENT_WORDS.get(ctype, _ANY_EVENT)
    problems += [(reason, words(f)) for f in mine if f.kind == "event"]
    return problems


def _recovery_problems(results: list[ProbeResult]) -> list[tuple[str, str]]:
    """What the driver asks for each GPU. Where NVML reports the recovery action field, the field decides: its
    NONE (after the action is done) is the all-clear. Elsewhere the Xid 154 announcement stands for the boot."""
    samples = [s for r in results for s in r.samples]
    field = [s for s in samples if s.family is catalog.GPU_RECOVERY_ACTION_FIELD]
    supported = {s.labels["pci_bus_id"] for s in samples
                 if s.family is catalog.GPU_RECOVERY_ACTION_FIELD_SUPPORTED and s.value == 1}
    problems = [("GPURecoveryAction", f"driver asks {s.labels['action']} for GPU {s.labels['pci_bus_id']}")
                for s in field if s.value != 0]
    problems += [("GPURecoveryAction", f"driver asks {a.action} for GPU {a.pci_bus_id}")
                 for r in results if r.kernel is not None for a in r.kernel.recovery
                 if a.code != 0 and a.pci_bus_id not in supported]
    return problems


def _condition(
    ctype: str, problems: list[tuple[str, str]], failing: list[str], healthy_reason: str, healthy_message: str
) -> Condition:
    if problems:
        message = "; ".join(text for _, text in problems)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        return Condition(ctype, "False", problems[0][0], message)
    if failing:
        return Condition(ctype, "Unknown", "ProbeFailed", f"cannot tell: probe {', '.join(failing)} failing")
    return Condition(ctype, "True", healthy_reason, healthy_message)


def evaluate(
    states: dict[str, ProbeState], expect: Expectations, fault_window: float, now: float | None = None
) -> list[Condition]:
    now_wall = time.time() if now is None else now
    good = trusted(states, time.monotonic())
    # Paused for a GPU reset: judged by its last run, whatever its age (it is not expected to run while paused).
    good |= {n: st for n, st in states.items() if st.paused and st.success and st.result is not None}
    failing = sorted(n for n in states if n not in good)
    # Faults come from every probe's latest good result, even if the probe has failed since.
    known = {n: st for n, st in states.items() if st.result is not None}
    results = [st.result for st in known.values() if st.result is not None]
    recent = _recent(results, fault_window, now_wall)

    gpu: list[tuple[str, str]] = []
    visible = visible_gpus(known)
    if expect.gpus is not None and visible is not None and visible < expect.gpus:
        gpu.append(("GPUsMissing", f"{visible} of {expect.gpus} GPUs visible"))
    gpu += _kernel_log_problems(recent, GPU)
    gpu += _recovery_problems(results)
    gpu += [("GPUFault", p) for r in results for p in r.problems.gpu]

    nvlink = [("NVLinkFault", p) for r in results for p in r.problems.nvlink]
    nvlink += _kernel_log_problems(recent, NVLINK)

    efa: list[tuple[str, str]] = []
    seen = efa_devices_visible(known)
    given = expect.efa.expected(seen)  # what the node was provisioned with, never the instance type's maximum
    if seen is not None and given is not None and seen < given.count:
        efa.append(("EFADevicesMissing",
                    f"{seen:g} of {given.count} EFA devices visible (expected: {given.describe()})"))
    efa += _kernel_log_problems(recent, EFA)

    kernel = _kernel_log_problems(recent, KERNEL)

    probes = [("ProbeFailed", f"{name}: {st.reason or 'stale'} ({st.message or 'no fresh result'})")
              for name, st in sorted(states.items()) if name not in good]

    def build(ctype: str, problems: list[tuple[str, str]], reason: str, message: str) -> Condition:
        sources_failing = [n for n in failing if n in SOURCES.get(ctype, ())]
        return _condition(ctype, _dedupe(problems), sources_failing, reason, message)

    return [
        build(GPU, gpu, "GPUsHealthy", "no GPU fault seen"),
        build(NVLINK, nvlink, "NVLinkHealthy", "no NVLink/NVSwitch fault seen"),
        build(EFA, efa, "EFAHealthy", "EFA devices present, no driver error"),
        build(KERNEL, kernel, "KernelHealthy", "no host kernel fault seen"),
        _condition(PROBES, probes, [], "ProbesHealthy", "every probe reports in time"),
    ]


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))
