# The diagnostic Job's collect step (diagnose.yaml.j2, init container `collect`, in policy diagnose.image): runs the
# tools and writes, per tool, <name>.out, <name>.err and <name>.rc (124: stopped by its timeout; 127: not found), or
# <name>.absent, to /diag for the judge (gpuhealth/exporter/diagnose). It always exits 0: a tool that fails is the judge's
# evidence, not this step's failure. Arguments: the dcgmi diag level, then seconds for dcgmi diag and for the
# all-reduce.
set -u
level="$1"
dcgm_seconds="$2"
nccl_seconds="$3"
out=/diag

run() {  # run NAME SECONDS COMMAND...
  local name="$1" seconds="$2"
  shift 2
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "$1: not found" >"$out/$name.err"
    echo 127 >"$out/$name.rc"
    return
  fi
  timeout --kill-after=10 "$seconds" "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo "$?" >"$out/$name.rc"
}

run gpus 60 nvidia-smi --query-gpu=index,uuid,name,pci.bus_id --format=csv,noheader
gpus=$(grep -c '^[0-9]' "$out/gpus.out" 2>/dev/null)
gpus=${gpus:-0}

# dcgmi talks to a host engine: this pod's own (the node's, if the GPU Operator runs one, is left alone)
if command -v nv-hostengine >/dev/null 2>&1; then
  nv-hostengine -f "$out/hostengine.log" >/dev/null 2>&1 || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    dcgmi discovery -l >/dev/null 2>&1 && break
    sleep 1
  done
fi
run dcgm "$dcgm_seconds" dcgmi diag -r "$level" -j
nv-hostengine -t >/dev/null 2>&1 || true

if command -v all_reduce_perf >/dev/null 2>&1; then
  run nccl "$nccl_seconds" all_reduce_perf -b 1G -e 8G -f 2 -g "$gpus"
else
  : >"$out/nccl.absent"
fi
exit 0
