"""API requests at 2,000 nodes: what the node agents ask of the API server to follow their own Nodes.

Runs the exporter's real Node-reading code for --nodes nodes against the fake API server (tests/fakes/apiserver/,
the chart's RBAC enforced for each node's exporter token, as the e2e does), counts the requests the server receives
by verb over a measured period, and extrapolates to 2,000 nodes. Two ways, one after the other:

- after: what the exporter runs now. Per node the watch of its Node (gpuhealth/exporter/node_watch.py: a list, then a
watch
  renewed every 5-10 minutes), the condition writer reading the watched Node (gpuhealth/exporter/node_status.py), the
  GPU reset marker's release (gpuhealth/exporter/gpu_reset.py) and the node loop of `gpuhealth-exporter`
  (gpuhealth/exporter/serve.py `_node_loop`), with their shipped intervals;
- before: the requests 799efd6's exporter made, replayed with the same HTTP client: a GET of the Node with
  `resourceVersion=0` every `reset_marker_interval` (10 s) for the reset marker, the condition writer's GET of
  the Node at start and every 600 s, and the instance type's GET at start.

Meanwhile each Node changes as a kubelet changes it (a status update every 5 minutes), so the watches carry events.
Time is compressed by --time-scale (20, or 60 with --quick: a wall second is a minute): every interval of the code
(the watch's 5-10 minutes, reset_marker_interval, condition_interval, the writer's 600 s) is divided by it, and a
rate measured per wall second is divided by it again. The first requests (a list and a watch, or the GETs at start)
fall in a warm-up that is not measured: the figures are the steady state. The replay of the old polls keeps its
schedule only while the machine keeps up (at 60x each node GETs 6 times a second): the figure its intervals give,
366 requests per node-hour, is printed beside the measured one.

Then the reaction to the reset marker, uncompressed: the marker is set on one node after another over one
reset_marker_interval, and the time until each node's release has read it is measured (before: up to
reset_marker_interval; after: as the watch delivers it).

Target (docs/benchmarks.md): under 10 requests a second for 2,000 nodes (the remediator's half of the section is
its own).

    .venv/bin/python bench/api_requests.py            # 50 nodes, 50 measured minutes at 20x (~6 min)
    .venv/bin/python bench/api_requests.py --quick    # 20 nodes, 45 measured minutes at 60x (~2 min, make bench)
Last lines: `name value` pairs.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuhealth.exporter import node_status  # noqa: E402
from gpuhealth.exporter.collector import Expectations  # noqa: E402
from gpuhealth.exporter.config import Settings  # noqa: E402
from gpuhealth.exporter.gpu_reset import ANNOTATION, GpuResetRelease  # noqa: E402
from gpuhealth.exporter.node_status import NodeConditionWriter  # noqa: E402
from gpuhealth.exporter.node_watch import WATCH_SECONDS, NodeWatch  # noqa: E402
from gpuhealth.exporter.serve import _node_loop  # noqa: E402
from gpuhealth.exporter.snapshot import Snapshot  # noqa: E402
from tests.fakes.apiserver import FakeCluster  # noqa: E402
from tests.support import chart_rbac  # noqa: E402

FLEET = 2_000
TARGET_PER_SECOND = 10.0  # for FLEET nodes
KUBELET_STATUS_SECONDS = 300.0  # the kubelet's nodeStatusReportFrequency: a Node update every 5 minutes
SHIPPED = Settings()  # reset_marker_interval and condition_interval as shipped (10 s each)
OLD_RELOAD_SECONDS = 600.0  # 799efd6's NodeConditionWriter read its Node again every 600 s


@dataclass
class Agent:
    """One node's exporter, as far as it reads its Node."""

    node: str
    release: GpuResetRelease
    threads: list[threading.Thread]


def _sa_dir(workdir: Path, node: str) -> str:
    d = workdir / node
    d.mkdir(parents=True, exist_ok=True)
    (d / "token").write_text(f"exporter-{node}\n")
    return str(d)


def start_after(cluster: FakeCluster, node: str, sa_dir: str, scale: float, stop: threading.Event) -> Agent:
    """The exporter as it runs now (gpuhealth/exporter/serve.py serve, less the probes)."""
    settings = Settings(node=node, condition_interval=SHIPPED.condition_interval / scale,
                        reset_marker_interval=SHIPPED.reset_marker_interval / scale)
    changed = threading.Event()
    watch = NodeWatch(cluster.url, node, sa_dir=sa_dir, on_change=changed.set,
                      watch_seconds=(WATCH_SECONDS[0] / scale, WATCH_SECONDS[1] / scale))
    watch.list()
    writer = NodeConditionWriter(cluster.url, node, sa_dir=sa_dir, read_node=watch.node)
    snapshot = Snapshot()
    release = GpuResetRelease([], snapshot, watch.annotations)
    release.poll()
    threads = [watch.start(stop),
               threading.Thread(target=_node_loop, args=(writer, snapshot, settings, stop, release,
                                                         Expectations(), changed), daemon=True)]
    threads[1].start()
    return Agent(node, release, threads)


