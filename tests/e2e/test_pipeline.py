"""End to end: fault on a simulated node → exporter → Prometheus rules → Alertmanager → remediator → cluster.

Real Prometheus and Alertmanager (Debian's packages), the real exporter and remediator processes,
and a fake Kubernetes API server. Rule durations are divided by stack.TIME_SCALE (30): a 5-minute
`for` takes 10 s here. Run alone with `make e2e` (pytest -m e2e).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.stack import (
    FIXTURES,
    GPU_OPERATOR_OPERANDS,
    ROOT,
    NodeOptions,
    Stack,
    http_get,
    http_json,
    print_logs_if_failed,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(360)]

# Production timings shortened to fit a test; what each rung does is unchanged.
POLICY = """
return_to_service: {healthy_delay: 8s}
ladder:
  reset_gpu: {timeout: 20s, escalate_after: 20s}
  reboot: {timeout: 30s, escalate_after: 15s}
breaker: {cooldown: 60s}
replace: {method: condition}
"""


def _running(request: pytest.FixtureRequest, **kwargs: Any) -> Iterator[Stack]:
    with Stack(policy=POLICY, **kwargs) as s:
        yield s
        print_logs_if_failed(request.node, s, (*s.remediators, "alertmanager", "prometheus"), 60)


@pytest.fixture
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    yield from _running(request)


def events(stack: Stack, node: str) -> list[str]:
    return stack.cluster.reasons(node)


def test_fatal_xid_79_cordons_drains_reboots_and_returns_the_node_to_service(stack: Stack) -> None:
    node = stack.nodes["pool-a-gpu-0"]
    pod = f"train-{node.name}"
    node.xid(79)
    wait_for("GPUFallenOffBus firing", lambda: stack.firing("GPUFallenOffBus", node.name), timeout=30)
    wait_for("cordon", lambda: stack.cordoned(node.name), timeout=30)
    wait_for("the pod evicted through the Eviction API",
             lambda: ("POST", f"/api/v1/namespaces/ml/pods/{pod}/eviction") in stack.cluster.requests, timeout=30)
    wait_for("a reboot Job pinned to the node", lambda: [j for j in stack.jobs(node.name)
                                                         if "reboot" in j["metadata"]["name"]], timeout=30)
    wait_for("the node to reboot", lambda: node.name in stack.rebooted, timeout=30)
    # The fault is gone after the reboot: the alert resolves, the healthy delay passes, the node returns.
    wait_for("uncordon", lambda: not stack.cordoned(node.name) and
             not stack.cluster.node(node.name)["spec"].get("unschedulable"), timeout=120)
    assert stack.disrupted() == []
    # Events go out through the remediator's outbox, after the write they tell of: the uncordon may come first
    wait_for("the ReturnedToService Event", lambda: "ReturnedToService" in events(stack, node.name), timeout=30)
    reasons = events(stack, node.name)
    assert reasons.count("Cordoned") == 1, reasons
    assert len([j for j in stack.jobs(node.name) if "reboot" in j["metadata"]["name"]]) == 1
    assert stack.jobs() == stack.jobs(node.name)  # no Job anywhere else
    # the evidence an RMA asks for was kept before the reboot: the node's kernel log, in a ConfigMap of its own
    (cm,) = [c for (_, name), c in stack.cluster.configmaps.items() if f"gpuhealth-evidence-{node.name}" in name]
    assert "Xid" in cm["data"]["kernel-log.txt"] and cm["metadata"]["labels"]["gpuhealth.io/rung"] == "reboot"
    assert reasons.index("EvidenceCollected") < reasons.index("Reboot"), reasons
    # the reboot was validated before the node returned: the chart's diagnostic Job, judged by gpuhealth-diagnose
    assert [rc for name, rc in stack.diagnosed if name.startswith(f"gpuhealth-validate-{node.name}")] == [0]
    assert reasons.index("DiagnosticPassed") < reasons.index("ReturnedToService"), reasons
    others = [n for n in stack.nodes if n != node.name]
    assert all(not stack.cluster.node(n)["spec"].get("unschedulable") for n in others)


@pytest.fixture
def dra_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    yield from _running(request, node_options={"pool-a-gpu-0": NodeOptions(dra=True, gpu_operator=True)})


def test_an_xid_48_on_one_gpu_of_a_dra_node_quarantines_that_gpu_and_resets_it_with_its_clients_stopped(
        dra_stack: Stack) -> None:
    """GPU scope end to end: the kernel line, the exporter's counter, the rule, Alertmanager's route as the
    operator renders it, the remediator's DeviceTaintRule; the fake API server evicts as kube-controller-manager
    does. Then the reset sequence: the GPU Operator's operands paused (their DaemonSet pods go), the real exporter
    releasing NVML on the reset request, the reset (which fails while anything holds the GPU), and everything
    restored; and once the alert resolves, the GPU back in service with only gpuhealth's device taints removed."""
    stack = dra_stack
    node = stack.nodes["pool-a-gpu-0"]
    devices = {d["name"]: d for d in stack.cluster.dra.slices[f"{node.name}-gpu.nvidia.com-x"]["spec"]["devices"]}
    bus = devices["gpu-2"]["attributes"]["resource.kubernetes.io/pciBusID"]["string"].rsplit(".", 1)[0]
    node.xid(48, pci=bus, detail="An uncorrectable double bit error (DBE) has been detected on GPU")
    # 48 alone (no 63/64): GPUXidDoubleBitError, after its for 1m (rules/alerts/gpu.yaml)
    wait_for("GPUXidDoubleBitError firing", lambda: stack.firing("GPUXidDoubleBitError", node.name), timeout=120)
    def quarantined() -> set[tuple[str, str]]:
        with stack.cluster.lock:
            return {(r["spec"]["deviceSelector"]["device"], r["spec"]["taint"]["effect"])
                    for r in stack.cluster.dra.rules.values()}

    wait_for("the GPU quarantined with NoExecute", lambda: ("gpu-2", "NoExecute") in quarantined(), timeout=40)
    wait_for("the pod on that GPU evicted",
             lambda: f"serve/infer-{node.name}-gpu-2" in stack.cluster.evictions(), timeout=30)
    assert {device for device, _ in quarantined()} == {"gpu-2"}
    operands = [f"nvidia.com/gpu.deploy.{op}" for op in GPU_OPERATOR_OPERANDS]

    def labels() -> dict[str, str]:
        return {k: stack.cluster.node(node.name)["metadata"]["labels"].get(k, "") for k in operands}

    wait_for("the operands paused", lambda: set(labels().values()) == {"paused-for-gpu-reset"}, timeout=60)
    assert not [j for j in stack.jobs(node.name) if "reset" in j["metadata"]["name"]]  # not while they hold it
    wait_for("the reset Job for that GPU", lambda: stack.resets, timeout=60)
    assert stack.resets == [(node.name, [])]  # nothing held the GPU when it ran: the operands gone, NVML released
    wait_for("the operands restored", lambda: set(labels().values()) == {"true"}, timeout=30)
    wait_for("the exporter back on NVML", lambda: next(
        c for c in stack.cluster.node(node.name)["status"]["conditions"] if c["type"] == "GpuhealthProbesHealthy"
    )["reason"] != "ReleasedForGPUReset", timeout=30)
    assert "gpuhealth.io/gpu-reset-request" not in stack.cluster.annotations(node.name)
    assert not stack.cordoned(node.name)
    assert stack.cluster.evictions() == [f"serve/infer-{node.name}-gpu-2"]  # the other seven, and train-*, kept
    # the Events are written after the Node (each step's write, then its Event): a loaded machine may show the
    # restored labels a moment before the Event that says so
    wanted = {"GPUQuarantined", "GPUClientsStopping", "GPUResetSucceeded", "GPUClientsRestored"}
    wait_for("the reset's Events", lambda: wanted <= set(events(stack, node.name)), timeout=10)
    assert "Cordoned" not in events(stack, node.name)
    # No new Xid: the alert resolves, the healthy delay passes, the GPU returns; a rule gpuhealth did not make stays.
    with stack.cluster.lock:
        stack.cluster.dra.rules["driver-maintenance"] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "driver-maintenance", "labels": {}, "uid": "uid-dtr-driver-maintenance",
                         "resourceVersion": stack.cluster._next_rv()},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": node.name, "device": "gpu-5"},
                     "taint": {"key": "example.com/maintenance", "value": "true", "effect": "None"}}}
    wait_for("GPUXidDoubleBitError resolved", lambda: not stack.firing("GPUXidDoubleBitError", node.name),
             timeout=90)
    wait_for("the GPU back in service", lambda: "GPUReturnedToService" in events(stack, node.name), timeout=60)
    assert quarantined() == {("gpu-5", "None")}  # only gpuhealth's rule removed
    assert stack.cluster.evictions() == [f"serve/infer-{node.name}-gpu-2"]


