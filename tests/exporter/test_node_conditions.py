"""Node conditions: gpuhealth's own types, True = healthy, written on change, cleared when the fault clears."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.collector import Expectations
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.efa_expected import EfaExpectation
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.node_status import KubeError, NodeConditionWriter
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.samples import GpuIdentity, ProbeResult, Sample
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.apiserver import FakeCluster
from tests.fakes.probe import FakeProbe
from tests.support import chart_rbac, process_tree

TYPES = ["GpuhealthGPUHealthy", "GpuhealthNVLinkHealthy", "GpuhealthEFAHealthy", "GpuhealthKernelHealthy",
         "GpuhealthProbesHealthy"]


STATUS = "/api/v1/nodes/gpu-node-1/status"


@pytest.fixture
def api() -> Iterator[FakeCluster]:
    with FakeCluster() as server:
        server.add_node("gpu-node-1")
        chart_rbac.enforce(server)  # the exporter's ClusterRole from the chart, and its pod's token on this node
        server.add_service_account_token("sa-token", chart_rbac.NAMESPACE, chart_rbac.EXPORTER_SA,
                                         node="gpu-node-1", pod="gpuhealth-exporter-abcde")
        yield server


def stored(api: FakeCluster) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in api.node("gpu-node-1")["status"]["conditions"]}


def patches(api: FakeCluster) -> int:
    return api.writes().count(("PATCH", STATUS))


@pytest.fixture
def sa_dir(tmp_path: Path) -> str:
    (tmp_path / "token").write_text("sa-token\n")
    return str(tmp_path)


def snapshot_with(log: Path, nvml_gpus: int = 8, efa: int | None = None) -> Snapshot:
    snapshot = Snapshot()
    probes: list[object] = [KmsgProbe.for_path(str(log), True),
                            FakeProbe("nvml", ProbeResult(gpus=[GpuIdentity(f"0000000{i}:00:00.0", str(i))
                                                                for i in range(nvml_gpus)]))]
    if efa is not None:
        probes.append(FakeProbe("efa", ProbeResult([Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, efa)])))
    for probe in probes:
        ProbeRunner(probe, snapshot, interval=10, deadline=2).run_once()  # type: ignore[arg-type]
    return snapshot


def by_type(snapshot: Snapshot, expect: Expectations, now: float | None = None) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in evaluate(snapshot.view(), expect, 900, now)}


def test_a_healthy_node_has_every_condition_true(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 13, pid=1, name=a, app fault\n")
    got = by_type(snapshot_with(log, efa=4), Expectations(gpus=8, efa=EfaExpectation(setting=4)))
    assert list(got) == TYPES
    assert all(status == "True" for status, _, _ in got.values())


def test_fatal_xid_missing_gpu_and_host_faults_turn_conditions_false(tmp_path: Path, fixtures: Path) -> None:
    log = tmp_path / "kern.log"
    kmsg = fixtures / "kmsg"
    log.write_text((kmsg / "samples.txt").read_text() + (kmsg / "constructed.txt").read_text())
    got = by_type(snapshot_with(log, nvml_gpus=7, efa=3), Expectations(gpus=8, efa=EfaExpectation(setting=4)))
    assert got["GpuhealthGPUHealthy"][:2] == ("False", "GPUsMissing")
    assert "7 of 8 GPUs visible" in got["GpuhealthGPUHealthy"][2]
    assert "Xid 79 on GPU 00000000:05:00.0" in got["GpuhealthGPUHealthy"][2]
    assert "Xid 13" not in got["GpuhealthGPUHealthy"][2]  # application Xid: not the node's fault
    assert got["GpuhealthNVLinkHealthy"][:2] == ("False", "FatalSXid")
    assert got["GpuhealthEFAHealthy"][:2] == ("False", "EFADevicesMissing")
    assert got["GpuhealthKernelHealthy"][:2] == ("False", "KernelFault")
    for event in ("hung_task", "soft_lockup", "pcie_aer_fatal 00000000:17:00.0", "mce", "mlx5_fatal 00000000:03:00.0"):
        assert event in got["GpuhealthKernelHealthy"][2]


def test_a_kernel_log_fault_clears_once_the_window_passes(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.\n")
    snapshot = snapshot_with(log)
    assert by_type(snapshot, Expectations(gpus=8))["GpuhealthGPUHealthy"][0] == "False"
    later = time.time() + 901
    assert by_type(snapshot, Expectations(gpus=8), now=later)["GpuhealthGPUHealthy"][0] == "True"


def test_a_failing_probe_makes_the_node_unhealthy_not_healthy(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    snapshot = snapshot_with(log)
    ProbeRunner(FakeProbe("dcgm", RuntimeError("hostengine gone")), snapshot, 10, 2).run_once()
    status, reason, message = by_type(snapshot, Expectations())["GpuhealthProbesHealthy"]
    assert (status, reason) == ("False", "ProbeFailed")
    assert message == "dcgm: error (RuntimeError: hostengine gone)"


def test_conditions_are_patched_only_when_they_change(api: FakeCluster, sa_dir: str, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    writer = NodeConditionWriter(api.url, "gpu-node-1", sa_dir=sa_dir)
    healthy = evaluate(snapshot_with(log).view(), Expectations(gpus=8), 900)
    assert writer.sync(healthy) is True
    assert writer.sync(healthy) is False
    assert patches(api) == 1
    first = stored(api)
    assert first["Ready"]["status"] == "True"  # other owners' conditions untouched
    assert {t: first[t]["status"] for t in TYPES} == dict.fromkeys(TYPES, "True")

    with api.lock:  # as if the node had been healthy since long ago
        for c in api.nodes["gpu-node-1"]["status"]["conditions"]:
            c["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    with log.open("a") as f:
        f.write("[ 2.0] NVRM: Xid (PCI:0000:05:00): 48\n")
    sick = evaluate(snapshot_with(log).view(), Expectations(gpus=8), 900)
    writer = NodeConditionWriter(api.url, "gpu-node-1", sa_dir=sa_dir, clock=lambda: 1_900_000_000.0)
    assert writer.sync(sick) is True
    now = stored(api)
    assert now["GpuhealthGPUHealthy"]["lastTransitionTime"] == "2030-03-17T17:46:40Z"  # the writer's clock
    assert now["GpuhealthGPUHealthy"]["status"] == "False"
    assert now["GpuhealthGPUHealthy"]["message"] == "Xid 48 on GPU 00000000:05:00.0"
    # unchanged conditions keep their transition time
    assert now["GpuhealthKernelHealthy"]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert now["GpuhealthGPUHealthy"]["lastTransitionTime"] != "2020-01-01T00:00:00Z"


def test_a_restarted_agent_does_not_rewrite_what_the_node_already_says(
    api: FakeCluster, sa_dir: str, tmp_path: Path
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    conditions = evaluate(snapshot_with(log).view(), Expectations(), 900)
    NodeConditionWriter(api.url, "gpu-node-1", sa_dir=sa_dir).sync(conditions)
    assert NodeConditionWriter(api.url, "gpu-node-1", sa_dir=sa_dir).sync(conditions) is False
    assert patches(api) == 1


def test_api_errors_are_reported_and_retried(api: FakeCluster, sa_dir: str, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    conditions = evaluate(snapshot_with(log).view(), Expectations(), 900)
    writer = NodeConditionWriter(api.url, "gpu-node-1", sa_dir=sa_dir)
    api.fail("PATCH", STATUS, 500)
    with pytest.raises(KubeError, match="HTTP 500"):
        writer.sync(conditions)
    assert writer.sync(conditions) is True
    with pytest.raises(KubeError, match="HTTP 404"):
        NodeConditionWriter(api.url, "no-such-node", sa_dir=sa_dir).sync(conditions)
    with pytest.raises(KubeError, match="HTTP 401"):
        NodeConditionWriter(api.url, "gpu-node-1", sa_dir=str(tmp_path / "nowhere")).sync(conditions)


def test_a_fault_stays_reported_when_the_probe_that_saw_it_fails(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.\n")
    snapshot = Snapshot()
    probe = KmsgProbe.for_path(str(log), True)
    runner = ProbeRunner(probe, snapshot, interval=10, deadline=2)
    runner.run_once()
    log.unlink()  # the log becomes unreadable: the probe fails from now on
    runner.run_once()
    got = by_type(snapshot, Expectations())
    assert got["GpuhealthGPUHealthy"][:2] == ("False", "FatalXid")
    assert got["GpuhealthProbesHealthy"][:2] == ("False", "ProbeFailed")


def test_a_condition_whose_probes_fail_without_a_fault_is_unknown_not_true(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    snapshot = snapshot_with(log)
    ProbeRunner(FakeProbe("nvml", RuntimeError("NVML call hung")), snapshot, 10, 2).run_once()
    ProbeRunner(FakeProbe("efa", ProbeResult([Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, 4)])), snapshot, 10,
                2).run_once()
    got = by_type(snapshot, Expectations(gpus=8, efa=EfaExpectation(setting=4)))
    assert got["GpuhealthGPUHealthy"] == ("Unknown", "ProbeFailed", "cannot tell: probe nvml failing")
    assert got["GpuhealthNVLinkHealthy"][0] == "Unknown"
    assert got["GpuhealthEFAHealthy"][0] == "True"
    assert got["GpuhealthKernelHealthy"][0] == "True"


def test_the_served_agent_learns_its_instance_type_from_its_node(api: FakeCluster, tmp_path: Path) -> None:
    import os
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with api.lock:
        api.nodes["gpu-node-1"]["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "p5.48xlarge"
    # the agent runs outside a pod here: its service-account token is where --service-account-dir says
    (tmp_path / "sa").mkdir()
    (tmp_path / "sa" / "token").write_text("sa-token\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "kern.log"
    log.write_text("")
    exe = shutil.which("gpuhealth-exporter", path=str(Path(sys.executable).parent))
    assert exe
    proc = process_tree.spawn([exe, "--listen", f"127.0.0.1:{port}", "--kmsg-file", str(log), "--node", "gpu-node-1",
                             "--kube-api", api.url, "--service-account-dir", str(tmp_path / "sa"),
                             "--state-file", str(tmp_path / "s.json"), "--disable", "nvml,dcgm,diag,efa"],
                            stderr=subprocess.DEVNULL,
                            env={k: v for k, v in os.environ.items() if k != "INSTANCE_TYPE"})
    try:
        body = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "gpuhealth_gpus_expected 8.0" not in body:
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        assert "gpuhealth_gpus_expected 8.0" in body
        # a p5.48xlarge can take 32 EFA interfaces: an upper bound, not what this node was given (nothing says)
        assert "gpuhealth_efa_devices_max 32.0" in body and "gpuhealth_efa_devices_expected" not in body
    finally:
        proc.terminate()
        proc.wait(10)
