"""The remediator under an alert storm, at fleet scale.

A fake Kubernetes API server (tests/fakes/apiserver/, in this process) holds N nodes in 20 pools,
each node with a GPU training pod (one PodDisruptionBudget per pool), a DaemonSet pod and a
ReplicaSet pod. The real remediator runs as in production: `gpuhealth-remediator serve` (waitress,
four threads, and the reconcile loop in a process of its own: gpuhealth/remediator/loop_process.py), with the
shipped example policy (gpuhealth/remediator/policy.example.yaml) and only these changes: no Alertmanager silence
checks, the fleet-wide action rate cap raised (the storm is meant to hit the per-pool budgets, not the 20
actions an hour), a 2 s pass interval.

The storm: N/5 node-level fatal alerts (GPUFallenOffBus, remediation=reboot), 40 to a webhook post
(2,000 alerts in 50 posts at 10,000 nodes), sent by 4 concurrent senders as Alertmanager would;
then the same posts again (Alertmanager's repeats); then every alert resolved.

Every request to the fake API server waits --latency-ms first (default 10 ms: a real API server's round trip
in a busy cluster), so that the remediator's client is measured as it would be against one, not against a
server in the same machine answering in a fraction of a millisecond. Its request threads (and watch streams) run
at niceness --api-niceness (default 0).

Where the processes run (--remediator-cpus, default 1): the remediator's processes (the receiver and the loop) on
that many CPUs of their own, the fake API server (this process) and the posting process (Alertmanager's stand-in) on
the others, as in a cluster, where neither takes the remediator pod's CPU. One CPU is less than a pod at the
chart's default gets on a busy node; 0 puts every process on every CPU, as the figures before did.

Reported, beside the targets:
- webhook response time, median and p99, per phase (target p99 < 50 ms);
- time until every cordon is written (every alerted node recorded and cordoned), and until every decision is
  made: that, and in every pool as many nodes draining or further as the disruption budget allows (target
  60 s at 10,000 nodes);
- API requests a second at rest, by verb and resource, over --rest-seconds before the storm (the fleet listed,
  no alert: what the watches and the Lease cost);
- the most requests the fake API server served at once (the pass's parallel writes, policy
  kube_api.parallel_writes) and the seconds requests waited for the client's rate limit (kube_api.qps, burst);
- Kubernetes API calls per action, by verb and resource, from the fake API server's counters;
- budget violations, replayed from the fake API server's history of every Node change (target 0:
  at no moment more nodes of a pool cordoned or disrupted than the policy allows);
- the remediator's CPU seconds and reconcile passes until then, the CPU of one pass's decisions
  over the whole fleet (measured here, in this process, with the remediator's own functions), and
  how each figure grows with the fleet;
- the CPUs the remediator's processes may run on, as the kernel reports them (--remediator-cpus).

    .venv/bin/python bench/remediator_storm.py            # 1,000, 3,000 and 10,000 nodes (about 3 min)
    .venv/bin/python bench/remediator_storm.py --quick    # 500, 1,000 and 2,000 nodes (about 1.5 min)
    .venv/bin/python bench/remediator_storm.py --sizes 100 --pools 4   # a single small run
    .venv/bin/python bench/remediator_storm.py --sizes 10000 --parallel-writes 1 --qps 0   # one after another
    .venv/bin/python bench/remediator_storm.py --sizes 10000 --remediator-cpus 0   # every process on every CPU
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from processes import free_port, stop_group, wait_until, write_kubeconfig  # noqa: E402

from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, TAINT_KEY  # noqa: E402
from gpuhealth.remediator.decide.vocabulary import DISRUPTIVE  # noqa: E402
from gpuhealth.remediator.policy import parse_policy  # noqa: E402
from tests.fakes.apiserver import FakeCluster  # noqa: E402

BIN = Path(sys.executable).parent
TOKEN = "storm-token"
POOL_LABEL = "karpenter.sh/nodepool"
ALERTS_PER_POST = 40
SENDERS = 4
TARGET_P99_MS = 50.0
API_NICENESS = 0  # the fake API server's request threads; 10 puts them below the remediator's processes (0 and 5)
TARGET_DECIDED_S = 60.0  # at 10,000 nodes with 10 ms API calls (issue 27)
OVERRIDES: dict[str, dict[str, Any]] = {"alertmanager": {"url": "none"},
                                        "budget": {"max_actions_per_hour": 100000}}


@dataclass
class Run:
    nodes: int
    pools: int
    alerts: int
    posts: int
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    decided_s: float | None = None
    recorded_s: float | None = None  # every alert recorded on its node
    cordoned_s: float | None = None  # every alerted node recorded and cordoned
    rest_rate: Counter[tuple[str, str]] = field(default_factory=Counter)  # requests a second at rest
    peak_in_flight: int = 0
    throttled_s: float = 0.0  # seconds the remediator's requests waited for its rate limit
    resolved_s: float | None = None
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    peaks: dict[str, tuple[int, int]] = field(default_factory=dict)  # budget -> (worst use, limit) over pools
    cpu_s: float = 0.0
    passes: float = 0.0
    rss_mb: float = 0.0
    # the receiver's (serve's first process's) threads over the storm, from /proc/PID/task/*/schedstat: seconds on a
    # CPU, and seconds runnable but waiting for one (the machine's cores taken; waiting for the GIL is not in it)
    receiver_cpu_s: float = 0.0
    receiver_queued_s: float = 0.0
    pass_ms: float = 0.0  # the decisions of one pass over the whole fleet (views, budget, ladder), CPU ms
    cpus: str = ""  # the CPUs the remediator's processes may run on, as they report it (Cpus_allowed_list)


def policy_text(kube_api: dict[str, int] | None = None) -> str:
    policy = yaml.safe_load((ROOT / "gpuhealth" / "remediator" / "policy.example.yaml").read_text())
    for key, value in {**OVERRIDES, "kube_api": kube_api or {}}.items():
        policy.setdefault(key, {}).update(value)
    return yaml.safe_dump(policy)


def build_cluster(cluster: FakeCluster, nodes: int, pools: int) -> list[str]:
    cluster.watch_history = 10**8  # keep every change: budgets are checked from the whole history
    cluster.pod_grace = 0.5
    names = []
    for i in range(nodes):
        pool = f"pool-{i % pools:02d}"
        name = f"{pool}-gpu-{i // pools:05d}"
        names.append(name)
        cluster.add_node(name, pool=pool)
        cluster.add_pod(name, f"train-{name}", labels={"app": "train", "pool": pool}, gpus=8)
        cluster.add_pod(name, f"dcgm-{name}", owner_kind="DaemonSet")
        cluster.add_pod(name, f"sidecar-{name}")
    for p in range(pools):
        cluster.add_pdb("default", {"app": "train", "pool": f"pool-{p:02d}"}, nodes // pools)
    return names


def alert(node: str, status: str) -> dict[str, Any]:
    labels = {"alertname": "GPUFallenOffBus", "node": node, "remediation": "reboot", "severity": "critical",
              "component": "gpu", "gpu": "all"}
    return {"status": status, "labels": labels, "annotations": {"summary": "GPU fell off the bus"},
            "startsAt": "2026-12-02T10:00:00.000Z",
            "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-12-02T10:30:00.000Z",
            "generatorURL": "http://prometheus/graph", "fingerprint": f"fp-{node}"}


def bodies(nodes: list[str], status: str) -> list[bytes]:
    out = []
    for i in range(0, len(nodes), ALERTS_PER_POST):
        chunk = nodes[i:i + ALERTS_PER_POST]
        out.append(json.dumps({
            "version": "4", "groupKey": f"storm-{i}", "truncatedAlerts": 0, "status": status,
            "receiver": "gpuhealth", "groupLabels": {"alertname": "GPUFallenOffBus"},
            "commonLabels": {"alertname": "GPUFallenOffBus"}, "commonAnnotations": {},
            "externalURL": "http://alertmanager", "alerts": [alert(n, status) for n in chunk]}).encode())
    return out


def post_all(port: int, posts: list[bytes]) -> list[float]:
    """In a process of its own (this one serves the fake API server, which must not slow the clock we
    measure with): the posts' response times in milliseconds."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_post_all, port, posts).result()


