"""Repeat offenders: a node whose hardware keeps failing is retired, not repaired again (policy repeat_offenders).

Two rules read the node's history (decide/history.py) when an episode acts on a hardware alert:
- episodes: the current episode is at least the `episodes`-th hardware episode started within `window` (3 in 7 days:
  the third escalates), and an earlier one of them repaired the node (its reset or reboot was carried out): episodes
  that only cordoned or drained it (a flapping alert) never skip the ladder's rungs;
- same_gpu: a GPU the current alerts name was reset (reset_gpu or a reboot) by an earlier episode within `window`,
  and fails again.
The first that applies escalates the episode's target to replace: the ladder climbs to it as usual, through cordon
and drain, under the same budgets, breaker, holds, silences and dry run (it only raises the target). Where
ladder.max_rung is below replace, the node is cordoned and drained and then left for a person, with that reason. The
rule is recorded in the state (said once: a RepeatOffender Event, an audit line, a counted escalation) and holds for
the rest of the episode; alerts that ask for replace themselves need no rule.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from gpuhealth.remediator.decide.event_reasons import EventReason, Note
from gpuhealth.remediator.decide.history import Episode, gpu_ids, hardware_alerts, history_after, in_window
from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState, rung_index, time_text
from gpuhealth.remediator.decide.planner import Draft, Pass, alert_ceiling, note, out
from gpuhealth.remediator.decide.state_records import Offence
from gpuhealth.remediator.decide.step import Step
from gpuhealth.remediator.decide.vocabulary import Action, Rung, Severity, Verdict
from gpuhealth.remediator.policy.repeat_offenders import RepeatOffenderSettings

EPISODES = "episodes"
SAME_GPU = "same_gpu"
RULES = (EPISODES, SAME_GPU)  # the counter's reason label values


def span(d: timedelta) -> str:
    """A window as the policy writes it: 7d, 36h, 90m."""
    seconds = int(d.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def judge(history: tuple[Episode, ...], episode: datetime, gpus: tuple[str, ...],
          policy: RepeatOffenderSettings) -> Offence | None:
    """The rule the current episode (started at `episode`, its alerts naming `gpus`) breaks, or None."""
    past = [e for e in in_window(history, episode - policy.window) if e.start < episode]
    # a node is retired for a repair that did not hold: one that was never repaired (its episodes cordoned or drained
    # it, and its alerts resolved) is a flapping alert, not a lemon, and climbs the ladder one rung at a time
    repaired = any(rung_index(e.rung) >= rung_index(Rung.RESET_GPU) for e in past)
    if len(past) + 1 >= policy.episodes and repaired:
        starts = ", ".join(str(time_text(e.start)) for e in sorted(past, key=lambda e: e.start))
        return Offence(EPISODES, f"{_ordinal(len(past) + 1)} hardware episode in {span(policy.window)} "
                                 f"(repeat_offenders.episodes {policy.episodes}; the earlier ones started {starts})")
    if not policy.same_gpu_after_reset:
        return None
    for e in past:  # newest first
        same = sorted(set(gpus) & set(e.gpus))
        if same and rung_index(e.rung) >= rung_index(Rung.RESET_GPU):
            return Offence(SAME_GPU, f"GPU {', '.join(same)} fails again after the {e.rung} of the episode that "
                                     f"started {time_text(e.start)}, within {span(policy.window)} "
                                     "(repeat_offenders.same_gpu_after_reset)")
    return None


def judge_offender(d: Draft, ctx: Pass, actionable: dict[str, AlertRecord]) -> None:
    """As the episode acts on hardware alerts: the rule it breaks recorded in the state and said once (before the
    target: a repeat offender's is replace, raise_target)."""
    st, settings = d.state, ctx.policy.repeat_offenders
    if not settings.enabled or st.offence.rule is not None or st.episode is None:
        return
    hardware = hardware_alerts(st, firing_only=True)
    own = [a for fp, a in hardware.items() if fp in actionable]
    if not own or max(rung_index(a.remediation) for a in own) >= rung_index(Rung.REPLACE):
        return  # no hardware alert acts, or the alerts ask for replace themselves
    if alert_ceiling(d, [fp for fp in hardware if fp in actionable]).index < rung_index(Rung.REPLACE):
        return  # none of its alerts may climb to replace (a cable's max_rung, a correlated fault)
    offence = judge(d.full.history, st.episode, gpu_ids(own, d.full.devices), settings)
    if offence is None:
        return
    asks = max((a.remediation for a in own), key=rung_index)
    top = ctx.policy.ladder.max_rung
    then = ("escalating to replace" if rung_index(top) >= rung_index(Rung.REPLACE) else
            f"replace is above ladder.max_rung ({top}): the node is drained and left for a person")
    why = f"repeat offender: {offence.why}; the alerts ask for {asks}, {then}"
    d.state = replace(st, offence=Offence(offence.rule, why))
    note(d, Note(EventReason.REPEAT_OFFENDER, why, Severity.WARNING))


def history_to_write(d: Draft, ctx: Pass) -> tuple[Episode, ...] | None:
    """The history to write with this plan's state (None: as it is), decide/history.py."""
    return history_after(d.full.history, d.full.devices, d.full.taken_over, d.plan.base_state,
                         d.state, ctx.now, ctx.policy.repeat_offenders.window, d.seen)


def _offending(d: Draft, ctx: Pass, st: NodeState) -> bool:
    return st.offence.rule is not None and ctx.policy.repeat_offenders.enabled


def raise_target(d: Draft, ctx: Pass, target: int, st: NodeState) -> int:
    """The climb's target (scope.target_of): a repeat offender's is replace."""
    return max(target, rung_index(Rung.REPLACE)) if _offending(d, ctx, st) else target


def restate(d: Draft, ctx: Pass, step: Step) -> Step | None:
    """The climb's step before its start (climb.start): a repeat offender's said with its rule; None where replace
    is beyond the ladder and the step is past the drain (said: needs a person). Any other step as it is."""
    st = d.state
    if not _offending(d, ctx, st) or step.resume or st.offence.why is None:
        return step
    if rung_index(ctx.policy.ladder.max_rung) < rung_index(Rung.REPLACE) and (
            rung_index(step.rung) > min(rung_index(Rung.DRAIN), rung_index(ctx.policy.ladder.max_rung))):
        out(d, Action.NONE, Verdict.SKIPPED, f"{st.offence.why}: needs a person")
        return None
    if step.rung == Rung.CORDON:
        return replace(step, why=f"{st.offence.why}{d.scope_note}")
    if step.rung == Rung.REPLACE:
        return replace(step, why=st.offence.why)
    return step
