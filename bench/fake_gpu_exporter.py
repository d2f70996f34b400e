"""`gpuhealth-exporter` on a node with N healthy H100s that exist only in NVML's Python bindings.

The GPUs are faked where the tests fake them (tests/fakes/nvml.py: pynvml's own constants, error
classes and ctypes structures, only the hardware answers are made up); everything else is the real
exporter process. What it cannot show is the NVIDIA driver's own time inside each NVML call.

    .venv/bin/python bench/fake_gpu_exporter.py --gpus 8 -- --listen 127.0.0.1:9842 ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuhealth.exporter import cli
from tests.fakes.nvml import FakeGpu, FakeNvml


class _Discard(list[tuple[int, str]]):
    """FakeNvml records every call for the tests to inspect; a long-running exporter must not grow with it."""

    def append(self, item: tuple[int, str]) -> None:
        pass


def fake_nvml(gpus: int) -> FakeNvml:
    nvml = FakeNvml([FakeGpu(f"GPU-8c1f2a3b-0000-4000-8000-{i:012x}", f"00000000:{0x10 + i:02X}:00.0")
                     for i in range(gpus)])
    nvml.calls = _Discard()
    return nvml


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, required=True, help="how many GPUs NVML reports")
    parser.add_argument("exporter_args", nargs=argparse.REMAINDER, help="-- then gpuhealth-exporter's arguments")
    args = parser.parse_args()
    rest = args.exporter_args[1:] if args.exporter_args[:1] == ["--"] else args.exporter_args
    sys.modules["pynvml"] = fake_nvml(args.gpus)  # what `import pynvml` in the NVML probe will find
    return cli.main(rest)


if __name__ == "__main__":
    sys.exit(main())