@pytest.fixture
def mig_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    yield from _running(request, node_options={"pool-a-gpu-0": NodeOptions(dra=True, mig=True)})


def test_an_xid_94_on_one_mig_instance_names_that_instance_and_leaves_every_pod_and_the_node_alone(
        mig_stack: Stack) -> None:
    """MIG end to end: the driver's line for one GPU instance (GPU-I:07), the exporter's counter with its gpu_instance,
    NVML's MIG devices (the NVML stand-in, the same devices the DRA driver publishes), the Xid record's join
    (mig_uuid), Alertmanager's route, the chart's remediator. Xid 94 asks for no action (remediation none in the
    shipped rules): the alert names the instance, the remediator records it, and no pod on any instance or GPU is
    touched, nothing is quarantined and the node is not cordoned."""
    from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, NodeState
    from tests.fakes.apiserver.dra import recorded_mig_layout

    stack = mig_stack
    node = stack.nodes["pool-a-gpu-0"]
    devices = {d["name"]: d for d in stack.cluster.dra.slices[f"{node.name}-gpu.nvidia.com-x"]["spec"]["devices"]}
    bus = devices["gpu-1"]["attributes"]["resource.kubernetes.io/pciBusID"]["string"].rsplit(".", 1)[0]
    target = next(m for m in recorded_mig_layout() if m.gpu_instance == 7)  # a 1g.10gb, not the 3g.40gb
    served = {p for (ns, p) in stack.cluster.pods if ns == "serve"}
    assert len(served) == 7 + 4  # the other GPUs' pods and one per MIG device of gpu-1
    wait_for("NVML's MIG devices scraped", lambda: stack.query_value(
        f'count(gpuhealth_gpu_mig_instance_info{{node="{node.name}"}})') == 4, timeout=40)
    node.xid(94, pci=bus, gpu_instance=target.gpu_instance,
             detail="Contained: CE User Channel (0x9). RST: No, D-RST: No")
    (alert,) = wait_for("GPUContainedMemoryError firing", lambda: stack.firing("GPUContainedMemoryError", node.name),
                        timeout=40)
    assert {k: alert["labels"].get(k) for k in ("pci_bus_id", "gpu_instance", "mig_uuid", "remediation")} == {
        "pci_bus_id": f"0000{bus}.0".upper(), "gpu_instance": "07", "mig_uuid": target.uuid, "remediation": "none"}

    def recorded() -> bool:
        state = NodeState.from_json(stack.cluster.annotations(node.name).get(STATE_ANNOTATION))
        return any(a.name == "GPUContainedMemoryError" and a.mig_uuid == target.uuid for a in state.alerts.values())

    wait_for("the remediator recorded the alert with its MIG device", recorded, timeout=30)
    time.sleep(5)  # several remediator passes (1 s each here): none may act on it
    assert stack.cluster.evictions() == [] and not stack.cluster.dra.rules and not stack.cordoned(node.name)
    assert {p for (ns, p) in stack.cluster.pods if ns == "serve"} == served
    assert not [e for e in events(stack, node.name) if e in ("GPUQuarantined", "Cordoned", "NodeScope")]


