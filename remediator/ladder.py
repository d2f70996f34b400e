"""The ladder: what to do with each node now. Pure functions of (views, policy, time, budget).

No I/O happens here except through the injected silence check. `serve` executes these decisions;
`plan` prints them; both call `decide`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from remediator.budget import Ledger
from remediator.cluster import NodeView
from remediator.nodestate import DISRUPTIVE, RUNGS, AlertRecord, NodeState, fmt_time, parse_time, rung_index
from remediator.policy import Policy

ACTIONS = ("cordon", "drain", "reset_gpu", "reboot", "replace", "uncordon", "none")


@dataclass(frozen=True)
class SilenceAnswer:
    silenced_by: tuple[str, ...] = ()
    error: str | None = None


SilenceCheck = Callable[[str, list[str]], SilenceAnswer]


@dataclass(frozen=True)
class Decision:
    node: str
    action: str  # one of ACTIONS
    decision: str  # execute | deferred | skipped
    reason: str
    pool: str = ""
    state_after: NodeState | None = None  # the node's state once this action has been started
    new: bool = True  # starts a rung (False: another pass of one under way, e.g. drain retries)
    force: bool = False  # drain: delete instead of evict (policy drain.on_timeout: force)
    gpu: str | None = None

    def line(self) -> dict[str, str]:
        return {"node": self.node, "action": self.action, "decision": self.decision, "reason": self.reason}


@dataclass
class NodePlan:
    node: str
    base_state: NodeState  # the state after observations (drain finished, job done), before any action
    decisions: list[Decision] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (reason, message) for Events

    @property
    def changed(self) -> bool:
        return bool(self.notes)


def job_name(node: str, rung: str, episode: str | None) -> str:
    short = {"reset_gpu": "reset", "reboot": "reboot"}.get(rung, rung)
    digest = hashlib.sha1(f"{node}/{rung}/{episode}".encode()).hexdigest()[:8]
    return f"gpuhealth-{short}-{node}"[:53].rstrip("-.") + f"-{digest}"


def _age(now: datetime, since: str | None) -> timedelta:
    return now - parse_time(since) if since else timedelta(0)


def _pick_gpu(alerts: dict[str, AlertRecord]) -> str | None:
    ranked = sorted(alerts.values(), key=lambda a: (-rung_index(a.remediation), a.starts_at))
    return next((a.gpu for a in ranked if a.gpu), None)


def _observe(view: NodeView, state: NodeState, now: datetime) -> tuple[NodeState, list[tuple[str, str]]]:
    """Progress of the rung under way, as the cluster shows it."""
    if state.rung_status != "running":
        return state, []
    done = replace(state, rung_status="done", rung_done=fmt_time(now))
    failed = replace(state, rung_status="failed", rung_done=fmt_time(now))
    if state.rung == "drain" and not view.evictable:
        return done, [("DrainFinished", "no evictable pods left on the node")]
    if state.rung == "reset_gpu":
        if view.job_status == "succeeded":
            return done, [("GPUResetSucceeded", f"reset job {state.job} succeeded")]
        if view.job_status in ("failed", "missing"):
            return failed, [("GPUResetFailed", f"reset job {state.job} {view.job_status}")]
    if state.rung == "reboot":
        if state.boot_id and view.boot_id and view.boot_id != state.boot_id and view.ready:
            return done, [("RebootSucceeded", f"node is back with boot id {view.boot_id}")]
        if view.job_status == "failed":
            return failed, [("RebootFailed", f"reboot job {state.job} failed")]
    return state, []


def decide(views: list[NodeView], policy: Policy, now: datetime, ledger: Ledger,
           silences: SilenceCheck | None = None) -> list[NodePlan]:
    """Decisions for every node, oldest episode first, taking from the budget as actions start."""
    def order(v: NodeView) -> tuple[int, str, str]:
        return (0 if v.name in ledger.pools[v.pool].disrupted else 1, v.state.episode or fmt_time(now), v.name)

    return [_decide_node(v, policy, now, ledger, silences) for v in sorted(views, key=order)]


def _decide_node(v: NodeView, policy: Policy, now: datetime, ledger: Ledger,
                 silences: SilenceCheck | None) -> NodePlan:
    st = v.state
    firing = st.firing(now, policy.quiet_timeout)
    actionable = {fp: a for fp, a in firing.items() if a.remediation != "none"}
    plan = NodePlan(node=v.name, base_state=st)

    def out(action: str, decision: str, reason: str, **kw: object) -> NodePlan:
        plan.decisions.append(Decision(v.name, action, decision, reason, v.pool, **kw))  # type: ignore[arg-type]
        return plan

    if not st.active and not v.our_taint:
        if firing and not actionable:
            return out("none", "skipped", "firing alerts ask for no action (remediation=none)")
        return plan
    if v.excluded:
        return out("none", "skipped", "node excluded by the policy's exclude selectors")
    if v.hold:
        who = f" by {v.hold['by']}" if v.hold.get("by") else ""
        return out("none", "skipped", f"held{who}: {v.hold.get('reason', '')}".rstrip(": "))
    if v.human_cordoned:
        return out("none", "skipped", "cordoned by a person, not by gpuhealth: left alone")

    if not actionable:
        stale = st.stale(now, policy.quiet_timeout)
        if stale:
            if not st.quiet:
                plan.base_state = replace(st, quiet=True)
                plan.notes.append(("EpisodeQuiet", f"no word on {len(stale)} firing alert(s) for "
                                   f"{policy.quiet_timeout}; escalation stopped, node left as is"))
            return out("none", "skipped", "episode went quiet (alerts neither repeated nor resolved, e.g. silenced): "
                       "escalation stopped; `gpuhealth-remediator release` returns the node")
        if st.rung == "replace":
            return out("none", "skipped", "replacement under way: not returned to service")
        if st.rung is None and not v.our_taint:  # resolved before anything was done: close the episode
            plan.base_state = NodeState(actions=st.actions)
            return out("none", "skipped", "alerts resolved before any action")
        healthy_since = st.healthy_since or fmt_time(now)
        if st.healthy_since is None:
            plan.base_state = replace(st, healthy_since=healthy_since)
        healthy_for = _age(now, healthy_since)
        if healthy_for < policy.healthy_delay:
            return out("uncordon", "deferred", f"healthy for {int(healthy_for.total_seconds())}s of "
                       f"{int(policy.healthy_delay.total_seconds())}s")
        ledger.release(v)
        return out("uncordon", "execute", f"all alerts resolved for {int(healthy_for.total_seconds())}s: "
                   "undoing what gpuhealth did", state_after=NodeState(actions=st.actions))

    max_idx = rung_index(policy.max_rung)
    target = min(max(rung_index(a.remediation) for a in actionable.values()), max_idx)
    gpu = _pick_gpu(actionable)
    state, notes = _observe(v, st, now)
    plan.base_state, plan.notes = state, notes

    for _ in range(len(RUNGS) + 1):
        rung, status = state.rung, state.rung_status
        idx = rung_index(rung)
        if rung is None:
            nxt, why = "cordon", f"alert asks for {RUNGS[target]}"
        elif status == "running":
            timeout = policy.rung(rung).timeout
            timed_out = timeout is not None and _age(now, state.rung_started) >= timeout
            if rung == "drain":
                if timed_out and policy.drain_on_timeout == "escalate":
                    state = replace(state, rung_status="failed", rung_done=fmt_time(now))
                    plan.notes.append(("DrainTimedOut", f"drain passed its {timeout} timeout: escalating (policy)"))
                    continue
                if timed_out and policy.drain_on_timeout == "force":
                    return out("drain", "execute", f"drain passed its {timeout} timeout: deleting the remaining "
                               f"{len(v.evictable)} pod(s) (policy drain.on_timeout=force)", new=False, force=True,
                               state_after=state)
                wait = " (timed out; policy drain.on_timeout=wait)" if timed_out else ""
                return out("drain", "execute", f"evicting {len(v.evictable)} pod(s){wait}", new=False,
                           state_after=state)
            if rung == "replace":
                return out("replace", "skipped", "replacement under way")
            if timed_out:
                state = replace(state, rung_status="failed", rung_done=fmt_time(now))
                plan.notes.append((f"{rung}TimedOut", f"{rung} passed its {timeout} timeout"))
                continue
            return out(rung, "deferred", f"{rung} under way since {state.rung_started}")
        elif status == "failed":
            if idx >= max_idx:
                return out("none", "skipped", f"{rung} failed and the ladder stops at {policy.max_rung}: "
                           "needs a person")
            nxt, why = RUNGS[idx + 1], f"{rung} failed"
        else:  # done
            if idx < target:  # cordon and drain come first; then straight to the rung the alert asks for
                nxt = RUNGS[idx + 1] if idx < rung_index("drain") else RUNGS[target]
                why = f"passing through to {RUNGS[target]}" if nxt != RUNGS[target] else f"alert asks for {nxt}"
            else:
                esc = policy.rung(rung).escalate_after
                if esc is None or idx >= max_idx:
                    if plan.decisions:
                        return plan
                    return out("none", "skipped", f"at {rung}, as far as the alerts ask; fault persisting does "
                               "not climb from here")
                persisted = _age(now, state.rung_done)
                if persisted < esc:
                    if plan.decisions:
                        return plan
                    return out(RUNGS[idx + 1], "deferred", f"fault persists {int(persisted.total_seconds())}s "
                               f"after {rung}; climbs after {int(esc.total_seconds())}s")
                nxt, why = RUNGS[idx + 1], f"fault persisted {int(persisted.total_seconds())}s after {rung}"

        if nxt == "reset_gpu" and gpu is None:
            state = replace(state, rung="reset_gpu", rung_status="failed", rung_started=fmt_time(now),
                            rung_done=fmt_time(now))
            plan.notes.append(("GPUResetSkipped", "no alert names a GPU (index or PCI bus id): cannot reset"))
            continue
        if rung_index(nxt) > max_idx:
            return out("none", "skipped", f"ladder stops at {policy.max_rung}")
        if nxt == "reset_gpu" and v.gpu_pods:
            return out(nxt, "deferred", f"{v.gpu_pods} pod(s) still use GPUs on the node")
        blocked = ledger.gate(v, nxt)
        if blocked:
            return out(nxt, "deferred", blocked)
        if nxt in DISRUPTIVE and silences is not None:
            answer = silences(v.name, sorted(actionable))
            if answer.error and policy.silence_on_error == "defer":
                return out(nxt, "deferred", f"cannot check Alertmanager silences: {answer.error}")
            if answer.silenced_by:
                return out(nxt, "skipped", f"silenced in Alertmanager ({', '.join(answer.silenced_by)}): "
                           "a person took over")
        ledger.take(v, nxt)
        started = state.with_action(now, rung=nxt, rung_status="running", rung_started=fmt_time(now), rung_done=None)
        if nxt == "cordon":
            started = replace(started, rung_status="done", rung_done=fmt_time(now),
                              cordoned=state.cordoned or not v.unschedulable)
        elif nxt == "drain":
            if not v.evictable:
                started = replace(started, rung_status="done", rung_done=fmt_time(now))
                why += "; nothing to evict"
            else:
                why += f"; evicting {len(v.evictable)} pod(s)"
        elif nxt in ("reset_gpu", "reboot"):
            started = replace(started, job=job_name(v.name, nxt, state.episode),
                              gpu=gpu if nxt == "reset_gpu" else None,
                              boot_id=v.boot_id if nxt == "reboot" else state.boot_id)
            if nxt == "reset_gpu":
                why += f"; GPU {gpu}"
        plan.decisions.append(Decision(v.name, nxt, "execute", why, v.pool, state_after=started,
                                       gpu=started.gpu if nxt == "reset_gpu" else None))
        state = started
        if state.rung_status != "done":
            return plan
    return plan
