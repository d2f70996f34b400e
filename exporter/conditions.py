"""Node conditions from the snapshot: gpuhealth's own types, True = healthy, reason and message say why.

These are detection signals for people and schedulers. The health policy (thresholds, `for`
durations, what to do) lives in rules/; the remediator alone writes the Karpenter-watched types.
A condition clears when its fault clears: current-state faults clear on the next probe run, and
kernel-log faults once `fault_window` seconds pass without the fault being seen again.
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


@dataclass(frozen=True)
class Condition:
    type: str
    healthy: bool
    reason: str
    message: str

    @property
    def status(self) -> str:
        return "True" if self.healthy else "False"


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


def _condition(ctype: str, problems: list[tuple[str, str]], healthy_reason: str, healthy_message: str) -> Condition:
    if not problems:
        return Condition(ctype, True, healthy_reason, healthy_message)
    message = "; ".join(text for _, text in problems)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return Condition(ctype, False, problems[0][0], message)


def _is_node_fault(e: dict[str, str]) -> bool:
    xid = int(e["xid"])
    return xid in NODE_FAULT_XIDS or (xid in NVLINK5_XIDS and e.get("fatal") == "true")


def evaluate(
    states: dict[str, ProbeState], expect: Expectations, fault_window: float, now: float | None = None
) -> list[Condition]:
    now_wall = time.time() if now is None else now
    good = trusted(states, time.monotonic())
    recent = _recent(good, fault_window, now_wall)
    xids = [e for e in recent if e["kind"] == "xid"]
    events = [e for e in recent if e["kind"] == "event"]

    gpu: list[tuple[str, str]] = []
    visible = visible_gpus(good)
    if expect.gpus is not None and visible is not None and visible < expect.gpus:
        gpu.append(("GPUsMissing", f"{visible} of {expect.gpus} GPUs visible"))
    gpu += [("FatalXid", f"Xid {e['xid']} on GPU {e['pci_bus_id'] or 'unknown'}") for e in xids if _is_node_fault(e)]
    for st in good.values():
        assert st.result is not None
        gpu += [("GPURecoveryAction", f"driver asks {s.labels['action']} for GPU {s.labels['pci_bus_id']}")
                for s in st.result.samples if s.name == "gpuhealth_gpu_recovery_action" and s.value != 0]
    gpu += [("GPUFault", p) for p in _facts(good, "gpu_problems")]

    nvlink = [("NVLinkFault", p) for p in _facts(good, "nvlink_problems")]
    nvlink += [("FatalSXid", f"SXid {e['sxid']} on NVSwitch {e['pci_bus_id']}")
               for e in recent if e["kind"] == "sxid" and e["fatal"] == "true"]
    nvlink += [("NVLinkError", "NVLink training/discovery failure in kernel log")
               for e in events if e["event"] in NVLINK_FAULT_EVENTS][:1]

    efa: list[tuple[str, str]] = []
    efa_st = good.get("efa")
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

    return [
        _condition("GpuhealthGPUHealthy", _dedupe(gpu), "GPUsHealthy", "no GPU fault seen"),
        _condition("GpuhealthNVLinkHealthy", _dedupe(nvlink), "NVLinkHealthy", "no NVLink/NVSwitch fault seen"),
        _condition("GpuhealthEFAHealthy", _dedupe(efa), "EFAHealthy", "EFA devices present, no driver error"),
        _condition("GpuhealthKernelHealthy", _dedupe(kernel), "KernelHealthy", "no host kernel fault seen"),
        _condition("GpuhealthProbesHealthy", probes, "ProbesHealthy", "every probe reports in time"),
    ]


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))