def _old_loop(writer: NodeConditionWriter, release: GpuResetRelease, snapshot: Snapshot, s: Settings,
              stop: threading.Event) -> None:
    """799efd6's _node_loop: the marker every reset_marker_interval, the conditions every condition_interval."""
    from gpuhealth.exporter.conditions import evaluate

    now = time.monotonic()
    next_sync, next_poll = now + s.condition_interval, now + s.reset_marker_interval
    while not stop.wait(max(0.0, min(next_sync, next_poll) - time.monotonic())):
        now = time.monotonic()
        if now >= next_poll:
            next_poll = now + s.reset_marker_interval
            release.poll()
        if now >= next_sync:
            next_sync = now + s.condition_interval
            writer.sync(release.acknowledge(evaluate(snapshot.view(), Expectations(), s.fault_window)))


def start_before(cluster: FakeCluster, node: str, sa_dir: str, scale: float, stop: threading.Event) -> Agent:
    """799efd6's requests: GET the Node (resourceVersion=0) every reset_marker_interval, and the writer's GETs."""
    settings = Settings(node=node, condition_interval=SHIPPED.condition_interval / scale,
                        reset_marker_interval=SHIPPED.reset_marker_interval / scale)
    writer = NodeConditionWriter(cluster.url, node, sa_dir=sa_dir)  # no watched Node: it GETs, as it did
    writer.http.request("GET", f"/api/v1/nodes/{node}")  # node_labels(): the instance type at start

    def annotations() -> Mapping[str, str]:  # node_annotations() at 799efd6
        got = writer.http.request("GET", f"/api/v1/nodes/{node}?resourceVersion=0")
        return {str(k): str(v) for k, v in (got["metadata"].get("annotations") or {}).items()}

    snapshot = Snapshot()
    release = GpuResetRelease([], snapshot, annotations)
    release.poll()
    thread = threading.Thread(target=_old_loop, args=(writer, release, snapshot, settings, stop), daemon=True)
    thread.start()
    return Agent(node, release, [thread])


def kubelet(cluster: FakeCluster, nodes: list[str], scale: float, stop: threading.Event) -> None:
    """Each Node's status updated every KUBELET_STATUS_SECONDS (scaled), spread over the period."""
    period = KUBELET_STATUS_SECONDS / scale
    i = 0
    while not stop.wait(period / len(nodes)):
        name = nodes[i % len(nodes)]
        cluster.update_node(name, lambda n: n["status"].update(heartbeat=time.time()))
        i += 1


def node_requests(cluster: FakeCluster) -> Counter[str]:
    with cluster.lock:
        return Counter({f"{verb} {resource}": n for (verb, resource), n in cluster.calls.items()
                        if resource in ("nodes", "nodes/status")})


@dataclass
class Measured:
    by_verb: Counter[str]
    per_node_second: float  # real seconds
    reaction: list[float]  # seconds from the marker set to the release having read it


