"""Idle-node sweeps (docs/remediation.md, "Idle-node sweeps"): on a schedule, a node with no GPU work is cordoned and
runs the diagnostic Job at sweep.level; passed, it returns at once (no alert fired: no healthy delay); failed, it is a
hardware episode like one an alert raised, climbing from its cordon to the rung its failure asks for; not started
(gpuhealth's own breakage), it returns unswept.

A sweep never drains and never touches a node with GPU work: it starts only on a node whose pods ask for no GPU
(decide/views.py gpu_work), and a GPU pod that appears on it meanwhile (one that tolerates gpuhealth's taint) ends the
sweep unjudged and returns the node. When its last sweep started is on the Node (gpuhealth.io/last-sweep, written with
the cordon), so that a restart does not sweep it again before sweep.interval; cleanup removes it.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhealth.remediator.decide import climb
from gpuhealth.remediator.decide.diagnose_step import read_diagnosis
from gpuhealth.remediator.decide.diagnosis import Diagnosis, diagnosis_job_name
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import ALL_GPUS, NodeState, rung_index, time_text
from gpuhealth.remediator.decide.planner import NO_CEILING, Ceiling, Draft, Pass, note, out
from gpuhealth.remediator.decide.state_records import DiagnosticRun
from gpuhealth.remediator.decide.vocabulary import Action, Purpose, Rung, RungStatus, Severity, Verdict

# The rung each failed check asks for: a diag test or an all-reduce under its floor is a GPU's (its reset first, then
# the climb: reboot, replace); a GPU or EFA device missing from the bus is the node's (a reboot re-enumerates them);
# tool_error is no evidence either way: the node stays cordoned for a person (fail closed), nothing climbs.
# gpu_config (a diag test failed for the node's software or configuration, not the GPU) is a person's too.
SWEEP_RUNGS: dict[str, Rung] = {"gpu_diag": Rung.RESET_GPU, "nccl_bandwidth": Rung.RESET_GPU,
                                "gpu_count": Rung.REBOOT, "efa_count": Rung.REBOOT, "tool_error": Rung.CORDON,
                                "gpu_config": Rung.CORDON}


def sweep_rung(categories: tuple[str, ...]) -> Rung:
    """The highest rung the failed checks ask for (an unknown category: a person's, as tool_error)."""
    return max((SWEEP_RUNGS.get(c, Rung.CORDON) for c in categories), key=rung_index, default=Rung.CORDON)


def ceiling(d: Draft, fps: list[str]) -> Ceiling | None:
    """A failed sweep has no alert: its fault may climb as far as ladder.max_rung lets any. None: not a failed
    sweep's climb (the alerts' ceiling applies: planner.alert_ceiling)."""
    return NO_CEILING if not fps and d.state.sweep_rung is not None else None


# --- the start ----------------------------------------------------------------------------
def start_sweep(d: Draft, ctx: Pass) -> None:
    """An idle node due for a sweep, within its pool's sweep limit, the cordon budget and the breaker: cordoned,
    and its diagnostic Job asked for, in one plan. One held back is no decision (thousands of idle nodes would
    each say so every pass): it is taken on a later pass."""
    v, policy, now = d.view, ctx.policy, ctx.now
    if v.gpu_work is None or v.gpu_work:  # not a candidate this pass (decide/sweep_due.py), or GPU work on it
        return
    usage = ctx.ledger.pools[v.pool]
    if len(usage.sweeping) >= policy.sweep.max_per_pool.limit(usage.size) or ctx.ledger.breaker_open(v.pool):
        return
    if ctx.ledger.gate(v, Action.CORDON) is not None:  # the cordon budget, the action rate cap
        return
    ctx.ledger.take(v, Action.CORDON)
    usage.sweeping.add(v.name)
    name = diagnosis_job_name(v.name, Purpose.SWEEP, now)
    d.state = NodeState(actions=d.state.actions).with_action(
        now, episode=now, rung=Rung.CORDON, rung_status=RungStatus.DONE, rung_started=now, rung_done=now,
        cordoned=True, diagnostic=DiagnosticRun(name, Purpose.SWEEP, now))
    d.plan.swept = now
    last = f"last swept {time_text(v.last_sweep)}" if v.last_sweep else "never swept"
    note(d, Note(EventReason.SWEEP_STARTED, f"idle-node sweep ({last}, no GPU pod): cordoned while diagnostic "
                 f"job {name} runs dcgmi diag -r {policy.sweep.level} and the GPU and EFA counts"))
    out(d, Action.CORDON, Verdict.EXECUTE, f"idle-node sweep: no GPU pod, {last}")
    out(d, Action.DIAGNOSE, Verdict.EXECUTE, f"idle-node sweep: diagnostic job {name} "
        f"(dcgmi diag -r {policy.sweep.level})", job=name)

# --- under way --------------------------------------------------------------------------
def sweep_holds(d: Draft, ctx: Pass) -> bool:
    """A sweep's episode (no alert): True while this decides the node (the sweep under way, or its failure's
    climb); False for the ladder's own return to service (a repair done: its validation, then the node returns)."""
    st = d.state
    if not st.active or st.alerts:  # an alert fired meanwhile: the ladder's as any episode
        return False
    if st.sweep_rung is not None:
        return _sweep_climb(d, ctx)
    if st.diagnostic.purpose == Purpose.SWEEP and st.diagnostic.result is None:
        return _read_sweep(d, ctx)
    return False


def _read_sweep(d: Draft, ctx: Pass) -> bool:
    st, v, policy = d.state, d.view, ctx.policy
    started = st.diagnostic.started or ctx.now
    busy = [p for p in v.evictable if p.uses_gpu and not p.terminating]
    if busy:
        return _sweep_return(d, ctx, EventReason.SWEEP_ABANDONED, f"GPU pod {busy[0].namespace}/{busy[0].name} came "
                             "to the node during its sweep (it tolerates gpuhealth's taint): a sweep never "
                             "touches GPU work; the node returns unswept")
    found = read_diagnosis(d, ctx, policy.sweep.level)
    if isinstance(found, str):
        return _sweep_return(d, ctx, EventReason.SWEEP_NOT_STARTED, f"diagnostic job {st.diagnostic.job} did not "
                             f"start: {found}. gpuhealth's own breakage: no fault was seen, so the "
                             "node returns unswept (it is not swept again before sweep.interval)",
                             Severity.WARNING)
    if found is None:
        out(d, Action.UNCORDON, Verdict.DEFERRED, f"idle-node sweep: diagnostic job {st.diagnostic.job} under "
            f"way since {time_text(started)}")
        return True
    if found.passed:
        return _sweep_return(d, ctx, EventReason.SWEEP_PASSED, f"idle-node sweep passed: diagnostic job "
                             f"{st.diagnostic.job} ({found.detail}); the node returns to service")
    return _sweep_failed(d, ctx, found)


def _sweep_return(d: Draft, ctx: Pass, reason: EventReason, why: str, severity: Severity = Severity.NORMAL) -> bool:
    """The node back in service now: no alert fired, so no healthy delay."""
    note(d, Note(reason, why, severity))
    ctx.ledger.release(d.view)
    d.state = NodeState(actions=d.state.actions)
    out(d, Action.UNCORDON, Verdict.EXECUTE, why)
    return True


def _sweep_failed(d: Draft, ctx: Pass, found: Diagnosis) -> bool:
    st = d.state
    rung = sweep_rung(found.categories)
    gpu = found.gpus[0] if len(found.gpus) == 1 else ALL_GPUS
    what = ", ".join(found.categories) or "failed"
    d.state = replace(st, diagnostic=replace(st.diagnostic, result=f"failed: {what}"), sweep_rung=rung, gpu=gpu)
    then = ("no evidence either way: the node stays cordoned for a person" if rung == Rung.CORDON else
            f"a hardware episode: the ladder climbs from its cordon to {rung}")
    note(d, Note(EventReason.SWEEP_FAILED, f"idle-node sweep failed: diagnostic job {st.diagnostic.job} "
                 f"({what}: {found.detail}); {then}", Severity.WARNING))
    return _sweep_climb(d, ctx)


def _sweep_climb(d: Draft, ctx: Pass) -> bool:
    """A failed sweep's episode: up the ladder to the rung its failure asks for, then on failure above it; a
    repair done goes to the ladder's return to service (False: its validation, then the node returns)."""
    st = d.state
    assert st.sweep_rung is not None
    target = rung_index(st.sweep_rung)
    if target <= rung_index(Rung.CORDON):
        what = "burn-in" if st.diagnostic.purpose == Purpose.BURN_IN else "idle-node sweep"
        out(d, Action.NONE, Verdict.SKIPPED, f"the {what} failed ({st.diagnostic.result}): the node "
            "stays cordoned for a person; `gpuhealth-remediator release` returns it")
        return True
    if st.rung_status == RungStatus.DONE and rung_index(st.rung) >= target:
        return False
    climb.run(d, ctx, target, st.gpu or ALL_GPUS, [], NO_CEILING)  # a failed sweep's climb: sweep.ceiling
    return True
