# The evidence Job's script (templates/evidence.yaml.j2 runs it with bash -c): what a vendor's RMA asks for, written
# to stdout in sections the remediator reads from the pod's log and stores (gpuhealth/remediator/act/evidence_job.py). Each
# section is bounded here and again there; a tool that is missing or fails is said in its section, never fatal.
# $1: the kernel-log lines kept. Env: EVIDENCE_NODE, EVIDENCE_EPISODE, EVIDENCE_NAME, EVIDENCE_UPLOAD (a command, or
# empty: no bundle).
set -u
lines="${1:-300}"
dir="$(mktemp -d)"
section() { echo "==> gpuhealth-evidence: $1 <=="; }
section meta
echo "node=${EVIDENCE_NODE:-} episode=${EVIDENCE_EPISODE:-} name=${EVIDENCE_NAME:-} date=$(date -u +%FT%TZ)"
section nvidia-smi
timeout 60 nvidia-smi -q -x >"$dir/nvidia-smi.xml" 2>"$dir/nvidia-smi.err"
echo "exit=$?" >>"$dir/nvidia-smi.err"
head -c 600000 "$dir/nvidia-smi.xml"; echo
section nvidia-smi-status
head -c 2000 "$dir/nvidia-smi.err"
section dcgmi-diag
if command -v dcgmi >/dev/null 2>&1; then
  timeout 120 dcgmi diag -r 1 -j >"$dir/dcgmi-diag.json" 2>&1; echo "exit=$?" >"$dir/dcgmi.status"
  head -c 200000 "$dir/dcgmi-diag.json"; echo
else
  echo "dcgmi not in this image" >"$dir/dcgmi.status"
fi
section dcgmi-status
cat "$dir/dcgmi.status"
section kernel-log
# the host's kernel ring buffer (the pod is privileged: dmesg reads the host's): the last lines, and as many of the
# GPU, PCIe and machine-check lines from all of it
timeout 30 dmesg --time-format iso >"$dir/dmesg.txt" 2>&1 || timeout 30 dmesg >"$dir/dmesg.txt" 2>&1
grep -aE 'NVRM|Xid|SXid|nvidia|AER|pcieport|mce|Machine Check|fallen off' "$dir/dmesg.txt" | tail -n "$lines" | cut -c1-400
echo "--- last $lines lines ---"
tail -n "$lines" "$dir/dmesg.txt" | cut -c1-400
section bug-report
if [ -z "${EVIDENCE_UPLOAD:-}" ]; then
  echo "no upload_command: no bundle made"
elif command -v nvidia-bug-report.sh >/dev/null 2>&1; then
  (cd "$dir" && timeout 300 nvidia-bug-report.sh --safe-mode --output-file "$dir/nvidia-bug-report.log" >/dev/null 2>&1)
  echo "nvidia-bug-report.sh exit=$?"
else
  echo "nvidia-bug-report.sh not in this image"
fi
section upload
if [ -n "${EVIDENCE_UPLOAD:-}" ]; then
  export EVIDENCE_BUNDLE="/tmp/${EVIDENCE_NAME:-evidence}.tar.gz"
  tar -czf "$EVIDENCE_BUNDLE" -C "$dir" . 2>&1 | tail -n 5
  timeout 300 bash -c "$EVIDENCE_UPLOAD" 2>&1 | tail -n 20
  echo "upload exit=${PIPESTATUS[0]}"
else
  echo "none"
fi
section end
