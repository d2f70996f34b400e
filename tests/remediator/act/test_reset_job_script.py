"""The reset Job's script, run by bash as the Job runs it (the rendered manifest's command), against stand-ins for
nvidia-smi, dcgmi and nv-hostengine on PATH: the one boundary a machine without a GPU cannot have."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuhealth.remediator.act.node_jobs import render_job
from gpuhealth.remediator.policy import Policy

GPU = "00000000:86:00.0"
UUID = "GPU-8b1b4b1c-6a5f-2c3e-9f1d-4e2a7b9c0d11"

# nvidia-smi as far as the script uses it: --query-gpu (pci.bus_id,uuid | index) and --gpu-reset, optionally -i.
# The GPU's UUID after the reset is read from $FAKE/uuid_after once a reset happened; $FAKE/reset_fails fails it.
FAKE_NVIDIA_SMI = r"""#!/bin/bash
echo "nvidia-smi $*" >> "$FAKE/calls"
case "$*" in
  *--gpu-reset*)
    [ -e "$FAKE/reset_fails" ] && { echo "Unable to reset GPU: In use by another client" >&2; exit 255; }
    touch "$FAKE/was_reset"; exit 0 ;;
  *--query-gpu=index*) echo 3; exit 0 ;;
  *--query-gpu=pci.bus_id,uuid*)
    uuid="$(cat "$FAKE/uuid")"
    if [ -e "$FAKE/was_reset" ]; then
      [ -e "$FAKE/gone_after" ] && { echo "No devices were found" >&2; exit 6; }
      [ -e "$FAKE/uuid_after" ] && uuid="$(cat "$FAKE/uuid_after")"
    fi
    echo "00000000:86:00.0, $uuid"; exit 0 ;;
esac
exit 2
"""
FAKE_DCGMI = r"""#!/bin/bash
echo "dcgmi $*" >> "$FAKE/calls"
[ -e "$FAKE/diag_fails" ] && exit 226
exit 0
"""
FAKE_HOSTENGINE = r"""#!/bin/bash
echo "nv-hostengine $*" >> "$FAKE/calls"
"""


def _tool(bin_dir: Path, name: str, text: str) -> None:
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)


def _run(tmp_path: Path, gpu: str = GPU, dcgm: bool = False, **state: bool | str) -> tuple[int, str, list[str]]:
    fake, bin_dir = tmp_path / "fake", tmp_path / "bin"
    fake.mkdir()
    bin_dir.mkdir()
    (fake / "uuid").write_text(UUID)
    for name, value in state.items():
        (fake / name).write_text(value if isinstance(value, str) else "")
    _tool(bin_dir, "nvidia-smi", FAKE_NVIDIA_SMI)
    if dcgm:
        _tool(bin_dir, "dcgmi", FAKE_DCGMI)
        _tool(bin_dir, "nv-hostengine", FAKE_HOSTENGINE)
    job = render_job("reset_gpu", "gpuhealth-reset-n1-abc", "n1", Policy(), gpu)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["bash", "-c"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE": str(fake)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=False)
    calls = (fake / "calls").read_text().splitlines() if (fake / "calls").exists() else []
    return done.returncode, done.stdout + done.stderr, calls


def test_a_reset_that_brings_the_gpu_back_with_its_uuid_succeeds(tmp_path: Path) -> None:
    status, out, calls = _run(tmp_path)
    assert status == 0, out
    assert f"nvidia-smi --gpu-reset -i {GPU}" in calls
    assert "same UUID" in out and UUID in out and "no diagnostic" in out


def test_an_empty_gpu_resets_every_gpu_of_the_node(tmp_path: Path) -> None:
    status, out, calls = _run(tmp_path, gpu="all")
    assert status == 0, out
    assert "nvidia-smi --gpu-reset" in calls and not any("-i" in c for c in calls)


@pytest.mark.parametrize(("state", "status", "said"), [
    ({"reset_fails": True}, 3, "nvidia-smi --gpu-reset failed"),
    ({"uuid_after": "GPU-00000000-0000-0000-0000-000000000000"}, 4, "came back different"),
    ({"gone_after": True}, 4, "not visible after the reset"),
])
def test_a_reset_that_fails_or_brings_back_another_gpu_fails_the_job(tmp_path: Path, state: dict[str, bool | str],
                                                                     status: int, said: str) -> None:
    got, out, _ = _run(tmp_path, **state)
    assert got == status and said in out, out


def test_where_the_image_has_dcgm_a_short_diagnostic_must_pass(tmp_path: Path) -> None:
    status, out, calls = _run(tmp_path, dcgm=True)
    assert status == 0, out
    assert "dcgmi diag -r 1 -i 3" in calls  # the GPU's index, as DCGM numbers GPUs
    assert calls.index("dcgmi diag -r 1 -i 3") > calls.index(f"nvidia-smi --gpu-reset -i {GPU}")
    assert calls[-1] == "nv-hostengine -t"  # its own host engine, stopped again
    failed = tmp_path / "failed"
    failed.mkdir()
    status, out, _ = _run(failed, dcgm=True, diag_fails=True)
    assert status == 5 and "dcgmi diag -r 1 failed" in out


def test_a_gpu_that_cannot_be_listed_is_never_reset(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    job = render_job("reset_gpu", "gpuhealth-reset-n1-abc", "n1", Policy(), GPU)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    _tool(fake_bin, "nvidia-smi", "#!/bin/bash\necho \"$*\" >> \"$FAKE\"\nexit 9\n")
    log = tmp_path / "calls"
    done = subprocess.run(command, env={"PATH": f"{fake_bin}:/usr/bin:/bin", "FAKE": str(log)},
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and "--gpu-reset" not in log.read_text()
    assert os.path.basename(command[3]) == "gpuhealth-reset"  # $0 in the Job's log lines
