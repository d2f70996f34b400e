"""The whole gpuhealth pipeline on 127.0.0.1, with real parts where they can exist here.

- a fake Kubernetes API server (tests/fakes/apiserver/, real HTTP) holding a small GPU fleet;
- one real `gpuhealth-exporter` process per simulated node, fed by inputs the tests can break:
  a kernel log it follows, an EFA sysfs tree, a `dcgmi` stand-in that can answer, fail or hang, and
  a saved dcgm-exporter scrape (a healthy L4 by default; NodeOptions picks another per node);
- Debian's real Prometheus, scraping the exporters (1 s) with the project's rules/, time-scaled;
- Debian's real Alertmanager, routing with the project's examples/alertmanager.yml to the remediator
  with a Bearer token;
- the real `gpuhealth-remediator serve` against the fake API server.

Time scaling: production rules count in minutes. Here every duration in the rules (`for`,
`keep_firing_for`, range windows, offsets) is divided by TIME_SCALE, so a 5-minute `for` takes 10 s;
thresholds are unchanged. Everything is started on free ports in a temporary directory, waited on
by polling (never fixed sleeps), and stopped on exit.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from gpuhealth.exporter.diagnose.cli import main as judge
from tests.e2e.chart_pods import SA_MOUNT, Addresses, Pod, ServiceProxy, find, materialize
from tests.e2e.operator_prometheus import pod_monitor, rule_groups, service_monitor
from tests.fakes.apiserver import FakeCluster
from tests.fakes.apiserver.dra import recorded_mig_layout
from tests.fakes.apiserver.objects import rfc3339
from tests.support import chart_rbac, process_tree
from tests.support import kube_prometheus_stack as kps
from tests.support.chart_render import render_fresh as render
from tests.support.operator_alertmanager import generate
from tests.support.sysfs_tree import build_efa_sysfs

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FIXTURES = ROOT / "tests" / "fixtures"
HEALTHY_DCGM_EXPORTER = FIXTURES / "dcgm" / "metrics_kops_aws_L4_580.105.08.prom"
NVML_STANDIN = Path(__file__).resolve().parent / "nvml_standin"  # NodeOptions.mig: its exporter's pynvml
TIME_SCALE = 30
MIN_WINDOW_SECONDS = 3  # a range shorter than this holds too few 1 s samples for rate()/increase()
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies, however it dies (Linux)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seconds(text: str) -> float:
    return sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(text))


def _scaled(text: str, floor: float = 0) -> str:
    seconds = max(floor, _seconds(text) / TIME_SCALE)
    return f"{max(1, round(seconds))}s"


def scale_expr(expr: str) -> str:
    """Divide every range, subquery and offset duration in a PromQL expression by TIME_SCALE."""
    def rng(m: re.Match[str]) -> str:
        inner = m.group(1)
        if ":" in inner:  # subquery [range:step]
            r, step = inner.split(":", 1)
            return f"[{_scaled(r, MIN_WINDOW_SECONDS)}:{_scaled(step) if step else ''}]"
        return f"[{_scaled(inner, MIN_WINDOW_SECONDS)}]"

    expr = re.sub(r"\[((?:\d+(?:ms|[smhdwy]))+(?::(?:(?:\d+(?:ms|[smhdwy]))+)?)?)\]", rng, expr)
    return re.sub(r"\boffset\s+((?:\d+(?:ms|[smhdwy]))+)", lambda m: f"offset {_scaled(m.group(1))}", expr)


def scale_rule_groups(groups: list[dict[str, Any]], dst: Path) -> None:
    """Rule groups (a PrometheusRule's), every duration divided by TIME_SCALE, as a Prometheus rule file."""
    doc = {"groups": [dict(g, rules=[dict(r) for r in g.get("rules", [])]) for g in groups]}
    for group in doc["groups"]:
        if "interval" in group:
            group["interval"] = "1s"
        for rule in group.get("rules", []):
            rule["expr"] = scale_expr(str(rule["expr"]))
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = _scaled(str(rule[key]))
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))


def http_get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def http_json(url: str, timeout: float = 2.0) -> Any:
    return json.loads(http_get(url, timeout))


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
    """Poll until check() returns something truthy; fail with `what` and the last error on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except (OSError, ValueError, KeyError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(every)
    raise TimeoutError(f"waited {timeout:g}s for {what}; last: {last!r}")


DCGMI = """#!/bin/sh
# dcgmi stand-in for a simulated node: answers with recorded outputs, fails or hangs on request.
here=$(dirname "$0")
[ -e "$here/dcgmi.hang" ] && {{ echo $$ >> "$here/dcgmi.pid"; exec sleep 120; }}
[ -e "$here/dcgmi.fail" ] && {{ echo "Error: unable to establish a connection to the specified host" >&2; exit 1; }}
case "$*" in
  "health -s a") echo "Health monitor systems set successfully." ;;
  "health -c -j") cat '{fixtures}/dcgm/virtualclient_DCGMIHealthCheckResults.json' ;;
  "diag -r 1 -j") cat '{fixtures}/dcgm/virtualclient_DCGMIDiag_r1_results.json' ;;
  *) exit 64 ;;
