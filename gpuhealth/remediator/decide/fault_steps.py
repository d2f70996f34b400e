"""The monitoring and correlated faults of one node's pass (counted for the whole pass: decide/monitoring_fault.py,
decide/correlated.py, both in the pass's ledger): a monitoring fault's alerts are left out of what the ladder acts on,
and a node whose only alerts are one is held as it is; a correlated fault's alerts are recorded in the state, so that
the climb keeps them at their own rung (planner.alert_ceiling).
"""

from __future__ import annotations

from dataclasses import replace

from gpuhealth.remediator.decide import settle
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.monitoring_fault import FaultKey
from gpuhealth.remediator.decide.nodestate import AlertRecord, time_text
from gpuhealth.remediator.decide.planner import Draft, Pass, note, out
from gpuhealth.remediator.decide.vocabulary import Action, Severity, Verdict


def monitoring_faults(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord]) -> dict[str, FaultKey]:
    """This node's alerts that are a monitoring fault this pass (decide/monitoring_fault.py), by fingerprint: kept
    in the state (an Event when one becomes one), and left out of what the ladder acts on."""
    faults = ctx.ledger.faults.of(d.view, actionable)
    st = d.state
    others = sorted({a.name for fp, a in actionable.items() if fp not in faults})
    rest = f"; its other alerts ({', '.join(others)}) are handled as usual" if others else ""
    for key in sorted({key for fp, key in faults.items() if fp not in st.monitoring_faults}):
        note(d, Note(EventReason.MONITORING_FAULT, f"{ctx.ledger.faults.why(key)}: it starts no node action "
                     f"here (no cordon, no new rung){rest}", Severity.WARNING))
    if tuple(sorted(faults)) != st.monitoring_faults:
        d.state = replace(st, monitoring_faults=tuple(sorted(faults)))
    return faults


def correlated_faults(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord]) -> None:
    """This node's alerts that are a correlated fault (decide/correlated.py): recorded in the state for as long as
    they fire (an Event when one joins), so that the climb keeps them at their own rung."""
    st, shared = d.state, ctx.ledger.correlated.of(d.view, actionable)
    for key in sorted({key for fp, key in shared.items() if fp not in st.correlated}):
        note(d, Note(EventReason.CORRELATED_FAULT, f"{ctx.ledger.correlated.why(key)}: this node gets the "
                     "alert's own rung and climbs no higher for it; one page for all of them "
                     "(GpuhealthCorrelatedFault)", Severity.WARNING))
    kept = tuple(sorted(fp for fp in {*st.correlated, *shared} if fp in actionable))
    if kept != st.correlated:
        d.state = replace(st, correlated=kept)


def hold_for_monitoring_fault(d: Draft, ctx: Pass, faults: dict[str, FaultKey]) -> None:
    """Only a monitoring fault's alerts fire: nothing starts or climbs, and nothing is undone either. A node
    gpuhealth took out before (for these alerts, before they counted as one; for others, since resolved) stays as
    it is until they resolve, so that it is not returned and taken out again as a share crosses its threshold
    back and forth."""
    what = "; ".join(ctx.ledger.faults.why(key) for key in sorted(set(faults.values())))
    # a reset not begun yet would hold the GPU's clients stopped (the device plugin off) for as long as the
    # monitoring fault lasts: it is no longer needed, as when the alerts resolve
    settle.cancel_unstarted_reset(d, ctx, "only a monitoring fault's alerts were left while the GPU's clients were "
                                  "stopping")
    st = d.state
    if st.rung is None:
        return out(d, Action.NONE, Verdict.SKIPPED, f"monitoring fault, not this node's: {what}: no node action")
    return out(d, Action.NONE, Verdict.SKIPPED, f"monitoring fault, not this node's: {what}: the node stays at "
               f"{st.rung} (since {time_text(st.rung_started)}), with no new rung, and returns to service "
               "once its alerts resolve")
