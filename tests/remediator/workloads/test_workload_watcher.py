"""The workload watcher (gpuhealth/remediator/workloads/watcher.py) against the fake API server, through the official
client and the real WatchCache: pods that end are classified once, recorded on the pod (annotation, Event), logged
and counted; the restart-loop guard counts on the Job and suspends it when the policy says so; a restarted
remediator neither counts a pod twice nor forgets a loop."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import generate_latest

from gpuhealth.remediator.app import ServeConfig, create_app
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.clients.watch_cache import WatchCache
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, AlertRecord, NodeState
from gpuhealth.remediator.metrics import Metrics
from gpuhealth.remediator.policy import Policy, parse_policy
from gpuhealth.remediator.workloads.ended_pods import ENDED_ANNOTATION, ENDED_SELECTOR, FAILURE_ANNOTATION, Sources
from gpuhealth.remediator.workloads.restart_loop import LOOP_ANNOTATION, LoopState
from gpuhealth.remediator.workloads.watcher import WorkloadWatcher
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import T0, TOKEN, Harness

NS = "ml"
POLICY = "workloads:\n  enabled: true\n  namespaces: [ml]\n"


def _stamp(t: Any) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Env:
    """A watcher (and its pod cache) as serve runs it, on the test's clock. `restart()` is a new remediator
    process: new cache, new metrics, nothing in memory."""

    def __init__(self, cluster: FakeCluster, policy: str = POLICY, dry_run: bool = False) -> None:
        self.cluster, self.policy, self.dry_run = cluster, parse_policy(policy), dry_run
        self.now = T0
        self.leader = True
        if cluster.rbac is None:  # the chart's RBAC for this policy (its workloads namespaces)
            chart_rbac.enforce(cluster, chart_rbac.policy_values(self.policy))
        self.kube = Kube(client.ApiClient(chart_rbac.configuration(cluster)), request_timeout=2.0)
        self.controller = client.CoreV1Api(chart_rbac.admin(cluster))  # a Job controller deleting its pods
        self.stops: list[threading.Event] = []
        self.restart()

    def restart(self, metrics: Metrics | None = None) -> None:
        for stop in self.stops:
            stop.set()
        stop = threading.Event()
        self.stops.append(stop)
        self.cache = WatchCache(partial(self.kube.core.list_namespaced_pod, NS), field_selector=ENDED_SELECTOR,
                                name="pods-ml", request_timeout=2.0, timeout_seconds=30)
        self.metrics = metrics or Metrics()
        self.watcher = WorkloadWatcher(self.kube, self.policy, self.metrics, Sources({NS: self.cache}),
                                       clock=lambda: self.now, dry_run=self.dry_run, is_leader=lambda: self.leader)
        self.cache.on_change = self.watcher.on_change
        self.cache.start(stop)
        assert self.cache.wait_synced(5)

    def close(self) -> None:
        for stop in self.stops:
            stop.set()

    def step(self) -> list[Any]:
        assert self.cache.wait_for(str(self.cluster.rv), 5), "the watch did not catch up"
        return self.watcher.run_once()

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def failure(self, pod: str) -> dict[str, Any] | None:
        value = (self.cluster.pods[(NS, pod)]["metadata"].get("annotations") or {}).get(FAILURE_ANNOTATION)
        return json.loads(value) if value else None


@pytest.fixture
def env(cluster: FakeCluster) -> Iterator[Env]:
    e = Env(cluster)
    yield e
    e.close()


def start_pod(cluster: FakeCluster, name: str, node: str = "gpu-3", job: str | None = "train",
              started: Any = None) -> None:
    cluster.add_pod(node, name, namespace=NS, owner_kind=None, gpus=8)

    def change(pod: dict[str, Any]) -> None:
        pod["status"]["startTime"] = _stamp(started if started is not None else T0 - timedelta(hours=1))
        if job:
            pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                   "uid": f"uid-job-{job}", "controller": True}]
    cluster.update_pod(NS, name, change)


def end_pod(cluster: FakeCluster, name: str, phase: str = "Failed", exit_code: int = 1, reason: str = "Error",
            message: str = "", at: Any = T0, conditions: list[dict[str, Any]] | None = None) -> None:
    """What the kubelet writes when the pod's container ends."""
    def change(pod: dict[str, Any]) -> None:
        terminated = {"exitCode": 0 if phase == "Succeeded" else exit_code,
                      "reason": "Completed" if phase == "Succeeded" else reason,
                      "startedAt": _stamp(T0 - timedelta(hours=1)), "finishedAt": _stamp(at)}
        if message:
            terminated["message"] = message
        status = {"name": "c", "image": "x", "imageID": "x@sha256:1", "ready": False, "restartCount": 0,
                  "state": {"terminated": terminated}}
        pod["status"].update(phase=phase, containerStatuses=[status], conditions=list(conditions or []))
    cluster.update_pod(NS, name, change)


