"""The remediator's memory on objects of real size: the sizing of the chart's memory request and limit.

A fake Kubernetes API server (tests/fakes/apiserver/, in this process) holds --nodes Nodes of --node-kib KiB in 20
pools and --pods Pods of --pod-kib KiB spread over them, in the shape real clusters carry
(tests/fakes/apiserver/real_objects.py: managedFields, GPU Feature Discovery's and NFD's labels, the images a kubelet
reports; a training Pod's environment, volumes, tolerations, conditions and container statuses). The real remediator
runs as in production (`gpuhealth-remediator serve` with the shipped example policy, as bench/remediator_storm.py
starts it: the receiver's process, which watches the Nodes' metadata, and the reconcile loop's, which watches every
Node and Pod). Measured:

1. the fleet listed and the first pass made (both processes' watch caches filled);
2. then a relist of everything by both processes at once, as after an API server restart whose watch history is gone
   (every watch cut off and its resourceVersion compacted away: 410 Expired, list again). A relist holds the old cache
   and the new list together: the peak.

Reported: each process's resident memory after each phase, each process's peak (VmHWM, the kernel's high-water mark
of its RSS), the peak of their sum sampled every 0.1 s, and last `peak_rss_mib`, the sum of the two processes' peaks
(never below the container's true peak: what its memory limit must hold).

    .venv/bin/python bench/remediator_memory.py --nodes 10000 --pods 30000 --pod-kib 11   # the sizing (minutes)
    .venv/bin/python bench/remediator_memory.py --nodes 2000 --pods 6000 --pod-kib 11     # 2,000 GPU nodes
    .venv/bin/python bench/remediator_memory.py --nodes 20 --pods 60 --pod-kib 2          # a smoke run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from processes import stop_group, wait_until  # noqa: E402
from remediator_storm import Setup, family, start_remediator, status_fields  # noqa: E402

from tests.fakes.apiserver import FakeCluster  # noqa: E402
from tests.fakes.apiserver.real_objects import fill, json_size, real_node, real_pod  # noqa: E402

POOLS = 20
SAMPLE_S = 0.1  # how often the processes' RSS is read for the peak of their sum


def mib(values: list[str]) -> list[float]:
    """`VmRSS:`/`VmHWM:` values ("123456 kB") in MiB."""
    return [int(v.split()[0]) / 1024 for v in values]


class Sampler:
    """The largest sum of the remediator's processes' RSS seen, read every SAMPLE_S seconds on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            try:
                self.peak = max(self.peak, sum(mib(status_fields(self.pid, "VmRSS"))))
            except (OSError, ValueError):  # a process ending or starting while read
                continue

    def close(self) -> float:
        self.stop.set()
        self.thread.join()
        return self.peak


def relist_everything(cluster: FakeCluster, nodes: int, pods: int, timeout: float, proc: subprocess.Popen[bytes],
                      log: Path) -> None:
    """Every watch cut off and its resourceVersion compacted away, atomically (no watch sees a change in between):
    each cache gets 410 Expired and lists again. Waits until the lists have carried every Node to each of the two
    processes and every Pod to the loop's."""
    with cluster.lock:
        listed_nodes, listed_pods = cluster.listed[("list", "nodes")], cluster.listed[("list", "pods")]
        cluster.drop_watches()
        cluster.update_node(next(iter(cluster.nodes)), lambda n: n["metadata"]["labels"].update({"bench/relist": "1"}))
        cluster.compact()
    wait_until("every cache listed again", lambda: cluster.listed[("list", "nodes")] >= listed_nodes + 2 * nodes
               and cluster.listed[("list", "pods")] >= listed_pods + pods, timeout, proc, log)


def report_phase(what: str, pid: int) -> None:
    rss = mib(status_fields(pid, "VmRSS"))
    print(f"{what:<44} " + " + ".join(f"{r:.0f}" for r in rss) + f" = {sum(rss):.0f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10000, help="Nodes in the cluster (default 10000)")
    parser.add_argument("--pods", type=int, default=30000, help="Pods, spread over the Nodes (default 30000)")
    parser.add_argument("--pod-kib", type=float, default=11.0, help="size of a Pod's JSON in KiB (default 11)")
    parser.add_argument("--node-kib", type=float, default=16.0, help="size of a Node's JSON in KiB (default 16)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds to wait for each phase (default 1200)")
    args = parser.parse_args()
    if args.nodes < 1 or args.pods < 0:
        parser.error("--nodes must be at least 1 and --pods at least 0")
    node_kib = json_size(real_node("pool-00-gpu-00000", "pool-00", args.node_kib)) / 1024
    pod_kib = json_size(real_pod("pool-00-gpu-00000", "worker-000000-0", args.pod_kib)) / 1024
    print(f"remediator memory: {args.nodes} Nodes of {node_kib:.1f} KiB, {args.pods} Pods of {pod_kib:.1f} "
          f"KiB (about {(args.nodes * node_kib + args.pods * pod_kib) / 1024:.0f} MiB of objects as the API serves "
          "them); the remediator's two processes: the receiver + the loop")
    with FakeCluster() as cluster, tempfile.TemporaryDirectory(prefix="memory-") as tmp:
        started = time.monotonic()
        fill(cluster, args.nodes, args.pods, args.pod_kib, args.node_kib, POOLS)
        print(f"{'cluster filled (s)':<44} {time.monotonic() - started:.0f}")
        setup = Setup(POOLS, args.timeout, 0.0, 0.0, {}, start_s=args.timeout)
        started = time.monotonic()
        proc, _, log = start_remediator(cluster, setup, Path(tmp), args.nodes)
        sampler = Sampler(proc.pid)
        try:
            print(f"{'listed and first pass made (s)':<44} {time.monotonic() - started:.0f}")
            processes = len(family(proc.pid))
            report_phase("RSS after the first list and pass", proc.pid)
            started = time.monotonic()
            relist_everything(cluster, args.nodes, args.pods, args.timeout, proc, log)
            time.sleep(2.0)  # the last page slimmed and stored
            print(f"{'relist of everything by both (s)':<44} {time.monotonic() - started:.0f}")
            report_phase("RSS after the relist", proc.pid)
            peaks = mib(status_fields(proc.pid, "VmHWM"))
        finally:
            sampled = sampler.close()
            stop_group(proc, grace=10)
    others = ", the multiprocessing tracker" if processes > 2 else ""
    print(f"{'peak RSS of each process (VmHWM)':<44} " + " + ".join(f"{p:.0f}" for p in peaks) + " MiB"
          f"  ({processes} processes: the receiver, the loop{others})")
    print(f"{'peak of their sum, sampled every 0.1 s':<44} {sampled:.0f} MiB")
    print(f"peak_rss_mib {sum(peaks):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