def measure(start: Callable[..., Agent], nodes: int, seconds: float, scale: float, reaction_interval: float,
            workdir: Path) -> Measured:
    with FakeCluster() as cluster:
        names = [f"gpu-{i:04d}" for i in range(nodes)]
        for name in names:
            cluster.add_node(name)
        chart_rbac.enforce(cluster)
        for name in names:
            cluster.add_service_account_token(f"exporter-{name}", chart_rbac.NAMESPACE, chart_rbac.EXPORTER_SA,
                                              node=name, pod=f"gpuhealth-exporter-{name}")
        stop = threading.Event()
        cluster.on_close.append(stop.set)
        node_status.RELOAD_SECONDS = OLD_RELOAD_SECONDS / scale
        agents = [start(cluster, name, _sa_dir(workdir, name), scale, stop) for name in names]
        threading.Thread(target=kubelet, args=(cluster, names, scale, stop), daemon=True).start()
        time.sleep(max(2.0, 2 * SHIPPED.condition_interval / scale))  # warm-up: the first requests, conditions
        before = node_requests(cluster)
        time.sleep(seconds)
        by_verb = node_requests(cluster) - before
        stop.set()
        assert not cluster.forbidden, f"the chart does not grant {cluster.forbidden[:3]}"
        per_node_second = sum(by_verb.values()) / nodes / (seconds * scale)

    # The reaction, uncompressed: every interval as shipped (reaction_interval for the old poll).
    with FakeCluster() as cluster:
        for name in names:
            cluster.add_node(name)
        chart_rbac.enforce(cluster)
        for name in names:
            cluster.add_service_account_token(f"exporter-{name}", chart_rbac.NAMESPACE, chart_rbac.EXPORTER_SA,
                                              node=name)
        stop = threading.Event()
        cluster.on_close.append(stop.set)
        scale = SHIPPED.reset_marker_interval / reaction_interval
        agents = [start(cluster, name, _sa_dir(workdir, name), scale, stop) for name in names]
        time.sleep(0.5)
        # One node after another, evenly over one poll interval: the old polls all started together here, and a
        # marker is set at any point of a real exporter's interval.
        set_at: dict[str, float] = {}
        seen: dict[str, float] = {}
        first = time.monotonic()
        deadline = first + 3 * reaction_interval + 5
        while len(seen) < nodes and time.monotonic() < deadline:
            now = time.monotonic()
            for i, name in enumerate(names):
                if name not in set_at and now >= first + i * reaction_interval / nodes:
                    cluster.update_node(name, lambda n: n["metadata"]["annotations"].update(
                        {ANNOTATION: "bench-reset"}))
                    set_at[name] = time.monotonic()
            for agent in agents:
                if agent.node in set_at and agent.node not in seen and agent.release.requested == "bench-reset":
                    seen[agent.node] = time.monotonic() - set_at[agent.node]
            time.sleep(0.002)
        stop.set()
    if len(seen) < nodes:
        raise SystemExit(f"{nodes - len(seen)} of {nodes} nodes never read the marker")
    return Measured(by_verb, per_node_second, sorted(seen.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, help="node agents run (default 50; --quick 20)")
    parser.add_argument("--seconds", type=float, help="wall seconds measured per way (default 150; --quick 45)")
    parser.add_argument("--time-scale", type=float, help="every interval divided by this (default 20; --quick 60)")
    parser.add_argument("--quick", action="store_true", help="20 nodes, 45 s per way (make bench)")
    parser.add_argument("--smoke", action="store_true", help="3 nodes, 6 s, the old poll every 1 s (the tests)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # a watch cut at the end of a run is not news here
    nodes = args.nodes or (3 if args.smoke else 20 if args.quick else 50)
    seconds = args.seconds or (6.0 if args.smoke else 45.0 if args.quick else 150.0)
    scale = args.time_scale or (60.0 if args.smoke or args.quick else 20.0)
    reaction_interval = 1.0 if args.smoke else SHIPPED.reset_marker_interval
    results: dict[str, Measured] = {}
    with tempfile.TemporaryDirectory(prefix="gpuhealth-api-") as tmp:
        for way, start in (("before", start_before), ("after", start_after)):
            print(f"{way}: {nodes} nodes, {seconds:g} s at {scale:g}x ({seconds * scale / 3600:.1f} h measured) ...",
                  flush=True)
            results[way] = measure(start, nodes, seconds, scale, reaction_interval, Path(tmp) / way)

    print(f"\n{'requests per node-hour, by verb':<34}{'before':>10}{'after':>10}")
    verbs = sorted(set(results["before"].by_verb) | set(results["after"].by_verb))
    hours = seconds * scale / 3600
    for verb in verbs:
        print(f"  {verb:<32}" + "".join(f"{results[w].by_verb[verb] / nodes / hours:>10.1f}"
                                         for w in ("before", "after")))
    scheduled = 3600 / SHIPPED.reset_marker_interval + 3600 / OLD_RELOAD_SECONDS  # 799efd6's GETs per node-hour
    print(f"  {'(before, as its intervals say)':<32}{scheduled:>10.1f}")
    print(f"{'requests per second, 2,000 nodes':<34}" + "".join(f"{results[w].per_node_second * FLEET:>10.1f}"
                                                               for w in ("before", "after")))
    print(f"  {'(before, as its intervals say)':<32}{scheduled * FLEET / 3600:>10.1f}")
    print(f"{'marker read after (s), median':<34}" + "".join(
        f"{statistics.median(results[w].reaction):>10.3f}" for w in ("before", "after")))
    print(f"{'marker read after (s), max':<34}" + "".join(f"{max(results[w].reaction):>10.3f}"
                                                         for w in ("before", "after")))
    print(f"(the old poll every {reaction_interval:g} s in this reaction run; reset_marker_interval ships at 10 s)\n")
    for way in ("before", "after"):
        r = results[way]
        print(f"api_{way}_requests_per_node_hour {r.per_node_second * 3600:.3f}")
        print(f"api_{way}_requests_per_second_{FLEET}_nodes {r.per_node_second * FLEET:.2f}")
        print(f"api_{way}_marker_seen_median_seconds {statistics.median(r.reaction):.3f}")
        print(f"api_{way}_marker_seen_max_seconds {max(r.reaction):.3f}")
    after = results["after"].per_node_second * FLEET
    print(f"api_after_{FLEET}_nodes_target_met {1 if after < TARGET_PER_SECOND else 0}", flush=True)


if __name__ == "__main__":
    main()