esac
"""

# Chart values for the e2e: the time scale, and the node inputs that stand in for hardware. Everything else is
# the chart's default rendering (a scenario adds its own values).
E2E_EXPORTER_CONFIG: dict[str, Any] = {
    "probes": {"kmsg": {"interval": 0.5, "deadline": 2}, "nvml": {"enabled": False},  # no GPU here
               "dcgm": {"enabled": True, "interval": 1, "deadline": 1},  # a dcgmi stand-in on PATH
               "diag": {"enabled": False}, "efa": {"interval": 2, "deadline": 2},
               "dcgm_exporter": {"interval": 2, "deadline": 2}},
    "condition_interval": 1, "fault_window": 30,
    "dcgm_exporter": "http://{host_ip}:9400/metrics",  # docs/install.md's node-local recipe (a hostPort)
    "boot_id_file": "/proc/sys/kernel/random/boot_id",  # its default, named so that the node's kernel answers
}
MONITORING_ON = {kind: {"enabled": True} for kind in ("podMonitor", "serviceMonitor", "prometheusRule",
                                                       "alertmanagerConfig")}
RELEASE = NAMESPACE = "gpuhealth"
EFA_RESOURCE, EFA_DEVICES = "vpc.amazonaws.com/efa", 2  # each simulated node's EFA interfaces
GPU_RESOURCE, NODE_GPUS = "nvidia.com/gpu", 8  # and its GPUs, as the device plugin advertises them
DCGM_EXPORTER_PORT = 9400


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Helm's values merge: maps merge key by key, anything else in `top` replaces."""
    out = dict(base)
    for key, value in top.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass(frozen=True)
class NodeOptions:
    """How one simulated node differs from the rest of the fleet (the defaults: a healthy node)."""

    dcgm_exporter: Path = HEALTHY_DCGM_EXPORTER  # the scrape its dcgm-exporter serves
    gpus_expected: int | None = None  # --gpus-expected (None: unknown, nothing to compare)
    enable: tuple[str, ...] = ()  # probes to turn on beyond the rendered config's (e.g. diag, nvml)
    dra: bool = False  # its 8 GPUs published by NVIDIA's DRA driver (as on a real EKS H100 node), an inference
    # pod on each (namespace serve, its ResourceClaim allocated that GPU)
    # with dra: MIG on gpu-1 (the recorded H100 layout, tests/fakes/apiserver/dra.py's recorded_mig_layout), an
    # inference pod on each of its MIG devices instead of the GPU, and the NVML probe on, answered by an NVML stand-in
    # with the same GPUs and MIG devices (tests/e2e/nvml_standin)
    mig: bool = False
    # it registers with the burn-in startup taint (a Karpenter NodePool's startupTaints), made now, no pod on it yet
    burn_in: bool = False
    gpu_operator: bool = False  # the NVIDIA GPU Operator's operands run there (nvidia.com/gpu.deploy.* "true", their
    # DaemonSet pods in gpu-operator), and hold the GPUs open as they do: a reset fails while any of them runs


# The GPU Operator's operands that hold a GPU open, with their DaemonSet pods' app label (as the Operator deploys them)
GPU_OPERATOR_OPERANDS = {"device-plugin": "nvidia-device-plugin-daemonset", "gpu-feature-discovery":
                         "gpu-feature-discovery", "dcgm-exporter": "nvidia-dcgm-exporter", "dcgm": "nvidia-dcgm"}
GPU_OPERATOR_NS = "gpu-operator"
BURN_IN_TAINT = {"key": "gpuhealth.io/burn-in", "effect": "NoSchedule"}  # the policy's default burn_in.taint


def _write_nvml_standin(path: Path, gpus: list[dict[str, Any]], migs: dict[str, list[dict[str, Any]]]) -> None:
    """What the NVML stand-in answers (tests/e2e/nvml_standin): the GPUs the DRA driver published (UUID, bus id in
    NVML's form) and each MIG GPU's devices, with the GPU and compute instance ids of the recorded layout."""
    layout = {m.uuid: m for m in recorded_mig_layout()}
    out = []
    for g in gpus:
        mig = []
        for slot, device in enumerate(migs.get(g["name"], [])):
            m = layout[device["attributes"]["uuid"]["string"]]
            mig.append({"slot": slot, "gpu_instance": m.gpu_instance, "compute_instance": m.compute_instance,
                        "profile": m.profile, "uuid": m.uuid})
        out.append({"uuid": g["attributes"]["uuid"]["string"],
                    "bus_id": f"0000{g['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper(),
                    "mig": mig})
    path.write_text(json.dumps(out))


class _ScrapeServer(ThreadingHTTPServer):
    daemon_threads = True


