"""Node conditions from the snapshot: gpuhealth's own types, True = healthy, reason and message say why.

These are detection signals for people and schedulers. The health policy (thresholds, `for`
durations, what to do) lives in rules/; the remediator alone writes the Karpenter-watched types.
A condition clears when its fault clears: current-state faults clear on the next probe run, and
kernel-log faults once `fault_window` seconds pass without the fault being seen again. A fault a
probe reported is kept while that probe is failing (its last result stands), and a condition whose
sources are failing and show no fault is Unknown, never True: a probe that dies cannot make a node
look healthy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from exporter.collector import Expectations, trusted, visible_gpus
from exporter.snapshot import ProbeState

# Xids that mean the GPU needs at least a reset (DESIGN.md "Signal facts"); 144-150 only when Fatal.
NODE_FAULT_XIDS = frozenset({48, 64, 74, 79, 95, 109, 119, 120, 136, 140, 143, 155, 156, 158})
NVLINK5_XIDS = frozenset(range(144, 151))
KERNEL_FAULT_EVENTS = frozenset({"pcie_aer_fatal", "mce", "hung_task", "soft_lockup", "hard_lockup", "mlx5_fatal"})
NVLINK_FAULT_EVENTS = frozenset({"nvlink_error"})
EFA_FAULT_EVENTS = frozenset({"efa_error"})
MAX_MESSAGE = 1024


# The probes each condition is built from (those that are enabled).
SOURCES = {
    "GpuhealthGPUHealthy": ("kmsg", "nvml", "dcgm", "diag", "dcgm_exporter"),
    "GpuhealthNVLinkHealthy": ("kmsg", "nvml"),
    "GpuhealthEFAHealthy": ("kmsg", "efa"),
    "GpuhealthKernelHealthy": ("kmsg",),
}


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" (healthy), "False", or "Unknown" (its probes are failing and show no fault)
    reason: str
    message: str


def _recent(states: dict[str, ProbeState], window: float, now: float) -> list[dict[str, str]]:
    st = states.get("kmsg")
    if st is None or st.result is None:
        return []
    events = st.result.facts.get("recent_events") or []
    assert isinstance(events, list)
    return [{k: str(v) for k, v in e.items()} for e in events if now - float(e["time"]) <= window]


def _facts(states: dict[str, ProbeState], key: str) -> list[str]:
    out: list[str] = []
    for st in states.values():
        if st.result is not None:
            items = st.result.facts.get(key) or []
            assert isinstance(items, list)
            out.extend(str(i) for i in items)
    return out


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


def _is_node_fault(e: dict[str, str]) -> bool:
    xid = int(e["xid"])
    return xid in NODE_FAULT_XIDS or (xid in NVLINK5_XIDS and e.get("fatal") == "true")


def evaluate(
    states: dict[str, ProbeState], expect: Expectations, fault_window: float, now: float | None = None
) -> list[Condition]:
    now_wall = time.time() if now is None else now
    good = trusted(states, time.monotonic())
    failing = sorted(n for n in states if n not in good)
    # Faults come from every probe's latest good result, even if the probe has failed since.
    known = {n: st for n, st in states.items() if st.result is not None}
    recent = _recent(known, fault_window, now_wall)
    xids = [e for e in recent if e["kind"] == "xid"]
    events = [e for e in recent if e["kind"] == "event"]

    gpu: list[tuple[str, str]] = []
    visible = visible_gpus(known)
    if expect.gpus is not None and visible is not None and visible < expect.gpus:
        gpu.append(("GPUsMissing", f"{visible} of {expect.gpus} GPUs visible"))
    gpu += [("FatalXid", f"Xid {e['xid']} on GPU {e['pci_bus_id'] or 'unknown'}") for e in xids if _is_node_fault(e)]
    for st in known.values():
        assert st.result is not None
        gpu += [("GPURecoveryAction", f"driver asks {s.labels['action']} for GPU {s.labels['pci_bus_id']}")
                for s in st.result.samples if s.name == "gpuhealth_gpu_recovery_action" and s.value != 0]
    gpu += [("GPUFault", p) for p in _facts(known, "gpu_problems")]

    nvlink = [("NVLinkFault", p) for p in _facts(known, "nvlink_problems")]
    nvlink += [("FatalSXid", f"SXid {e['sxid']} on NVSwitch {e['pci_bus_id']}")
               for e in recent if e["kind"] == "sxid" and e["fatal"] == "true"]
    nvlink += [("NVLinkError", "NVLink training/discovery failure in kernel log")
               for e in events if e["event"] in NVLINK_FAULT_EVENTS][:1]

    efa: list[tuple[str, str]] = []
    efa_st = known.get("efa")
    if efa_st is not None and efa_st.result is not None and expect.efa_devices is not None:
        seen = next((s.value for s in efa_st.result.samples if s.name == "gpuhealth_efa_devices_visible"), None)
        if seen is not None and seen < expect.efa_devices:
            efa.append(("EFADevicesMissing", f"{seen:g} of {expect.efa_devices} EFA devices visible"))
    efa += [("EFADriverError", f"efa driver error on {e['device'] or 'unknown device'}")
            for e in events if e["event"] in EFA_FAULT_EVENTS]

    kernel = [("KernelFault", f"{e['event']} {e['device']}".strip()) for e in events
              if e["event"] in KERNEL_FAULT_EVENTS]

    probes = [("ProbeFailed", f"{name}: {st.reason or 'stale'} ({st.message or 'no fresh result'})")
              for name, st in sorted(states.items()) if name not in good]

    def build(ctype: str, problems: list[tuple[str, str]], reason: str, message: str) -> Condition:
        sources_failing = [n for n in failing if n in SOURCES.get(ctype, ())]
        return _condition(ctype, _dedupe(problems), sources_failing, reason, message)

    return [
        build("GpuhealthGPUHealthy", gpu, "GPUsHealthy", "no GPU fault seen"),
        build("GpuhealthNVLinkHealthy", nvlink, "NVLinkHealthy", "no NVLink/NVSwitch fault seen"),
        build("GpuhealthEFAHealthy", efa, "EFAHealthy", "EFA devices present, no driver error"),
        build("GpuhealthKernelHealthy", kernel, "KernelHealthy", "no host kernel fault seen"),
        _condition("GpuhealthProbesHealthy", probes, [], "ProbesHealthy", "every probe reports in time"),
    ]


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))
