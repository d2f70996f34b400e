"""Memory of one read of Alertmanager's active alerts (the sync's `read_alertmanager`), as the alerts grow.

Two fleets of alerts, each read by a fresh Python process, so that nothing but the read is measured: tracemalloc's
peak during the read (the figure to compare), and in a second process how far the read raised the process's peak
RSS (ru_maxrss after less before: 0 when the read fit in what importing the remediator had already used):
- others: Debian's real Alertmanager holding --alerts alerts NOT meant for gpuhealth (kube-prometheus-stack's
  KubeNodeNotReady, which names a node but asks for no remediation) and 10 gpuhealth alerts, read with the
  policy's receiver unset (any receiver): only the label matchers keep the others out;
- gpuhealth: a server answering --alerts gpuhealth alerts (a fleet-wide storm), shaped as Alertmanager 0.25's
  GET /api/v2/alerts writes them (tests/support/real_alertmanager.py's capture of the shape, with the chart's labels);
- empty: three members of an HA Alertmanager (or what answers in their place) each answering just under the byte cap
  (8 MiB) of `{},`: the smallest values cost the most when parsed (issue 35, item 12: 814 MiB before the bound on
  what is parsed per member).

--remediator-root reads with another checkout's remediator, e.g. the code before the byte cap and the filter:

    git worktree add /tmp/before 4d8443d
    .venv/bin/python bench/alertmanager_answer_memory.py --remediator-root /tmp/before

    .venv/bin/python bench/alertmanager_answer_memory.py            # 100,000 alerts (~3 min: Alertmanager ingests)
    .venv/bin/python bench/alertmanager_answer_memory.py --quick    # 20,000 alerts
    .venv/bin/python bench/alertmanager_answer_memory.py --cases empty    # the three members of `{}` only (~1 min)
Last lines: `name value` pairs (MiB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from static_answer import StaticAnswer  # noqa: E402

from tests.support.real_alertmanager import RealAlertmanager, stamp  # noqa: E402

READ = """
import importlib, json, os, resource, sys, tracemalloc
sys.path.insert(0, sys.argv[1])
# a checkout from before the gpuhealth namespace (0.1.0) has the remediator at the top level
pkg = "gpuhealth.remediator" if os.path.isdir(os.path.join(sys.argv[1], "gpuhealth", "remediator")) else "remediator"
client_from = importlib.import_module(f"{pkg}.clients.alertmanager").client_from
read_alertmanager = importlib.import_module(f"{pkg}.intake.alert_sync").read_alertmanager
parse_policy = importlib.import_module(f"{pkg}.policy").parse_policy
policy = parse_policy(sys.argv[2])
client = client_from(policy)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[3] == "tracemalloc":
    tracemalloc.start()
try:
    reading = read_alertmanager(client, policy)
    result = f"{len(reading.active)} active, {len(reading.ignored)} ignored"
except Exception as exc:
    result = f"{type(exc).__name__}: {str(exc)[:120]}"
peak = tracemalloc.get_traced_memory()[1] if sys.argv[3] == "tracemalloc" else \\
    (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"peak": peak, "result": result}))
