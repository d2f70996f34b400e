"""What the remediator's reset sequence meets on a GPU node, played at the API boundary (the fake API server): the GPU
Operator's DaemonSet controller, whose operand pods go when their nvidia.com/gpu.deploy.<operand> label is not "true"
and come back when it is again, and gpuhealth's exporter, whose answer to a reset request (as to everything else it
sees) is the node condition it writes."""

from __future__ import annotations

from collections.abc import Mapping

from gpuhealth.remediator.decide.nodestate import RESET_REQUEST_ANNOTATION
from tests.fakes.apiserver import FakeCluster, Obj

OPERATOR_NS = "gpu-operator"
# The operands as the GPU Operator labels a GPU node (nvidia.com/gpu.deploy.<operand>) and the app label of each
# one's DaemonSet pods; the driver and the toolkit are not GPU clients and are never paused.
OPERAND_PODS = {"device-plugin": "nvidia-device-plugin-daemonset", "gpu-feature-discovery": "gpu-feature-discovery",
                "dcgm-exporter": "nvidia-dcgm-exporter", "dcgm": "nvidia-dcgm"}
PAUSED = "paused-for-gpu-reset"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."


def label(operand: str) -> str:
    return f"{DEPLOY_LABEL_PREFIX}{operand}"


def deploy_labels(c: FakeCluster, node: str) -> dict[str, str]:
    """The node's nvidia.com/gpu.deploy.* labels, keys in full."""
    return {k: v for k, v in c.node(node)["metadata"]["labels"].items() if k.startswith(DEPLOY_LABEL_PREFIX)}


def start_operand_pods(c: FakeCluster, node: str, operands: Mapping[str, str] = OPERAND_PODS) -> None:
    for app in operands.values():
        c.add_pod(node, f"{app}-{node}", namespace=OPERATOR_NS, labels={"app": app}, owner_kind="DaemonSet")


def exporter_says(c: FakeCluster, node: str, reason: str = "ProbesHealthy", message: str = "every probe answered",
                  ctype: str = "GpuhealthProbesHealthy") -> None:
    """gpuhealth's exporter writes its condition `ctype` (replacing its last one)."""
    def change(n: Obj) -> None:
        conditions = [x for x in n["status"]["conditions"] if x["type"] != ctype]
        conditions.append({"type": ctype, "status": "True", "reason": reason, "message": message})
        n["status"]["conditions"] = conditions
    c.update_node(node, change)


def operator_node(c: FakeCluster, name: str = "gpu-1", pool: str = "gpu", **labels: str) -> None:
    """A GPU Operator node: every operand deployed ("true"), its pods running, and gpuhealth's exporter's condition."""
    c.add_node(name, pool=pool, labels={**{label(op): "true" for op in OPERAND_PODS}, label("driver"): "true",
                                        **labels})
    start_operand_pods(c, name)
    exporter_says(c, name)


def daemonset_controller(c: FakeCluster, node: str, operands: Mapping[str, str] = OPERAND_PODS) -> None:
    """What the GPU Operator's DaemonSets do: an operand's pod goes when its label is not "true", and comes back
    when it is again."""
    labels = c.node(node)["metadata"]["labels"]
    for op, app in operands.items():
        running = (OPERATOR_NS, f"{app}-{node}") in c.pods
        if labels.get(label(op)) != "true" and running:
            with c.lock:
                c._emit("pods", c.pods.pop((OPERATOR_NS, f"{app}-{node}")), None, deleted=True)
        elif labels.get(label(op)) == "true" and not running:
            c.add_pod(node, f"{app}-{node}", namespace=OPERATOR_NS, labels={"app": app}, owner_kind="DaemonSet")


def release_for_reset(c: FakeCluster, node: str) -> None:
    """The operands' pods go and the exporter answers the node's reset request, as each does on its own."""
    daemonset_controller(c, node)
    request = c.annotations(node)[RESET_REQUEST_ANNOTATION]
    exporter_says(c, node, "ReleasedForGPUReset", f"released NVML and paused DCGM for GPU reset request {request}")
