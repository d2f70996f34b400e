"""The ladder's scope steps: whether a fault takes one GPU (its DRA devices quarantined by device taints, or at node
scope only the pods on it drained) or the node, and the GPU quarantine's upkeep (re-driven after a stop, grown to
MIG devices made anew, widened from one MIG instance to its GPU)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from gpuhealth.remediator.decide.decision import Decision
from gpuhealth.remediator.decide.devices import Device
from gpuhealth.remediator.decide.nodestate import ALL_GPUS, RUNGS, AlertRecord, NodeState, fmt_time, rung_index
from gpuhealth.remediator.decide.planner import Draft, Pass, alert_ceiling, scope_view, to_node_scope
from gpuhealth.remediator.decide.views import GpuPods
from gpuhealth.remediator.decide.vocabulary import Action, Rung, RungStatus, Scope, TaintEffect, Verdict

# How much older than its alert the exporter's GPU -> pod map can be when the rule reads it: the map is believed for
# 2 x 15 s + 5 s, the rule sees the series one scrape and one evaluation later. A GPU pod created after the alert's
# startsAt less this is evicted with the pods the alert names (GpuPods).
GPU_PODS_MAP_AGE = timedelta(minutes=2)


def _gpu_family(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord],
                target: int) -> tuple[tuple[str, ...], str]:
    """The DRA devices a GPU-scoped fault quarantines (the GPU and its MIG devices), or () and why the fault
    takes the node ("" when the node has no DRA devices at all: nothing to explain)."""
    v, policy = d.full, ctx.policy
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
    if mig_uuid is not None and mig is None and _quarantined(d, ctx, v.devices.find(label)):
        pass  # an instance of the quarantined GPU, no longer published since its reset: the GPU's fault
    elif mig_uuid is not None:  # every alert names one MIG instance of the GPU (an Xid on that GPU instance)
        parent = v.devices.parent(mig) if mig is not None else None
        if mig is None or (parent is not None and v.devices.find(label) != parent):
            return (), (f"MIG device {mig_uuid} of GPU {label} is not among the node's DRA devices (driver "
                        f"{v.devices.driver})")
        if _instance_scoped(d, ctx, target, list(actionable)):
            return (mig.name,), ""
    gpu = v.devices.find(label)
    if gpu is None:
        return (), f"GPU {label} is not among the node's DRA devices (driver {v.devices.driver})"
    return tuple(dev.name for dev in v.devices.family(gpu)), ""


def redrive_quarantine(d: Draft, ctx: Pass) -> None:
    """A GPU quarantine recorded (the state's write) and not seen done (act/executor.py's pending: the remediator
    stopped before its DeviceTaintRules were made): made now, with each effect the rung reached. Idempotent: a rule
    that exists is left as it is."""
    st = d.state
    if Action.QUARANTINE_GPU not in st.pending or st.scope != Scope.GPU or st.rung is None or not st.gpu_scope.devices:
        return
    effects = [TaintEffect.NO_SCHEDULE]
    if rung_index(st.rung) >= rung_index(Rung.DRAIN):
        effects.append(TaintEffect.NO_EXECUTE)
    for effect in effects:
        d.plan.decisions.append(Decision(
            d.view.name, Action.QUARANTINE_GPU, Verdict.EXECUTE, f"the quarantine of {', '.join(st.gpu_scope.devices)} "
            f"({st.rung}) was recorded but not seen done (the remediator stopped in between): making its "
            f"{effect} device taints", d.view.pool, new=False, devices=st.gpu_scope.devices, effect=effect,
            pods=d.full.holders(st.gpu_scope.devices)))


def cover_new_instances(d: Draft, ctx: Pass) -> None:
    """A quarantined GPU's MIG devices made anew (a reset drops a MIG GPU's instances; the MIG manager makes them
    again, under other names where the layout changed) are quarantined too, with the effects the GPU already
    has: the scheduler must not place a claim on an instance of a GPU gpuhealth holds."""
    st, devices = d.state, d.full.devices
    if st.scope != Scope.GPU or st.rung is None or st.rung_status == RungStatus.FAILED or devices is None:
        return
    gpu = next((dev for dev in devices.devices if dev.kind == "gpu" and dev.name in st.gpu_scope.devices), None)
    if gpu is None:
        return
    new = tuple(dev.name for dev in devices.family(gpu) if dev.name not in st.gpu_scope.devices)
    if not new:
        return
    d.state = replace(st, gpu_scope=replace(st.gpu_scope, devices=(*st.gpu_scope.devices, *new)))
    effects = [TaintEffect.NO_SCHEDULE]
    if rung_index(st.rung) >= rung_index(Rung.DRAIN):
        effects.append(TaintEffect.NO_EXECUTE)
    for effect in effects:
        d.plan.decisions.append(Decision(
            d.view.name, Action.QUARANTINE_GPU, Verdict.EXECUTE,
            f"MIG device(s) {', '.join(new)} of the quarantined GPU {gpu.name} appeared (made anew after its "
            "reset): quarantined with it", d.view.pool, devices=new, effect=effect,
            pods=d.full.holders(new)))


def _quarantined(d: Draft, ctx: Pass, gpu: Device | None) -> bool:
    """This GPU itself (and so its whole family) is what the GPU scope holds."""
    return d.state.scope == Scope.GPU and gpu is not None and gpu.name in d.state.gpu_scope.devices


def _one_gpu(d: Draft, ctx: Pass, *device_sets: tuple[str, ...]) -> Device | None:
    """The one GPU that every set's published devices belong to (a MIG device by its parent), if there is one."""
    assert d.full.devices is not None
    gpus = [{g.name: g for n in names if (g := d.full.devices.gpu_of(n)) is not None} for names in device_sets]
    if not all(gpus) or len({name for found in gpus for name in found}) != 1:
        return None
    return next(iter(gpus[0].values()))


