"""The node condition types the exporter writes on its Node (True = healthy), each named once.

The probe registry (gpuhealth/exporter/probes/registry.py) says which probes feed each, a kernel-log pattern
(gpuhealth/exporter/data/kernel_patterns.yaml, `condition:`) which one its match sets, and
gpuhealth/exporter/conditions.py how each is judged. The remediator alone writes the Karpenter-watched types; these are
gpuhealth's own.
"""

from __future__ import annotations

from gpuhealth.contract.names import EXPORTER_CONDITION

GPU = "GpuhealthGPUHealthy"
NVLINK = "GpuhealthNVLinkHealthy"
EFA = "GpuhealthEFAHealthy"
KERNEL = "GpuhealthKernelHealthy"
PROBES = EXPORTER_CONDITION

# The conditions a fault on the node sets False, in the order they are written; GpuhealthProbesHealthy,
# written last, is about the probes themselves.
FAULTS = (GPU, NVLINK, EFA, KERNEL)
ALL = (*FAULTS, PROBES)