def fire_on_node(cluster: FakeCluster, node: str, name: str, remediation: str, start: Any,
                 component: str = "gpu") -> None:
    record = AlertRecord(name=name, remediation=remediation, status="firing", starts_at=start,
                         last_seen=start, gpu="0", component=component)
    state = NodeState(alerts={f"fp-{name}": record}, episode=start)
    cluster.update_node(node, lambda n: n["metadata"].setdefault("annotations", {}).update(
        {STATE_ANNOTATION: state.to_json()}))


def fail_job_pods(env: Env, names: list[str], exit_code: int = 2, job: str = "train") -> None:
    for i, name in enumerate(names):
        start_pod(env.cluster, name, node=f"gpu-{i}", job=job, started=env.now - timedelta(minutes=1))  # a retry
        end_pod(env.cluster, name, exit_code=exit_code, at=env.now)
        env.now += timedelta(minutes=6)  # past the look-ahead: the app verdict is final
        env.step()


# --- classify, record, count ----------------------------------------------------------------------

def test_a_pod_failing_after_a_fatal_xid_on_its_node_is_recorded_as_infra(env: Env) -> None:
    fire_on_node(env.cluster, "gpu-3", "GPUXidFatal", "reset_gpu", T0 - timedelta(minutes=3))
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", exit_code=1)
    [outcome] = env.step()
    assert outcome.recorded and outcome.verdict.cls == "infra"
    record = env.failure("train-0")
    assert record and (record["class"], record["reason"], record["node"]) == ("infra", "node_fault", "gpu-3")
    assert any("GPUXidFatal" in e for e in record["evidence"]) and record["workload"] == "Job/train"
    assert env.cluster.pods[(NS, "train-0")]["metadata"]["annotations"][ENDED_ANNOTATION] == "Failed"
    [event] = env.cluster.events_for("train-0")
    assert event["reason"] == "WorkloadFailureClassified" and event["metadata"]["namespace"] == NS
    assert event["involvedObject"]["kind"] == "Pod" and "infra (node_fault)" in event["message"]
    assert env.metric("gpuhealth_workload_failures_total", **{"class": "infra"}, reason="node_fault",
                      namespace=NS) == 1
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Failed") == 1
    assert env.metric("gpuhealth_workload_lost_seconds_total", **{"class": "infra"}, namespace=NS) == 3600
    assert env.metric("gpuhealth_workload_node_suspect_workloads", node="gpu-3", pool="gpu") == 1


def test_a_pod_on_a_mig_device_or_a_shared_gpu_is_a_gpu_workload_too(env: Env) -> None:
    fire_on_node(env.cluster, "gpu-3", "GPUXidFatal", "reset_gpu", T0 - timedelta(minutes=3))
    for name, resource in (("infer-mig", "nvidia.com/mig-1g.10gb"), ("infer-shared", "nvidia.com/gpu.shared")):
        env.cluster.add_pod("gpu-3", name, namespace=NS, owner_kind=None, resources={"limits": {resource: "1"}})
        env.cluster.update_pod(NS, name, lambda p: p["status"].update(startTime=_stamp(T0 - timedelta(hours=1))))
        end_pod(env.cluster, name, exit_code=1)
    outcomes = env.step()
    assert sorted((o.verdict.cls, o.recorded) for o in outcomes) == [("infra", True), ("infra", True)]
    assert env.failure("infer-mig") and env.failure("infer-shared")


def test_an_app_verdict_waits_for_the_look_ahead(env: Env) -> None:
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", exit_code=2)
    env.now = T0 + timedelta(minutes=2)
    [outcome] = env.step()
    assert not outcome.recorded and env.failure("train-0") is None
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Failed") == 0
    env.now = T0 + timedelta(minutes=5)
    env.step()
    assert env.failure("train-0")["class"] == "app"  # type: ignore[index]


