"""The reset_gpu rung's sequence: stop the node's GPU clients, reset, restore them. Pure functions of a view.

`nvidia-smi --gpu-reset` fails while any process holds the GPU open ("In use by another client"). On a node with
the NVIDIA GPU Operator those are its operands (device plugin, gpu-feature-discovery, DCGM, dcgm-exporter, NVSM),
which the Operator runs only where their `nvidia.com/gpu.deploy.<operand>` label is "true", and gpuhealth's own
exporter (NVML, DCGM). So the rung:

1. stopping: sets each of those labels that is "true" to the policy's pause value (the Operator removes the pods)
   and annotates the node with gpuhealth.io/gpu-reset-request (the exporter lets go of NVML and answers on its
   GpuhealthProbesHealthy condition), in the same write as the state;
2. resetting: once no such pod is left on the node and the exporter answered, the reset Job runs (it checks the
   GPU came back with the same UUID, and runs a short DCGM diagnostic where its image has DCGM);
3. whatever ends the rung (the Job's success or failure, the rung's timeout, the episode closing, the alerts no
   longer asking for it before the Job began: "not needed", back at the drain, no climb) restores exactly the labels
   it paused and removes the annotation (gpuhealth/remediator/decide/node_patches.py).
"""

from __future__ import annotations

from gpuhealth.contract.names import EXPORTER_CONDITION
from gpuhealth.remediator.decide.nodestate import ALL_GPUS, RELEASED_REASON, NodeState
from gpuhealth.remediator.decide.views import NodeView
from gpuhealth.remediator.policy import Policy


def operands_to_pause(view: NodeView, policy: Policy) -> tuple[str, ...]:
    """The operand labels of this node that are "true": the ones gpuhealth pauses (and so restores)."""
    return tuple(op.label for op in policy.reset.operands if view.labels.get(op.label) == "true")


def reset_target(view: NodeView, policy: Policy, gpu: str) -> str:
    """The GPU one reset takes: the faulty one, or every GPU where they cannot be reset alone (reset.scope)."""
    return ALL_GPUS if policy.reset.resets_whole_node(view.labels) else gpu


def still_holding(view: NodeView, state: NodeState, policy: Policy) -> list[str]:
    """What still holds the node's GPUs open before the reset may start; [] when nothing does."""
    left = [f"pod {name}" for name in view.gpu_clients]
    if policy.reset.wait_for_exporter and view.exporter_condition is not None:
        message = str(view.exporter_condition.get("message") or "")
        # the exporter's message ends with the request it answers (gpuhealth/exporter/gpu_reset.py): this one, not
        # another
        request = state.reset_request
        released = view.exporter_condition.get("reason") == RELEASED_REASON and request is not None and \
            message.endswith(f" {request}")
        if not released:
            left.append(f"gpuhealth's exporter ({EXPORTER_CONDITION} not yet {RELEASED_REASON} for {request})")
    return left
