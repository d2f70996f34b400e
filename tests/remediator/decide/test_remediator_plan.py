"""`gpuhealth-remediator plan`: the decisions serve would make, from kubectl JSON and webhook bodies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.remediator.cli import main
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import FIXTURES, T0, Harness, webhook


def _write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, str]]:
    assert main(["plan", *args, "--now", "2026-12-02T10:00:30Z"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_plan_prints_every_action_serve_would_start_now(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster() as cluster:
        for i in range(10):  # budgets: 2 cordoned, 1 disrupted
            cluster.add_node(f"gpu-{i}")
        cluster.add_pod("gpu-1", "train-0", gpus=8)
        nodes = _write(tmp_path, "nodes.json", {"kind": "List", "items": list(cluster.nodes.values())})
        pods = _write(tmp_path, "pods.json", {"kind": "List", "items": list(cluster.pods.values())})
        bodies = [_write(tmp_path, "a.json", webhook("gpu-1", "reboot")),
                  _write(tmp_path, "b.json", webhook("gpu-2", "reset_gpu", gpu="00000000:9B:00.0")),
                  _write(tmp_path, "c.json", webhook("gpu-99", "cordon"))]
        lines = _run(capsys, "--nodes", nodes, "--pods", pods, "--alerts", *bodies)
        assert [(x["node"], x["action"], x["decision"]) for x in lines] == [
            ("gpu-1", "cordon", "execute"), ("gpu-1", "drain", "execute"),
            ("gpu-2", "cordon", "execute"), ("gpu-2", "drain", "deferred"),
            ("gpu-99", "none", "skipped")]
        assert set(lines[0]) == {"node", "action", "decision", "reason"}
        assert "disruption budget of pool gpu in use (1/1)" in lines[3]["reason"]

        # serve, on the same cluster and webhooks, takes the same decisions (dry run: nothing changes)
        h = Harness(cluster, dry_run=True)
        h.now = T0.replace(second=30)
        for body in bodies:
            h.post(Path(body).read_text())
        served = [(d.node, d.action, d.decision) for d in h.decided(h.step())]
        assert served == [(x["node"], x["action"], x["decision"]) for x in lines if x["node"] != "gpu-99"]


def test_plan_reads_the_real_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = _write(tmp_path, "nodes.json", {"kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {}}, "spec": {}, "status": {}}]})
    policy = tmp_path / "p.yaml"
    policy.write_text("alert_labels: {remediation: action}\n")
    lines = _run(capsys, "--nodes", nodes, "--alerts", str(FIXTURES / "webhook_firing_v4.json"),
                 "--policy", str(policy))
    assert lines == [{"node": "gpu-node-1", "action": "cordon", "decision": "execute",
                      "reason": "alert asks for cordon"}]
    lines = _run(capsys, "--nodes", nodes, "--alerts", str(FIXTURES / "webhook_firing_v4.json"),
                 str(FIXTURES / "webhook_resolved_v4.json"), "--policy", str(policy))
    assert lines == [{"node": "gpu-node-1", "action": "none", "decision": "skipped",
                      "reason": "alerts resolved before any action"}]


def test_plan_rejects_a_bad_policy_with_file_key_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("budget:\n  max_cordoned: many\n")
    code = main(["plan", "--nodes", "x", "--alerts", "y", "--policy", str(policy)])
    assert code == 2
    assert f"{policy}: budget.max_cordoned (line 2)" in capsys.readouterr().err


def test_plan_rejects_a_malformed_webhook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = _write(tmp_path, "nodes.json", {"items": []})
    bad = _write(tmp_path, "bad.json", {"version": "4", "status": "firing"})
    assert main(["plan", "--nodes", nodes, "--alerts", bad]) == 2
    assert "missing 'alerts'" in capsys.readouterr().err


def test_plan_without_pods_treats_them_as_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = _write(tmp_path, "nodes.json", {"kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "gpu-1", "labels": {}}, "spec": {}, "status": {}}]})
    body = _write(tmp_path, "a.json", webhook("gpu-1", "reboot"))
    lines = _run(capsys, "--nodes", nodes, "--alerts", body)
    assert [(x["action"], x["decision"]) for x in lines] == [("cordon", "execute"), ("drain", "deferred")]
    assert lines[1]["reason"] == "pods unknown — pass --pods"


def test_plan_reads_the_breaker_state_from_the_lease(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = _write(tmp_path, "nodes.json", {"kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": f"gpu-{i}", "labels": {"karpenter.sh/nodepool": "gpu"}},
         "spec": {}, "status": {}} for i in range(10)]})
    pods = _write(tmp_path, "pods.json", {"items": []})
    body = _write(tmp_path, "a.json", webhook("gpu-1", "drain"))
    trips = {"gpuhealth.io/breaker-trips": json.dumps({"gpu": "2026-12-02T09:50:00Z"})}
    lease = _write(tmp_path, "lease.json", {"kind": "Lease", "spec": {},
                                            "metadata": {"name": "gpuhealth-remediator", "annotations": trips}})
    lines = _run(capsys, "--nodes", nodes, "--pods", pods, "--alerts", body, "--lease", lease)
    assert [(x["action"], x["decision"]) for x in lines] == [("cordon", "execute"), ("drain", "deferred")]
    assert "circuit breaker open" in lines[1]["reason"]
    lines = _run(capsys, "--nodes", nodes, "--pods", pods, "--alerts", body)  # without it: as if closed
    assert [(x["action"], x["decision"]) for x in lines] == [("cordon", "execute"), ("drain", "execute")]


@pytest.mark.parametrize("content", ["{not json", '{"kind": "List", "items": [1]}', '"pods"'])
def test_plan_names_a_bad_pods_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    nodes = _write(tmp_path, "nodes.json", {"items": []})
    pods = tmp_path / "pods.json"
    pods.write_text(content)
    body = _write(tmp_path, "a.json", webhook("gpu-1", "reboot"))
    assert main(["plan", "--nodes", nodes, "--pods", str(pods), "--alerts", body]) == 2
    assert f"error: {pods}:" in capsys.readouterr().err


def test_plan_with_resourceslices_quarantines_the_gpu_and_names_the_pods_it_affects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU-scoped alert on a node whose GPUs a DRA driver publishes: a quarantine_gpu row with the devices,
    the taint's effect and the pods, and no node cordon while the GPU scope holds; serve decides the same."""
    with FakeCluster() as cluster:
        cluster.add_node("gpu-1")
        devices = cluster.dra.publish_gpus("gpu-1")
        for d in devices:
            cluster.add_pod("gpu-1", f"train-{d['name']}")
            cluster.dra.add_claim("default", f"c-{d['name']}", [("gpu.nvidia.com", "gpu-1", d["name"])],
                                  [f"train-{d['name']}"])
        bus = f"0000{devices[4]['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper()
        nodes = _write(tmp_path, "nodes.json", {"kind": "List", "items": list(cluster.nodes.values())})
        pods = _write(tmp_path, "pods.json", {"kind": "List", "items": list(cluster.pods.values())})
        slices = _write(tmp_path, "slices.json", {"kind": "List", "items": list(cluster.dra.slices.values())})
        claims = _write(tmp_path, "claims.json", {"kind": "List", "items": list(cluster.dra.claims.values())})
        body = _write(tmp_path, "a.json", webhook("gpu-1", "drain", gpu=bus))
        lines = _run(capsys, "--nodes", nodes, "--pods", pods, "--alerts", body, "--resourceslices", slices,
                     "--resourceclaims", claims)
        assert [(x["action"], x["decision"], x.get("effect")) for x in lines] == [
            ("quarantine_gpu", "execute", "NoSchedule"), ("quarantine_gpu", "execute", "NoExecute")]
        assert all(x["devices"] == ["gpu-4"] and x["pods"] == ["default/train-gpu-4"] for x in lines)

        node_scope = _run(capsys, "--nodes", nodes, "--pods", pods, "--alerts", body, "--resourceslices", slices,
                          "--resourceclaims", claims, "--device-taint-api", "none")
        assert node_scope[0]["action"] == "cordon"
        assert "the cluster serves no DeviceTaintRule" in node_scope[0]["reason"]

        unknown = _run(capsys, "--nodes", nodes, "--pods", pods, "--alerts", body, "--resourceslices", slices)
        assert [(x["action"], x["decision"]) for x in unknown] == [("quarantine_gpu", "execute"),
                                                                 ("quarantine_gpu", "deferred")]
        assert "pods unknown" in unknown[1]["reason"]  # without the claims, nobody knows who holds the GPU

        h = Harness(cluster, dry_run=True)
        h.now = T0.replace(second=30)
        h.post(Path(body).read_text())
        served = [(d.action, d.decision, d.effect, d.devices, d.pods) for d in h.decided(h.step())]
        assert served == [(x["action"], x["decision"], x["effect"], tuple(x["devices"]), tuple(x["pods"]))
                          for x in lines]


