"""Names both programs use on a Node: one writes, the other reads."""

from __future__ import annotations

# The exporter's own condition on its Node (gpuhealth/exporter/condition_types.py): the remediator reads it to know the
# exporter runs there, and for the GPU reset's acknowledgement.
EXPORTER_CONDITION = "GpuhealthProbesHealthy"
# While the node's GPU clients stop for a reset, the remediator sets this annotation (value: the request, the reset
# Job's name and the rung's start) to ask the exporter to release NVML and pause DCGM (gpuhealth/exporter/gpu_reset.py)
# ...
GPU_RESET_REQUEST_ANNOTATION = "gpuhealth.io/gpu-reset-request"
# ... and the exporter answers with this reason on EXPORTER_CONDITION once it let go.
RELEASED_FOR_GPU_RESET = "ReleasedForGPUReset"
