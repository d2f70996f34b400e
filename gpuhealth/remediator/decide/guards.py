"""The guards: whether a node is the ladder's this pass at all. A damaged state, a node with no episode (its burn-in,
its idle-node sweep, or nothing to do), one excluded, held, cordoned by a person, taken over by a person (gpuhealth's
taint removed) or handed over to Karpenter's node repair is left alone, said in a decision; decide_node stops there.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhealth.remediator.decide import burn_in, sweep
from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState
from gpuhealth.remediator.decide.planner import Draft, Pass, note, out
from gpuhealth.remediator.decide.vocabulary import Action, Purpose, Rung, RungStatus, Scope, Severity, Verdict


def left_alone(d: Draft, ctx: Pass, firing: dict[str, AlertRecord],
               actionable: dict[str, AlertRecord]) -> bool:
    """The node is not the ladder's this pass (nothing to do, excluded, held, a person's, handed over to
    Karpenter's repair), said in a decision: True. Karpenter's repair in warn mode goes on (False)."""
    v, st = d.view, d.view.state
    if v.damaged:
        out(d, Action.NONE, Verdict.SKIPPED, f"state annotation unreadable ({v.damaged}): counted as disrupted "
            "and left alone; fix or remove the gpuhealth.io/state annotation")
    elif not st.active and not v.our_taint:
        if v.burn_in or st.diagnostic.purpose == Purpose.BURN_IN:
            burn_in.burn_in_node(d, ctx)  # a new node's burn-in
        elif firing and not actionable:
            out(d, Action.NONE, Verdict.SKIPPED, "firing alerts ask for no action (remediation=none)")
        elif not firing:
            sweep.start_sweep(d, ctx)  # an idle node due for its sweep
    elif v.excluded:
        out(d, Action.NONE, Verdict.SKIPPED, "node excluded by the policy's exclude selectors")
    elif v.hold:
        who = f" by {v.hold['by']}" if v.hold.get("by") else ""
        out(d, Action.NONE, Verdict.SKIPPED, f"held{who}: {v.hold.get('reason', '')}".rstrip(": "))
    elif v.human_cordoned:
        out(d, Action.NONE, Verdict.SKIPPED, "cordoned by a person, not by gpuhealth: left alone")
    elif v.taken_over and st.scope == Scope.NODE:
        _taken_over(d, ctx, bool(actionable))
    elif v.repair_conditions and st.active:
        found = _karpenter_repair(d, ctx)
        if ctx.policy.karpenter_repair.mode != "handover":
            d.repair_warning = found
            return False
        out(d, Action.NONE, Verdict.SKIPPED, f"handed over to Karpenter's node repair: {found}, set by another "
            "agent (karpenter_repair.mode handover): no further rung is started and nothing is undone while "
            "it stays False")
    else:
        return False
    return True


def _taken_over(d: Draft, ctx: Pass, actionable: bool) -> None:
    """A person removed gpuhealth's taint: nothing is started or undone; the episode closes once it resolves."""
    st = d.state
    if actionable and st.reset.phase is not None:  # the GPU's clients come back: the person has the node
        d.state = replace(st, rung_status=RungStatus.FAILED, rung_done=ctx.now)
        note(d, Note(EventReason.GPU_RESET_SKIPPED, "gpuhealth's taint was removed while the reset was "
                     "under way: a person took over; the GPU's clients are restored", rung=Rung.RESET_GPU))
    if actionable:
        return out(d, Action.NONE, Verdict.SKIPPED,
                   "gpuhealth's taint was removed from the node: a person took over; "
                   "nothing is started or undone (hold or release to hand it back)")
    d.state = NodeState(actions=st.actions)
    return out(d, Action.NONE, Verdict.SKIPPED,
               "alerts resolved after a person took over (removed gpuhealth's "
               "taint): episode closed, node left as the person set it")


def _karpenter_repair(d: Draft, ctx: Pass) -> str:
    """Karpenter-watched conditions another agent (the EKS node monitoring agent) set False on a node gpuhealth is
    working on: each said once per episode (an Event and an audit line; the executor counts it), as the state
    records. Returns them, described."""
    st, found = d.state, d.view.repair_conditions
    described = ", ".join(c.describe() for c in found)
    new = [c for c in found if c.type not in st.repair_reported]
    if new:
        d.state = replace(st, repair_reported=(*st.repair_reported, *(c.type for c in new)))
        then = ("gpuhealth starts no further rung on the node and undoes nothing (karpenter_repair.mode handover)"
                if ctx.policy.karpenter_repair.mode == "handover" else
                "gpuhealth's ladder goes on (karpenter_repair.mode warn): a replacement can cut a rung short")
        said = "; ".join(f"{c.type}: {c.message[:200]}" for c in new if c.message)
        note(d, Note(EventReason.KARPENTER_REPAIR_CONFLICT,
                     f"{', '.join(c.describe() for c in new)}, not set by gpuhealth"
                     f"{' (' + said + ')' if said else ''}: with its NodeRepair feature gate on, Karpenter "
                     "force-replaces a node whose condition stays False past its toleration "
                     "(AcceleratedHardwareReady 10m, the others 30m), whatever gpuhealth's holds, budgets and "
                     f"do-not-disrupt say; {then}", Severity.WARNING))
    return described