def _instance_scoped(d: Draft, ctx: Pass, target: int, fps: list[str]) -> bool:
    """A fault on one MIG instance is that instance's alone while it can never reach a GPU reset, which takes
    every instance of the GPU: the alerts ask for at most drain, and the ladder cannot climb from the drain to
    reset_gpu (ladder.drain.escalate_after unset, or the alerts' ceiling or ladder.max_rung at most drain).
    Otherwise the whole GPU is quarantined from the start, so that a reset finds every instance's pods gone."""
    drain = rung_index(Rung.DRAIN)
    ceiling = min(rung_index(ctx.policy.ladder.max_rung), max(target, alert_ceiling(d, fps).index))
    return target <= drain and (ctx.policy.rung(Rung.DRAIN).escalate_after is None or ceiling <= drain)


def choose_scope(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord], target: int) -> None:
    """At an episode's first step: GPU scope when the fault is one GPU's and the cluster can quarantine it.
    At GPU scope: the node ladder once the fault is no longer that GPU's alone (another GPU, a bigger
    remediation). Either way a change of scope is said in the audit trail (the decision's reason, an Event)."""
    st = d.state
    if st.scope == Scope.NODE and (st.rung is not None or st.gpu_scope.devices):
        return  # at node scope for this episode (a GPU scope that handed over never comes back)
    if st.scope == Scope.GPU and st.rung_status == RungStatus.FAILED:
        scope_view(d)  # the GPU step failed: the node ladder takes over (climb.run), whatever the alerts now say
        return
    devices, why = _gpu_family(d, ctx, actionable, target)
    same_gpu = _one_gpu(d, ctx, st.gpu_scope.devices, devices) if st.scope == Scope.GPU and devices else None
    if st.scope == Scope.GPU and devices and set(devices) <= set(st.gpu_scope.devices):
        pass  # the same devices, or one MIG instance of the quarantined GPU: the whole GPU stays quarantined
    elif same_gpu is not None and same_gpu.name in st.gpu_scope.devices:
        pass  # the quarantined GPU, its instances made anew since its reset (cover_new_instances)
    elif same_gpu is not None:  # the GPU, or another instance of it: the GPU and all its instances
        assert d.full.devices is not None
        _widen(d, ctx, tuple(dev.name for dev in d.full.devices.family(same_gpu)))
    elif st.scope == Scope.GPU and devices != st.gpu_scope.devices:
        to_node_scope(d, why or "the alerts now name another GPU", floor=None)
    elif st.scope == Scope.NODE and devices:
        d.state = replace(st, scope=Scope.GPU, gpu_scope=replace(st.gpu_scope, devices=devices))
    elif st.scope == Scope.NODE and why:
        d.scope_note = f"; node scope: {why}"
    scope_view(d)


def _widen(d: Draft, ctx: Pass, devices: tuple[str, ...]) -> None:
    """A fault on one MIG instance is now its GPU's (it asks for a reset, which takes every instance, or the
    alerts name the GPU or another of its instances): the quarantine grows to the GPU and all its instances, its
    ladder from the start (NoSchedule, then NoExecute on them all), still at GPU scope, not the node's; said in
    the first decision's reason."""
    st = d.state
    d.state = replace(st, gpu_scope=replace(st.gpu_scope, devices=devices), rung=None, rung_status=None,
                      rung_started=None, rung_done=None, timed_out=False)
    d.scope_note = (f"; the fault grew from MIG device {', '.join(st.gpu_scope.devices)} to its GPU: the GPU and every "
                    "MIG instance of it are quarantined")


def target_of(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord], st: NodeState) -> int:
    """The rung the alerts ask for, within the ladder, and at node scope not below a failed GPU step's floor."""
    target = min(max(rung_index(a.remediation) for a in actionable.values()),
                 rung_index(ctx.policy.ladder.max_rung))
    return max(target, rung_index(st.gpu_scope.node_floor)) if st.scope == Scope.NODE else target


def gpu_pods_view(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord], target: int,
                  note: bool = True) -> None:
    """Node scope without device taints (the device plugin): a fault on one GPU that asks for at most a reset of
    that GPU drains only the pods the node agent says are on it (the alerts' gpu_pods, from the kubelet's
    pod-resources API). Any alert without the mapping, another GPU, or a reset that takes every GPU: the whole
    node, as before."""
    st, v = d.state, d.full
    if st.scope != Scope.NODE or st.gpu_scope.node_floor is not None or target > rung_index(Rung.RESET_GPU):
        return
    gpus = {a.gpu for a in actionable.values()}
    if len(gpus) != 1 or next(iter(gpus)) in (None, ALL_GPUS):
        return
    if target == rung_index(Rung.RESET_GPU) and ctx.policy.reset.resets_whole_node(v.labels):
        return
    maps = [a.gpu_pods for a in actionable.values()]
    if any(m is None for m in maps):
        return
    names = tuple(sorted({n for m in maps for n in (m or "").split()}))
    earliest = min(a.starts_at for a in actionable.values())
    # year 1: a record stored before the webhook refused such a startsAt (no room to subtract): every GPU pod
    since = earliest - GPU_PODS_MAP_AGE if earliest.year > 1 else earliest
    d.plan.drain_only = only = GpuPods(names, since)
    d.view = replace(v, evictable=[p for p in v.evictable if only.includes(p)])
    if note and st.rung is None:
        d.scope_note += (f"; only the pods on GPU {next(iter(gpus))} ({', '.join(names) or 'none'}, the node "
                         "agent's pod-resources mapping) and any GPU pod created since "
                         f"{fmt_time(since)}: the node's other pods keep running")
