"""API requests at 2,000 nodes: what the remediator asks of the API server when nothing is wrong, and while one GPU
is quarantined.

A fake Kubernetes API server (tests/fakes/apiserver/, in this process) holds --nodes GPU nodes in 20 pools, each with
its 8 GPUs published by NVIDIA's DRA driver (the slice recorded on a real EKS H100 node), and on each GPU a pod
whose ResourceClaim holds it: 2,000 ResourceSlices and 16,000 ResourceClaims and pods at 2,000 nodes, a DRA fleet
(on a device-plugin fleet there are no DRA objects to read). The real remediator runs as the chart runs it:
`gpuhealth-remediator serve` in its own process, the default pass interval (10 s) and Lease (15 s), the shipped
policy with Alertmanager off (its sync reads Alertmanager, not the API server).

Measured, once its caches have listed the fleet and its first pass is done, over --seconds of wall time each:
- at rest: no alert anywhere;
- one GPU quarantined: a cordon alert on one GPU of one node (GPU scope: a DeviceTaintRule), still firing.
For each: requests a second by verb and resource, and the objects the list answers carried a second, from the fake
API server's counters. The Nodes and Pods come from the remediator's watches (one list, then a watch renewed every
5 minutes: about nothing a second); the rest is the Lease and what each pass reads.

--remediator-root runs another checkout's remediator against the same fleet (its `python -m gpuhealth.remediator`), e.g.
the code before DRA objects were read in pages and only when a pass can use them:

    git worktree add /tmp/before 799efd6
    .venv/bin/python bench/remediator_api_rate.py --remediator-root /tmp/before

    .venv/bin/python bench/remediator_api_rate.py            # 2,000 nodes, 120 s a phase (~5 min)
    .venv/bin/python bench/remediator_api_rate.py --quick    # 2,000 nodes, 20 s a phase (~1.5 min, make bench)
Last lines: `name value` pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from processes import free_port, stop_group, wait_until, write_kubeconfig  # noqa: E402

from tests.fakes.apiserver import FakeCluster  # noqa: E402
from tests.fakes.apiserver.dra import _recorded_gpu_slice  # noqa: E402

TOKEN = "api-rate-token"
DRIVER = "gpu.nvidia.com"
POOLS = 20
POLICY = {"alertmanager": {"url": "none"}}  # the defaults otherwise (a policy any version of the remediator reads)

Calls = Counter[tuple[str, str]]


def build_fleet(cluster: FakeCluster, nodes: int) -> list[str]:
    """Every node's GPUs published, a pod on each GPU with the claim that holds it."""
    template = _recorded_gpu_slice("template")
    names = []
    for i in range(nodes):
        pool = f"pool-{i % POOLS:02d}"
        name = f"{pool}-gpu-{i // POOLS:05d}"
        names.append(name)
        cluster.add_node(name, pool=pool)
        obj = copy.deepcopy(template)
        obj["metadata"]["name"] = f"{name}-gpu.nvidia.com-x"
        obj["metadata"]["ownerReferences"][0]["name"] = name
        obj["spec"].update(nodeName=name, pool={"name": name, "generation": 1, "resourceSliceCount": 1})
        cluster.dra.add_slice(obj)
        for device in obj["spec"]["devices"]:
            pod = f"infer-{name}-{device['name']}"
            cluster.add_pod(name, pod, labels={"app": "infer", "pool": pool})
            cluster.dra.add_claim("default", f"{pod}-gpu", [(DRIVER, name, device["name"])], [pod])
        cluster.add_pod(name, f"dcgm-{name}", owner_kind="DaemonSet")
    return names


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def passes(port: int) -> float:
    with contextlib.suppress(OSError):
        status, text = _get(port, "/metrics")
        if status == 200:
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("gpuhealth_remediator_reconcile_passes_total"))
    return 0.0


def ready(port: int) -> bool:
    with contextlib.suppress(OSError):
        return _get(port, "/readyz")[0] == 200
    return False


def fire_gpu_alert(port: int, node: str, gpu: str) -> None:
    """A cordon alert on one GPU (a PCI bus id, as the exporter's Xid alerts carry it), posted as Alertmanager does."""
    labels = {"alertname": "GPUXidApplicationRepeated", "node": node, "remediation": "cordon",
              "severity": "warning", "component": "gpu", "gpu": gpu}
    body = json.dumps({"version": "4", "groupKey": "api-rate", "truncatedAlerts": 0, "status": "firing",
                       "receiver": "gpuhealth", "groupLabels": {"node": node}, "commonLabels": labels,
                       "commonAnnotations": {}, "externalURL": "http://alertmanager",
                       "alerts": [{"status": "firing", "labels": labels, "annotations": {"summary": "bench"},
                                   "startsAt": "2026-12-02T10:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
                                   "generatorURL": "http://prometheus/graph", "fingerprint": f"fp-{node}"}]})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/alerts", body=body, headers={"Authorization": f"Bearer {TOKEN}",
                                                        "Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    if status != 202:
        raise RuntimeError(f"webhook answered {status}")