def _serve_file(path: Path, ip: str, port: int) -> _ScrapeServer:
    """A node's dcgm-exporter on its hostPort: /metrics answers with the file as it is now."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/metrics" or not path.exists():
                self.send_error(404)
                return
            body = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = _ScrapeServer((ip, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name=f"dcgm-exporter-{ip}").start()
    return server


@dataclass
class SimNode:
    """One GPU node: its exporter pod, as the rendered DaemonSet runs it, and the inputs a test can break."""

    name: str
    pool: str
    dir: Path
    stack: Stack
    host_ip: str
    pod_ip: str
    token: str
    proc: subprocess.Popen[bytes] | None = None
    boot: int = 1
    options: NodeOptions = field(default_factory=NodeOptions)
    pod: Pod | None = None

    @property
    def kmsg(self) -> Path:
        return self.dir / "kmsg.log"

    @property
    def port(self) -> int:
        assert self.pod is not None
        return self.pod.ports["metrics"]

    def prepare(self) -> None:
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        (self.dir / "pod-resources").mkdir(exist_ok=True)  # the kubelet's socket dir (no kubelet: mapping unknown)
        (self.dir / "boot_id").write_text(f"boot-{self.boot}\n")
        if not self.kmsg.exists():
            self.kmsg.write_text("")
        self.dcgm_exporter = _serve_file(self.dir / "dcgm-exporter.prom", self.host_ip, DCGM_EXPORTER_PORT)

    def start(self) -> None:
        # as this node's own dcgm-exporter serves it: NODE_NAME set, so Hostname is the node's name (the
        # recording's Hostname is the node it was taken on, and the probe drops another host's samples)
        scrape = self.options.dcgm_exporter.read_text()
        scrape = re.sub(r'\b([Hh]ostname)="[^"]*"', lambda m: f'{m.group(1)}="{self.name}"', scrape)
        (self.dir / "dcgm-exporter.prom").write_text(scrape)
        self.pod = materialize(
            self.stack.workload("DaemonSet", "gpuhealth-exporter"), self.stack.docs,
            pod_name=f"gpuhealth-exporter-{self.name}", node=self.name, ip=self.pod_ip, host_ip=self.host_ip,
            root=self.dir / "pod", token=self.token,
            host_paths={"/dev/kmsg": self.kmsg, "/sys": self.dir / "sysfs" / "sys",
                        "/var/lib/gpuhealth": self.dir / "state",
                        "/var/lib/kubelet/pod-resources": self.dir / "pod-resources"},
            kernel_files={"/proc/sys/kernel/random/boot_id": self.dir / "boot_id"})
        # Stand-ins for what a container gets from the node and the cluster: the kernel log as a file (the
        # device cannot be faked), the API server's address and the projected token's directory.
        standins = ["--kmsg-file", str(self.pod.local("/dev/kmsg")), "--kube-api", self.stack.cluster.url,
                    "--service-account-dir", str(self.pod.local(SA_MOUNT))]
        env = {"PYTHONPATH": str(NVML_STANDIN), "GPUHEALTH_E2E_NVML": str(self.dir / "nvml.json")} \
            if self.options.mig else {}
        self.proc = self.stack.run_pod(f"exporter-{self.name}", self.pod, standins + self._option_flags(),
                                       path_prefix=[self.dir / "bin"], env=env)

    def _option_flags(self) -> list[str]:
        enable = (*self.options.enable, *(("nvml",) if self.options.mig and "nvml" not in self.options.enable
                                          else ()))
        flags = ["--enable", ",".join(enable)] if enable else []
        if self.options.gpus_expected is not None:
            flags += ["--gpus-expected", str(self.options.gpus_expected)]
        return flags

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # A dcgmi stand-in left hanging runs in its own session (the exporter's hard deadline): end it.
        pidfile = self.dir / "bin" / "dcgmi.pid"
        if pidfile.exists():
            for pid in pidfile.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                    os.killpg(int(pid), signal.SIGKILL)
            pidfile.unlink(missing_ok=True)

    def shutdown(self) -> None:
        self.stop()
        server = getattr(self, "dcgm_exporter", None)
        if server is not None:
            server.shutdown()
            server.server_close()

    def restart(self, options: NodeOptions | None = None) -> None:
        """The exporter restarts, with new options if given (other flags, another dcgm-exporter scrape);
        the node does not reboot: its kernel log and the exporter's place in it stay."""
        self.stop()
        if options is not None:
            self.options = options
        self.start()

    def reboot(self) -> None:
        """What a reboot does to the signals: a new boot id, a fresh kernel log and a new exporter process. The
        state on the hostPath survives a reboot; reading /dev/kmsg, the exporter drops it on the new boot id.
        The file that stands in for the device cannot tell a reboot (a followed kern.log spans boots), so the
        stand-in drops it here, as the device reader would."""
        self.stop()
        self.boot += 1
        (self.dir / "boot_id").write_text(f"boot-{self.boot}\n")
        self.kmsg.write_text("")
        for state in (self.dir / "state").glob("kmsg-state.json*"):
            state.unlink()
        self.start()

    def log_kernel(self, *lines: str) -> None:
        stamp = time.monotonic()
        with self.kmsg.open("a") as f:
            for line in lines:
                f.write(f"[{stamp:12.6f}] {line}\n")

    def xid(self, xid: int, pci: str = "0000:9b:00", detail: str = "", gpu_instance: int | None = None) -> None:
        """An Xid line as the driver prints it; on a MIG GPU instance with `GPU-I:%02u` (kernel_rc.c)."""
        text = detail or {79: "GPU has fallen off the bus.", 13: "Graphics SM Warp Exception"}.get(xid, "x")
        where = f"PCI:{pci}" if gpu_instance is None else f"PCI:{pci} GPU-I:{gpu_instance:02d}"
        self.log_kernel(f"NVRM: Xid ({where}): {xid}, pid=4242, name=python3, {text}")

    def sxid(self, sxid: int, pci: str = "0000:c3:00.0", fatal: bool = True, detail: str = "") -> None:
        severity = "Fatal" if fatal else "Non-fatal"
        self.log_kernel(f"nvidia-nvswitch0: SXid (PCI:{pci}): {sxid}, {severity}, {detail or 'Link 28 error'}")

    def remove_efa(self, device: str = "rdmap1s27") -> None:
        """The EFA device disappears from sysfs (a lost or unbound adapter)."""
        link = self.dir / "sysfs" / "sys" / "class" / "infiniband" / device
        shutil.rmtree(link.resolve(), ignore_errors=True)
        link.unlink(missing_ok=True)

    def dcgmi(self, mode: str) -> None:
        """ok | fail | hang"""
        for flag in ("hang", "fail"):
            (self.dir / "bin" / f"dcgmi.{flag}").unlink(missing_ok=True)
        if mode != "ok":
            (self.dir / "bin" / f"dcgmi.{mode}").write_text("")


