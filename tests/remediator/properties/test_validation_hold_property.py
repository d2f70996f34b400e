"""A property of the pass (decide/ladder.py `decide`): it never returns to service a node whose last validation failed
(issue 35, item 3). Hypothesis plays one node through random sequences of its alert firing, resolving and firing again,
time passing, the reset and reboot Jobs succeeding, failing or hanging, the node rebooting or not, and each diagnostic
Job passing, failing or still running; the world answers each pass's decisions as the executor and the cluster would.
A failed validation is ended only by a later rung starting (a reboot after a reset's, a replacement after a reboot's);
until then no pass may uncordon the node, whatever the alerts do."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhealth.remediator.decide.budget import Ledger
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.diagnosis import Diagnosis
from gpuhealth.remediator.decide.history import Episode
from gpuhealth.remediator.decide.ladder import decide
from gpuhealth.remediator.decide.nodestate import AlertRecord, NodeState, record_alerts, rung_index
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.decide.vocabulary import Action, JobStatus, Rung, Verdict
from gpuhealth.remediator.policy import Policy, parse_policy

T0 = datetime(2026, 12, 2, 10, tzinfo=UTC)
POOL_SIZE = 20  # the node and idle ones: a budget that is not the node's own limit
NODE = "gpu-1"
LATER_RUNGS = {Action.RESET_GPU: Rung.RESET_GPU, Action.STOP_GPU_CLIENTS: Rung.RESET_GPU,
               Action.REBOOT: Rung.REBOOT, Action.REPLACE: Rung.REPLACE}


def _policy(actions_per_hour: int) -> Policy:
    return parse_policy(f"""
alertmanager: {{url: none}}
evidence: {{enabled: false}}
diagnose: {{judge_image: "ghcr.io/gpuhealth/gpuhealth:0.2.0"}}
return_to_service: {{healthy_delay: 10m}}
budget: {{max_actions_per_hour: {actions_per_hour}}}
""")


@dataclass(frozen=True)
class Step:
    alert: str  # fire | resolve | repeat (Alertmanager repeats what fires)
    minutes: int  # time that passes before the pass
    job: JobStatus  # how the reset or reboot Job under way stands
    rebooted: bool  # the node came back with a new boot id
    diagnosis: str  # running | passed | failed: the diagnostic Job the state names


steps = st.lists(st.builds(
    Step,
    alert=st.sampled_from(["fire", "resolve", "repeat", "repeat"]),
    minutes=st.sampled_from([1, 2, 5, 11, 31, 61]),
    job=st.sampled_from([JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED]),
    rebooted=st.booleans(),
    diagnosis=st.sampled_from(["running", "passed", "failed", "failed"]),
), min_size=4, max_size=30)


@dataclass
class World:
    """The node as the cluster shows it to each pass, answering the decisions as the executor would."""

    policy: Policy
    remediation: str
    max_rung: str | None
    now: datetime = T0
    state: NodeState = field(default_factory=NodeState)
    history: tuple[Episode, ...] = ()
    boot: int = 0
    fired: int = 0

    def alert(self, status: str) -> None:
        fp = f"fp-{self.fired}"
        record = AlertRecord("GPUXidFatal", self.remediation, status, starts_at=self.now, last_seen=self.now,
                             ends_at=self.now if status == "resolved" else None, gpu="1", component="gpu",
                             max_rung=self.max_rung)
        self.state = record_alerts(self.state, [(fp, record)], self.now)

    def view(self, step: Step) -> NodeView:
        s = self.state
        if step.rebooted and s.rung == Rung.REBOOT:
            self.boot += 1
        ours = s.active and s.rung is not None
        verdict = {"running": None, "passed": Diagnosis(True, detail="ok", level=1),
                   "failed": Diagnosis(False, ("gpu_diag",), ("1",), "dcgmi diag: Memory failed", level=1)}
        return NodeView(name=NODE, pool="gpu", labels={}, unschedulable=ours and s.cordoned, our_taint=ours,
                        state=s, hold=None, excluded=False, ready=True, boot_id=f"boot-{self.boot}",
                        resource_version="1", job_status=step.job if s.job else None, history=self.history,
                        diagnosis=verdict[step.diagnosis] if s.diagnostic.job and s.diagnostic.result is None else None)

    def run(self, step: Step) -> NodePlan:
        self.now += timedelta(minutes=step.minutes)
        firing = any(a.status == "firing" for a in self.state.alerts.values())
        if step.alert == "fire" and not firing:
            self.fired += 1
            self.alert("firing")
        elif step.alert == "resolve" and firing:
            self.alert("resolved")
        elif firing:
            self.alert("firing")  # repeated: last_seen moves on
        views = [self.view(step), *(NodeView(name=f"idle-{i}", pool="gpu", labels={}, unschedulable=False,
                                             our_taint=False, state=NodeState(), hold=None, excluded=False,
                                             ready=True, boot_id="b", resource_version="1")
                                    for i in range(POOL_SIZE - 1))]
        plan = next(p for p in decide(views, self.policy, self.now, Ledger.from_views(views, self.policy, self.now))
                    if p.node == NODE)
        self.state = replace(plan.final_state, pending=())  # the executor did what the plan asked
        self.history = plan.history if plan.history is not None else self.history
        return plan


def _failed_validation(before: NodeState, after: NodeState) -> str | None:
    """The rung whose validation this pass read as failed (the world's verdict on a validation Job), or None."""
    if before.diagnostic.purpose == "validate" and before.diagnostic.result is None and before.diagnostic.job and \
            after.diagnostic.job == before.diagnostic.job and (after.diagnostic.result or "").startswith("failed"):
        return before.rung
    if before.diagnostic.purpose == "validate" and before.diagnostic.result is None and before.diagnostic.job and \
            after.diagnostic.purpose == "diagnose" and before.rung is not None:
        return before.rung  # failed, and the climb asked for the diagnosis before a replacement in the same pass
    return None


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(remediation=st.sampled_from(["reset_gpu", "reboot"]), max_rung=st.sampled_from([None, "reset_gpu", "reboot"]),
       actions_per_hour=st.sampled_from([3, 4, 20]), plays=steps)
def test_no_pass_returns_a_node_whose_last_validation_failed(remediation: str, max_rung: str | None,
                                                             actions_per_hour: int, plays: list[Step]) -> None:
    world = World(_policy(actions_per_hour), remediation, max_rung)
    failed: str | None = None  # the rung whose validation failed, while no later rung has started
    for step in plays:
        before = world.state
        plan = world.run(step)
        started = [LATER_RUNGS[d.action] for d in plan.decisions
                   if d.decision == Verdict.EXECUTE and d.action in LATER_RUNGS]
        returned = any(d.action == Action.UNCORDON and d.decision == Verdict.EXECUTE for d in plan.decisions)
        assert not (failed and returned), f"returned to service after the validation of its {failed} failed"
        if failed and any(rung_index(r) > rung_index(failed) for r in started):
            failed = None  # a later rung: it is validated in its turn
        failed = _failed_validation(before, plan.final_state) or failed
        assert not (failed and returned), f"returned to service in the pass its {failed}'s validation failed"
        if plan.final_state.rung == Rung.REPLACE:
            return  # handed over: the node is not returned from here