def test_plan_quarantines_only_the_mig_instance_an_alert_names(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """An Xid alert on one MIG instance (its mig_uuid) that asks for drain: the quarantine_gpu rows name that MIG
    device and the one pod on it, not the GPU's other instances; asking for a reset, every instance and its pod."""
    with FakeCluster() as cluster:
        cluster.add_node("gpu-1")
        gpus, migs = cluster.dra.publish_mig_gpus("gpu-1", "gpu-1")
        for d in migs:
            cluster.add_pod("gpu-1", f"infer-{d['name']}")
            cluster.dra.add_claim("default", f"c-{d['name']}", [("gpu.nvidia.com", "gpu-1", d["name"])],
                                  [f"infer-{d['name']}"])
        parent = next(g for g in gpus if g["name"] == "gpu-1")
        bus = f"0000{parent['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper()
        uuid = migs[2]["attributes"]["uuid"]["string"]
        files = ["--nodes", _write(tmp_path, "nodes.json", {"kind": "List", "items": list(cluster.nodes.values())}),
                 "--pods", _write(tmp_path, "pods.json", {"kind": "List", "items": list(cluster.pods.values())}),
                 "--resourceslices", _write(tmp_path, "slices.json",
                                            {"kind": "List", "items": list(cluster.dra.slices.values())}),
                 "--resourceclaims", _write(tmp_path, "claims.json",
                                            {"kind": "List", "items": list(cluster.dra.claims.values())})]
    labels = {"pci_bus_id": bus, "gpu_instance": "08", "mig_uuid": uuid, "max_rung": "drain"}
    drain = _run(capsys, *files, "--alerts", _write(tmp_path, "a.json", webhook("gpu-1", "drain", gpu=bus,
                                                                                labels=labels)))
    assert [(x["action"], x["decision"], x["effect"], x["devices"], x["pods"]) for x in drain] == [
        ("quarantine_gpu", "execute", "NoSchedule", [migs[2]["name"]], [f"default/infer-{migs[2]['name']}"]),
        ("quarantine_gpu", "execute", "NoExecute", [migs[2]["name"]], [f"default/infer-{migs[2]['name']}"])]
    reset = _run(capsys, *files, "--alerts", _write(tmp_path, "b.json", webhook("gpu-1", "reset_gpu", gpu=bus,
                                                                                labels=labels)))
    assert reset[0]["action"] == "quarantine_gpu"
    assert reset[0]["devices"] == ["gpu-1", *sorted(m["name"] for m in migs)]
    assert sorted(reset[0]["pods"]) == sorted(f"default/infer-{m['name']}" for m in migs)
