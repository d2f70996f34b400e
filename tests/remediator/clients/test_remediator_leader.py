"""Leadership: one leader at a time, even across processes of one pod, lost leases, long passes and dry runs."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from gpuhealth.remediator.app import config_from_env
from gpuhealth.remediator.clients.leader import leader_identity
from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import T0, Harness

POLICY = "budget: {max_disrupted: 2, max_cordoned: 10}\nbreaker: {min_nodes: 100}"


def test_identity_is_unique_per_process_even_with_a_shared_pod_name() -> None:
    env = {"POD_NAME": "gpuhealth-remediator-7d9f-abcde"}
    one, two = leader_identity(env), leader_identity(env)
    assert one != two and one.startswith("gpuhealth-remediator-7d9f-abcde_")
    assert config_from_env({**env, "GPUHEALTH_TOKEN": "t"}).identity.startswith("gpuhealth-remediator-7d9f-abcde_")


def test_two_workers_of_one_pod_never_both_lead(cluster: FakeCluster) -> None:
    env = {"POD_NAME": "pod-x"}
    w1 = Harness(cluster, POLICY, identity=leader_identity(env))  # one process of the pod
    w2 = Harness(cluster, POLICY, identity=leader_identity(env))  # another, same POD_NAME
    assert w1.rem.elector.try_acquire()
    assert not w2.rem.elector.try_acquire()
    w1.fire("gpu-1", "cordon")
    assert w2.step() is None and not cluster.taints("gpu-1")


def test_a_leader_that_lost_its_lease_mid_pass_stops_writing(cluster: FakeCluster) -> None:
    """A slow API call takes A past its renew deadline (no renewal got through): A stops before its next
    write, and B, which only measures how long the Lease has not changed, takes over later."""
    a = Harness(cluster, POLICY, identity="replica-a")
    b = Harness(cluster, POLICY, identity="replica-b")
    a.step()
    assert b.step() is None  # b sees the Lease, held by a
    a.advance(seconds=1)
    a.fire("gpu-1", "drain")
    real_get = a.kube.get_node

    def slow_get(name: str) -> dict[str, object]:
        a.advance(seconds=12)  # the re-check before the drain hangs for 12 s
        return real_get(name)

    a.kube.get_node = slow_get  # type: ignore[method-assign]
    writes_before = len(cluster.writes())
    a.step()
    assert not a.rem.elector.is_leader()
    assert a.metric("gpuhealth_remediator_passes_aborted_total", reason="lost the Lease") == 1
    assert cluster.writes()[writes_before + 1:] == []  # only its renewal at the start of the pass
    assert not cluster.taints("gpu-1")
    b.now = a.now
    assert b.step() is None  # the Lease changed (a's renewal) since b last looked: not expired for b
    b.advance(seconds=16)
    assert b.step() is not None
    assert next(iter(cluster.leases.values()))["spec"]["holderIdentity"] == "replica-b"
    a.kube.get_node = real_get  # type: ignore[method-assign]
    a.now = b.now
    assert a.step() is None  # a learns it lost
    assert cluster.taints("gpu-1")  # b acted


def test_backoff_never_runs_a_pass_past_its_deadline(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    for k in range(3):  # 3 pods x (1 + 2 + 4) s of backoff would be 21 s: more than the 10 s deadline
        cluster.add_pod("gpu-0", f"x{k}", labels={"app": "x"})
    cluster.add_pdb("default", {"app": "x"}, 0)
    h.fire("gpu-0", "drain")
    h.fire("gpu-1", "cordon")
    h.step()
    assert sum(h.slept) < 10 and cluster.taints("gpu-1")  # the rest of the pass still ran
    assert h.metric("gpuhealth_remediator_passes_aborted_total", reason="lost the Lease") == 0


def test_two_leaders_never_exceed_the_budget_when_a_hold_is_released_mid_pass(cluster: FakeCluster) -> None:
    """The reviewer's scenario: A is slow (PDB backoff), a hold on V is released, B runs a pass."""
    a = Harness(cluster, POLICY, identity="replica-a")
    b = Harness(cluster, POLICY, identity="replica-b")
    for k in range(3):
        cluster.add_pod("gpu-0", f"x{k}", labels={"app": "x"})
    cluster.add_pdb("default", {"app": "x"}, 0)
    a.fire("gpu-0", "drain")
    a.step()
    a.advance(minutes=1)
    a.fire("gpu-2", "drain")
    cluster.update_node("gpu-2", lambda n: n["metadata"]["annotations"].update({HOLD_ANNOTATION: '{"reason":"look"}'}))
    a.advance(minutes=1)
    a.fire("gpu-1", "cordon", alertname="Warn")
    a.step()
    a.advance(minutes=1)
    a.fire("gpu-1", "drain")
    a.advance(seconds=30)
    b.now = a.now
    ran_b: list[object] = []

    def slow_sleep(seconds: float) -> None:
        a.now += timedelta(seconds=seconds)
        b.now = a.now
        if not ran_b and a.now - T0 > timedelta(minutes=3, seconds=46):
            cluster.update_node("gpu-2", lambda n: n["metadata"]["annotations"].pop(HOLD_ANNOTATION, None))
            ran_b.append(b.decisions(b.step()))

    a.rem.loop.guard.backoff_sleep = slow_sleep
    a.step()
    disrupted = [n for n in cluster.nodes if a.state(n).active and a.state(n).rung in DISRUPTIVE]
    assert len(disrupted) <= 2, (disrupted, ran_b)


def test_renewal_runs_in_the_background_every_third_of_the_lease(cluster: FakeCluster) -> None:
    h = Harness(cluster, "leader: {lease_duration: 3s}")
    from tests.support.remediator_harness import utc_now_clock

    h.rem.elector.clock = utc_now_clock
    stop = threading.Event()
    thread = threading.Thread(target=h.rem.elector.renew_loop, args=(stop,), daemon=True)
    thread.start()
    try:
        stop.wait(1.3)
    finally:
        stop.set()
        thread.join(2)
    renewals = [r for r in cluster.requests if "/leases" in r[1] and r[0] in ("PUT", "POST")]
    assert len(renewals) >= 2 and h.rem.elector.is_leader()


def test_dry_run_takes_no_part_in_leader_election(cluster: FakeCluster) -> None:
    dry = Harness(cluster, identity="laptop-dry-run", dry_run=True)
    live = Harness(cluster, identity="prod-0")
    live.fire("gpu-0", "cordon")
    assert dry.step() is not None  # it decides and reports...
    assert cluster.leases == {} and [w for w in cluster.writes() if "leases" in w[1]] == []
    assert live.step() is not None  # ...and the live replica leads
    assert cluster.taints("gpu-0")


def test_policy_rejects_a_lease_too_short_to_renew() -> None:
    from gpuhealth.remediator.policy import PolicyError, parse_policy

    with pytest.raises(PolicyError, match="lease_duration"):
        parse_policy("leader: {lease_duration: 1s}")