def test_a_node_alert_inside_the_look_ahead_turns_a_pending_verdict_into_infra(env: Env) -> None:
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", exit_code=2)
    env.now = T0 + timedelta(minutes=2)
    env.step()
    fire_on_node(env.cluster, "gpu-3", "GPUFallenOffBus", "reboot", T0 + timedelta(minutes=1))
    env.step()
    assert env.failure("train-0")["class"] == "infra"  # type: ignore[index]


def test_an_ended_pod_is_counted_once_across_passes_and_restarts(env: Env) -> None:
    start_pod(env.cluster, "ok-0")
    end_pod(env.cluster, "ok-0", phase="Succeeded")
    start_pod(env.cluster, "bad-0")
    end_pod(env.cluster, "bad-0", conditions=[{"type": "DisruptionTarget", "status": "True",
                                               "reason": "PreemptionByScheduler", "message": "preempted"}])
    env.step()
    env.step()
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Succeeded") == 1
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Failed") == 1
    env.restart()
    assert env.step() == []
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Succeeded") == 0
    assert len(env.cluster.events_for("bad-0")) == 1


def test_an_evicted_pod_deleted_before_the_pass_is_still_counted_once(env: Env) -> None:
    """A Job's evicted pod stays only until the Job controller has counted it: the watch's last view is used."""
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", exit_code=143, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting"}])
    env.cluster.update_pod(NS, "train-0", lambda p: p["metadata"].update(deletionTimestamp=_stamp(T0)))
    env.controller.delete_namespaced_pod("train-0", NS, grace_period_seconds=0)
    [outcome] = env.step()
    assert outcome.recorded and (outcome.verdict.cls, outcome.verdict.reason) == ("infra", "eviction")
    assert env.step() == []
    assert env.metric("gpuhealth_workload_failures_total", **{"class": "infra"}, reason="eviction",
                      namespace=NS) == 1
    assert "WorkloadFailureClassified" in env.cluster.reasons("train-0")


def test_a_deleted_pod_not_counted_within_the_hour_is_forgotten_not_kept_forever(env: Env) -> None:
    env.leader = False  # no replica leads while it ends and is deleted
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", exit_code=143, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}])
    env.cluster.update_pod(NS, "train-0", lambda p: p["metadata"].update(deletionTimestamp=_stamp(T0)))
    env.controller.delete_namespaced_pod("train-0", NS, grace_period_seconds=0)
    env.step()
    assert list(env.watcher.ended.gone)  # kept, as last seen, for the leader to count
    env.now += timedelta(hours=2)
    env.leader = True
    assert env.step() == [] and env.watcher.ended.gone == {}


def test_a_pod_its_controller_deleted_is_not_a_failure_of_its_own(env: Env) -> None:
    """A JobSet restarting (or a Job past its backoffLimit) deletes the other pods: they end, but did not fail."""
    start_pod(env.cluster, "train-1")
    env.cluster.update_pod(NS, "train-1", lambda p: p["metadata"].update(deletionTimestamp=_stamp(T0)))
    end_pod(env.cluster, "train-1", exit_code=143)
    env.now += timedelta(minutes=10)
    assert env.step() == []
    env.controller.delete_namespaced_pod("train-1", NS, grace_period_seconds=0)
    assert env.step() == []
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Failed") == 0


def test_pods_that_ended_over_an_hour_before_are_history_and_not_counted(env: Env) -> None:
    start_pod(env.cluster, "old-0")
    end_pod(env.cluster, "old-0", phase="Succeeded", at=T0 - timedelta(hours=2))
    start_pod(env.cluster, "new-0")
    end_pod(env.cluster, "new-0", phase="Succeeded", at=T0 - timedelta(minutes=50))
    assert [o.pod for o in env.step()] == ["new-0"]
    assert ENDED_ANNOTATION not in (env.cluster.pods[(NS, "old-0")]["metadata"].get("annotations") or {})