def test_a_single_application_xid_leaves_the_node_alone(stack: Stack) -> None:
    node = stack.nodes["pool-b-gpu-1"]
    node.xid(13, pci="0000:38:00")
    alert = wait_for("GPUXidApplication firing", lambda: stack.firing("GPUXidApplication", node.name), timeout=30)
    assert alert[0]["labels"]["remediation"] == "none"
    # The remediator did receive it: it records every alert on its node before answering the webhook.
    wait_for("the alert recorded on the node", lambda: "GPUXidApplication" in stack.cluster.annotations(
        node.name).get("gpuhealth.io/state", ""), timeout=30)
    # Then give it several passes, longer than a fatal fault needs to be cordoned (~2 s here).
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        assert stack.disrupted() == [] and stack.jobs() == []
        time.sleep(0.5)
    assert not stack.cluster.node(node.name)["spec"].get("unschedulable")
    assert not any(m != "GET" and "eviction" in p for m, p in stack.cluster.requests)


def test_dcgmi_hanging_past_its_deadline_cordons_the_node(stack: Stack) -> None:
    node = stack.nodes["pool-a-gpu-3"]
    node.dcgmi("hang")
    wait_for("probe dcgm reported failing", lambda: stack.query_value(
        f'gpuhealth_probe_success{{probe="dcgm",node="{node.name}"}}') == 0, timeout=30)
    wait_for("cordon (fail closed)", lambda: stack.cordoned(node.name), timeout=90)
    alert = stack.firing(node=node.name)
    assert {a["labels"]["alertname"] for a in alert} & {"GpuhealthProbeFailing", "GpuhealthProbeStale"}
    assert stack.cluster.pods_on(node.name), "a cordon lets running work continue"
    assert stack.disrupted() == [node.name]


