#!/usr/bin/env bash
# `make demo`: the node agent on a recorded fixture node, then what it saw, in plain words.
# The node: a p4d.24xlarge (8 GPUs) launched with all 4 of its EFA interfaces (--efa-expected 4: what the
# Node's gpuhealth.io/efa-expected label or the EFA device plugin's capacity says on a cluster), whose kernel
# log is the 47 real lines of tests/fixtures/kmsg/samples.txt, with 3 of those 4 EFA devices present
# (sysfs tree built from the EFA driver's layout), DCGM answering with recorded dcgmi outputs, and a saved
# dcgm-exporter scrape. There is no NVIDIA driver here, so the NVML probe fails, and says so: that is
# fail-closed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Running: gpuhealth-exporter --once on the fixture node"
$BIN/gpuhealth-exporter --once --show-conditions \
  --kmsg-file tests/fixtures/kmsg/samples.txt \
  --sysfs-root tests/fixtures/sysfs/p4d --instance-type p4d.24xlarge --efa-expected 4 \
  --dcgmi demo/fixture-node/dcgmi \
  --dcgm-exporter-url tests/fixtures/dcgm/metrics_kops_aws_L4_580.105.08.prom \
  >"$out/metrics.txt" 2>"$out/stderr.txt"

say "Probes (1 = answered in time with valid data; 0 = fail closed, with the reason)"
grep -E '^gpuhealth_probe_(success|error)\{' "$out/metrics.txt"

say "Xids from the kernel log, one counter per GPU and Xid (fatal= is set for NVLink5 Xids 144-150)"
grep -E '^gpuhealth_xid_errors_total\{' "$out/metrics.txt"

say "Driver recovery actions (Xid 154), NVSwitch SXids and host/NIC kernel events"
grep -E '^gpuhealth_(gpu_recovery_action|nvswitch_sxid_errors_total|kernel_events_total)\{' "$out/metrics.txt"

say "Counts against what this node should have (source=: where the EFA count comes from; max: what a p4d can take)"
grep -E '^gpuhealth_(gpus|efa_devices)_(visible|expected|max)[ {]' "$out/metrics.txt"

say "Node conditions the agent would write on its Node (True = healthy)"
grep '^condition ' "$out/stderr.txt"

say "Why NVML failed"
grep -E 'probe nvml failed' "$out/stderr.txt" | sed 's/^.*WARNING //'

say "The whole exposition: $(grep -c '^gpuhealth_' "$out/metrics.txt") gpuhealth_* samples; every metric is described in docs/metrics.md"
echo "Run it yourself: .venv/bin/gpuhealth-exporter --once --help"