def _post_all(port: int, posts: list[bytes]) -> list[float]:
    """Each post on its own connection, SENDERS at a time; milliseconds from request to full answer."""
    def send(body: bytes) -> float:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        started = time.perf_counter()
        conn.request("POST", "/alerts", body, {"Authorization": f"Bearer {TOKEN}",
                                                "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
        conn.close()
        if response.status != 202:
            raise RuntimeError(f"webhook answered {response.status}")
        return elapsed

    with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:
        return list(pool.map(send, posts))


def state_of(node: dict[str, Any]) -> dict[str, Any]:
    raw = (node["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"damaged": True}
    return value if isinstance(value, dict) else {"damaged": True}


def tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


def disrupted(node: dict[str, Any]) -> bool:
    st = state_of(node)
    return bool(st.get("damaged")) or (st.get("episode") is not None and st.get("rung") in DISRUPTIVE)


class Progress:
    """Each alerted node as its latest change left it, read from the fake API server's history as it
    grows (so that watching progress costs the API server next to nothing)."""

    def __init__(self, cluster: FakeCluster, alerted: list[str], pool_of: dict[str, str]) -> None:
        self.cluster, self.pool_of = cluster, pool_of
        self.alerted = set(alerted)
        self.seen = len(cluster.history)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.started = time.monotonic()
        self.recorded_s: float | None = None  # when every alert was first seen recorded (the intake's writes)
        self.cordoned_s: float | None = None  # when every alerted node was first seen recorded and cordoned

    def _catch_up(self) -> None:
        with self.cluster.lock:
            new = self.cluster.history[self.seen:]
            self.seen += len(new)
        latest = {}
        for event in new:
            name = event.new[event.new.find('"name": "') + 9:].split('"', 1)[0] if event.kind == "nodes" else ""
            if name in self.alerted:
                latest[name] = event.new
        for name, raw in latest.items():
            node = json.loads(raw)
            record = (state_of(node).get("alerts") or {}).get(f"fp-{name}") or {}
            self.nodes[name] = {"status": record.get("status"), "tainted": tainted(node),
                                "disrupted": disrupted(node)}

    def decided(self, limits: dict[str, int]) -> bool:
        """Every alerted node recorded and cordoned; every pool draining as many as its budget allows."""
        self._catch_up()
        if len(self.nodes) < len(self.alerted):
            return False
        want: Counter[str] = Counter(self.pool_of[n] for n in self.alerted)
        have: Counter[str] = Counter(self.pool_of[n] for n, st in self.nodes.items() if st["disrupted"])
        if not all(st["status"] == "firing" for st in self.nodes.values()):
            return False
        if self.recorded_s is None:
            self.recorded_s = time.monotonic() - self.started
        if not all(st["tainted"] for st in self.nodes.values()):
            return False
        if self.cordoned_s is None:
            self.cordoned_s = time.monotonic() - self.started
        return all(have[p] >= min(want[p], limits[p]) for p in want)

    def resolved(self) -> bool:
        self._catch_up()
        return all(st["status"] == "resolved" for st in self.nodes.values())


def replay_budgets(cluster: FakeCluster, cordon_limit: dict[str, int], disrupt_limit: dict[str, int],
                   run: Run) -> None:
    """Walk every committed Node change in order; at each one, count the pool's cordoned (our taint)
    and disrupted (drain or higher) nodes, and compare with the policy's limits."""
    cordoned: dict[str, set[str]] = {p: set() for p in cordon_limit}
    out: dict[str, set[str]] = {p: set() for p in cordon_limit}
    worst = {"cordoned": (0, 0), "disrupted": (0, 0)}
    with cluster.lock:
        history = [e for e in cluster.history if e.kind == "nodes"]
    for event in history:
        node = json.loads(event.new)
        name, pool = node["metadata"]["name"], node["metadata"]["labels"][POOL_LABEL]
        for budget, members, limits, now_in in (("cordoned", cordoned, cordon_limit, tainted(node)),
                                                ("disrupted", out, disrupt_limit, disrupted(node))):
            (members[pool].add if now_in and event.type != "DELETED" else members[pool].discard)(name)
            used, limit = len(members[pool]), limits[pool]
            if used > limit:
                run.violations.append(f"rv {event.rv}: pool {pool} {budget} {used} > {limit}")
            peak, peak_limit = worst[budget]
            if used * max(1, peak_limit) > peak * limit or peak_limit == 0:  # the fullest pool, as a share
                worst[budget] = (used, limit)
    run.peaks = worst


def family(pid: int) -> list[int]:
    """The remediator's process and its children (serve's receiver, and the reconcile loop's process)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(c) for c in children)]


def proc_cpu(pid: int) -> float:
    total = 0.0
    for p in family(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def status_fields(pid: int, key: str) -> list[str]:
    """One field of /proc/PID/status (`VmRSS`, `Cpus_allowed_list`) for each of the remediator's processes."""
    out = []
    for p in family(pid):
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                out.append(line.split(":", 1)[1].strip())
    return out


def proc_rss_mb(pid: int) -> float:
    """The remediator's resident memory: its processes' together (what the container's memory limit counts)."""
    return sum(int(value.split()[0]) / 1024 for value in status_fields(pid, "VmRSS"))


def allowed_cpus(pid: int) -> str:
    """The CPUs each of the remediator's processes may run on, as the kernel reports them (one entry if all agree)."""
    return " / ".join(sorted(set(status_fields(pid, "Cpus_allowed_list"))))


def run_queue(pid: int) -> tuple[float, float]:
    """A process's threads, summed: (seconds on a CPU, seconds runnable waiting for a CPU) (/proc schedstat)."""
    on_cpu = waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            ran, waited, _ = (task / "schedstat").read_text().split()
            on_cpu, waiting = on_cpu + int(ran), waiting + int(waited)
    return on_cpu / 1e9, waiting / 1e9


def metric(port: int, name: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def count_actions(cluster: FakeCluster, alerted: list[str]) -> Counter[str]:
    actions: Counter[str] = Counter()
    with cluster.lock:
        for name in alerted:
            node = cluster.nodes[name]
            actions["cordon"] += tainted(node)
            actions["drain"] += disrupted(node)
        actions["reboot_job"] = len(cluster.jobs)
        actions["eviction"] = len(cluster.evictions())
    return actions


@dataclass(frozen=True)
class Setup:
    """How a run is set up: the fleet, the API server's latency and the remediator's kube_api keys."""

    pools: int
    timeout: float
    latency_s: float
    rest_s: float
    kube_api: dict[str, int]
    api_niceness: int = API_NICENESS
    remediator_cpus: frozenset[int] | None = None  # None: every CPU, shared with the API server
    start_s: float = 120.0  # seconds for the remediator to list the fleet, be ready and make its first pass


def start_remediator(cluster: FakeCluster, setup: Setup, workdir: Path, nodes: int) -> tuple[subprocess.Popen[bytes],
                                                                                               int, Path]:
    """`gpuhealth-remediator serve` against the cluster, ready and past its first pass."""
    (workdir / "policy.yaml").write_text(policy_text(setup.kube_api))
    (workdir / "token").write_text(TOKEN)
    write_kubeconfig(workdir / "kubeconfig", cluster.url, "storm")
    port = free_port()
    log = workdir / f"remediator-{nodes}.log"
    # The CPUs are the calling thread's (Linux keeps them per thread) while it starts the remediator, which inherits
    # them; the API server's threads keep theirs. (No preexec_fn: it is unsafe while other threads run.)
    mine = os.sched_getaffinity(0)
    if setup.remediator_cpus is not None:
        os.sched_setaffinity(0, setup.remediator_cpus)
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(BIN / "gpuhealth-remediator"), "serve",
                                     "--policy", str(workdir / "policy.yaml"), "--listen", f"127.0.0.1:{port}",
                                     "--token-file", str(workdir / "token"),
                                     "--kubeconfig", str(workdir / "kubeconfig"), "--interval", "2"],
                                    stdout=out, stderr=out, start_new_session=True,
                                    env={**os.environ, "POD_NAME": "storm",
                                         "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    finally:
        os.sched_setaffinity(0, mine)

    def ready() -> bool:
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        return False

    try:
        wait_until("the remediator ready", ready, setup.start_s, proc, log)
        wait_until("its first pass", lambda: metric(port, "gpuhealth_remediator_reconcile_passes_total") >= 1,
                   setup.start_s, proc, log)
    except BaseException:
        stop_group(proc, grace=10)
        raise
    return proc, port, log


def rest_rate(cluster: FakeCluster, seconds: float) -> Counter[tuple[str, str]]:
    """Requests a second by (verb, resource) over `seconds` with no alert: the watches' and the Lease's cost."""
    with cluster.lock:
        before = Counter(cluster.calls)
    started = time.monotonic()
    time.sleep(seconds)
    with cluster.lock:
        calls = Counter(cluster.calls) - before
    elapsed = time.monotonic() - started
    return Counter({k: v / elapsed for k, v in calls.items()})


def run_size(nodes: int, setup: Setup, workdir: Path) -> Run:
    policy = parse_policy(policy_text(setup.kube_api))
    with FakeCluster() as cluster:
        names = build_cluster(cluster, nodes, setup.pools)
        pool_of = {n: n.rsplit("-gpu-", 1)[0] for n in names}
        sizes = Counter(pool_of.values())
        cordon_limit = {p: policy.budget.max_cordoned.limit(s) for p, s in sizes.items()}
        disrupt_limit = {p: policy.budget.max_disrupted.limit(s) for p, s in sizes.items()}
        alerted = names[: nodes // 5]
        run = Run(nodes, setup.pools, len(alerted), -(-len(alerted) // ALERTS_PER_POST))
        cluster.latency = setup.latency_s
        cluster.server.thread_niceness = setup.api_niceness
        proc, port, log = start_remediator(cluster, setup, workdir, nodes)
        try:
            run.rest_rate = rest_rate(cluster, setup.rest_s)
            storm(cluster, port, proc, log, alerted, pool_of, disrupt_limit, setup.timeout, run)
        finally:
            stop_group(proc, grace=10)
        cluster.latency = 0.0
        replay_budgets(cluster, cordon_limit, disrupt_limit, run)
        run.pass_ms = decision_cpu_ms(cluster, policy)
    return run


def storm(cluster: FakeCluster, port: int, proc: subprocess.Popen[bytes], log: Path, alerted: list[str],
          pool_of: dict[str, str], disrupt_limit: dict[str, int], timeout: float, run: Run) -> None:
    """The storm's firing posts until every decision is made, their repeats, then their resolutions."""
    progress = Progress(cluster, alerted, pool_of)
    with cluster.lock:
        calls_before = Counter(cluster.calls)
        cluster.peak_in_flight = 0
    cpu_before = proc_cpu(proc.pid)
    queue_before = run_queue(proc.pid)
    passes_before = metric(port, "gpuhealth_remediator_reconcile_passes_total")
    throttled_before = metric(port, "gpuhealth_remediator_api_throttled_seconds_total")
    started = progress.started = time.monotonic()
    run.latency_ms["firing"] = post_all(port, bodies(alerted, "firing"))
    wait_until("every decision", lambda: progress.decided(disrupt_limit), timeout, proc, log)
    run.decided_s = time.monotonic() - started
    run.recorded_s, run.cordoned_s = progress.recorded_s, progress.cordoned_s
    with cluster.lock:
        run.calls = Counter(cluster.calls) - calls_before
        run.peak_in_flight = cluster.peak_in_flight
    run.actions = count_actions(cluster, alerted)
    run.cpu_s = proc_cpu(proc.pid) - cpu_before
    run.passes = metric(port, "gpuhealth_remediator_reconcile_passes_total") - passes_before
    run.throttled_s = metric(port, "gpuhealth_remediator_api_throttled_seconds_total") - throttled_before
    run.latency_ms["repeat"] = post_all(port, bodies(alerted, "firing"))
    started = time.monotonic()
    run.latency_ms["resolved"] = post_all(port, bodies(alerted, "resolved"))
    wait_until("every resolution recorded", progress.resolved, timeout, proc, log)
    run.resolved_s = time.monotonic() - started
    run.rss_mb = proc_rss_mb(proc.pid)
    run.cpus = allowed_cpus(proc.pid)
    queue_after = run_queue(proc.pid)
    run.receiver_cpu_s = queue_after[0] - queue_before[0]
    run.receiver_queued_s = queue_after[1] - queue_before[1]


def decision_cpu_ms(cluster: FakeCluster, policy: Any) -> float:
    """What a pass computes before it acts, on the fleet as the storm left it (2,000 nodes in an episode at
    10,000): the views, the budget ledger and every node's ladder decision, with the same functions the
    remediator runs (evaluate), on one core, here where no other thread competes. The best of 3."""
    from gpuhealth.remediator.decide.job_start import JobRecord
    from gpuhealth.remediator.decide.plan import evaluate
    from gpuhealth.remediator.decide.views import build_views

    with cluster.lock:
        nodes = [json.loads(json.dumps(n)) for n in cluster.nodes.values()]
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in cluster.pods.values():
            by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        views = build_views(nodes, policy, lambda name: by_node.get(name, []), lambda job: JobRecord("running"))
        evaluate(views, policy, datetime.now(UTC), {}, None)
        best = min(best, time.process_time() - started)
    return 1000 * best


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def report(run: Run) -> None:
    every = [v for values in run.latency_ms.values() for v in values]
    p99 = pct(every, 99)
    print(f"\n== {run.nodes} nodes in {run.pools} pools: {run.alerts} fatal alerts in {run.posts} posts "
          f"of up to {ALERTS_PER_POST}")
    print(f"{'figure':<44} {'measured':>12}   target")
    for phase, values in run.latency_ms.items():
        print(f"{'webhook ' + phase + ' median / p99 (ms)':<44} {statistics.median(values):>5.1f} / "
              f"{pct(values, 99):<5.1f}  p99 < {TARGET_P99_MS:.0f}")
    print(f"{'webhook all posts p99 (ms)':<44} {p99:>12.1f}   < {TARGET_P99_MS:.0f}  "
          f"{'ok' if p99 < TARGET_P99_MS else 'MISSED'}")
    print(f"{'every alert recorded (s after first post)':<44} {run.recorded_s or 0:>12.2f}   -")
    print(f"{'every cordon written (s after first post)':<44} {run.cordoned_s or 0:>12.2f}   -")
    print(f"{'every decision made (s after first post)':<44} {run.decided_s:>12.2f}   < {TARGET_DECIDED_S:.0f}  "
          f"{'ok' if (run.decided_s or 0) < TARGET_DECIDED_S else 'MISSED'}")
    print(f"{'every resolution recorded (s)':<44} {run.resolved_s:>12.2f}   -")
    print(f"{'budget violations (cordoned, disrupted)':<44} {len(run.violations):>12}   0  "
          f"{'ok' if not run.violations else 'VIOLATED'}")
    for budget, (used, limit) in run.peaks.items():
        print(f"{'  peak ' + budget + ' in a pool / its limit':<44} {f'{used} / {limit}':>12}")
    print(f"{'remediator CPU until decided (s)':<44} {run.cpu_s:>12.2f}   -")
    print(f"{'reconcile passes until decided':<44} {run.passes:>12.0f}   -")
    print(f"{'remediator RSS at the end (MB)':<44} {run.rss_mb:>12.0f}   -")
    print(f"{'remediator processes may run on CPUs':<44} {run.cpus:>12}   -")
    print(f"{'receiver threads on a CPU / waiting for one (s)':<44} "
          f"{f'{run.receiver_cpu_s:.1f} / {run.receiver_queued_s:.1f}':>12}   (the whole storm)")
    print(f"{'decisions of one pass over the fleet (CPU ms)':<44} {run.pass_ms:>12.0f}   < interval (10 s)")
    actions = sum(run.actions[a] for a in ("cordon", "drain", "reboot_job"))
    print(f"actions: {dict(run.actions)} (cordon + drain + reboot Job = {actions})")
    print(f"{'Kubernetes API calls until decided':<44} {sum(run.calls.values()):>12}   "
          f"per action {sum(run.calls.values()) / max(1, actions):.2f}")
    for (verb, resource), count in sorted(run.calls.items(), key=lambda kv: -kv[1]):
        print(f"  {verb + ' ' + resource:<42} {count:>12}   per action {count / max(1, actions):.2f}")
    print(f"{'most API requests served at once':<44} {run.peak_in_flight:>12}   -")
    print(f"{'seconds requests waited for the rate limit':<44} {run.throttled_s:>12.1f}   -")
    print(f"{'API requests a second at rest (before)':<44} {sum(run.rest_rate.values()):>12.2f}   -")
    for (verb, resource), rate in sorted(run.rest_rate.items(), key=lambda kv: -kv[1]):
        print(f"  {verb + ' ' + resource:<42} {rate:>12.2f}")
    lists = run.calls[("list", "nodes")]
    print(f"{'  node LISTs (a watch cache: 0 per pass)':<44} {lists:>12}   0 per pass")
    for violation in run.violations[:10]:
        print(f"  VIOLATION {violation}")


def growth(runs: list[Run]) -> None:
    if len(runs) < 2:
        return
    base = runs[0]
    print(f"\n== growth against {base.nodes} nodes (linear: the figure grows as the fleet)")
    print(f"{'nodes':>8} {'x fleet':>8} {'cordoned s':>10} {'decided s':>10} {'x':>6} {'CPU s':>8} {'x':>6} "
          f"{'pass ms':>8} {'x':>6} {'calls/action':>13} {'p99 ms':>7}")
    for r in runs:
        ratio = r.nodes / base.nodes
        per_pass, base_pass = r.pass_ms, base.pass_ms
        actions = sum(r.actions[a] for a in ("cordon", "drain", "reboot_job"))
        p99 = pct([v for values in r.latency_ms.values() for v in values], 99)
        decided_x = (r.decided_s or 0) / (base.decided_s or 1)
        print(f"{r.nodes:>8} {ratio:>8.1f} {r.cordoned_s or 0:>10.2f} {r.decided_s or 0:>10.2f} {decided_x:>6.1f} "
              f"{r.cpu_s:>8.2f} {r.cpu_s / max(0.01, base.cpu_s):>6.1f} {per_pass:>8.0f} "
              f"{per_pass / max(0.01, base_pass):>6.1f} {sum(r.calls.values()) / max(1, actions):>13.2f} {p99:>7.1f}")


def place(cpus: int) -> tuple[frozenset[int] | None, str]:
    """The remediator's CPUs: the first `cpus` of those this process may use; this process (and the posting process
    it starts) keeps the rest. None where `cpus` is 0 or no CPU would be left; and what was done, in words."""
    allowed = sorted(os.sched_getaffinity(0))
    if cpus <= 0:
        return None, f"every process on every CPU ({len(allowed)})"
    if len(allowed) <= cpus:
        return None, (f"every process on every CPU: {len(allowed)} CPU(s) leave none for the API server beside "
                      f"{cpus} for the remediator")
    mine, rest = frozenset(allowed[:cpus]), frozenset(allowed[cpus:])
    os.sched_setaffinity(0, rest)  # before the API server's threads and the posting process start: they inherit it
    return mine, f"the remediator on CPU(s) {sorted(mine)}, the API server and the posts on {sorted(rest)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="500, 1,000 and 2,000 nodes (make bench)")
    parser.add_argument("--sizes", help="comma-separated fleet sizes (default 1000,3000,10000)")
    parser.add_argument("--pools", type=int, default=20, help="pools the fleet is split into (default 20)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for each phase (default 600)")
    parser.add_argument("--latency-ms", type=float, default=10.0,
                        help="milliseconds every API request waits before it is served (default 10)")
    parser.add_argument("--api-niceness", type=int, default=API_NICENESS,
                        help=f"niceness of the fake API server's request threads (default {API_NICENESS}; with "
                        "--remediator-cpus 0 they compete for the remediator's CPUs, as equals at 0)")
    parser.add_argument("--remediator-cpus", type=int, default=1,
                        help="CPUs of the remediator's own (default 1); this process (the fake API server) and the "
                        "posting process get the others. 0: every process on every CPU")
    parser.add_argument("--rest-seconds", type=float, help="seconds at rest measured before the storm "
                        "(default 30; --quick 10)")
    parser.add_argument("--parallel-writes", type=int, help="policy kube_api.parallel_writes (default: the policy's)")
    parser.add_argument("--qps", type=int, help="policy kube_api.qps, 0: no limit (default: the policy's)")
    parser.add_argument("--burst", type=int, help="policy kube_api.burst (default: the policy's)")
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("500,1000,2000" if args.quick else "1000,3000,10000")).split(",")]
    if any(s < 5 * args.pools for s in sizes):
        parser.error("every size needs at least 5 nodes per pool (one alert per pool)")
    kube_api = {k: v for k, v in (("parallel_writes", args.parallel_writes), ("qps", args.qps),
                                  ("burst", args.burst)) if v is not None}
    remediator_cpus, placement = place(args.remediator_cpus)
    setup = Setup(args.pools, args.timeout, args.latency_ms / 1000,
                  args.rest_seconds if args.rest_seconds is not None else (10.0 if args.quick else 30.0), kube_api,
                  args.api_niceness, remediator_cpus)
    effective = parse_policy(policy_text(kube_api)).kube_api
    print(f"remediator storm: sizes {sizes}, {args.pools} pools, {args.latency_ms:g} ms a request (API server "
          f"threads at niceness {args.api_niceness}), kube_api qps {effective.qps} burst {effective.burst} "
          f"parallel_writes {effective.parallel_writes}; {placement}; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (figures are noisy when other work shares the machine)")
    runs = []
    with tempfile.TemporaryDirectory(prefix="storm-") as tmp:
        for size in sizes:
            run = run_size(size, setup, Path(tmp))
            report(run)
            runs.append(run)
    growth(runs)
    failed = [r for r in runs if r.violations]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