def test_a_storm_on_half_a_pool_is_held_by_the_budget_and_the_breaker(stack: Stack) -> None:
    storm = [f"pool-a-gpu-{i}" for i in range(4)]  # 4 of 8 nodes: past the 30% breaker
    for name in storm:
        stack.nodes[name].xid(79)
    wait_for("the storm's alerts firing", lambda: len({a["labels"]["node"] for a in stack.firing("GPUFallenOffBus")})
             == len(storm), timeout=30)
    wait_for("the breaker to report itself", lambda: b'gpuhealth_remediator_breaker_open{pool="pool-a"} 1.0'
             in http_get(f"{stack.leader_url()}/metrics"), timeout=30)
    # Cordons are still allowed with the breaker open, up to their own cap: 20% of 8, rounded up.
    wait_for("two of the storm's nodes cordoned", lambda: len([n for n in storm if stack.cordoned(n)]) == 2,
             timeout=30)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        cordoned = [n for n in stack.nodes if stack.cordoned(n)]
        assert len(cordoned) == 2, cordoned
        assert len({j["metadata"]["name"] for j in stack.jobs()}) <= 1  # max_disrupted 10% of 8 → 1
        time.sleep(0.5)
    metrics = http_get(f"{stack.leader_url()}/metrics").decode()
    deferred = [line for line in metrics.splitlines()
                if line.startswith("gpuhealth_remediator_actions_total{") and 'result="deferred"' in line]
    assert any(float(line.rsplit(" ", 1)[1]) > 0 for line in deferred), deferred  # the budget said no
    assert not any(n.startswith("pool-b") for n in stack.disrupted())
    assert any("Breaker" in r for n in storm for r in events(stack, n)) or any(
        "Breaker" in e.get("reason", "") for e in stack.cluster.events)


def test_a_silence_stops_escalation(stack: Stack) -> None:
    node = stack.nodes["pool-b-gpu-0"]
    efa = node.dir / "sysfs" / "sys" / "class" / "infiniband" / "rdmap1s27"
    rebooted = wait_for_reboot_after_efa_loss(stack, node.name, efa)
    assert rebooted
    # The device is still missing after the reboot, so the ladder would climb to replace; on-call
    # silences the node's alerts first.
    silence = stack.silence({"node": node.name})
    jobs = len(stack.jobs(node.name))

    def replaced() -> bool:
        return any(c["type"] == "AcceleratedHardwareReady" and c["status"] == "False"
                   for c in stack.cluster.node(node.name)["status"]["conditions"])

    end = time.monotonic() + 30  # twice reboot.escalate_after (15 s), plus passes: nothing may happen
    while time.monotonic() < end:
        assert not replaced() and len(stack.jobs(node.name)) == jobs
        time.sleep(0.5)
    assert stack.firing("EFADevicesMissing", node.name), "the fault itself is still there"
    # Control: once on-call lifts the silence, the same fault does climb to replace.
    stack.expire_silence(silence)
    wait_for("replace after the silence ends", replaced, timeout=90)