@dataclass
class Stack:
    """The pipeline as the chart deploys it. `values` are a scenario's chart values (a documented toggle), over
    the e2e's (time scale, stand-in inputs, every monitoring object on); `policy` is YAML for remediator.policy."""

    pools: dict[str, int] = field(default_factory=lambda: {"pool-a": 8, "pool-b": 4})
    policy: str = ""
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpuhealth-e2e-")))
    keep: bool = False
    node_options: dict[str, NodeOptions] = field(default_factory=dict)  # by node name; others healthy
    values: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)  # what the user applies beside the chart (Secrets)

    def __post_init__(self) -> None:
        self.cluster = FakeCluster()
        self.nodes: dict[str, SimNode] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.prom_port, self.am_port = free_port(), free_port()
        self.addresses = Addresses()
        self.remediators: dict[str, Pod] = {}
        self.services: list[ServiceProxy] = []
        self._stop = threading.Event()
        self.rebooted: list[str] = []
        self.resets: list[tuple[str, list[str]]] = []  # each reset Job's node and what held the GPU then
        self.evidence: list[str] = []  # the nodes whose evidence Job a stand-in node ran
        self.diagnosed: list[tuple[str, int]] = []  # each diagnostic Job run by a stand-in node, and its judge's exit
        self.extra_scrapes: list[dict[str, Any]] = []
        self.chart_values = deep_merge({
            "exporter": {"config": E2E_EXPORTER_CONFIG},
            "remediator": {"interval": 1, "alertmanagerURL": self.alertmanager,
                           "policy": yaml.safe_load(self.policy) if self.policy else {}},
            "monitoring": MONITORING_ON,
        }, self.values)
        self.rendered = render(self.chart_values)
        self.docs = [*self.rendered, *self.objects]

    def workload(self, kind: str, name: str) -> dict[str, Any]:
        return find(self.docs, kind, name, NAMESPACE)

    # --- URLs ---
    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def alertmanager(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    @property
    def remediator(self) -> str:
        """The remediator's Service, as Alertmanager reaches it (balanced over the ready replicas)."""
        return self.services[0].url

    def leader(self) -> str:
        """The remediator pod holding the Lease (its POD_NAME is the holder identity). In a dry run no replica
        takes the Lease and each decides on its own: the first replica then."""
        with self.cluster.lock:
            holders = [str(lease["spec"].get("holderIdentity", "")) for lease in self.cluster.leases.values()]
        names = [name for name in self.remediators if any(h.startswith(name) for h in holders)]
        if not names and self.chart_values["remediator"].get("dryRun"):
            return next(iter(self.remediators))
        if not names:
            raise LookupError(f"no remediator holds the Lease (holders: {holders})")
        return names[0]

    def leader_url(self) -> str:
        """The leader's metrics port: its /metrics has the budget, the breaker and the actions."""
        pod = self.remediators[self.leader()]
        return f"http://{pod.ip}:{pod.ports['metrics']}"

    # --- lifecycle ---
    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.cluster.__enter__()
        self.cluster.load_admission(self.docs)
        self.cluster.load_rbac(self.docs)  # each program gets what the chart grants its ServiceAccount, no more
        self._fleet()
        for node in self.nodes.values():
            node.prepare()
            node.start()
        self._start_remediators()
        self._start_prometheus()
        self._start_alertmanager()
        self._agent = threading.Thread(target=self._node_agent, daemon=True, name="e2e-node-agent")
        self._agent.start()
        self.wait_ready()

    def close(self) -> None:
        self._stop.set()
        agent = getattr(self, "_agent", None)
        if agent is not None:
            agent.join(15)  # a reboot in progress finishes before its node is stopped
        # Each part is stopped even when one before it fails to: a node's dcgm-exporter left listening would
        # hold its address for the rest of the session.
        with contextlib.ExitStack() as stopping:
            stopping.callback(self._close_cluster)
            for node in self.nodes.values():
                stopping.callback(node.shutdown)
            for name in list(self.procs):
                stopping.callback(self.stop_process, name)
            for service in self.services:
                stopping.callback(service.close)
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _close_cluster(self) -> None:
        with contextlib.suppress(Exception):
            self.cluster.__exit__(None, None, None)

    def _fleet(self) -> None:
        unknown = set(self.node_options) - {f"{p}-gpu-{i}" for p, n in self.pools.items() for i in range(n)}
        if unknown:
            raise ValueError(f"node_options for nodes not in the fleet: {sorted(unknown)}")
        for pool, count in self.pools.items():
            for i in range(count):
                name = f"{pool}-gpu-{i}"
                options = self.node_options.get(name, NodeOptions())
                self.cluster.add_node(name, pool=pool, created=rfc3339(self.cluster.clock()),
                                      taints=[BURN_IN_TAINT] if options.burn_in else None)
                # 2 EFA interfaces attached, as the EFA device plugin advertises them: what EFADevicesMissing
                # measures against (gpuhealth/exporter/efa_expected.py), beside the 2 devices in its sysfs below
                # and 8 GPUs, as the device plugin advertises them: what the diagnostic Job counts against
                self.cluster.update_node(name, lambda n: n["status"].update(
                    capacity={EFA_RESOURCE: str(EFA_DEVICES), GPU_RESOURCE: str(NODE_GPUS)},
                    allocatable={EFA_RESOURCE: str(EFA_DEVICES), GPU_RESOURCE: str(NODE_GPUS)}))
                d = self.workdir / "nodes" / name
                (d / "bin").mkdir(parents=True)
                build_efa_sysfs(d / "sysfs", [(f"rdmap{n}s27", "0xefa1", {}) for n in range(EFA_DEVICES)])
                script = d / "bin" / "dcgmi"
                script.write_text(DCGMI.format(fixtures=FIXTURES))
                script.chmod(0o755)
                token = f"exporter-{name}"
                pod_name = f"gpuhealth-exporter-{name}"
                self.cluster.add_service_account_token(token, NAMESPACE, "gpuhealth-exporter", node=name, pod=pod_name)
                self.nodes[name] = SimNode(name, pool, d, self, self.addresses.take(), self.addresses.take(), token,
                                           options=options)
                # a training job on every node (but a new one: the burn-in taint keeps pods off it), protected by a
                # PodDisruptionBudget
                if not options.burn_in:
                    self.cluster.add_pod(name, f"train-{name}", namespace="ml", labels={"app": "train"})
                if options.gpu_operator:
                    self.cluster.update_node(name, lambda n: n["metadata"]["labels"].update(
                        {f"nvidia.com/gpu.deploy.{op}": "true" for op in GPU_OPERATOR_OPERANDS}))
                    self._gpu_operator(name)
                if options.dra and options.mig:
                    gpus, migs = self.cluster.dra.publish_mig_gpus(name, "gpu-1")
                    _write_nvml_standin(d / "nvml.json", gpus, {"gpu-1": migs})
                    devices = [*(g for g in gpus if g["name"] != "gpu-1"), *migs]
                elif options.dra:
                    devices = self.cluster.dra.publish_gpus(name)
                if options.dra:
                    for device in devices:
                        pod = f"infer-{name}-{device['name']}"
                        self.cluster.add_pod(name, pod, namespace="serve", labels={"app": "infer"})
                        self.cluster.dra.add_claim("serve", f"{pod}-gpu", [("gpu.nvidia.com", name, device["name"])],
                                                   [pod])
        self.cluster.add_pdb("ml", {"app": "train"}, disruptions_allowed=1)

    def _start_remediators(self) -> None:
        deployment = self.workload("Deployment", "gpuhealth-remediator")
        for i in range(int(deployment["spec"].get("replicas", 1))):
            self.start_remediator(f"gpuhealth-remediator-{i}")
        self.services.append(ServiceProxy(find(self.docs, "Service", "gpuhealth-remediator", NAMESPACE),
                                          8080, self.addresses.take(), list(self.remediators.values())))

    def start_remediator(self, name: str | None = None) -> None:
        """One replica of the rendered Deployment (a new one, or the named one again, on its old address)."""
        name = name or next(iter(self.remediators))
        old = self.remediators.get(name)
        token = f"remediator-{name}"
        self.cluster.add_service_account_token(token, NAMESPACE, "gpuhealth-remediator", pod=name)
        pod = materialize(self.workload("Deployment", "gpuhealth-remediator"), self.docs, pod_name=name,
                          node="control-plane", ip=old.ip if old else self.addresses.take(), host_ip="127.0.0.1",
                          root=self.workdir / "pods" / name, host_paths={}, token=token)
        # The kubernetes client's in-cluster config insists on https and fixed paths: a kubeconfig with the same
        # service-account token stands in for it.
        kubeconfig = pod.root / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(chart_rbac.kubeconfig(self.cluster, token)))
        if old is not None:
            for service in self.services:
                service.pods = [pod if p.name == name else p for p in service.pods]
        self.remediators[name] = pod
        self.run_pod(name, pod, ["--kubeconfig", str(kubeconfig)])

    def run_pod(self, name: str, pod: Pod, standins: list[str], path_prefix: Sequence[Path] = (),
                env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        path = ":".join([*(str(p) for p in path_prefix), str(BIN), "/usr/local/bin", "/usr/bin", "/bin"])
        env = {"PATH": path, "HOME": str(pod.root), "LANG": "C.UTF-8", **pod.env, **(env or {})}
        argv = [shutil.which(pod.argv[0], path=path) or pod.argv[0], *pod.argv[1:], *standins]
        self._spawn(name, argv, env=env)
        return self.procs[name]

    def _start_prometheus(self) -> None:
        rules = self.workdir / "rules"
        rules.mkdir()
        for rule in (d for d in self.docs if d["kind"] == "PrometheusRule" and kps.selects(d)):
            scale_rule_groups(rule_groups(rule), rules / f"{rule['metadata']['name']}.yaml")
        path = self._write_prometheus_config()
        self._spawn("prometheus", ["prometheus", f"--config.file={path}", f"--storage.tsdb.path={self.workdir}/tsdb",
                                   f"--web.listen-address=127.0.0.1:{self.prom_port}", "--web.enable-lifecycle",
                                   "--log.level=warn"])

    def _node_labels(self, node: str) -> dict[str, str]:
        with self.cluster.lock:
            return dict(self.cluster.nodes[node]["metadata"].get("labels") or {})

    def _write_prometheus_config(self) -> Path:
        exporters = [n.pod for n in self.nodes.values() if n.pod is not None]
        scrapes = []
        for monitor in (d for d in self.docs if d["kind"] == "PodMonitor" and kps.selects(d)):
            scrapes += pod_monitor(monitor, exporters, self._node_labels, lambda d: _scaled(d, 1))
        for monitor in (d for d in self.docs if d["kind"] == "ServiceMonitor" and kps.selects(d)):
            service = find(self.docs, "Service", monitor["metadata"]["name"], NAMESPACE)
            scrapes += service_monitor(monitor, service, list(self.remediators.values()), lambda d: _scaled(d, 1))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(self.workdir / "rules" / "*.yaml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{self.am_port}"]}]}]},
            "scrape_configs": [*scrapes, *self.extra_scrapes],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start_training_job(self, job: str, ranks: list[tuple[str, float]], namespace: str = "ml") -> None:
        """A training job's ranks (node, step seconds each), each a process serving gpuhealth_training's metrics,
        scraped as docs/jobs.md's PodMonitor does (honor_labels: the job's own `job` label wins)."""
        targets = []
        for rank, (node, seconds) in enumerate(ranks):
            port = free_port()
            self._spawn(f"train-{job}-{rank}", [sys.executable, str(Path(__file__).with_name("training_rank.py")),
                                                "--job", job, "--rank", str(rank), "--node", node,
                                                "--port", str(port), "--step-seconds", str(seconds)])
            targets.append(f"127.0.0.1:{port}")
        self.extra_scrapes.append({"job_name": f"training-{job}", "honor_labels": True,
                                   "static_configs": [{"targets": targets, "labels": {"namespace": namespace}}]})
        self._write_prometheus_config()
        request = urllib.request.Request(f"{self.prometheus}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def _start_alertmanager(self) -> None:
        config = alertmanager_config(self.docs, self.workdir / "am-secrets", self._service_url)
        scale_route(config["route"])
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("alertmanager", ["prometheus-alertmanager", f"--config.file={path}",
                                     f"--storage.path={self.workdir}/am",
                                     f"--web.listen-address=127.0.0.1:{self.am_port}",
                                     "--cluster.listen-address=", f"--web.external-url={self.alertmanager}",
                                     "--log.level=warn"])

    def _service_url(self, url: str) -> str:
        """A cluster DNS URL (http://<service>.<namespace>.svc[.cluster.local]:<port>/...) to the Service's proxy."""
        parts = urllib.parse.urlsplit(url)
        host = (parts.hostname or "").split(".")
        if len(host) < 3 or host[2] != "svc":
            raise ValueError(f"{url}: not a Service URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        service = next((s for s in self.services if s.name == host[0] and s.port == port and host[1] == NAMESPACE),
                       None)
        if service is None:
            raise ValueError(f"{url}: no such Service and port in the rendering")
        return urllib.parse.urlunsplit((parts.scheme, f"{service.ip}:{service.port}", parts.path, parts.query, ""))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        self.procs[name] = process_tree.spawn(argv, stdout=log, stderr=log, start_new_session=True,
                                            preexec_fn=_die_with_parent,
                                            env=env if env is not None else {**os.environ, "POD_NAME": f"e2e-{name}"})
        log.close()

    def stop_process(self, name: str, kill: bool = False) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def alive(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_tail(self, name)}")

    def wait_ready(self) -> None:
        for name, url in (("prometheus", f"{self.prometheus}/-/ready"),
                          ("alertmanager", f"{self.alertmanager}/-/ready")):
            wait_for(f"{name} ready", lambda n=name, u=url: self.alive(n) or http_get(u))
        for name in self.remediators:
            wait_for(f"{name} ready", lambda n=name: self.alive(n) or n in self.services[0].ready())
        wait_for("a remediator to lead", self.leader_url)
        # Prometheus finds Alertmanager only after a few seconds: wait for it, never sleep.
        wait_for("Prometheus to discover Alertmanager",
                 lambda: http_json(f"{self.prometheus}/api/v1/alertmanagers")["data"]["activeAlertmanagers"])
        wait_for("every exporter target up", self._all_targets_up, timeout=90)
        wait_for("every probe healthy", lambda: self.query_value(
            'min(gpuhealth_probe_success{job="gpuhealth-exporter"})') == 1 and self.query_value(
            'count(gpuhealth_probe_success{probe="kmsg"})') == len(self.nodes), timeout=60)

    def _all_targets_up(self) -> bool:
        targets = http_json(f"{self.prometheus}/api/v1/targets")["data"]["activeTargets"]
        return len(targets) == len(self.nodes) + len(self.remediators) and all(t["health"] == "up" for t in targets)

    # --- what people do ---
    def hold(self, node: str, reason: str, by: str = "e2e") -> str:
        """`gpuhealth-remediator hold`: the remediator leaves the node alone until it is released."""
        result = subprocess.run([str(BIN / "gpuhealth-remediator"), "hold", node, "--reason", reason, "--by", by,
                                 "--policy", str(self.policy_file), "--kubeconfig", str(self.admin_kubeconfig)],
                                capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"hold {node} failed ({result.returncode}): {result.stdout}{result.stderr}")
        return result.stdout

    @property
    def policy_file(self) -> Path:
        """The policy as the remediator pods have it (the rendered ConfigMap)."""
        return next(iter(self.remediators.values())).local("/etc/gpuhealth/policy.yaml")

    @property
    def admin_kubeconfig(self) -> Path:
        path = self.workdir / "admin-kubeconfig"
        if not path.exists():
            path.write_text(yaml.safe_dump(chart_rbac.kubeconfig(self.cluster, chart_rbac.add_admin(self.cluster))))
        return path

    @property
    def webhook_token(self) -> str:
        """The token in the Secret the remediator mounts (rendered, or the user's existingSecret), which the
        AlertmanagerConfig names for Alertmanager too."""
        volumes = self.workload("Deployment", "gpuhealth-remediator")["spec"]["template"]["spec"]["volumes"]
        name = next(v["secret"]["secretName"] for v in volumes if v["name"] == "token")
        secret = find(self.docs, "Secret", name, NAMESPACE)
        return base64.b64decode(secret["data"]["token"]).decode()

    def post_alerts(self, body: dict[str, Any], token: str | None = None) -> int:
        """POST an Alertmanager webhook to the remediator's Service as Alertmanager would; the HTTP status."""
        token = self.webhook_token if token is None else token
        req = urllib.request.Request(f"{self.remediator}/alerts", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            return int(exc.code)

    # --- reading the pipeline ---
    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?query={urllib.parse.quote(promql)}"
        return list(http_json(url)["data"]["result"])

    def query_value(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def firing(self, alertname: str | None = None, node: str | None = None) -> list[dict[str, Any]]:
        alerts = http_json(f"{self.prometheus}/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["state"] == "firing" and (alertname is None or a["labels"]["alertname"] ==
                alertname) and (node is None or a["labels"].get("node") == node)]

    def cordoned(self, node: str) -> bool:
        n = self.cluster.node(node)
        return bool(n["spec"].get("unschedulable")) and any(
            t.get("key") == "gpuhealth.io/unhealthy" for t in n["spec"].get("taints") or [])

    def disrupted(self) -> list[str]:
        """Nodes gpuhealth has cordoned (its taint is on them)."""
        return sorted(name for name in self.nodes if self.cordoned(name))

    def jobs(self, node: str | None = None) -> list[dict[str, Any]]:
        with self.cluster.lock:
            jobs = [json.loads(json.dumps(j)) for j in self.cluster.jobs.values()]
        return [j for j in jobs if node is None or node in json.dumps(j["spec"])]

    def silence(self, matchers: dict[str, str], minutes: int = 60, comment: str = "on-call took over") -> str:
        now = time.time()
        body = {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in matchers.items()],
                "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 5)),
                "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + minutes * 60)),
                "createdBy": "e2e", "comment": comment}
        req = urllib.request.Request(f"{self.alertmanager}/api/v2/silences", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return str(json.loads(r.read())["silenceID"])

    def expire_silence(self, silence_id: str) -> None:
        req = urllib.request.Request(f"{self.alertmanager}/api/v2/silence/{silence_id}", method="DELETE")
        with urllib.request.urlopen(req, timeout=5):
            pass

    # --- the node side of reboot and reset Jobs, and the GPU Operator's DaemonSets ---
    def _gpu_operator(self, node: str) -> None:
        """The GPU Operator's DaemonSet controller on one node: an operand's pod runs where its label is "true"."""
        labels = self.cluster.node(node)["metadata"]["labels"]
        for op, app in GPU_OPERATOR_OPERANDS.items():
            key = (GPU_OPERATOR_NS, f"{app}-{node}")
            wanted = labels.get(f"nvidia.com/gpu.deploy.{op}") == "true"
            if wanted and key not in self.cluster.pods:
                self.cluster.add_pod(node, key[1], namespace=GPU_OPERATOR_NS, labels={"app": app},
                                     owner_kind="DaemonSet")
            elif not wanted and key in self.cluster.pods:
                with self.cluster.lock:
                    self.cluster._emit("pods", self.cluster.pods.pop(key), None, deleted=True)

    def _gpu_held_by(self, node: str) -> list[str]:
        """What would make nvidia-smi --gpu-reset fail on the node: an operand's pod, or gpuhealth's exporter not
        having released NVML for this reset (its condition's answer)."""
        held = [name for (ns, name), pod in list(self.cluster.pods.items())
                if ns == GPU_OPERATOR_NS and pod["spec"].get("nodeName") == node]
        conditions = self.cluster.node(node)["status"].get("conditions") or []
        probes = next((c for c in conditions if c.get("type") == "GpuhealthProbesHealthy"), {})
        if probes.get("reason") != "ReleasedForGPUReset":
            held.append("gpuhealth-exporter (NVML)")
        return held

    def _diagnose(self, job: dict[str, Any], node: str) -> None:
        """A diagnostic Job on a healthy stand-in node: its collect step's outputs as the tools write them on a node
        whose GPUs all answer and pass dcgmi diag (no nccl-tests in the image), judged by gpuhealth's own judge with
        the Job's rendered arguments; the pod ends with the judge's exit code and verdict, as the kubelet reports."""
        (container,) = job["spec"]["template"]["spec"]["containers"]
        command = container["command"]
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "gpus.out").write_text("".join(f"{i}, GPU-{i:08x}-1111-2222-3333-444455556666, NVIDIA H100 80GB "
                                                f"HBM3, 00000000:{i + 10:02X}:00.0\n" for i in range(NODE_GPUS)))
            (d / "gpus.rc").write_text("0\n")
            (d / "dcgm.out").write_text(HEALTHY_DCGM.read_text())
            (d / "dcgm.rc").write_text("0\n")
            (d / "nccl.absent").write_text("")
            with contextlib.redirect_stdout(io.StringIO()):  # the judge prints its verdict for the pod's log
                rc = judge(_judge_args(command, d, self.nodes[node].dir / "sysfs", d / "termination-log"))
            verdict = (d / "termination-log").read_text()
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pod = self.cluster.job_pod(ns, name, exit_code=rc)

        def ended(p: dict[str, Any]) -> None:
            p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = verdict
        self.cluster.update_pod(ns, pod["metadata"]["name"], ended)
        self.diagnosed.append((name, rc))

    def _collect_evidence(self, job: dict[str, Any], node: str) -> None:
        """The evidence Job on a stand-in node: the log templates/evidence.sh writes, its sections around a real
        `nvidia-smi -q -x` capture and the node's own kernel log (the stand-in has no dcgmi)."""
        kernel = self.nodes[node].kmsg.read_text(errors="replace").splitlines()[-300:]
        parts = ["==> gpuhealth-evidence: meta <==", f"node={node}", "==> gpuhealth-evidence: nvidia-smi <==",
                 NVSMI_XML.read_text(), "==> gpuhealth-evidence: nvidia-smi-status <==", "exit=0",
                 "==> gpuhealth-evidence: dcgmi-status <==", "dcgmi not in this image",
                 "==> gpuhealth-evidence: kernel-log <==", *kernel,
                 "==> gpuhealth-evidence: bug-report <==", "no upload_command: no bundle made",
                 "==> gpuhealth-evidence: upload <==", "none", "==> gpuhealth-evidence: end <=="]
        self.cluster.job_pod(job["metadata"]["namespace"], job["metadata"]["name"], exit_code=0,
                             log="\n".join(parts) + "\n")
        self.evidence.append(node)

    def _node_agent(self) -> None:
        """Plays the nodes: reboot Jobs take the machine down and back with a new boot id; reset Jobs succeed only
        when nothing holds the GPU; the GPU Operator's DaemonSets follow their labels."""
        done: set[str] = set()
        while not self._stop.wait(0.5):
            for name, node in self.nodes.items():
                if node.options.gpu_operator:
                    self._gpu_operator(name)
            for job in self.jobs():
                name = job["metadata"]["name"]
                component = (job["metadata"].get("labels") or {}).get("app.kubernetes.io/component")
                if name in done or not ("reboot" in name or "reset" in name or component in ("diagnose", "evidence")):
                    continue
                node = next((n for n in self.nodes if n in json.dumps(job["spec"])), None)
                if node is None:
                    continue
                done.add(name)
                if component == "diagnose":
                    self._diagnose(job, node)
                    continue
                if component == "evidence":
                    self._collect_evidence(job, node)
                    continue
                if "reset" in name:
                    held = self._gpu_held_by(node)
                    self.resets.append((node, held))
                    with self.cluster.lock:
                        self.cluster.jobs[(job["metadata"]["namespace"], name)]["status"] = \
                            {"failed": 1} if held else {"succeeded": 1}
                    continue
                self.rebooted.append(node)
                self.nodes[node].reboot()
                boot = f"boot-{self.nodes[node].boot}"
                self.cluster.update_node(node, lambda n, boot=boot: n["status"]["nodeInfo"].update(bootID=boot))


NVSMI_XML = FIXTURES / "nvsmi" / "hadoop_p100x2_nvidia-smi-q-x.xml"  # a real capture (tests/fixtures/SOURCES.md)
HEALTHY_DCGM = FIXTURES / "dcgm" / "diag4x_passing_constructed.json"  # a passing dcgmi diag -j (its source: SOURCES)


def _judge_args(command: list[str], directory: Path, sysfs_root: Path, log: Path) -> list[str]:
    """The judge's own command line from the rendered Job, run here: the collect step's outputs in `directory`, the
    verdict to `log`, the host's /sys the stand-in node's own (its EFA devices)."""
    args = list(command[1:])
    for flag, value in (("--dir", str(directory)), ("--sysfs-root", str(sysfs_root))):
        args[args.index(flag) + 1] = value
    return [*args, "--termination-log", str(log)]


def alertmanager_config(docs: list[dict[str, Any]], secrets: Path, service_url: Callable[[str], str]) -> dict[str, Any]:
    """The configuration kube-prometheus-stack's Alertmanager runs with the chart installed: its default base
    configuration plus the AlertmanagerConfigs it selects, as the Prometheus Operator generates it (default matcher
    strategy); the Secrets' values as files; webhook URLs of Services to the e2e's Service proxies."""
    selected = [d for d in docs if d["kind"] == "AlertmanagerConfig" and kps.selects(d)]
    data = {(d["metadata"]["namespace"], d["metadata"]["name"]):
            {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
            for d in docs if d["kind"] == "Secret"}
    secrets.mkdir(parents=True, exist_ok=True)
    config = generate(kps.base_config(), selected, data, strategy=kps.MATCHER_STRATEGY,
                      alertmanager_namespace=kps.NAMESPACE, secret_files=secrets)
    for receiver in config.get("receivers") or []:
        for hook in receiver.get("webhook_configs") or []:
            hook["url"] = service_url(hook["url"])
    return config


def scale_route(route: dict[str, Any]) -> None:
    """A routing tree's group_wait, group_interval and repeat_interval divided by TIME_SCALE (at least 1 s)."""
    for key in ("group_wait", "group_interval", "repeat_interval"):
        if key in route:
            route[key] = _scaled(str(route[key]), 1)
    for child in route.get("routes") or []:
        scale_route(child)


def log_tail(stack: Stack, name: str, lines: int = 40) -> str:
    path = stack.workdir / f"{name}.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def print_logs_if_failed(test: object, stack: Stack, parts: Iterable[str], lines: int = 40) -> None:
    """The last `lines` of each part's log, printed when the test (its pytest item) failed in its call phase
    (tests/e2e/conftest.py keeps the report on the item): a fixture's teardown shows what the processes said."""
    report = getattr(test, "rep_call", None)
    if report is not None and report.failed:
        for part in parts:
            print(f"--- {part} log ---\n{log_tail(stack, part, lines)}")


__all__ = ["FIXTURES", "TIME_SCALE", "NodeOptions", "SimNode", "Stack", "http_json", "log_tail",
           "scale_expr", "wait_for"]
