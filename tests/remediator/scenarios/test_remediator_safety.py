"""Safety under failure: API errors mid-drain, restarts, leadership changes, holds and silences."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuhealth.remediator.cli import main
from gpuhealth.remediator.clients.silences import SilenceChecker
from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import FakeAlertmanager, Harness


def test_pdb_429_is_retried_with_backoff_then_drain_finishes_when_allowed(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    cluster.add_pod("gpu-1", "train-0", labels={"app": "train"})
    cluster.add_pod("gpu-1", "web-0")
    pdb = cluster.add_pdb("default", {"app": "train"}, 0)
    h.fire("gpu-1", "drain")
    h.step()
    assert cluster.evictions() == ["default/web-0"] and cluster.terminating("gpu-1") == ["web-0"]
    assert h.slept == [1.0]  # one in-pass retry round (the default), then the next passes retry
    pdb["disruptionsAllowed"] = 1
    h.advance(seconds=30)
    h.step()
    h.advance(seconds=30)
    h.step()
    assert cluster.pods_on("gpu-1") == [] and h.state("gpu-1").rung_status == "done"
    assert "DrainFinished" in cluster.reasons("gpu-1")


def test_a_drain_blocked_by_a_pdb_sleeps_per_node_not_per_pod(cluster: FakeCluster) -> None:
    h = Harness(cluster, policy="evidence: {enabled: false}\ndrain: {eviction_backoff: [1s, 2s]}")
    for i in range(5):
        cluster.add_pod("gpu-1", f"train-{i}", labels={"app": "train"})
    cluster.add_pdb("default", {"app": "train"}, 0)
    h.fire("gpu-1", "drain")
    h.step()
    assert h.slept == [1.0, 2.0]  # two rounds over all five pods, not 2 sleeps x 5 pods
    assert cluster.pods_on("gpu-1") and len(cluster.pods_on("gpu-1")) == 5


def test_a_new_fault_is_cordoned_before_a_blocked_drain_backs_off(cluster: FakeCluster) -> None:
    h = Harness(cluster, policy="evidence: {enabled: false}\ndrain: {eviction_backoff: [1s, 2s, 4s]}")
    cluster.add_pod("gpu-1", "train-0", labels={"app": "train"})
    cluster.add_pdb("default", {"app": "train"}, 0)
    h.fire("gpu-1", "drain")
    h.step()  # gpu-1 cordoned, its drain blocked
    h.fire("gpu-2", "cordon")  # recorded on gpu-2 now; acted on in the next pass
    pass_starts = len(cluster.writes())
    writes_at_first_sleep: list[int] = []
    h.rem.loop.guard.backoff_sleep = lambda seconds: writes_at_first_sleep.append(len(cluster.writes()))
    h.step()
    cordon = [i for i, (method, path) in enumerate(cluster.writes())
              if i >= pass_starts and method == "PATCH" and path.endswith("/nodes/gpu-2")]
    assert writes_at_first_sleep, "gpu-1's blocked drain backed off in this pass"
    assert cordon and cordon[0] < writes_at_first_sleep[0]  # gpu-2 was cordoned before that
    assert "gpuhealth.io/unhealthy" in [t["key"] for t in cluster.taints("gpu-2")]

@pytest.mark.parametrize("fault", ["500", "409", "timeout"])
def test_api_errors_mid_drain_are_retried_on_the_next_pass(cluster: FakeCluster, fault: str) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n", timeout=0.3)
    for i in range(3):
        cluster.add_pod("gpu-1", f"p{i}")
    h.fire("gpu-1", "drain")
    if fault == "500":
        cluster.fail("POST", "/pods/p1/eviction$", 500)
    elif fault == "409":
        cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", 409, times=2, reason="Conflict")
    else:
        cluster.delay("POST", "/pods/p1/eviction$", 1.0)
    h.step()
    for _ in range(3):
        h.advance(seconds=30)
        h.step()
    assert cluster.pods_on("gpu-1") == []
    assert h.state("gpu-1").rung == "drain" and h.state("gpu-1").rung_status == "done"
    assert cluster.reasons("gpu-1").count("Cordoned") == 1


def test_stale_resource_version_never_overwrites_a_concurrent_change(cluster: FakeCluster) -> None:
    """Another replica records a resolve between the leader's list and its first disruptive step: the
    leader drops that node's plan (no Job on a healthy node, the resolve kept) and decides again."""
    a = Harness(cluster, "evidence: {enabled: false}\n", identity="replica-a")
    b = Harness(cluster, "evidence: {enabled: false}\n", identity="replica-b")
    a.fire("gpu-1", "reset_gpu", gpu="1")
    real_get = a.kube.get_node
    calls: list[str] = []

    def get_node(name: str) -> dict[str, object]:
        if not calls:  # the re-check before the first disruptive step; B's write lands just before it
            b.resolve("gpu-1", "reset_gpu", gpu="1")
        calls.append(name)
        return real_get(name)

    a.kube.get_node = get_node  # type: ignore[method-assign]
    a.step()
    assert calls == ["gpu-1"] and cluster.jobs == {}
    assert a.state("gpu-1").alerts["fp-gpu-1-GPUFault"].status == "resolved"
    assert not cluster.taints("gpu-1")
    a.kube.get_node = real_get  # type: ignore[method-assign]
    a.advance(seconds=30)
    assert a.decisions(a.step()) == [("gpu-1", "none", "skipped")]  # resolved before any action
    assert cluster.jobs == {} and not a.state("gpu-1").active


