"""Every step the remediator writes on the Node before it acts is done, once, after a crash between the two: the real
`gpuhealth-remediator serve` (a process of its own, the chart's RBAC, against the fake API server) is SIGKILLed
exactly as it sends the step's request (the fake API server's `crash_on`: the request is never performed),
restarted, and the next leader's pass does the step from what the Node says (docs/remediation.md, "Where the state
lives").

Fixed by this: the hand-over of a replacement (the NodeClaim's deletion) and a GPU's quarantine (its
DeviceTaintRules), which used to be lost. Guards (they held before): the reboot Job, a node drain's evictions, and
the DeviceTaintRules a return to service removes."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.remediator.dra_gpus import alert_gpu, dra_node
from tests.remediator.real_remediator import ServeProcess
from tests.support.polling import wait_for
from tests.support.remediator_harness import webhook

TOKEN = "intent-redrive-token"
LEASE_SECONDS = 3
RULES = r"^/apis/resource\.k8s\.io/v1/devicetaintrules"
NODECLAIMS = r"^/apis/karpenter\.sh/v1/nodeclaims/"


@dataclass
class Crash:
    cluster: FakeCluster
    serve: ServeProcess
    mark: int = 0  # cluster.requests before the restart

    def post(self, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.serve.port}/alerts", data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 202

    def fire(self, node: str, remediation: str, **kw: Any) -> None:
        self.post(webhook(node, remediation, starts=datetime.now(UTC), **kw))

    def start(self) -> None:
        self.serve.start()

    def killed_at(self, method: str, path: str, after: int = 0) -> None:
        """The next (after `after` more) request matching (method, path) kills the remediator and is dropped."""
        self.cluster.crash_on(method, path, self.serve.kill, after)

    def wait_killed(self) -> None:
        proc = self.serve.proc
        assert proc is not None
        assert wait_for(lambda: proc.poll() is not None, 30), "the remediator never reached the crash point"

    def restart(self) -> None:
        with self.cluster.lock:
            self.mark = len(self.cluster.requests)
        self.serve.start()

    def since_restart(self, method: str, path: str) -> list[str]:
        with self.cluster.lock:
            return [p for m, p in self.cluster.requests[self.mark:] if m == method and p.startswith(path)]

    def state(self, node: str) -> dict[str, Any]:
        raw = self.cluster.annotations(node).get(STATE_ANNOTATION)
        loaded: dict[str, Any] = json.loads(raw) if raw else {}
        return loaded

    def settled(self, node: str) -> bool:
        """Nothing the state promised is left to do (or no state at all)."""
        return not self.state(node).get("pending")


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


@pytest.fixture
def crash(cluster: FakeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Crash]:
    """`request.param`: more policy (indirect parametrization)."""
    (tmp_path / "token").write_text(TOKEN)
    policy = yaml.safe_dump({"alertmanager": {"url": "none"},
                             "leader": {"lease_duration": f"{LEASE_SECONDS}s"},
                             "return_to_service": {"healthy_delay": "0s"}, "evidence": {"enabled": False},
                             **getattr(request, "param", {})})
    serve = ServeProcess(cluster, tmp_path, tmp_path / "token", policy)
    try:
        yield Crash(cluster, serve)  # each test starts it once its cluster is set up
    finally:
        serve.stop()


def _rules(c: FakeCluster) -> list[tuple[str, str]]:
    with c.lock:
        return sorted((r["spec"]["deviceSelector"]["device"], r["spec"]["taint"]["effect"])
                      for r in c.dra.rules.values())


def _metric(serve: ServeProcess, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{serve.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


def _repair_condition(c: FakeCluster, node: str) -> dict[str, Any] | None:
    conditions = c.node(node)["status"].get("conditions") or []
    return next((x for x in conditions if x["type"] == "AcceleratedHardwareReady"), None)


def test_a_remediator_killed_before_it_deletes_the_nodeclaim_hands_the_node_over_once_after_its_restart(
        cluster: FakeCluster, crash: Crash) -> None:
    cluster.add_node("gpu-0")
    cluster.nodeclaims["gpu-pool-abcde"] = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                            "metadata": {"name": "gpu-pool-abcde"}, "status": {"nodeName": "gpu-0"}}
    crash.start()
    crash.killed_at("DELETE", NODECLAIMS)
    crash.fire("gpu-0", "replace", gpu=None)
    crash.wait_killed()
    at_kill = crash.state("gpu-0")
    assert (at_kill["rung"], at_kill["rung_status"]) == ("replace", "running")  # the intent is on the Node
    assert cluster.nodeclaims and "Replace" not in cluster.reasons("gpu-0")

    crash.restart()
    assert wait_for(lambda: not cluster.nodeclaims and crash.settled("gpu-0"), LEASE_SECONDS + 30), \
        crash.serve.log.read_text()[-3000:]
    assert crash.since_restart("DELETE", "/apis/karpenter.sh/v1/nodeclaims/") == [
        "/apis/karpenter.sh/v1/nodeclaims/gpu-pool-abcde"]
    assert cluster.reasons("gpu-0").count("Replace") == 1
    assert _metric(crash.serve, "gpuhealth_remediator_budget_in_use", pool="gpu", budget="disrupted") == 1
    assert crash.state("gpu-0")["rung"] == "replace"


@pytest.mark.parametrize("crash", [{"replace": {"method": "condition"}}], indirect=True, ids=["method_condition"])
def test_a_remediator_killed_before_it_sets_the_repair_condition_sets_it_once_after_its_restart(
        cluster: FakeCluster, crash: Crash) -> None:
    """replace.method condition: the hand-over is a status write of the Node, so the write that clears `pending`
    after it meets a newer resourceVersion (read again, then written)."""
    cluster.add_node("gpu-0")
    crash.start()
    crash.killed_at("PATCH", r"^/api/v1/nodes/gpu-0/status$")
    crash.fire("gpu-0", "replace", gpu=None)
    crash.wait_killed()
    assert crash.state("gpu-0")["rung"] == "replace" and _repair_condition(cluster, "gpu-0") is None

    crash.restart()
    assert wait_for(lambda: _repair_condition(cluster, "gpu-0") is not None and crash.settled("gpu-0"),
                    LEASE_SECONDS + 30), crash.serve.log.read_text()[-3000:]
    condition = _repair_condition(cluster, "gpu-0")
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "GpuhealthReplace")
    assert crash.since_restart("PATCH", "/api/v1/nodes/gpu-0/status") == ["/api/v1/nodes/gpu-0/status"]
    assert cluster.reasons("gpu-0").count("Replace") == 1
    assert _metric(crash.serve, "gpuhealth_remediator_budget_in_use", pool="gpu", budget="disrupted") == 1
    assert crash.state("gpu-0")["rung"] == "replace"


@pytest.mark.parametrize(("remediation", "after", "rules"), [
    ("cordon", 0, [("gpu-3", "NoSchedule")]),  # the cordon's only act: the GPU stayed schedulable
    ("drain", 0, [("gpu-3", "NoExecute"), ("gpu-3", "NoSchedule")]),  # killed before the first of its two rules
    ("drain", 1, [("gpu-3", "NoExecute"), ("gpu-3", "NoSchedule")]),  # a guard: the drain's retries made the second
])
def test_a_remediator_killed_before_it_quarantines_the_gpu_makes_its_device_taint_rules_once_after_its_restart(
        cluster: FakeCluster, crash: Crash, remediation: str, after: int, rules: list[tuple[str, str]]) -> None:
    devices = dra_node(cluster)
    crash.start()
    crash.killed_at("POST", RULES, after)
    crash.fire("gpu-1", remediation, gpu=alert_gpu(devices[3]))
    crash.wait_killed()
    at_kill = crash.state("gpu-1")
    assert (at_kill["scope"], at_kill["devices"]) == ("gpu", ["gpu-3"])  # counted as quarantined: the intent
    assert len(_rules(cluster)) == after == cluster.reasons("gpu-1").count("GPUQuarantined")

    crash.restart()
    assert wait_for(lambda: _rules(cluster) == rules and crash.settled("gpu-1"), LEASE_SECONDS + 30), \
        crash.serve.log.read_text()[-3000:]
    made = crash.since_restart("POST", "/apis/resource.k8s.io/v1/devicetaintrules")
    assert made and len(made) <= 3  # the missing ones made (a second POST of one that exists is a 409), no more
    assert "GPUQuarantined" in cluster.reasons("gpu-1")
    assert not cluster.taints("gpu-1") and not cluster.node("gpu-1")["spec"].get("unschedulable")
    if remediation == "cordon":
        assert len(made) == 1 and cluster.reasons("gpu-1").count("GPUQuarantined") == 1
        assert cluster.evictions() == []
    else:  # kube-controller-manager evicted the one pod whose claim holds the GPU
        assert wait_for(lambda: cluster.evictions() == ["default/train-gpu-1-gpu-3"])
    assert _metric(crash.serve, "gpuhealth_remediator_budget_in_use", pool="gpu", budget="quarantined_gpus") == 1


def test_a_remediator_killed_before_it_creates_the_reboot_job_creates_it_once_after_its_restart(
        cluster: FakeCluster, crash: Crash) -> None:
    """A guard: the Job's name is in the state before the Job exists, and a missing one is created next pass."""
    cluster.add_node("gpu-0")
    crash.start()
    crash.killed_at("POST", r"^/apis/batch/v1/namespaces/[^/]+/jobs$")
    crash.fire("gpu-0", "reboot", gpu=None)
    crash.wait_killed()
    job = crash.state("gpu-0")["job"]
    assert job and not cluster.jobs

    crash.restart()
    assert wait_for(lambda: len(cluster.jobs) == 1, LEASE_SECONDS + 30), crash.serve.log.read_text()[-3000:]
    assert [name for _, name in cluster.jobs] == [job]
    assert len(crash.since_restart("POST", "/apis/batch/v1/namespaces/")) == 1