"""


def gpuhealth_alert(i: int, now: datetime) -> dict[str, Any]:
    node = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
    return {
        "annotations": {"summary": f"Fatal Xid 79 on GPU 0000:{i % 256:02x}:00.0 of {node}",
                        "description": "The GPU has fallen off the bus: its jobs are lost; reset or reboot.",
                        "runbook_url": "https://github.com/gpuhealth/gpuhealth/blob/main/docs/runbooks/GPUXidFatal.md"},
        "endsAt": stamp(now + timedelta(minutes=4)), "fingerprint": f"{i:016x}",
        "receivers": [{"name": "gpuhealth/gpuhealth/gpuhealth-remediator"}],
        "startsAt": stamp(now - timedelta(minutes=1)),
        "status": {"inhibitedBy": [], "silencedBy": [], "state": "active"},
        "updatedAt": stamp(now), "generatorURL": "http://prometheus.example/graph?g0.expr=gpuhealth_xid",
        "labels": {"alertname": "GPUXidFatal", "component": "gpu", "gpu": f"0000:{i % 256:02x}:00.0",
                   "node": node, "pool": "p5", "remediation": "reset_gpu", "severity": "critical", "xid": "79",
                   "namespace": "gpuhealth", "prometheus": "monitoring/kube-prometheus-stack-prometheus"}}


def other_alert(i: int, now: datetime) -> dict[str, Any]:
    return {"labels": {"alertname": "KubeNodeNotReady", "node": f"node-{i}", "severity": "warning",
                       "namespace": "monitoring", "job": "kube-state-metrics", "condition": "Ready", "status": "true",
                       "instance": "10.0.0.1:8080", "pod": "kube-state-metrics-0", "service": "kube-state-metrics"},
            "annotations": {"summary": "Node is not ready.",
                            "description": f"node-{i} has been unready for more than 15 minutes.",
                            "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/"
                                           "kubenodenotready"},
            "startsAt": stamp(now - timedelta(minutes=1)), "endsAt": stamp(now + timedelta(hours=1)),
            "generatorURL": "http://prometheus.example/graph"}


def measure(root: Path, url: str | list[str]) -> dict[str, tuple[float, str]]:
    text = yaml.safe_dump({"alertmanager": {"url": url, "receiver": None, "min_uptime": "0s", "timeout": "300s"}})
    out = {}
    for mode in ("rss", "tracemalloc"):
        run = subprocess.run([sys.executable, "-c", READ, str(root), text, mode], capture_output=True, text=True,
                             check=True, timeout=900)
        answer = json.loads(run.stdout.strip().splitlines()[-1])
        out[mode] = (answer["peak"] / 2**20, answer["result"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="20,000 alerts")
    parser.add_argument("--remediator-root", type=Path, default=ROOT)
    parser.add_argument("--cases", default="gpuhealth,others,empty", help="which of gpuhealth, others, empty")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    count = 20_000 if args.quick else args.alerts
    now = datetime.now(UTC)
    results: dict[str, dict[str, tuple[float, str]]] = {}
    if "empty" in cases:
        results["empty"] = measure_empty(args.remediator_root)
    if "gpuhealth" in cases:
        results["gpuhealth"] = measure_gpuhealth(args.remediator_root, count, now)
    if "others" in cases:
        results["others"] = measure_others(args.remediator_root, count, now)
    for case, modes in results.items():
        for mode, (mib, result) in modes.items():
            print(f"{case} {mode}: {mib:.1f} MiB ({result})")
    for case, modes in results.items():
        for mode, (mib, _) in modes.items():
            print(f"{case}_{mode}_peak_mib {mib:.1f}")
    return 0


def measure_empty(root: Path, members: int = 3) -> dict[str, tuple[float, str]]:
    body = b"[" + b",".join([b"{}"] * ((8 << 20) // 3 - 1)) + b"]"  # under the default 8 MiB cap
    servers = [StaticAnswer(body, "application/json") for _ in range(members)]
    print(f"empty: {members} members, each {len(body) / 2**20:.2f} MiB of {{}}", flush=True)
    try:
        return measure(root, [s.url for s in servers])
    finally:
        for server in servers:
            server.close()


def measure_gpuhealth(root: Path, count: int, now: datetime) -> dict[str, tuple[float, str]]:
    body = json.dumps([gpuhealth_alert(i, now) for i in range(count)]).encode()
    print(f"gpuhealth: {count} alerts, an answer of {len(body) / 2**20:.1f} MiB", flush=True)
    with StaticAnswer(body, "application/json") as static:
        return measure(root, static.url)


def measure_others(root: Path, count: int, now: datetime) -> dict[str, tuple[float, str]]:
    with RealAlertmanager() as am:
        for start in range(0, count, 1000):
            am.post_alerts([other_alert(i, now) for i in range(start, min(count, start + 1000))])
        for i in range(10):
            am.push(f"gpu-{i}", "GPUXidFatal", "reset_gpu")
        with urllib.request.urlopen(f"{am.url}/api/v2/alerts?active=true", timeout=300) as r:
            listed = len(json.loads(r.read()))
        print(f"others: Alertmanager lists {listed} alerts ({count} not for gpuhealth)", flush=True)
        return measure(root, am.url)


if __name__ == "__main__":
    sys.exit(main())
