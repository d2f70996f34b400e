# The reset Job's script (templates/reset_gpu.yaml.j2 runs it with bash -c; $1 is the GPU's PCI bus id, or empty
# for every GPU of the node). It runs once the node's GPU clients have stopped (gpuhealth/remediator/decide/reset.py).
# Exit status: 0 reset and back; 2 the GPU cannot be listed before the reset; 3 nvidia-smi --gpu-reset failed;
# 4 the GPU is not back, or not with the same UUID; 5 the DCGM diagnostic failed. Anything but 0 fails the rung.
set -u
gpu="${1:-}"
select=()
if [ -n "$gpu" ]; then select=(-i "$gpu"); fi
say() { echo "gpuhealth-reset: $*"; }
query() { nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader "${select[@]}"; }

before="$(query)" || { say "cannot list GPU ${gpu:-(all)} before the reset"; exit 2; }
say "resetting: ${before//$'\n'/; }"
nvidia-smi --gpu-reset "${select[@]}" || { say "nvidia-smi --gpu-reset failed"; exit 3; }
after="$(query)" || { say "GPU ${gpu:-(all)} is not visible after the reset"; exit 4; }
if [ "$before" != "$after" ]; then
  say "GPU came back different: ${after//$'\n'/; } (was ${before//$'\n'/; })"
  exit 4
fi

# A short diagnostic where the image has DCGM: the node's DCGM is paused for the reset, so a host engine of our own.
if command -v dcgmi >/dev/null 2>&1 && command -v nv-hostengine >/dev/null 2>&1; then
  ids="$(nvidia-smi --query-gpu=index --format=csv,noheader "${select[@]}" | paste -sd, -)"
  nv-hostengine >/dev/null 2>&1 || true  # one may already answer: dcgmi then uses it
  dcgmi diag -r 1 -i "$ids"
  status=$?
  nv-hostengine -t >/dev/null 2>&1 || true
  if [ "$status" -ne 0 ]; then say "dcgmi diag -r 1 failed on GPU $ids (status $status)"; exit 5; fi
  say "dcgmi diag -r 1 passed on GPU $ids"
else
  say "no DCGM in this image (jobs.image): same UUID checked, no diagnostic"
fi
say "back with the same UUID: ${after//$'\n'/; }"
