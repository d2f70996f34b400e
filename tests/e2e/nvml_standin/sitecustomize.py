"""The e2e's NVML stand-in for one simulated node's exporter (tests/e2e/stack.py, NodeOptions.mig): this directory
is on that process's PYTHONPATH only, and with GPUHEALTH_E2E_NVML naming a JSON list of GPUs (uuid, bus_id, and the
MIG devices: slot, gpu_instance, compute_instance, profile, uuid), `import pynvml` in that process answers with
tests/fakes/nvml.py's FakeNvml over them: pynvml's own constants and exception classes, only the hardware faked.
The exporter's NVML probe runs unchanged. Without the variable nothing happens."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

_SPEC = os.environ.get("GPUHEALTH_E2E_NVML")
if _SPEC:
    sys.path.append(str(Path(__file__).resolve().parents[3]))  # the repository: tests.fakes.nvml, after everything
    import pynvml

    from tests.fakes.nvml import FakeGpu, FakeMig, FakeNvml

    _gpus = []
    for _g in json.loads(Path(_SPEC).read_text()):
        _migs = [FakeMig(**m) for m in _g.get("mig") or []]
        _mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE) if _migs else None
        _gpus.append(FakeGpu(_g["uuid"], _g["bus_id"], mig_mode=_mode, mig_devices=_migs))
    sys.modules["pynvml"] = FakeNvml(_gpus)
