"""The ladder: what to do with each node now. Pure functions of (views, policy, time, budget).

No I/O happens here except through the injected silence check. `serve` executes these decisions;
`plan` prints them; both call `decide`.

A node's plan is its final state (written once, with the resourceVersion the view was read at) plus
the decisions; the executor writes the state first, then performs the side effects (evictions, Jobs,
replacement), so what gpuhealth intends is on the Node before it happens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum

from remediator.decide.budget import Ledger
from remediator.decide.decision import NOT_STARTED, Decision, NodePlan, SilenceCheck
from remediator.decide.devices import Device
from remediator.decide.event_reasons import EventReason, Note
from remediator.decide.monitoring_fault import FaultKey
from remediator.decide.nodestate import (
    ALL_GPUS,
    DO_NOT_DISRUPT_ANNOTATION,
    RUNGS,
    AlertRecord,
    NodeState,
    elapsed,
    fmt_time,
    rung_index,
    time_text,
)
from remediator.decide.progress import observe
from remediator.decide.reset import operands_to_pause, reset_target, still_holding
from remediator.decide.views import GpuPods, NodeView, PodRef
from remediator.decide.vocabulary import (
    DISRUPTIVE,
    JOB_RUNGS,
    NEEDS_DRAINED,
    Action,
    ResetPhase,
    Rung,
    RungStatus,
    Scope,
    Severity,
    TaintEffect,
    Verdict,
)
from remediator.policy import Policy

# How much older than its alert the exporter's GPU -> pod map can be when the rule reads it: the map is believed for
# 2 x 15 s + 5 s, the rule sees the series one scrape and one evaluation later. A GPU pod created after the alert's
# startsAt less this is evicted with the pods the alert names (GpuPods).
GPU_PODS_MAP_AGE = timedelta(minutes=2)


def job_name(node: str, rung: str, episode: datetime | None) -> str:
    short = {"reset_gpu": "reset", "reboot": "reboot"}.get(rung, rung)
    digest = hashlib.sha1(f"{node}/{rung}/{time_text(episode)}".encode()).hexdigest()[:8]
    return f"gpuhealth-{short}-{node}"[:53].rstrip("-.") + f"-{digest}"


def _names(pods: list[PodRef]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)


def _pick_gpu(alerts: dict[str, AlertRecord]) -> str | None:
    """The GPU to reset: the one the alerts name; all of them when they name several, or "all"."""
    gpus = {a.gpu for a in alerts.values() if a.gpu}
    if not gpus:
        return None
    return gpus.pop() if len(gpus) == 1 else ALL_GPUS


class _Flow(Enum):
    AGAIN = "again"  # the state moved on within this pass: decide the next step
    STOP = "stop"  # decided (or nothing more to do) for this node this pass


@dataclass(frozen=True)
class _Step:
    """The rung the climb would start next, why, and whether it is one already recorded and resumed (no budget)."""

    rung: str
    why: str
    resume: bool = False


def decide(views: list[NodeView], policy: Policy, now: datetime, ledger: Ledger,
           silences: SilenceCheck | None = None) -> list[NodePlan]:
    """Decisions for every node, oldest episode first, taking from the budget as actions start."""
    def order(v: NodeView) -> tuple[int, datetime, str]:
        return (0 if v.name in ledger.pools[v.pool].disrupted else 1, v.state.episode or now, v.name)

    return [_Planner(v, policy, now, ledger, silences).run() for v in sorted(views, key=order)]


class _Planner:
    """One node's plan. `self.state` is the state so far; whatever it is when run() returns is written."""

    def __init__(self, v: NodeView, policy: Policy, now: datetime, ledger: Ledger,
                 silences: SilenceCheck | None) -> None:
        self.v, self.policy, self.now, self.ledger, self.silences = v, policy, now, ledger, silences
        self.full = v  # the whole node; at GPU scope, self.v holds only the quarantined GPU's pods
        self.state = v.state
        self.scope_note = ""  # why a fault on one GPU takes the node (said in the first decision's reason)
        self.repair_warning = ""  # karpenter_repair.mode warn: what Karpenter's node repair may act on (every decision)
        self.plan = NodePlan(node=v.name, base_state=v.state, final_state=v.state,
                             resource_version=v.resource_version)

    def out(self, action: Action, decision: Verdict, reason: str, **kw: object) -> None:
        st = self.state
        if action == Action.UNCORDON and self.plan.base_state.scope == Scope.GPU:
            st = self.plan.base_state  # returning to service closes the episode: its scope was the GPU's
        if st.scope == Scope.GPU and action in (Action.CORDON, Action.DRAIN):
            # GPU scope: the node's cordon and drain are the GPU's device taints (kube-controller-manager evicts)
            effect = TaintEffect.NO_SCHEDULE if action == Action.CORDON else TaintEffect.NO_EXECUTE
            kw = {k: w for k, w in kw.items() if k not in ("force",)}
            kw.update(devices=st.devices, effect=effect, pods=self.full.holders(st.devices))
            action = Action.QUARANTINE_GPU
        elif st.scope == Scope.GPU and action == Action.UNCORDON:
            action, kw = Action.RELEASE_GPU, {**kw, "devices": st.devices}
        self.plan.decisions.append(Decision(self.v.name, action, decision, reason, self.v.pool,
                                            **kw))  # type: ignore[arg-type]

    def note(self, note: Note) -> None:
        self.plan.notes.append(note)

    def run(self) -> NodePlan:
        self._decide()
        self._restore_gpu_clients()
        if self.repair_warning:
            self.plan.decisions = [replace(d, karpenter_repair=self.repair_warning) for d in self.plan.decisions]
        self.plan.final_state = self.state
        return self.plan

    def _restore_gpu_clients(self) -> None:
        """Whatever ended a reset rung that stopped the GPU's clients (its Job's outcome, its timeout, the episode
        closing, the node ladder taking over): what it paused is restored, in this plan's write."""
        base, st = self.plan.base_state, self.state
        if not (base.reset_phase or base.paused) or (
                st.rung == Rung.RESET_GPU and st.rung_status == RungStatus.RUNNING):
            return
        self.state = replace(st, reset_phase=None, paused=(), pause_value=None)
        what = ", ".join(base.paused) or "no operand label"
        self.out(Action.RESTORE_GPU_CLIENTS, Verdict.EXECUTE, f"the reset is over: {what} back to \"true\", "
                 "gpuhealth's exporter takes NVML back")

    # --- the node as a whole ----------------------------------------------------------------
    def _decide(self) -> None:
        v, policy, now = self.v, self.policy, self.now
        if v.damaged:
            return self.out(Action.NONE, Verdict.SKIPPED,
                            f"state annotation unreadable ({v.damaged}): counted as disrupted "
                            "and left alone; fix or remove the gpuhealth.io/state annotation")
        st = v.state
        firing = st.firing(now, policy.episode.quiet_timeout)
        actionable = {fp: a for fp, a in firing.items() if a.remediation != "none"}
        if not st.active and not v.our_taint:
            if firing and not actionable:
                return self.out(Action.NONE, Verdict.SKIPPED, "firing alerts ask for no action (remediation=none)")
            return None
        if v.excluded:
            return self.out(Action.NONE, Verdict.SKIPPED, "node excluded by the policy's exclude selectors")
        if v.hold:
            who = f" by {v.hold['by']}" if v.hold.get("by") else ""
            return self.out(Action.NONE, Verdict.SKIPPED, f"held{who}: {v.hold.get('reason', '')}".rstrip(": "))
        if v.human_cordoned:
            return self.out(Action.NONE, Verdict.SKIPPED, "cordoned by a person, not by gpuhealth: left alone")
        if v.taken_over and st.scope == Scope.NODE:
            if actionable and st.reset_phase is not None:  # the GPU's clients come back: the person has the node
                self.state = replace(st, rung_status=RungStatus.FAILED, rung_done=now)
                self.note(Note(EventReason.GPU_RESET_SKIPPED, "gpuhealth's taint was removed while the reset was "
                               "under way: a person took over; the GPU's clients are restored", rung=Rung.RESET_GPU))
            if actionable:
                return self.out(Action.NONE, Verdict.SKIPPED,
                                "gpuhealth's taint was removed from the node: a person took over; "
                                "nothing is started or undone (hold or release to hand it back)")
            self.state = NodeState(actions=st.actions)
            return self.out(Action.NONE, Verdict.SKIPPED,
                            "alerts resolved after a person took over (removed gpuhealth's "
                            "taint): episode closed, node left as the person set it")
        if v.repair_conditions and st.active:
            found = self._karpenter_repair()
            if policy.karpenter_repair.mode == "handover":
                return self.out(Action.NONE, Verdict.SKIPPED, f"handed over to Karpenter's node repair: {found}, set "
                                "by another agent (karpenter_repair.mode handover): no further rung is started and "
                                "nothing is undone while it stays False")
            self.repair_warning = found
        faults = self._monitoring_faults(actionable)
        actionable = {fp: a for fp, a in actionable.items() if fp not in faults}

        if st.scope == Scope.GPU and (self.full.devices is None or self.full.taint_api is None):
            # the DRA objects could not be read this pass (an API error, a driver restarting): no evidence that
            # the fault outgrew its GPU, and no way to change its device taints: wait, at GPU scope
            return self.out(Action.NONE, Verdict.DEFERRED, f"GPU scope ({', '.join(st.devices)}): the DRA objects "
                            "or the DeviceTaintRule API could not be read this pass")
        self._redrive_quarantine()
        self._cover_new_instances()
        st = self.state
        self._scope_view()
        if actionable:  # the rung under way is observed on the pods it is about
            self._gpu_pods_view(actionable, self._target(actionable, st), note=False)
        self.state, notes = observe(self.v, st, now, policy)
        self.plan.notes.extend(notes)
        if not actionable and self._replace_pending():  # decided on the alerts then: handed over whatever they say now
            return self._climb(rung_index(Rung.REPLACE), None, [])
        if not actionable:
            return self._hold_for_monitoring_fault(faults) if faults else self._settle()
        target = self._target(actionable, self.state)
        self._choose_scope(actionable, target)
        self._gpu_pods_view(actionable, target)
        return self._climb(target, _pick_gpu(actionable), sorted(actionable))

    # --- monitoring faults ------------------------------------------------------------------
    def _monitoring_faults(self, actionable: dict[str, AlertRecord]) -> dict[str, FaultKey]:
        """This node's alerts that are a monitoring fault this pass (decide/monitoring_fault.py), by fingerprint: kept
        in the state (an Event when one becomes one), and left out of what the ladder acts on."""
        faults = self.ledger.faults.of(self.v, actionable)
        st = self.state
        others = sorted({a.name for fp, a in actionable.items() if fp not in faults})
        rest = f"; its other alerts ({', '.join(others)}) are handled as usual" if others else ""
        for key in sorted({key for fp, key in faults.items() if fp not in st.monitoring_faults}):
            self.note(Note(EventReason.MONITORING_FAULT, f"{self.ledger.faults.why(key)}: it starts no node action "
                           f"here (no cordon, no new rung){rest}", Severity.WARNING))
        if tuple(sorted(faults)) != st.monitoring_faults:
            self.state = replace(st, monitoring_faults=tuple(sorted(faults)))
        return faults

    def _hold_for_monitoring_fault(self, faults: dict[str, FaultKey]) -> None:
        """Only a monitoring fault's alerts fire: nothing starts or climbs, and nothing is undone either. A node
        gpuhealth took out before (for these alerts, before they counted as one; for others, since resolved) stays as
        it is until they resolve, so that it is not returned and taken out again as a share crosses its threshold
        back and forth."""
        what = "; ".join(self.ledger.faults.why(key) for key in sorted(set(faults.values())))
        # a reset not begun yet would hold the GPU's clients stopped (the device plugin off) for as long as the
        # monitoring fault lasts: it is no longer needed, as when the alerts resolve
        self._cancel_unstarted_reset("only a monitoring fault's alerts were left while the GPU's clients were stopping")
        st = self.state
        if st.rung is None:
            return self.out(Action.NONE, Verdict.SKIPPED, f"monitoring fault, not this node's: {what}: no node action")
        return self.out(Action.NONE, Verdict.SKIPPED, f"monitoring fault, not this node's: {what}: the node stays at "
                        f"{st.rung} (since {time_text(st.rung_started)}), with no new rung, and returns to service "
                        "once its alerts resolve")

    def _cancel_unstarted_reset(self, why: str) -> bool:
        """A reset whose Job has not begun (the GPU's clients still stopping, or its Job never made) ends as not
        needed, never as a failure: the ladder goes back to the drain it had reached (done: a reset starts only on a
        drained node or GPU), so that alerts firing again start the reset afresh under the usual rules instead of
        climbing to a reboot (at GPU scope: to the node ladder). Its paused clients are restored in the same write
        (_restore_gpu_clients). True when it did."""
        v, st = self.v, self.state
        unstarted = st.reset_phase == ResetPhase.STOPPING or (
            st.reset_phase == ResetPhase.RESETTING and v.job_status == "missing")
        if not (st.rung == Rung.RESET_GPU and st.rung_status == RungStatus.RUNNING and unstarted):
            return False
        self.state = replace(st, rung=Rung.DRAIN, rung_status=RungStatus.DONE, rung_done=self.now, job=None,
                             gpu=None)
        what = f"GPU {', '.join(st.devices)}" if st.scope == Scope.GPU else "the node"
        self.note(Note(EventReason.GPU_RESET_NOT_NEEDED, f"{why}: the reset is no longer needed and did not start "
                       f"(job {st.job} never created); {what} stays drained (the ladder back at its drain) until it "
                       "returns to service, and alerts firing again start the reset afresh", rung=Rung.RESET_GPU))
        return True

    def _karpenter_repair(self) -> str:
        """Karpenter-watched conditions another agent (the EKS node monitoring agent) set False on a node gpuhealth is
        working on: each said once per episode (an Event and an audit line; the executor counts it), as the state
        records. Returns them, described."""
        st, found = self.state, self.v.repair_conditions
        described = ", ".join(c.describe() for c in found)
        new = [c for c in found if c.type not in st.repair_reported]
        if new:
            self.state = replace(st, repair_reported=(*st.repair_reported, *(c.type for c in new)))
            then = ("gpuhealth starts no further rung on the node and undoes nothing (karpenter_repair.mode handover)"
                    if self.policy.karpenter_repair.mode == "handover" else
                    "gpuhealth's ladder goes on (karpenter_repair.mode warn): a replacement can cut a rung short")
            said = "; ".join(f"{c.type}: {c.message[:200]}" for c in new if c.message)
            self.note(Note(EventReason.KARPENTER_REPAIR_CONFLICT,
                           f"{', '.join(c.describe() for c in new)}, not set by gpuhealth"
                           f"{' (' + said + ')' if said else ''}: with its NodeRepair feature gate on, Karpenter "
                           "force-replaces a node whose condition stays False past its toleration "
                           "(AcceleratedHardwareReady 10m, the others 30m), whatever gpuhealth's holds, budgets and "
                           f"do-not-disrupt say; {then}", Severity.WARNING))
        return described

    # --- scope ------------------------------------------------------------------------------
    def _gpu_family(self, actionable: dict[str, AlertRecord], target: int) -> tuple[tuple[str, ...], str]:
        """The DRA devices a GPU-scoped fault quarantines (the GPU and its MIG devices), or () and why the fault
        takes the node ("" when the node has no DRA devices at all: nothing to explain)."""
        v, policy = self.full, self.policy
        if v.devices is None:
            return (), ""
        if not policy.dra.enabled:
            return (), "dra.enabled is false"
        if v.taint_api is None:
            return (), ("the cluster serves no DeviceTaintRule (resource.k8s.io; before Kubernetes 1.37, the "
                        "DRADeviceTaintRules feature gate)")
        if target > rung_index(Rung.RESET_GPU):
            return (), f"the alerts ask for {RUNGS[target]}, which takes the node"
        if target == rung_index(Rung.RESET_GPU) and policy.reset.resets_whole_node(v.labels):
            return (), (f"a reset of this node's GPUs ({v.labels.get('nvidia.com/gpu.product', 'unknown product')}) "
                        f"takes every GPU of it (reset.scope {policy.reset.scope})")
        gpus = {a.gpu for a in actionable.values()}
        label = next(iter(gpus)) if len(gpus) == 1 else None
        if label is None or label in (ALL_GPUS, "unknown"):
            return (), "the alerts name no single GPU"
        migs = {a.mig_uuid for a in actionable.values()}
        mig_uuid = next(iter(migs)) if len(migs) == 1 else None
        mig = v.devices.find_mig(mig_uuid) if mig_uuid is not None else None
        if mig_uuid is not None and mig is None and self._quarantined(v.devices.find(label)):
            pass  # an instance of the quarantined GPU, no longer published since its reset: the GPU's fault
        elif mig_uuid is not None:  # every alert names one MIG instance of the GPU (an Xid on that GPU instance)
            parent = v.devices.parent(mig) if mig is not None else None
            if mig is None or (parent is not None and v.devices.find(label) != parent):
                return (), (f"MIG device {mig_uuid} of GPU {label} is not among the node's DRA devices (driver "
                            f"{v.devices.driver})")
            if self._instance_scoped(target):
                return (mig.name,), ""
        gpu = v.devices.find(label)
        if gpu is None:
            return (), f"GPU {label} is not among the node's DRA devices (driver {v.devices.driver})"
        return tuple(d.name for d in v.devices.family(gpu)), ""

    def _replace_pending(self) -> bool:
        """The replace rung started (the state's write) and its hand-over was not seen done (act/executor.py's
        pending): the remediator stopped in between."""
        st = self.state
        return st.rung == Rung.REPLACE and st.rung_status == RungStatus.RUNNING and Action.REPLACE in st.pending

    def _redrive_quarantine(self) -> None:
        """A GPU quarantine recorded (the state's write) and not seen done (act/executor.py's pending: the remediator
        stopped before its DeviceTaintRules were made): made now, with each effect the rung reached. Idempotent: a rule
        that exists is left as it is."""
        st = self.state
        if Action.QUARANTINE_GPU not in st.pending or st.scope != Scope.GPU or st.rung is None or not st.devices:
            return
        effects = [TaintEffect.NO_SCHEDULE]
        if rung_index(st.rung) >= rung_index(Rung.DRAIN):
            effects.append(TaintEffect.NO_EXECUTE)
        for effect in effects:
            self.plan.decisions.append(Decision(
                self.v.name, Action.QUARANTINE_GPU, Verdict.EXECUTE, f"the quarantine of {', '.join(st.devices)} "
                f"({st.rung}) was recorded but not seen done (the remediator stopped in between): making its "
                f"{effect} device taints", self.v.pool, new=False, devices=st.devices, effect=effect,
                pods=self.full.holders(st.devices)))

    def _cover_new_instances(self) -> None:
        """A quarantined GPU's MIG devices made anew (a reset drops a MIG GPU's instances; the MIG manager makes them
        again, under other names where the layout changed) are quarantined too, with the effects the GPU already
        has: the scheduler must not place a claim on an instance of a GPU gpuhealth holds."""
        st, devices = self.state, self.full.devices
        if st.scope != Scope.GPU or st.rung is None or st.rung_status == RungStatus.FAILED or devices is None:
            return
        gpu = next((d for d in devices.devices if d.kind == "gpu" and d.name in st.devices), None)
        if gpu is None:
            return
        new = tuple(d.name for d in devices.family(gpu) if d.name not in st.devices)
        if not new:
            return
        self.state = replace(st, devices=(*st.devices, *new))
        effects = [TaintEffect.NO_SCHEDULE]
        if rung_index(st.rung) >= rung_index(Rung.DRAIN):
            effects.append(TaintEffect.NO_EXECUTE)
        for effect in effects:
            self.plan.decisions.append(Decision(
                self.v.name, Action.QUARANTINE_GPU, Verdict.EXECUTE,
                f"MIG device(s) {', '.join(new)} of the quarantined GPU {gpu.name} appeared (made anew after its "
                "reset): quarantined with it", self.v.pool, devices=new, effect=effect,
                pods=self.full.holders(new)))

    def _quarantined(self, gpu: Device | None) -> bool:
        """This GPU itself (and so its whole family) is what the GPU scope holds."""
        return self.state.scope == Scope.GPU and gpu is not None and gpu.name in self.state.devices

    def _one_gpu(self, *device_sets: tuple[str, ...]) -> Device | None:
        """The one GPU that every set's published devices belong to (a MIG device by its parent), if there is one."""
        assert self.full.devices is not None
        gpus = [{g.name: g for n in names if (g := self.full.devices.gpu_of(n)) is not None} for names in device_sets]
        if not all(gpus) or len({name for found in gpus for name in found}) != 1:
            return None
        return next(iter(gpus[0].values()))

    def _instance_scoped(self, target: int) -> bool:
        """A fault on one MIG instance is that instance's alone while it can never reach a GPU reset, which takes
        every instance of the GPU: the alerts ask for at most drain, and the ladder cannot climb from the drain to
        reset_gpu (ladder.drain.escalate_after unset, or ladder.max_rung at most drain). Otherwise the whole GPU is
        quarantined from the start, so that a reset finds every instance's pods gone."""
        drain = rung_index(Rung.DRAIN)
        return target <= drain and (self.policy.rung(Rung.DRAIN).escalate_after is None
                                    or rung_index(self.policy.ladder.max_rung) <= drain)

    def _choose_scope(self, actionable: dict[str, AlertRecord], target: int) -> None:
        """At an episode's first step: GPU scope when the fault is one GPU's and the cluster can quarantine it.
        At GPU scope: the node ladder once the fault is no longer that GPU's alone (another GPU, a bigger
        remediation). Either way a change of scope is said in the audit trail (the decision's reason, an Event)."""
        st = self.state
        if st.scope == Scope.NODE and (st.rung is not None or st.devices):
            return  # at node scope for this episode (a GPU scope that handed over never comes back)
        if st.scope == Scope.GPU and st.rung_status == RungStatus.FAILED:
            self._scope_view()  # the GPU step failed: the node ladder takes over (_climb), whatever the alerts now say
            return
        devices, why = self._gpu_family(actionable, target)
        same_gpu = self._one_gpu(st.devices, devices) if st.scope == Scope.GPU and devices else None
        if st.scope == Scope.GPU and devices and set(devices) <= set(st.devices):
            pass  # the same devices, or one MIG instance of the quarantined GPU: the whole GPU stays quarantined
        elif same_gpu is not None and same_gpu.name in st.devices:
            pass  # the quarantined GPU, its instances made anew since its reset (_cover_new_instances)
        elif same_gpu is not None:  # the GPU, or another instance of it: the GPU and all its instances
            assert self.full.devices is not None
            self._widen(tuple(d.name for d in self.full.devices.family(same_gpu)))
        elif st.scope == Scope.GPU and devices != st.devices:
            self._to_node_scope(why or "the alerts now name another GPU", floor=None)
        elif st.scope == Scope.NODE and devices:
            self.state = replace(st, scope=Scope.GPU, devices=devices)
        elif st.scope == Scope.NODE and why:
            self.scope_note = f"; node scope: {why}"
        self._scope_view()

    def _widen(self, devices: tuple[str, ...]) -> None:
        """A fault on one MIG instance is now its GPU's (it asks for a reset, which takes every instance, or the
        alerts name the GPU or another of its instances): the quarantine grows to the GPU and all its instances, its
        ladder from the start (NoSchedule, then NoExecute on them all), still at GPU scope, not the node's; said in
        the first decision's reason."""
        st = self.state
        self.state = replace(st, devices=devices, rung=None, rung_status=None, rung_started=None, rung_done=None,
                             timed_out=False)
        self.scope_note = (f"; the fault grew from MIG device {', '.join(st.devices)} to its GPU: the GPU and every "
                           "MIG instance of it are quarantined")

    def _scope_view(self) -> None:
        """At GPU scope the rungs see only the pods that hold the quarantined devices (their claims say so)."""
        if self.state.scope != Scope.GPU:
            self.v = self.full
            return
        holders = set(self.full.holders(self.state.devices))
        self.v = replace(self.full, evictable=[p for p in self.full.evictable if f"{p.namespace}/{p.name}" in holders],
                         pods_known=self.full.pods_known and self.full.claims is not None)

    def _target(self, actionable: dict[str, AlertRecord], st: NodeState) -> int:
        """The rung the alerts ask for, within the ladder, and at node scope not below a failed GPU step's floor."""
        target = min(max(rung_index(a.remediation) for a in actionable.values()),
                     rung_index(self.policy.ladder.max_rung))
        return max(target, rung_index(st.node_floor)) if st.scope == Scope.NODE else target

    def _gpu_pods_view(self, actionable: dict[str, AlertRecord], target: int, note: bool = True) -> None:
        """Node scope without device taints (the device plugin): a fault on one GPU that asks for at most a reset of
        that GPU drains only the pods the node agent says are on it (the alerts' gpu_pods, from the kubelet's
        pod-resources API). Any alert without the mapping, another GPU, or a reset that takes every GPU: the whole
        node, as before."""
        st, v = self.state, self.full
        if st.scope != Scope.NODE or st.node_floor is not None or target > rung_index(Rung.RESET_GPU):
            return
        gpus = {a.gpu for a in actionable.values()}
        if len(gpus) != 1 or next(iter(gpus)) in (None, ALL_GPUS):
            return
        if target == rung_index(Rung.RESET_GPU) and self.policy.reset.resets_whole_node(v.labels):
            return
        maps = [a.gpu_pods for a in actionable.values()]
        if any(m is None for m in maps):
            return
        names = tuple(sorted({n for m in maps for n in (m or "").split()}))
        earliest = min(a.starts_at for a in actionable.values())
        # year 1: a record stored before the webhook refused such a startsAt (no room to subtract): every GPU pod
        since = earliest - GPU_PODS_MAP_AGE if earliest.year > 1 else earliest
        self.plan.drain_only = only = GpuPods(names, since)
        self.v = replace(v, evictable=[p for p in v.evictable if only.includes(p)])
        if note and st.rung is None:
            self.scope_note += (f"; only the pods on GPU {next(iter(gpus))} ({', '.join(names) or 'none'}, the node "
                                "agent's pod-resources mapping) and any GPU pod created since "
                                f"{fmt_time(since)}: the node's other pods keep running")

    def _to_node_scope(self, why: str, floor: str | None) -> None:
        """The GPU-scoped steps are not enough: the node ladder from its start (cordon, drain), then `floor`."""
        st = self.state
        self.state = replace(st, scope=Scope.NODE, rung=None, rung_status=None, rung_started=None, rung_done=None,
                             timed_out=False, node_floor=floor, not_started=None)
        self.v = self.full
        self.plan.drain_only = None
        self.note(Note(EventReason.NODE_SCOPE, f"GPU {', '.join(st.devices)}: {why}; the node ladder takes over",
                       Severity.WARNING))

    def _settle(self) -> None:
        """No actionable alert fires: return to service after the healthy delay, or stay quiet."""
        v, policy, now, st = self.v, self.policy, self.now, self.state
        stale = st.stale(now, policy.episode.quiet_timeout)
        if stale:
            if not st.quiet:
                self.state = replace(st, quiet=True)
                self.note(Note(EventReason.EPISODE_QUIET, f"no word on {len(stale)} firing alert(s) for "
                               f"{policy.episode.quiet_timeout}; escalation stopped, node left as is"))
            return self.out(Action.NONE, Verdict.SKIPPED,
                            "episode went quiet (alerts neither repeated nor resolved, e.g. "
                            "silenced): escalation stopped; `gpuhealth-remediator release` returns the node")
        if st.rung == Rung.REPLACE:
            return self.out(Action.NONE, Verdict.SKIPPED, "replacement under way: not returned to service")
        if st.rung is None and not v.our_taint:  # resolved before anything was done: close the episode
            self.state = NodeState(actions=st.actions)
            return self.out(Action.NONE, Verdict.SKIPPED, "alerts resolved before any action")
        if st.healthy_since is None:
            self.state = st = replace(st, healthy_since=now)
        if self._cancel_unstarted_reset("the alerts resolved while the GPU's clients were stopping"):
            return self.out(Action.UNCORDON, Verdict.DEFERRED, "reset cancelled before it started; healthy for 0s of "
                            f"{int(policy.return_to_service.healthy_delay.total_seconds())}s")
        if st.rung_status == RungStatus.RUNNING and st.rung in JOB_RUNGS:
            return self.out(Action.UNCORDON, Verdict.DEFERRED,
                            f"{st.rung} still under way (job {st.job}): the node returns "
                            "once it is done or has failed")
        healthy_for = elapsed(now, st.healthy_since)
        if healthy_for < policy.return_to_service.healthy_delay:
            return self.out(Action.UNCORDON, Verdict.DEFERRED, f"healthy for {int(healthy_for.total_seconds())}s of "
                            f"{int(policy.return_to_service.healthy_delay.total_seconds())}s")
        self.ledger.release(v)
        self.state = NodeState(actions=st.actions)
        return self.out(Action.UNCORDON, Verdict.EXECUTE,
                        f"all alerts resolved for {int(healthy_for.total_seconds())}s: "
                        "undoing what gpuhealth did")

    # --- climbing ---------------------------------------------------------------------------
    def _silenced(self, action: str, fingerprints: list[str]) -> bool:
        """Before every disruptive step (starts, drain retries, forced deletion): True if it must not happen."""
        if self.silences is None:
            return False
        answer = self.silences(self.v.name, fingerprints)
        if answer.error and self.policy.alertmanager.on_error == "defer":
            self.out(Action(action), Verdict.DEFERRED, f"cannot check Alertmanager silences: {answer.error}")
            return True
        if answer.silenced_by:
            self.out(Action(action), Verdict.SKIPPED,
                     f"silenced or inhibited in Alertmanager ({', '.join(answer.silenced_by)}): "
                     "a person took over")
            return True
        return False

    def _stop(self, action: Action, decision: Verdict, reason: str) -> None:
        """The end of the climb for this pass: a decision only if nothing else was decided."""
        if not self.plan.decisions:
            self.out(action, decision, reason)

    def _spared(self, pods: list[PodRef]) -> list[PodRef]:
        """The pods the drain leaves where they are for now: an active karpenter.sh/do-not-disrupt, as Karpenter's own
        drain leaves them (drain.honor_pod_do_not_disrupt). Node scope only: at GPU scope kube-controller-manager evicts
        for the NoExecute device taint, and it does not read Karpenter's annotation."""
        if not self.policy.drain.honor_pod_do_not_disrupt or self.state.scope == Scope.GPU:
            return []
        return [p for p in pods if p.protected(self.now)]

    def _drain_more(self, before: str, fps: list[str], force: bool = False, why: str = "") -> None:
        """Evict (or delete) what is still on the node; wait for what is terminating, and for the pods
        karpenter.sh/do-not-disrupt keeps (deleted only when forced: drain.on_timeout force)."""
        v = self.v
        spared = [] if force else self._spared(v.pending_pods)
        pending = [p for p in v.pending_pods if p not in spared]
        kept = f"; not evicting {_names(spared)} ({DO_NOT_DISRUPT_ANNOTATION})" if spared else ""
        if not pending:
            terminating = len(v.evictable) - len(spared)
            waits = [f"{terminating} pod(s) to terminate"] if terminating or not spared else []
            waits += [f"{_names(spared)}, which {DO_NOT_DISRUPT_ANNOTATION} keeps from eviction "
                      "(drain.honor_pod_do_not_disrupt)"] if spared else []
            return self.out(Action.DRAIN, Verdict.DEFERRED, f"waiting for {' and '.join(waits)}{before}")
        if self._silenced("drain", fps):
            return None
        verb = "deleting" if force else "evicting"
        return self.out(Action.DRAIN, Verdict.EXECUTE,
                        f"{why}{verb} {len(pending)} pod(s){before}{kept}", new=False, force=force)

    def _climb(self, target: int, gpu: str | None, fps: list[str]) -> None:
        """From the node's rung and its status to the next step (_STEPS, one handler each), then through the
        gates to its start (_start): until a step is started, deferred or stopped, or the climb ends this pass."""
        for _ in range(4 * len(RUNGS) + 4):
            st = self.state
            if st.scope == Scope.GPU and st.rung_status == RungStatus.FAILED and not st.not_started:
                # a GPU step failed or timed out: the node ladder, above that step (a failed drain: from the node's
                # own drain). A fault that outgrew the GPU was handed over by _choose_scope, an escalation below.
                floor = RUNGS[rung_index(st.rung) + 1] if st.rung != Rung.DRAIN else None
                self._to_node_scope(f"{st.rung} failed", floor)
                target = max(target, rung_index(floor))
                continue
            step = self._next_step(target, gpu, fps)
            if step is _Flow.AGAIN:
                continue
            if step is _Flow.STOP:
                return
            st = self.state
            if st.scope == Scope.GPU and rung_index(step.rung) > rung_index(Rung.RESET_GPU):
                # a reset that was not enough (the fault persisted): reboot and replace take the node, from its cordon
                self._to_node_scope(f"{st.rung} was not enough: the alerts ask for {step.rung}", floor=step.rung)
                target = max(target, rung_index(step.rung))
                continue
            if step.rung == Rung.RESET_GPU and gpu is None:
                self.state = replace(st, rung=Rung.RESET_GPU, rung_status=RungStatus.FAILED,
                                     rung_started=self.now, rung_done=self.now, timed_out=False)
                self.note(Note(EventReason.GPU_RESET_SKIPPED,
                               "no alert names a GPU (index, PCI bus id, all or unknown): cannot reset",
                               rung=Rung.RESET_GPU))
                continue
            if self._start(step, gpu, fps) is _Flow.STOP:
                return
        return

    # --- the next step, by the rung's status -----------------------------------------------------------
    def _next_step(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        if self.state.rung is None:
            return self._first_step(target, gpu, fps)
        return _STEPS[self.state.rung_status or RungStatus.DONE](self, target, gpu, fps)

    def _ceiling(self, target: int) -> int:
        """The highest rung the climb may reach: after a failed drain, no higher than the alerts ask."""
        top = rung_index(self.policy.ladder.max_rung)
        return min(top, target) if self.state.drain_failed else top

    def _first_step(self, target: int, gpu: str | None, fps: list[str]) -> _Step:
        why = f"alert asks for {RUNGS[target]}{self.scope_note}"
        if self.state.scope == Scope.GPU:
            why += f"; GPU scope: quarantining {', '.join(self.state.devices)}, the node stays in service"
        return _Step(Rung.CORDON, why)

    def _while_running(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        v, st, policy = self.v, self.state, self.policy
        rung = st.rung
        assert rung is not None  # _next_step: a rung is under way
        if rung == Rung.DRAIN:
            return _Flow.AGAIN if self._draining(fps) else _Flow.STOP
        if rung == Rung.REPLACE and not self._replace_pending():
            self.out(Action.REPLACE, Verdict.SKIPPED, "replacement under way")
            return _Flow.STOP
        if rung == Rung.RESET_GPU and st.reset_phase is not None and v.job_status == "missing" and gpu and \
                reset_target(v, policy, gpu) != st.gpu:  # no Job yet: it resets what the alerts name now
            self.state = st = replace(st, gpu=reset_target(v, policy, gpu))
        if rung == Rung.RESET_GPU and st.reset_phase == ResetPhase.STOPPING:
            left = still_holding(v, st, policy)
            self.out(Action.RESET_GPU, Verdict.DEFERRED, f"stopping the GPU's clients before the reset "
                     f"(since {time_text(st.rung_started)}); still holding it: {', '.join(left)}")
            return _Flow.STOP
        if v.job_status == "missing" and rung in JOB_RUNGS:  # intent recorded, Job never created
            just_stopped = self.plan.base_state.reset_phase == ResetPhase.STOPPING
            why = (f"the GPU's clients stopped: starting reset job {st.job}" if just_stopped
                   else f"{rung} recorded but its job {st.job} is missing: creating it")
            return _Step(rung, why, resume=True)
        if rung == Rung.REPLACE:
            return _Step(rung, "replace recorded but its hand-over not seen done (the remediator stopped in "
                               f"between): handing over again (replace.method {policy.replace.method})", resume=True)
        self.out(Action(rung), Verdict.DEFERRED, f"{rung} under way since {time_text(st.rung_started)}")
        return _Flow.STOP

    def _after_failure(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        st = self.state
        rung, idx, ceiling = st.rung, rung_index(st.rung), self._ceiling(target)
        if st.not_started:  # gpuhealth's own breakage says nothing about the node: no climb on it
            self._stop(Action.NONE, Verdict.SKIPPED, f"{rung}: {NOT_STARTED} ({st.not_started}); "
                       "the ladder does not climb for gpuhealth's own breakage: needs a person")
            return _Flow.STOP
        if rung == Rung.DRAIN and target <= idx:
            self._stop(Action.NONE, Verdict.SKIPPED, "drain failed (timed out) and the alerts ask for no more "
                       "than drain: needs a person")
            return _Flow.STOP
        if idx >= ceiling:
            self._stop(Action.NONE, Verdict.SKIPPED, f"{rung} failed and the ladder stops at {RUNGS[ceiling]}: "
                       "needs a person")
            return _Flow.STOP
        return _Step(RUNGS[target] if rung == Rung.DRAIN else RUNGS[idx + 1], f"{rung} failed")

    def _after_done(self, target: int, gpu: str | None, fps: list[str]) -> _Step | _Flow:
        st = self.state
        rung, idx = st.rung, rung_index(st.rung)
        assert rung is not None  # _next_step: a rung is done
        if idx < target:  # cordon and drain come first; then straight to the rung the alert asks for
            nxt = RUNGS[idx + 1] if idx < rung_index(Rung.DRAIN) else RUNGS[target]
            why = f"passing through to {RUNGS[target]}" if nxt != RUNGS[target] else f"alert asks for {nxt}"
            return _Step(nxt, why)
        esc = self.policy.rung(rung).escalate_after
        if esc is None or idx >= self._ceiling(target):
            self._stop(Action.NONE, Verdict.SKIPPED, f"at {rung}, as far as the alerts ask; fault persisting does "
                       "not climb from here")
            return _Flow.STOP
        persisted = elapsed(self.now, st.rung_done)
        if persisted < esc:
            self._stop(Action(RUNGS[idx + 1]), Verdict.DEFERRED, f"fault persists {int(persisted.total_seconds())}s "
                       f"after {rung}; climbs after {int(esc.total_seconds())}s")
            return _Flow.STOP
        return _Step(RUNGS[idx + 1], f"fault persisted {int(persisted.total_seconds())}s after {rung}")

    # --- the gates, then the start ---------------------------------------------------------------------
    def _start(self, step: _Step, gpu: str | None, fps: list[str]) -> _Flow:
        """The step through the ladder's limit, the drained-node rule, the budget and the silences; then its
        decision and the state that starts it. AGAIN when the rung it started is already done (cordon, an empty
        drain) and the climb goes on."""
        policy, st, nxt = self.policy, self.state, step.rung
        if rung_index(nxt) > rung_index(policy.ladder.max_rung):
            self.out(Action.NONE, Verdict.SKIPPED, f"ladder stops at {policy.ladder.max_rung}")
            return _Flow.STOP
        if rung_index(nxt) > rung_index(Rung.RESET_GPU) and self.plan.drain_only is not None:
            # past the one GPU's reset (a reboot, a replacement): the whole node must be empty first
            self.v = self.full
            self.plan.drain_only = None
        v = self.v
        if nxt in NEEDS_DRAINED:
            if not v.pods_known:
                self.out(Action(nxt), Verdict.DEFERRED, "pods unknown — pass --pods")
                return _Flow.STOP
            if v.evictable:  # pods came back after the drain (or never left): drain first
                self._drain_more(f" before {nxt}", fps, why="node not drained: ")
                return _Flow.STOP
        if nxt == Rung.DRAIN and not v.pods_known:
            self.out(Action.DRAIN, Verdict.DEFERRED, "pods unknown — pass --pods")
            return _Flow.STOP
        budgeted = Action.QUARANTINE_GPU if st.scope == Scope.GPU else nxt  # the node stays in service
        if not step.resume:
            held = self.ledger.gate(v, budgeted)
            if held is not None:
                self.out(Action(nxt), Verdict.DEFERRED, held.reason, deferral=held.limit)
                return _Flow.STOP
        if nxt in DISRUPTIVE and self._silenced(nxt, fps):
            return _Flow.STOP
        if step.resume:
            self.out(Action(nxt), Verdict.EXECUTE, step.why, new=False, gpu=st.gpu, job=st.job)
            return _Flow.STOP
        self.ledger.take(v, budgeted)
        started, why = self._started(nxt, step.why, gpu)
        action = Action.STOP_GPU_CLIENTS if started.reset_phase == ResetPhase.STOPPING else Action(nxt)
        self.out(action, Verdict.EXECUTE, why, gpu=started.gpu if nxt == Rung.RESET_GPU else None,
                 job=started.job if nxt in JOB_RUNGS else None)
        self.state = started
        return _Flow.AGAIN if started.rung_status == RungStatus.DONE else _Flow.STOP

    def _started(self, nxt: str, why: str, gpu: str | None) -> tuple[NodeState, str]:
        """The state that starts rung `nxt`, with what each rung needs written in the same step, and the
        decision's reason with what it will do."""
        policy, st, v, now = self.policy, self.state, self.v, self.now
        started = st.with_action(now, rung=nxt, rung_status=RungStatus.RUNNING, rung_started=now,
                                 rung_done=None, timed_out=False, reset_phase=None, paused=(), pause_value=None,
                                 not_started=None)
        if nxt == Rung.CORDON:
            started = replace(started, rung_status=RungStatus.DONE, rung_done=now,
                              cordoned=st.cordoned or (st.scope == Scope.NODE and not v.unschedulable))
        elif nxt == Rung.DRAIN and st.scope == Scope.GPU:  # kube-controller-manager evicts the GPU's pods
            if not v.evictable:
                started = replace(started, rung_status=RungStatus.DONE, rung_done=now)
                why += "; no pod holds the GPU"
            else:
                why += f"; {len(v.pending_pods)} pod(s) hold the GPU"
        elif nxt == Rung.DRAIN:
            # Karpenter must not consolidate a node mid-ladder: annotated in the write that starts the drain
            started = replace(started, do_not_disrupt=st.do_not_disrupt or policy.drain.karpenter_do_not_disrupt)
            spared = self._spared(v.pending_pods)
            if not v.evictable:
                started = replace(started, rung_status=RungStatus.DONE, rung_done=now)
                why += "; nothing to evict"
            else:
                why += f"; evicting {len(v.pending_pods) - len(spared)} pod(s)"
            if spared:
                why += (f"; not evicting {_names(spared)} ({DO_NOT_DISRUPT_ANNOTATION}): the drain waits for "
                        "them, and drain.on_timeout decides at its timeout")
        elif nxt == Rung.REPLACE:  # handed to Karpenter (or a hook): our annotation must not block it
            started = replace(started, do_not_disrupt=False)
        elif nxt in JOB_RUNGS:
            started = replace(started, job=job_name(v.name, nxt, st.episode),
                              gpu=reset_target(v, policy, gpu) if nxt == Rung.RESET_GPU and gpu else None,
                              boot_id=v.boot_id if nxt == Rung.REBOOT else st.boot_id)
            if nxt == Rung.RESET_GPU:
                why += f"; GPU {started.gpu}" if started.gpu != ALL_GPUS else "; all GPUs of the node"
                if started.gpu != gpu:
                    why += f" (a reset of {v.labels.get('nvidia.com/gpu.product', 'these GPUs')} takes them all)"
                started, why = self._stop_clients(started, why)
        return started, why

    def _stop_clients(self, started: NodeState, why: str) -> tuple[NodeState, str]:
        """The reset's first step: pause the operands that hold the GPU, ask gpuhealth's exporter to let go; the Job
        starts once they have (progress.observe). With nothing to wait for, the Job starts now."""
        base = self.plan.base_state  # a stop already under way (a GPU scope handed to the node's): its labels stay ours
        paused = tuple(dict.fromkeys((*base.paused, *operands_to_pause(self.v, self.policy))))
        stopping = replace(started, reset_phase=ResetPhase.STOPPING, paused=paused,
                           pause_value=base.pause_value if base.paused else self.policy.reset.pause_value)
        left = still_holding(replace(self.v, gpu_clients=()), stopping, self.policy)
        if not paused and not left:
            return started, why
        what = [f"pausing {', '.join(paused)}"] if paused else []
        what += ["asking gpuhealth's exporter to release NVML"] if left else []
        return stopping, f"{why}; first stopping the GPU's clients: {' and '.join(what)}"

    def _draining(self, fps: list[str]) -> bool:
        """The drain rung is running: keep evicting, and past its timeout do what drain.on_timeout says.
        True when the drain failed (on_timeout=escalate) and the climb goes on."""
        policy, st, v = self.policy, self.state, self.v
        if not v.pods_known:
            self.out(Action.DRAIN, Verdict.DEFERRED, "pods unknown — pass --pods")
            return False
        timeout = policy.rung("drain").timeout
        timed_out = timeout is not None and elapsed(self.now, st.rung_started) >= timeout
        if timed_out and not st.timed_out:
            self.state = st = replace(st, timed_out=True)
            spared = self._spared(v.pending_pods)
            kept = f" ({_names(spared)} kept by {DO_NOT_DISRUPT_ANNOTATION})" if spared else ""
            self.note(Note.timeout(Rung.DRAIN, f"drain passed its {timeout} timeout with {len(v.evictable)} pod(s) "
                                   f"left{kept}; policy drain.on_timeout={policy.drain.on_timeout}"))
        if timed_out and policy.drain.on_timeout == "escalate":
            self.state = replace(st, rung_status=RungStatus.FAILED, rung_done=self.now, drain_failed=True)
            return True
        if timed_out and policy.drain.on_timeout == "force":
            self._drain_more("", fps, force=True, why=f"drain passed its {timeout} timeout "
                             "(policy drain.on_timeout=force): ")
            return False
        self._drain_more("", fps, why="drain timed out (policy drain.on_timeout=wait): " if timed_out else "")
        return False


# The ladder's table: the handler that finds the next step, by the status of the node's rung (no rung yet:
# _first_step). Each returns the step, or says the climb goes on (AGAIN) or ends this pass (STOP).
_STEPS: dict[RungStatus, Callable[[_Planner, int, str | None, list[str]], _Step | _Flow]] = {
    RungStatus.RUNNING: _Planner._while_running,
    RungStatus.FAILED: _Planner._after_failure,
    RungStatus.DONE: _Planner._after_done,
}