def test_pods_without_gpus_and_other_namespaces_are_left_alone(env: Env) -> None:
    env.cluster.add_pod("gpu-3", "web-0", namespace=NS, owner_kind=None)  # no GPU
    env.cluster.add_pod("gpu-3", "train-9", namespace="other", owner_kind=None, gpus=8)
    end_pod(env.cluster, "web-0")
    env.cluster.update_pod("other", "train-9", lambda p: p["status"].update(phase="Failed"))
    env.now += timedelta(minutes=10)
    assert env.step() == []
    assert not env.cluster.pods[(NS, "web-0")]["metadata"].get("annotations")


def test_a_replica_that_does_not_lead_does_nothing(env: Env) -> None:
    env.leader = False
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", phase="Succeeded")
    assert env.step() == []
    assert ENDED_ANNOTATION not in (env.cluster.pods[(NS, "train-0")]["metadata"].get("annotations") or {})


def test_a_pod_changed_since_the_cache_saw_it_is_not_counted_twice(env: Env) -> None:
    start_pod(env.cluster, "train-0")
    end_pod(env.cluster, "train-0", phase="Succeeded")
    env.cluster.fail("PATCH", r"/pods/train-0$", 409)
    env.step()
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Succeeded") == 0
    env.step()
    env.step()
    assert env.metric("gpuhealth_workload_pods_ended_total", namespace=NS, phase="Succeeded") == 1


# --- a node that keeps killing jobs ---------------------------------------------------------------

def test_a_node_counts_each_workload_that_failed_on_it_once_within_the_window(env: Env) -> None:
    nccl = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600027 ms"
    for name, job in (("a-0", "a"), ("a-1", "a"), ("b-0", "b")):
        start_pod(env.cluster, name, node="gpu-5", job=job)
        end_pod(env.cluster, name, message=nccl, at=env.now)
    start_pod(env.cluster, "c-0", node="gpu-5", job="c")  # preempted: the node is not a suspect
    end_pod(env.cluster, "c-0", at=env.now, conditions=[{"type": "DisruptionTarget", "status": "True",
                                                         "reason": "PreemptionByScheduler", "message": "preempted"}])
    env.now += timedelta(minutes=6)
    env.step()
    assert {env.failure(n)["reason"] for n in ("a-0", "a-1", "b-0")} == {"nccl_timeout"}  # type: ignore[index]
    assert env.metric("gpuhealth_workload_node_suspect_workloads", node="gpu-5", pool="gpu") == 2
    assert env.metric("gpuhealth_workload_failures_total", **{"class": "unknown"}, reason="nccl_timeout",
                      namespace=NS) == 3
    env.restart()
    env.step()
    assert env.metric("gpuhealth_workload_node_suspect_workloads", node="gpu-5", pool="gpu") == 2
    env.now += timedelta(hours=1)  # workloads.node_suspect_window
    env.step()
    assert env.metrics.registry.get_sample_value("gpuhealth_workload_node_suspect_workloads",
                                                 {"node": "gpu-5", "pool": "gpu"}) is None


# --- the restart-loop guard -----------------------------------------------------------------------

def test_three_app_failures_in_a_row_raise_the_restart_loop_gauge_and_count_on_the_job(env: Env) -> None:
    env.cluster.add_job(NS, "train")
    fail_job_pods(env, ["train-0", "train-1"])
    assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 0
    fail_job_pods(env, ["train-2"])
    assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 1
    loop = LoopState.from_json(env.cluster.jobs[(NS, "train")]["metadata"]["annotations"][LOOP_ANNOTATION])
    assert (loop.count, loop.cause) == (3, "app_exit_code:2")
    assert env.cluster.jobs[(NS, "train")]["spec"]["suspend"] is False  # suspend is off by default
    assert "RestartLoop" in env.cluster.reasons("train")


def test_the_ranks_of_one_attempt_failing_together_are_one_failure_not_a_loop(env: Env) -> None:
    env.cluster.add_job(NS, "train")
    started = env.now - timedelta(minutes=1)
    for rank in range(4):  # an indexed Job's four ranks, all started together, all failing on the same bad flag
        start_pod(env.cluster, f"train-{rank}", node=f"gpu-{rank}", started=started)
        end_pod(env.cluster, f"train-{rank}", exit_code=2, at=env.now + timedelta(seconds=rank))
    env.now += timedelta(minutes=6)
    env.step()
    loop = LoopState.from_json(env.cluster.jobs[(NS, "train")]["metadata"]["annotations"][LOOP_ANNOTATION])
    assert loop.count == 1 and env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 0
    fail_job_pods(env, ["train-4"])  # the retry, started after they failed: the second failure in a row
    loop = LoopState.from_json(env.cluster.jobs[(NS, "train")]["metadata"]["annotations"][LOOP_ANNOTATION])
    assert loop.count == 2