def test_a_concurrent_write_after_the_recheck_still_fails_the_write(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    h.fire("gpu-1", "cordon")
    h.rem.elector.try_acquire()
    cluster.fail("PATCH", "/api/v1/nodes/gpu-1$", 409, reason="Conflict")  # someone wrote in between
    h.rem.loop.reconcile()
    assert not cluster.taints("gpu-1") and "Cordoned" not in cluster.reasons("gpu-1")
    h.step()
    assert cluster.taints("gpu-1")


def test_restart_in_the_middle_of_a_ladder_carries_on_from_the_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    h.fire("gpu-2", "reset_gpu", gpu="2")
    cluster.add_pod("gpu-2", "train-0", labels={"app": "t"})
    pdb = cluster.add_pdb("default", {"app": "t"}, 0)
    h.step()
    assert h.state("gpu-2").rung == "drain"
    # a new process: nothing in memory, same identity (the restarted pod keeps its name)
    h2 = Harness(cluster, "evidence: {enabled: false}\n")
    h2.now = h.now
    pdb["disruptionsAllowed"] = 1
    h2.advance(seconds=30)
    h2.step()
    h2.advance(seconds=30)
    assert h2.decisions(h2.step()) == [("gpu-2", "reset_gpu", "execute")]
    assert cluster.reasons("gpu-2").count("Cordoned") == 1 and len(cluster.jobs) == 1


def test_only_the_leader_acts_and_a_follower_takes_over_when_the_lease_expires(cluster: FakeCluster) -> None:
    a = Harness(cluster, "evidence: {enabled: false}\n", identity="replica-a")
    b = Harness(cluster, "evidence: {enabled: false}\n", identity="replica-b")
    assert a.step() is not None  # a takes the lease first
    b.fire("gpu-3", "cordon")  # the webhook lands on the follower: recorded on the Node at once
    writes = len(cluster.writes())
    assert b.step() is None  # b does not act
    assert len(cluster.writes()) == writes and not cluster.taints("gpu-3")
    a.step()
    assert cluster.taints("gpu-3")
    b.fire("gpu-4", "cordon")
    b.advance(seconds=10)
    assert b.step() is None  # lease still live
    b.advance(seconds=20)  # a died: no renewal for longer than the lease duration
    assert b.step() is not None
    assert cluster.taints("gpu-4")
    lease = next(iter(cluster.leases.values()))
    assert lease["spec"]["holderIdentity"] == "replica-b" and lease["spec"]["leaseTransitions"] == 1


def _kubeconfig(tmp_path: Path, cluster: FakeCluster) -> str:
    """A person's kubeconfig (cluster-admin), as on-call runs hold and release."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(chart_rbac.kubeconfig(cluster, chart_rbac.ADMIN_TOKEN)))
    return str(path)


def test_hold_stops_escalation_and_release_resumes_it(cluster: FakeCluster, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\n")
    kubeconfig = _kubeconfig(tmp_path, cluster)
    h.fire("gpu-5", "cordon")
    h.step()
    clock = lambda: h.now  # noqa: E731  the CLI reads the test's clock, as the remediator does
    assert main(["hold", "gpu-5", "--reason", "debugging Xid 79", "--by", "alice", "--kubeconfig", kubeconfig],
                clock) == 0
    assert "alice" in cluster.annotations("gpu-5")[HOLD_ANNOTATION]
    h.fire("gpu-5", "reboot")
    plans = h.step()
    assert h.decisions(plans) == [("gpu-5", "none", "skipped")]
    assert "debugging Xid 79" in h.decided(plans)[0].reason
    h.advance(hours=1)  # the person took a while: the alerts are still recent (quiet_timeout is 6 h)
    assert main(["release", "gpu-5", "--kubeconfig", kubeconfig], clock) == 0
    assert HOLD_ANNOTATION not in cluster.annotations("gpu-5")
    assert h.decisions(h.step())[-1] == ("gpu-5", "reboot", "execute")
    assert {"HoldSet", "HoldReleased"} <= set(cluster.reasons("gpu-5"))


def test_release_after_a_quiet_episode_returns_the_node(cluster: FakeCluster, tmp_path: Path) -> None:
    h = Harness(cluster, "evidence: {enabled: false}\nreturn_to_service: {healthy_delay: 0s}")
    h.fire("gpu-5", "cordon", starts=h.now)
    h.step()
    h.advance(hours=7)
    h.step()
    assert cluster.taints("gpu-5")
    h.advance(hours=1)  # released an hour later: past episode.quiet_timeout (6 h), so the alert is dropped
    assert main(["release", "gpu-5", "--kubeconfig", _kubeconfig(tmp_path, cluster)], lambda: h.now) == 0
    h.advance(minutes=1)
    assert h.decisions(h.step()) == [("gpu-5", "uncordon", "execute")]


def test_silenced_alert_stops_disruptive_steps(cluster: FakeCluster) -> None:
    with FakeAlertmanager() as am:
        h = Harness(cluster, "evidence: {enabled: false}\n", silences=SilenceChecker(am.url))
        am.silence("gpu-6", "fp-gpu-6-GPUFault", "4f2c")
        h.fire("gpu-6", "reboot")
        plans = h.step()
        assert h.decisions(plans) == [("gpu-6", "cordon", "execute"), ("gpu-6", "drain", "skipped")]
        assert "4f2c" in h.decided(plans)[1].reason
        assert 'filter=node%3D%22gpu-6%22' in am.queries[0]
        am.alerts.clear()
        assert h.decisions(h.step())[-1] == ("gpu-6", "reboot", "execute")


def test_unreachable_alertmanager_defers_disruptive_steps(cluster: FakeCluster) -> None:
    with FakeAlertmanager() as am:
        am.status = 503
        h = Harness(cluster, "evidence: {enabled: false}\n", silences=SilenceChecker(am.url))
        h.fire("gpu-6", "drain")
        plans = h.step()
        assert h.decisions(plans) == [("gpu-6", "cordon", "execute"), ("gpu-6", "drain", "deferred")]
        assert "cannot check Alertmanager" in h.decided(plans)[1].reason


def test_excluded_nodes_are_never_touched(cluster: FakeCluster) -> None:
    cluster.update_node("gpu-7", lambda n: n["metadata"]["labels"].update({"gpuhealth.io/exclude": "true"}))
    h = Harness(cluster, 'evidence: {enabled: false}\nexclude: [{gpuhealth.io/exclude: "true"}]')
    h.fire("gpu-7", "reboot")
    assert h.decisions(h.step()) == [("gpu-7", "none", "skipped")]
    assert not cluster.taints("gpu-7")


def _stuck_drain(cluster: FakeCluster, policy: str, remediation: str = "drain") -> Harness:
    h = Harness(cluster, "evidence: {enabled: false}\n" + policy)
    cluster.add_pod("gpu-8", "db-0", labels={"app": "db"})
    cluster.add_pdb("default", {"app": "db"}, 0)
    h.fire("gpu-8", remediation, gpu=None)
    h.step()
    return h


def test_drain_timeout_force_deletes_the_pods_and_waits_for_them_to_go(cluster: FakeCluster) -> None:
    h = _stuck_drain(cluster, "drain: {on_timeout: force}\nladder: {drain: {timeout: 10m}}")
    assert cluster.evictions() == []
    h.fire("gpu-8", "drain", gpu=None)
    h.advance(minutes=11)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-8", "drain", "execute")] and h.decided(plans)[0].force
    assert cluster.evictions() == ["default/db-0"] and cluster.terminating("gpu-8") == ["db-0"]
    assert cluster.reasons("gpu-8").count("DrainTimedOut") == 1
    h.advance(seconds=30)
    h.step()
    assert cluster.pods_on("gpu-8") == [] and h.state("gpu-8").rung_status == "done"


def test_drain_timeout_wait_keeps_evicting_and_reports_once(cluster: FakeCluster) -> None:
    h = _stuck_drain(cluster, "ladder: {drain: {timeout: 10m}}")
    for _ in range(3):
        h.fire("gpu-8", "drain", gpu=None)
        h.advance(minutes=6)
        plans = h.step()
        assert h.decisions(plans) == [("gpu-8", "drain", "execute")]
    assert "policy drain.on_timeout=wait" in h.decided(plans)[0].reason
    assert cluster.reasons("gpu-8").count("DrainTimedOut") == 1
    assert [p["metadata"]["name"] for p in cluster.pods_on("gpu-8")] == ["db-0"] and cluster.jobs == {}
    cluster.pdbs[0]["disruptionsAllowed"] = 1
    h.advance(minutes=1)
    h.step()
    h.advance(seconds=30)
    h.step()
    assert h.state("gpu-8").rung_status == "done"


def test_drain_timeout_escalate_never_reboots_over_a_pdb(cluster: FakeCluster) -> None:
    h = _stuck_drain(cluster, "drain: {on_timeout: escalate}\nladder: {drain: {timeout: 10m}}")
    h.fire("gpu-8", "drain", gpu=None)
    h.advance(minutes=11)
    plans = h.step()
    assert h.decisions(plans) == [("gpu-8", "none", "skipped")] and "needs a person" in h.decided(plans)[0].reason
    assert cluster.jobs == {} and h.state("gpu-8").rung_status == "failed"
    assert "DrainTimedOut" in cluster.reasons("gpu-8")
    h.fire("gpu-8", "drain", gpu=None)
    h.advance(hours=2)
    h.step()
    assert cluster.jobs == {} and [p["metadata"]["name"] for p in cluster.pods_on("gpu-8")] == ["db-0"]


def test_drain_timeout_escalate_goes_to_the_alerts_rung_only_once_the_node_is_empty(cluster: FakeCluster) -> None:
    h = _stuck_drain(cluster, "drain: {on_timeout: escalate}\nladder: {drain: {timeout: 10m}}", "reboot")
    h.fire("gpu-8", "reboot", gpu=None)
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [("gpu-8", "drain", "execute")]  # still evicting; no reboot over the PDB
    assert cluster.jobs == {}
    cluster.pdbs[0]["disruptionsAllowed"] = 1
    h.advance(minutes=1)
    h.step()
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-8", "reboot", "execute")]
    next(iter(cluster.jobs.values()))["status"] = {"failed": 1}
    h.fire("gpu-8", "reboot", gpu=None)
    h.advance(minutes=31)  # the reboot times out; after a failed drain the ladder stops at the alert's rung
    plans = h.step()
    assert h.decisions(plans) == [("gpu-8", "none", "skipped")] and "needs a person" in h.decided(plans)[0].reason


def test_silence_stops_drain_retries_and_forced_deletion(cluster: FakeCluster) -> None:
    with FakeAlertmanager() as am:
        h = Harness(cluster, "evidence: {enabled: false}\ndrain: {on_timeout: force}\nladder: {drain: {timeout: 10m}}",
                    silences=SilenceChecker(am.url))
        cluster.add_pod("gpu-8", "db-0", labels={"app": "db"})
        cluster.add_pdb("default", {"app": "db"}, 0)
        h.fire("gpu-8", "drain")
        h.step()
        am.silence("gpu-8", "fp-gpu-8-GPUFault")
        h.advance(minutes=1)
        assert h.decisions(h.step()) == [("gpu-8", "drain", "skipped")]  # no retry while silenced
        h.advance(minutes=11)
        assert h.decisions(h.step()) == [("gpu-8", "drain", "skipped")]  # no forced deletion either
        assert cluster.evictions() == [] and cluster.pods_on("gpu-8")


def test_inhibited_alert_stops_disruptive_steps_like_a_silence(cluster: FakeCluster) -> None:
    with FakeAlertmanager() as am:
        h = Harness(cluster, "evidence: {enabled: false}\n", silences=SilenceChecker(am.url))
        am.inhibit("gpu-6", "fp-gpu-6-GPUFault", by="NodeDown")
        h.fire("gpu-6", "reboot")
        plans = h.step()
        assert h.decisions(plans) == [("gpu-6", "cordon", "execute"), ("gpu-6", "drain", "skipped")]
        assert "inhibited by NodeDown" in h.decided(plans)[1].reason


def test_serve_needs_an_alertmanager_url_or_an_explicit_none() -> None:
    from kubernetes import client

    from gpuhealth.remediator.clients.kube import Kube
    from gpuhealth.remediator.policy import Policy, PolicyError, parse_policy
    from gpuhealth.remediator.service import Remediator

    with pytest.raises(PolicyError, match=r"alertmanager\.url"):
        Policy().check_serve(5)
    with pytest.raises(ValueError, match=r"alertmanager\.url"):
        Remediator(Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))), Policy(), "x")
    parse_policy("alertmanager: {url: none}").check_serve(5)
    with pytest.raises(PolicyError, match="shorter than the lease"):
        parse_policy("alertmanager: {url: none}").check_serve(30)
    checked = parse_policy("alertmanager: {url: 'http://am:9093'}")
    rem = Remediator(Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))), checked, "x")
    assert isinstance(rem.silences, SilenceChecker)


def test_cli_serve_refuses_a_policy_without_alertmanager_url(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--allow-no-auth"]) == 2
    assert "alertmanager.url" in capsys.readouterr().err


def test_hold_and_release_have_a_dry_run_and_report_api_errors_in_one_line(
        cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = _kubeconfig(tmp_path, cluster)
    assert main(["hold", "gpu-5", "--reason", "look", "--dry-run", "--kubeconfig", kubeconfig]) == 0
    assert "would hold" in capsys.readouterr().out
    assert HOLD_ANNOTATION not in cluster.annotations("gpu-5") and cluster.events == []
    assert main(["hold", "gpu-404", "--reason", "look", "--kubeconfig", kubeconfig]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTTP 404" in err and "gpu-404" in err
    main(["hold", "gpu-5", "--reason", "look", "--kubeconfig", kubeconfig])
    assert main(["release", "gpu-5", "--dry-run", "--kubeconfig", kubeconfig]) == 0
    assert HOLD_ANNOTATION in cluster.annotations("gpu-5")
    cluster.fail("PATCH", "/api/v1/nodes/gpu-5$", 500)
    capsys.readouterr()
    assert main(["release", "gpu-5", "--kubeconfig", kubeconfig]) == 1
    assert capsys.readouterr().err.startswith("error: Kubernetes API: HTTP 500")
