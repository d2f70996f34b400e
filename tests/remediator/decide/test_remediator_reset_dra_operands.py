"""The reset sequence on a node where the GPU Operator runs in DRA mode (a GPUCluster: NVIDIA's DRA driver for GPUs
instead of the device plugin). Its DCGM and dcgm-exporter run under deploy labels of their own
(nvidia.com/gpu.deploy.dcgm-dra, .dcgm-exporter-dra; NVIDIA/gpu-operator controllers/state_manager.go) and hold the GPU
as the device-plugin mode's do: the reset pauses them and restores them. The DRA kubelet plugin (dra-driver) and the DRA
validator stay: the plugin must outlive the pods whose claims it unprepares. Labels "false" or absent are left alone.
The GPU Operator's DaemonSet controller is played at the API boundary (tests/fakes/gpu_operator.py)."""

from __future__ import annotations

from tests.fakes.apiserver import FakeCluster
from tests.fakes.gpu_operator import (
    DEPLOY_LABEL_PREFIX,
    OPERATOR_NS,
    PAUSED,
    daemonset_controller,
    deploy_labels,
    label,
    start_operand_pods,
)
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
return_to_service: {healthy_delay: 10m}
"""
GPU = "00000000:86:00.0"
# DRA mode's operands on a GPU node, with their pods' app label (manifests/state-dcgm, state-dcgm-exporter,
# state-dra-driver, state-dra-validation in NVIDIA/gpu-operator)
DRA_OPERANDS = {"dcgm-dra": "nvidia-dcgm-dra", "dcgm-exporter-dra": "nvidia-dcgm-exporter-dra",
                "dra-driver": "nvidia-dra-driver-kubelet-plugin", "dra-validator": "nvidia-operator-validator"}


def _dra_node(c: FakeCluster, name: str = "gpu-1") -> None:
    c.add_node(name, labels={**{label(op): "true" for op in DRA_OPERANDS}, label("driver"): "true",
                             label("device-plugin"): "false"})
    start_operand_pods(c, name, DRA_OPERANDS)


def _deploy_labels(c: FakeCluster, node: str = "gpu-1") -> dict[str, str]:
    return {k.removeprefix(DEPLOY_LABEL_PREFIX): v for k, v in deploy_labels(c, node).items()}


def test_a_dra_mode_nodes_dcgm_operands_are_paused_for_the_reset_and_restored_after() -> None:
    with FakeCluster() as cluster:
        _dra_node(cluster)
        h = Harness(cluster, POLICY)
        h.fire("gpu-1", "reset_gpu", gpu=GPU)
        assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute"), ("gpu-1", "drain", "execute"),
                                         ("gpu-1", "stop_gpu_clients", "execute")]
        assert set(h.state("gpu-1").reset.paused) == {label("dcgm-dra"), label("dcgm-exporter-dra")}
        assert _deploy_labels(cluster) == {"dcgm-dra": PAUSED, "dcgm-exporter-dra": PAUSED, "dra-driver": "true",
                                           "dra-validator": "true", "driver": "true", "device-plugin": "false"}
        assert not cluster.jobs

        h.advance(seconds=10)  # DCGM still holds the GPU: no reset under it
        (waiting,) = h.decided(h.step())
        assert (waiting.action, waiting.decision) == ("reset_gpu", "deferred")
        assert "nvidia-dcgm-dra-gpu-1" in waiting.reason and not cluster.jobs

        daemonset_controller(cluster, "gpu-1", DRA_OPERANDS)
        assert (OPERATOR_NS, "nvidia-dra-driver-kubelet-plugin-gpu-1") in cluster.pods  # the kubelet plugin stays
        h.advance(seconds=10)
        assert h.decisions(h.step()) == [("gpu-1", "reset_gpu", "execute")]

        (job,) = cluster.jobs
        cluster.jobs[job]["status"] = {"succeeded": 1}
        h.advance(seconds=30)
        h.step()
        assert _deploy_labels(cluster) == {"dcgm-dra": "true", "dcgm-exporter-dra": "true", "dra-driver": "true",
                                           "dra-validator": "true", "driver": "true", "device-plugin": "false"}
        assert h.state("gpu-1").reset.paused == ()
        assert "GPUClientsRestored" in cluster.reasons("gpu-1")