def test_a_different_cause_or_progress_starts_the_count_again(env: Env) -> None:
    env.cluster.add_job(NS, "train")
    fail_job_pods(env, ["train-0", "train-1"])
    fail_job_pods(env, ["train-2"], exit_code=127)
    fail_job_pods(env, ["train-3"], exit_code=127)
    env.cluster.jobs[(NS, "train")]["status"]["succeeded"] = 1  # an index completed: progress
    fail_job_pods(env, ["train-4"], exit_code=127)
    loop = LoopState.from_json(env.cluster.jobs[(NS, "train")]["metadata"]["annotations"][LOOP_ANNOTATION])
    assert (loop.count, loop.cause) == (1, "app_exit_code:127")
    assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 0


def test_infra_failures_neither_count_nor_break_a_run(env: Env) -> None:
    env.cluster.add_job(NS, "train")
    fail_job_pods(env, ["train-0", "train-1"])
    start_pod(env.cluster, "train-x", job="train")
    end_pod(env.cluster, "train-x", at=env.now, conditions=[{"type": "DisruptionTarget", "status": "True",
                                                             "reason": "EvictionByEvictionAPI", "message": "drain"}])
    env.step()
    fail_job_pods(env, ["train-2"])
    assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 1


def test_suspend_policy_suspends_the_job_with_an_event_and_an_audit_line(
        cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    env = Env(cluster, POLICY + "  restart_loop: {suspend: true}\n")
    try:
        cluster.add_job(NS, "train")
        with caplog.at_level(logging.INFO, logger="gpuhealth.remediator"):
            fail_job_pods(env, ["train-0", "train-1", "train-2"])
        assert cluster.jobs[(NS, "train")]["spec"]["suspend"] is True
        assert "RestartLoopSuspended" in cluster.reasons("train")
        lines = [json.loads(r.getMessage()) for r in caplog.records if '"restart_loop"' in r.getMessage()]
        assert lines and lines[-1]["action"] == "suspend" and lines[-1]["count"] == 3
    finally:
        env.close()


def test_dry_run_suspends_nothing_and_says_what_it_would_do(cluster: FakeCluster,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    env = Env(cluster, POLICY + "  restart_loop: {suspend: true}\n", dry_run=True)
    try:
        cluster.add_job(NS, "train")
        with caplog.at_level(logging.INFO, logger="gpuhealth.remediator"):
            fail_job_pods(env, ["train-0", "train-1", "train-2"])
        job = cluster.jobs[(NS, "train")]
        assert job["spec"]["suspend"] is False and not job["metadata"]["annotations"]
        assert not any(a for (ns, _), p in cluster.pods.items() if ns == NS
                       for a in (p["metadata"].get("annotations") or {}))
        assert not cluster.events
        lines = [json.loads(r.getMessage()) for r in caplog.records if '"restart_loop"' in r.getMessage()]
        assert lines[-1]["action"] == "would suspend" and lines[-1]["dry_run"] is True
        assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 1
    finally:
        env.close()


def test_a_restarted_remediator_keeps_the_loop_and_its_count(env: Env) -> None:
    env.cluster.add_job(NS, "train")
    fail_job_pods(env, ["train-0", "train-1", "train-2"])
    env.restart()
    env.step()
    assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 1
    fail_job_pods(env, ["train-3"])
    loop = LoopState.from_json(env.cluster.jobs[(NS, "train")]["metadata"]["annotations"][LOOP_ANNOTATION])
    assert loop.count == 4


def test_a_later_success_ends_the_loop_gauge(env: Env) -> None:
    env.cluster.add_job(NS, "train")
    fail_job_pods(env, ["train-0", "train-1", "train-2"])
    start_pod(env.cluster, "train-3")
    end_pod(env.cluster, "train-3", phase="Succeeded", at=env.now)
    env.step()
    assert env.metric("gpuhealth_workload_restart_loop", namespace=NS, workload="train") == 0


# --- serve ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("enabled", [True, False])
def test_serve_starts_the_watcher_only_when_the_policy_enables_it(cluster: FakeCluster, enabled: bool) -> None:
    policy = Policy() if not enabled else parse_policy(POLICY + "alertmanager: {url: none}\n")
    h = Harness(cluster, policy)
    start_pod(cluster, "train-0")
    app = create_app(ServeConfig(h.policy, TOKEN, interval=0.05), remediator=h.rem, start_loop=True)
    try:
        assert ("workload_watcher" in app.extensions) == enabled
        end_pod(cluster, "train-0", conditions=[{"type": "DisruptionTarget", "status": "True",
                                                 "reason": "PreemptionByScheduler", "message": "preempted"}])
        deadline = time.monotonic() + (5 if enabled else 1)
        while time.monotonic() < deadline and FAILURE_ANNOTATION not in cluster.pods[(NS, "train-0")]["metadata"].get(
                "annotations", {}):
            time.sleep(0.05)
        annotations = cluster.pods[(NS, "train-0")]["metadata"].get("annotations") or {}
        assert (FAILURE_ANNOTATION in annotations) == enabled
    finally:
        app.extensions["remediator_stop"].set()


def test_the_workload_metrics_are_on_the_remediators_metrics_endpoint(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    env = Env(cluster)
    try:
        env.restart(metrics=h.rem.metrics)
        start_pod(cluster, "train-0")
        end_pod(cluster, "train-0", conditions=[{"type": "DisruptionTarget", "status": "True",
                                                 "reason": "PreemptionByScheduler", "message": "preempted"}])
        env.step()
        text = h.http.get("/metrics").get_data(as_text=True)
    finally:
        env.close()
    assert 'gpuhealth_workload_failures_total{class="infra",namespace="ml",reason="preemption"} 1.0' in text
    assert 'gpuhealth_workload_failures_total{class="app",namespace="ml",reason="oom_killed"} 0.0' in text
    assert 'gpuhealth_workload_pods_ended_total{namespace="ml",phase="Failed"} 1.0' in text
    assert 'gpuhealth_workload_lost_seconds_total{class="infra",namespace="ml"}' in text
    assert "gpuhealth_workload_restart_loop" in generate_latest(h.rem.metrics.registry).decode()



# --- MIG: an Xid on one MIG instance is the failure of the pods on that instance (their DRA claims) ---------------

def test_a_contained_memory_error_on_one_mig_instance_is_the_failure_of_the_pod_on_it_not_of_its_neighbour(
        cluster: FakeCluster) -> None:
    env = Env(cluster, POLICY + "  selector: app=infer\n")
    try:
        gpus, migs = cluster.dra.publish_mig_gpus("gpu-3", "gpu-1")
        for pod, device in (("infer-a", migs[1]), ("infer-b", migs[2])):  # two instances of one GPU
            cluster.add_pod("gpu-3", pod, namespace=NS, labels={"app": "infer"}, owner_kind=None)
            cluster.dra.add_claim(NS, f"{pod}-gpu", [("gpu.nvidia.com", "gpu-3", device["name"])], [pod])
        parent = next(g for g in gpus if g["name"] == "gpu-1")
        bus = f"0000{parent['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper()
        start = T0 - timedelta(minutes=2)
        record = AlertRecord(name="GPUContainedMemoryError", remediation="none", status="firing",
                             starts_at=start, last_seen=start, gpu=bus, component="memory",
                             mig_uuid=migs[1]["attributes"]["uuid"]["string"])
        state = NodeState(alerts={"fp-xid94": record})
        cluster.update_node("gpu-3", lambda n: n["metadata"].setdefault("annotations", {}).update(
            {STATE_ANNOTATION: state.to_json()}))
        for pod in ("infer-a", "infer-b"):
            end_pod(cluster, pod, exit_code=1)
        verdicts = {o.pod: o.verdict for o in env.step() if o.verdict is not None}
        assert (verdicts["infer-a"].cls, verdicts["infer-a"].reason) == ("infra", "gpu_memory_error")
        assert any("MIG device" in e for e in verdicts["infer-a"].evidence)
        assert (verdicts["infer-b"].cls, verdicts["infer-b"].reason) == ("unknown", "unexplained")
        assert env.failure("infer-a") and env.failure("infer-b") is None  # infer-b waits for the look-ahead
    finally:
        env.close()