def measure(cluster: FakeCluster, seconds: float) -> tuple[Calls, Calls, float]:
    """Requests and listed objects by (verb, resource) over `seconds` of wall time."""
    with cluster.lock:
        calls, listed = Counter(cluster.calls), Counter(cluster.listed)
    started = time.monotonic()
    time.sleep(seconds)
    with cluster.lock:
        return Counter(cluster.calls) - calls, Counter(cluster.listed) - listed, time.monotonic() - started


def report(phase: str, calls: Calls, listed: Calls, elapsed: float, nodes: int) -> dict[str, float]:
    total = sum(calls.values()) / elapsed
    objects = sum(listed.values()) / elapsed
    print(f"\n{phase}: {total:.2f} requests/s, {objects:.0f} listed objects/s ({nodes:,} nodes, {elapsed:.0f} s)")
    print(f"  {'verb':8} {'resource':28} {'requests/s':>10} {'objects/s':>10}")
    for (verb, resource), n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {verb:8} {resource:28} {n / elapsed:10.3f} {listed[(verb, resource)] / elapsed:10.0f}")
    dra = sum(n for (_, r), n in calls.items() if r in ("resourceslices", "resourceclaims")) / elapsed
    # reads of Nodes and Pods other than the watches: a remediator that polled the fleet would show here
    polls = sum(n for (v, r), n in calls.items() if v in ("list", "get") and r in ("nodes", "pods")) / elapsed
    print(f"  Node and Pod reads besides the watches (polling): {polls:.3f}/s")
    return {"requests_per_second": total, "listed_objects_per_second": objects, "dra_requests_per_second": dra,
            "node_pod_polls_per_second": polls}


def run(nodes: int, seconds: float, workdir: Path, remediator_root: Path) -> dict[str, dict[str, float]]:
    with FakeCluster() as cluster:
        started = time.monotonic()
        names = build_fleet(cluster, nodes)
        print(f"fleet: {nodes:,} nodes, {len(cluster.dra.slices):,} ResourceSlices, {len(cluster.dra.claims):,} "
              f"ResourceClaims, {len(cluster.pods):,} pods (built in {time.monotonic() - started:.0f} s)")
        (workdir / "policy.yaml").write_text(yaml.safe_dump(POLICY))
        (workdir / "token").write_text(TOKEN)
        write_kubeconfig(workdir / "kubeconfig", cluster.url, "bench")
        port = free_port()
        log = workdir / "remediator.log"
        with open(log, "wb") as out:
            # a checkout from before the gpuhealth namespace (0.1.0) has the remediator at the top level
            module = "gpuhealth.remediator" if (remediator_root / "gpuhealth" / "remediator").is_dir() else "remediator"
            proc = subprocess.Popen([sys.executable, "-m", module, "serve", "--policy",
                                     str(workdir / "policy.yaml"), "--listen", f"127.0.0.1:{port}",
                                     "--token-file", str(workdir / "token"),
                                     "--kubeconfig", str(workdir / "kubeconfig")],
                                    stdout=out, stderr=out, start_new_session=True, cwd=remediator_root,
                                    env={**os.environ, "POD_NAME": "bench", "PYTHONPATH": str(remediator_root)})
        try:
            wait_until("the remediator ready", lambda: ready(port), 300, proc, log)
            first = passes(port)
            wait_until("a pass after the first", lambda: passes(port) >= max(first, 1) + 1, 60, proc, log)
            results = {"rest": report("at rest", *measure(cluster, seconds), nodes)}
            node = names[0]
            device = cluster.dra.slices[f"{node}-gpu.nvidia.com-x"]["spec"]["devices"][3]
            bus_id = device["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
            fire_gpu_alert(port, node, f"0000{bus_id}".upper())  # NVML's form, as the exporter's alerts carry it
            wait_until("the GPU quarantined", lambda: bool(cluster.dra.rules), 60, proc, log)
            results["one_gpu"] = report("one GPU quarantined", *measure(cluster, seconds), nodes)
        finally:
            stop_group(proc, grace=10)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20 s a phase (make bench)")
    parser.add_argument("--nodes", type=int, default=2000, help="fleet size (default 2,000)")
    parser.add_argument("--seconds", type=float, help="measured wall seconds a phase (default 120; --quick 20)")
    parser.add_argument("--remediator-root", type=Path, default=ROOT,
                        help="the checkout whose remediator runs (default this one)")
    args = parser.parse_args()
    seconds = args.seconds or (20.0 if args.quick else 120.0)
    print(f"remediator API requests: {args.nodes:,} nodes, {seconds:.0f} s a phase, remediator from "
          f"{args.remediator_root}, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="api-rate-") as tmp:
        results = run(args.nodes, seconds, Path(tmp), args.remediator_root.resolve())
    print()
    for phase, figures in results.items():
        for name, value in figures.items():
            print(f"remediator_{phase}_{name} {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