def wait_for_reboot_after_efa_loss(stack: Stack, node: str, efa: Path) -> bool:
    import shutil

    shutil.rmtree(efa.resolve(), ignore_errors=True)
    efa.unlink(missing_ok=True)
    wait_for("EFADevicesMissing firing", lambda: stack.firing("EFADevicesMissing", node), timeout=60)
    return bool(wait_for("the reboot", lambda: node in stack.rebooted, timeout=60))


def test_a_node_a_person_cordoned_is_never_touched(stack: Stack) -> None:
    name = "pool-a-gpu-5"
    stack.cluster.update_node(name, lambda n: n["spec"].update(unschedulable=True))  # kubectl cordon, by a person
    before = stack.cluster.node(name)["spec"]
    stack.nodes[name].xid(79)
    wait_for("GPUFallenOffBus firing", lambda: stack.firing("GPUFallenOffBus", name), timeout=30)

    def untouched() -> None:
        assert stack.cluster.node(name)["spec"] == before
        assert stack.jobs(name) == []

    # through firing and resolution, then the healthy delay (8 s) and a few passes: nothing may happen
    wait_for("GPUFallenOffBus resolved", lambda: untouched() or not stack.firing("GPUFallenOffBus", name), timeout=60)
    end = time.monotonic() + 12
    while time.monotonic() < end:
        untouched()
        time.sleep(0.5)
    assert not any(p.endswith(f"train-{name}/eviction") for _, p in stack.cluster.requests)


def test_a_remediator_killed_mid_drain_carries_on_from_the_node_annotations(stack: Stack) -> None:
    name = "pool-b-gpu-2"
    with stack.cluster.lock:
        for pdb in stack.cluster.pdbs:
            pdb["disruptionsAllowed"] = 0  # the drain is blocked by the PodDisruptionBudget
    stack.nodes[name].xid(79)
    wait_for("cordon", lambda: stack.cordoned(name), timeout=30)
    wait_for("a refused eviction (429)", lambda: ("POST", f"/api/v1/namespaces/ml/pods/train-{name}/eviction")
             in stack.cluster.requests, timeout=30)
    leader = stack.leader()
    stack.stop_process(leader, kill=True)  # the other replica takes the Lease over when it expires
    with stack.cluster.lock:
        for pdb in stack.cluster.pdbs:
            pdb["disruptionsAllowed"] = 1
    stack.start_remediator(leader)
    pod = stack.remediators[leader]
    wait_for("remediator ready again", lambda: http_get(f"http://{pod.ip}:{pod.ports['metrics']}/readyz"), timeout=30)
    wait_for("the reboot Job", lambda: [j for j in stack.jobs(name) if "reboot" in j["metadata"]["name"]],
             timeout=60)
    wait_for("the reboot to be seen through", lambda: "RebootSucceeded" in events(stack, name), timeout=60)
    assert events(stack, name).count("Cordoned") == 1
    # one of each, whatever the restart: the evidence before the reboot, the reboot, and its validation after it
    components = sorted(j["metadata"]["labels"]["app.kubernetes.io/component"] for j in stack.jobs(name))
    assert components in (["evidence", "reboot"], ["diagnose", "evidence", "reboot"]), components
    assert stack.cluster.evictions().count(f"ml/train-{name}") == 1
    taints = [t for t in stack.cluster.node(name)["spec"].get("taints", []) if t["key"] == "gpuhealth.io/unhealthy"]
    assert len(taints) <= 1


# The node whose drill-down the dashboard test reads: held, so the remediator leaves it (and its
# kernel log) alone, and broken in every way a per-series panel shows.
HELD = "pool-b-gpu-0"
CONSTRUCTED = FIXTURES / "dcgm" / "metrics_constructed_2gpu_faults.prom"
GPU0, GPU1 = "0000:10:1c", "0000:10:1d"  # the constructed scrape's two GPUs, as the kernel log names them