def test_a_remediator_killed_before_its_first_eviction_drains_the_node_after_its_restart(
        cluster: FakeCluster, crash: Crash) -> None:
    """A guard: a drain that is running evicts what is left on every pass."""
    cluster.add_node("gpu-0")
    cluster.add_pod("gpu-0", "train-0")
    crash.start()
    crash.killed_at("POST", r"/pods/train-0/eviction$")
    crash.fire("gpu-0", "drain", gpu=None)
    crash.wait_killed()
    assert crash.state("gpu-0")["rung"] == "drain" and cluster.evictions() == []

    crash.restart()
    assert wait_for(lambda: cluster.evictions() == ["default/train-0"], LEASE_SECONDS + 30), \
        crash.serve.log.read_text()[-3000:]


def test_a_remediator_killed_before_it_removes_the_device_taint_rules_at_return_removes_them_after_its_restart(
        cluster: FakeCluster, crash: Crash) -> None:
    """A guard: the episode is closed in the write, and the sweep removes gpuhealth's rules no episode holds."""
    devices = dra_node(cluster)
    crash.start()
    crash.fire("gpu-1", "cordon", gpu=alert_gpu(devices[2]))
    assert wait_for(lambda: _rules(cluster) == [("gpu-2", "NoSchedule")], 30)
    crash.killed_at("DELETE", RULES)
    crash.post(webhook("gpu-1", "cordon", status="resolved", gpu=alert_gpu(devices[2]), starts=datetime.now(UTC)))
    crash.wait_killed()
    assert _rules(cluster) == [("gpu-2", "NoSchedule")] and not crash.state("gpu-1").get("episode")

    crash.restart()
    assert wait_for(lambda: _rules(cluster) == [], LEASE_SECONDS + 30), crash.serve.log.read_text()[-3000:]