def with_retired_page_pending(scrape: str, gpu: str) -> str:
    """The constructed dcgm-exporter scrape with a page retirement pending on one GPU (it has none)."""
    pattern = re.compile(rf'^(DCGM_FI_DEV_RETIRED_PENDING\{{gpu="{gpu}",[^}}]*\}}) 0$', re.M)
    out, n = pattern.subn(r"\1 1", scrape)
    assert n == 1, f"no DCGM_FI_DEV_RETIRED_PENDING line for GPU {gpu}"
    return out


# What the faults below must raise (each seen firing at least once; the Xid ones resolve after
# their window). On the held node, then on the others.
EXPECTED_ALERTS = {
    HELD: {"GPUXidFatal", "GPUXidDoubleBitErrorRemapped", "GPUFallenOffBus", "GPUXidResetRequired",
           "GPUXidApplication", "GPUXidContactSupport", "GPUXidUnknown",
           "GPUContainedMemoryError", "GPUNVLinkXidFatal", "GPURecoveryActionReset", "NVSwitchFatalSXid",
           "PCIeAERFatal", "HostHungTask", "HostMachineCheck", "HostSoftLockup", "GPUECCDoubleBitErrors",
           "GPURowRemapFailure", "GPURetiredPagesPending", "GpuhealthProbeFailing"},
    "pool-a-gpu-1": {"GpuhealthProbeFailing"},
    "pool-a-gpu-2": {"EFADevicesMissing"},
}


# The dashboard scenario also classifies workload failures (look-ahead shortened to fit a test).
WORKLOADS_POLICY = POLICY + """
workloads: {enabled: true, namespaces: [research], look_ahead: 2s}
"""


@pytest.fixture
def dashboard_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    with Stack(policy=WORKLOADS_POLICY) as s:
        yield s
        print_logs_if_failed(request.node, s, (*s.remediators, "alertmanager", "prometheus"), 60)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def run_workload_pod(stack: Stack, name: str, node: str, job: str, phase: str, exit_code: int = 0,
                     started_ago: float = 600, ended_ago: float = 0) -> None:
    """A GPU pod of Job `job` in namespace research that ran and ended as the kubelet reports it."""
    stack.cluster.add_pod(node, name, namespace="research", owner_kind=None, gpus=8)
    now = time.time()

    def end(pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                               "uid": f"uid-job-{job}", "controller": True}]
        terminated = {"exitCode": exit_code, "reason": "Completed" if phase == "Succeeded" else "Error",
                      "startedAt": _stamp(now - started_ago), "finishedAt": _stamp(now - ended_ago)}
        pod["status"].update(phase=phase, startTime=_stamp(now - started_ago), containerStatuses=[
            {"name": "c", "image": "x", "imageID": "x@sha256:1", "ready": False, "restartCount": 0,
             "state": {"terminated": terminated}}])
    stack.cluster.update_pod("research", name, end)


def test_every_dashboard_query_returns_data(dashboard_stack: Stack, tmp_path: Path) -> None:
    stack = dashboard_stack
    dashboards = sorted((ROOT / "dashboards").glob("**/*.json"))
    if not dashboards:
        pytest.fail("no dashboards/ JSON to check")
    held = stack.nodes[HELD]
    # 1. On-call holds the node first: the remediator must not touch it (a reboot would wipe its kernel log).
    stack.hold(HELD, reason="e2e: keep the node and its faults for the dashboards")
    assert "HoldSet" in events(stack, HELD)
    # Its exporter restarts on a faulty 2-GPU dcgm-exporter scrape (ECC, remaps, a pending page
    # retirement, NVLink errors, violations, hardware slowdown, a last Xid), expecting 2 GPUs, with
    # dcgmi diag on, and with the NVML probe on, which fails here (no NVIDIA library): a probe error.
    scrape = tmp_path / "dcgm-exporter-faults.prom"
    scrape.write_text(with_retired_page_pending(CONSTRUCTED.read_text(), "1"))
    held.restart(NodeOptions(dcgm_exporter=scrape, gpus_expected=2, enable=("diag", "nvml")))

    # 2. Faults. The held node's kernel log: every Xid class, an NVLink5 Xid (Fatal), a recovery action
    # (Xid 154), a fatal NVSwitch SXid and host kernel events.
    held.xid(48, pci=GPU1, detail="DBE (double bit error) ECC error")  # with the 63 below: the remapped branch
    held.xid(95, pci=GPU0, detail="Uncontained ECC error")  # the fatal hardware class
    held.xid(79, pci=GPU0)
    held.xid(109, pci=GPU0, detail="Ctx Switch Timeout Error")
    held.xid(63, pci=GPU1, detail="Row Remapper: New row marked for remapping")
    held.xid(94, pci=GPU1, detail="Contained ECC error")
    held.xid(145, pci=GPU0, detail="Fatal, Link 03 (RLW) error")
    # Xid 74 as the driver prints it (../shared/fixtures/kmsg/samples.txt); its third register decodes to a reset
    held.xid(74, pci=GPU0, detail="NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    held.xid(154, pci=GPU1, detail="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")
    held.xid(13, pci=GPU0)
    held.xid(32, pci=GPU0, detail="Invalid or corrupted push buffer stream")  # the catalog's RESTART_APP
    held.xid(38, pci=GPU1, detail="Driver firmware error")  # the catalog's IGNORE: counted only
    held.xid(61, pci=GPU1, detail="Internal micro-controller breakpoint/warning")  # the catalog's CONTACT_SUPPORT
    held.xid(999, pci=GPU0, detail="an Xid no table knows")
    held.sxid(24007, fatal=True, detail="Link 28 sourcetrack timeout error (First)")
    held.log_kernel("pcieport 0000:00:03.1: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer",
                    "INFO: task python3:4242 blocked for more than 120 seconds.",
                    "mce: Uncorrected hardware memory error in user-access at 3c8fc000",
                    "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:4242]")
    # Elsewhere: dcgmi failing (probe errors, fail closed), an EFA device gone.
    stack.nodes["pool-a-gpu-1"].dcgmi("fail")
    stack.nodes["pool-a-gpu-2"].remove_efa()
    # A node that sees fewer GPUs than it should (its scrape has one L4; it expects two), and a node
    # whose exporter is gone (its target is down).
    stack.nodes["pool-b-gpu-1"].restart(NodeOptions(gpus_expected=2))
    stack.nodes["pool-b-gpu-2"].stop()
    # A webhook with the wrong token: rejected, counted.
    assert stack.post_alerts({"version": "4", "alerts": []}, token="not-the-token") == 401

    # 3. Wait until every expected alert has fired, and the remediator has acted where it may.
    seen: dict[str, set[str]] = {node: set() for node in EXPECTED_ALERTS}

    def all_fired() -> bool:
        for a in stack.firing():
            node = a["labels"].get("node", "")
            if node in seen:
                seen[node].add(a["labels"]["alertname"])
        return all(EXPECTED_ALERTS[n] <= seen[n] for n in seen)

    try:
        wait_for("the expected alerts", all_fired, timeout=120, every=0.5)
    except TimeoutError:
        pytest.fail(f"alerts not seen firing: { {n: sorted(EXPECTED_ALERTS[n] - seen[n]) for n in seen} }")
    wait_for("the node with a failing probe cordoned", lambda: stack.cordoned("pool-a-gpu-1"), timeout=60)
    assert not stack.cordoned(HELD) and stack.jobs(HELD) == [] and HELD not in stack.rebooted

    # 4. Workloads: a training job with one slow rank on the held node (three ranks, the third at half speed),
    # pods that end: one succeeds, one fails on the node with the failing probe (infra, the node a suspect),
    # and a sweep fails three times in a row with the same application exit code (a restart loop).
    stack.start_training_job("llm-pretrain", [("pool-a-gpu-3", 0.2), ("pool-a-gpu-4", 0.2), (HELD, 0.4)])
    stack.cluster.add_job("research", "sweep")
    run_workload_pod(stack, "eval-0", "pool-a-gpu-5", job="eval", phase="Succeeded")
    run_workload_pod(stack, "pretrain-0", "pool-a-gpu-1", job="pretrain", phase="Failed", exit_code=1)
    for i in range(3):  # each retry starts after the one before it failed: three attempts, not three ranks
        run_workload_pod(stack, f"sweep-{i}", f"pool-a-gpu-{3 + i}", job="sweep", phase="Failed", exit_code=2,
                         started_ago=600 - 200 * i, ended_ago=500 - 200 * i)
    wait_for("the slow rank flagged", lambda: stack.firing("TrainingRankSlow", HELD), timeout=90, every=1)
    wait_for("the sweep's restart loop", lambda: stack.query_value(
        'max(gpuhealth_workload_restart_loop{namespace="research", workload="sweep"})') == 1, timeout=60)
    failure = json.loads(stack.cluster.pods[("research", "pretrain-0")]["metadata"]["annotations"][
        "gpuhealth.io/failure"])
    assert failure["class"] == "infra", failure

    # 5. Every query of every panel returns data (polled: the last samples of a new series take a scrape).
    def empty_queries() -> list[str]:
        empty = []
        for path in dashboards:
            for panel in _panels(json.loads(path.read_text())):
                for target in panel.get("targets", []):
                    # A count's "or vector(0)" would answer even with no data: check the count itself.
                    expr = re.sub(r"\s*or\s+vector\(0\)\s*$", "", _substitute(target.get("expr", ""), HELD))
                    if expr and not http_json(f"{stack.prometheus}/api/v1/query?query={_q(expr)}")["data"]["result"]:
                        empty.append(f"{path.name}: {panel.get('title')}: {expr}")
        return empty

    with contextlib.suppress(TimeoutError):  # the assertion below names what stayed empty
        wait_for("every dashboard query to return data", lambda: not empty_queries(), timeout=30, every=1)
    assert empty_queries() == []
    assert not stack.cordoned(HELD), "the held node was left alone throughout"


def _panels(doc: dict[str, object]) -> Iterator[dict[str, object]]:
    for panel in doc.get("panels", []):  # type: ignore[union-attr]
        yield panel
        yield from panel.get("panels", [])


def _substitute(expr: str, node: str) -> str:
    for var, value in {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "${node}": node,
                       "$node": node, "$pool": ".*", "${pool}": ".*", "$datasource": "", "$gpu": ".*",
                       "$namespace": ".*", "$training_job": ".*"}.items():
        expr = expr.replace(var, value)
    return expr


def _q(expr: str) -> str:
    import urllib.parse

    return urllib.parse.quote(expr)


@pytest.fixture
def burn_in_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    yield from _running(request, node_options={"pool-a-gpu-1": NodeOptions(burn_in=True)})


def test_a_new_node_with_the_burn_in_taint_is_diagnosed_before_it_joins_the_fleet(burn_in_stack: Stack) -> None:
    stack, node = burn_in_stack, "pool-a-gpu-1"
    # registered with the startup taint: the chart's diagnostic Job runs on it, judged by gpuhealth-diagnose
    wait_for("the burn-in's diagnostic", lambda: [rc for name, rc in stack.diagnosed
                                                  if name.startswith(f"gpuhealth-burn-in-{node}")], timeout=60)
    wait_for("the burn-in taint removed", lambda: not stack.cluster.node(node)["spec"].get("taints"), timeout=60)
    assert [rc for name, rc in stack.diagnosed if name.startswith(f"gpuhealth-burn-in-{node}")] == [0]
    reasons = events(stack, node)
    assert reasons.index("BurnInStarted") < reasons.index("BurnInPassed") < reasons.index("BurnInEnded"), reasons
    assert not stack.cluster.node(node)["spec"].get("unschedulable") and stack.disrupted() == []
    wait_for("the burn-in counted", lambda: stack.query_value(
        'sum(gpuhealth_remediator_burn_ins_total{result="passed"})') == 1, timeout=30)
    assert all(not stack.cluster.node(n)["spec"].get("taints") for n in stack.nodes)  # no other node touched
