"""What a kubelet and kube-proxy would make of the chart's rendering, as local processes on 127.0.0.0/8.

The e2e runs the programs exactly as the rendered DaemonSet and Deployment say, so that a wrong flag,
port, path, environment variable, ConfigMap key or Secret in the chart fails a test:
- command and args, with `$(VAR)` expanded from the container's env as the kubelet does;
- env: `value`, the downward API (`fieldRef`: spec.nodeName, status.hostIP, status.podIP, metadata.name,
  metadata.namespace, spec.serviceAccountName) and `secretKeyRef`/`configMapKeyRef` into the rendering;
- volumes under a per-pod root directory: ConfigMaps and Secrets as files (their `items`), emptyDirs,
  hostPaths from the simulated node, and the service-account token where the kubelet mounts it.
  A container path P is `<pod root>/P` here: every absolute path in the args and in a mounted YAML
  file that lies under a mount (or above one: sysfs_root /host above /host/sys) is rewritten to it;
- networking: each pod has its own loopback address (its pod IP); a program that listens on every
  address of its network namespace (`:9842`, `0.0.0.0:9095`) listens on its pod IP, on the same port;
- a Service is a TCP proxy on its own loopback address and port, balancing over the ready pods its
  selector picks (readiness from the pod's own readinessProbe, as kube-proxy follows the endpoints),
  to the `targetPort` (a name resolved through the pods' container ports).

What cannot be faithful is refused, not approximated: an unknown env source, volume type, subPath or a
hostPath the node does not provide raises. The few stand-in inputs (a kernel-log file for /dev/kmsg,
the API server's URL and the token, a dcgmi on PATH) are added by the caller, named in tests/e2e/stack.py.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_ANY_ADDRESS = re.compile(r"^(?:0\.0\.0\.0|\[::\]|::)?:(\d+)$")


class Unfaithful(ValueError):
    """The rendering asks for something this stand-in cannot do as a kubelet would."""


def find(docs: Iterable[Obj], kind: str, name: str | None = None, namespace: str | None = None) -> Obj:
    found = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
             and (namespace is None or d["metadata"].get("namespace") == namespace)]
    if len(found) != 1:
        raise Unfaithful(f"expected one {kind} {name or ''} in the rendering, found {len(found)}")
    return found[0]


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion: a defined variable is replaced, an undefined one left as is,
    `$$(VAR)` escapes."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        m = _VAR.match(text, i)
        if m and m.group(1) in env:
            out.append(env[m.group(1)])
            i = m.end()
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _data(docs: list[Obj], kind: str, namespace: str, name: str) -> dict[str, str] | None:
    """A ConfigMap's or Secret's data as the container sees it (a Secret's decoded); None when not rendered."""
    found = [d for d in docs if d.get("kind") == kind and d["metadata"]["name"] == name
             and d["metadata"].get("namespace") == namespace]
    if not found:
        return None
    data = dict(found[0].get("data") or {})
    return {k: base64.b64decode(v).decode() for k, v in data.items()} if kind == "Secret" else {
        k: str(v) for k, v in data.items()}


def _key(docs: list[Obj], kind: str, namespace: str, ref: Obj) -> str | None:
    data = _data(docs, kind, namespace, ref["name"])
    if data is None:
        if ref.get("optional"):
            return None
        raise Unfaithful(f"{kind} {namespace}/{ref['name']} is referenced but not rendered")
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise Unfaithful(f"{kind} {namespace}/{ref['name']} has no key {ref['key']!r}")
    return data[ref["key"]]


@dataclass
class Pod:
    """One pod of a rendered workload, laid out on disk, ready to be run by the caller."""

    name: str
    namespace: str
    node: str
    ip: str
    host_ip: str
    root: Path
    labels: dict[str, str]
    container: Obj
    spec: Obj
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)  # container mount paths, longest first

    @property
    def ports(self) -> dict[str, int]:
        return {p["name"]: int(p["containerPort"]) for p in self.container.get("ports") or [] if "name" in p}

    def local(self, container_path: str) -> Path:
        """Where a path inside the container is on this machine."""
        return self.root / container_path.lstrip("/")

    def rewrite(self, value: str) -> str:
        """A container path that lies under (or above) a mount, as a local path; a listen-on-every-address
        `[HOST]:PORT` of a container port, on the pod IP; anything else unchanged."""
        m = _ANY_ADDRESS.match(value)
        if m and int(m.group(1)) in self.ports.values():
            return f"{self.ip}:{m.group(1)}"
        if value.startswith("/") and any(value == p or value.startswith(p.rstrip("/") + "/")
                                         or p.startswith(value.rstrip("/") + "/") for p in self.mounts):
            return str(self.local(value))
        return value

    def _rewrite_arg(self, arg: str) -> str:
        if arg.startswith("--") and "=" in arg:
            flag, _, value = arg.partition("=")
            return f"{flag}={self.rewrite(value)}"
        return self.rewrite(arg)

    def readiness_url(self) -> str | None:
        probe = (self.container.get("readinessProbe") or {}).get("httpGet")
        if not probe:
            return None
        port = probe["port"]
        number = self.ports[port] if isinstance(port, str) else int(port)
        return f"http://{self.ip}:{number}{probe.get('path', '/')}"


def materialize(workload: Obj, docs: list[Obj], *, pod_name: str, node: str, ip: str, host_ip: str, root: Path,
                host_paths: dict[str, Path], token: str | None, container: str | None = None,
                kernel_files: dict[str, Path] | None = None) -> Pod:
    """Lay out one pod of `workload` (a DaemonSet or Deployment from `docs`) under `root`, as the kubelet would:
    its volumes mounted, its env resolved, its command line expanded and its paths and addresses local.
    `host_paths` maps each hostPath the pod mounts to a local file or directory of the simulated node;
    `token` is the service-account token the kubelet would project (None: automount is off); `kernel_files` are
    files the kernel shows every container (/proc/sys/kernel/random/boot_id), from the simulated node."""
    namespace = workload["metadata"]["namespace"]
    template = workload["spec"]["template"]
    spec = template["spec"]
    containers = [c for c in spec["containers"] if container is None or c["name"] == container]
    if len(containers) != 1:
        raise Unfaithful(f"{workload['kind']} {workload['metadata']['name']}: pick one container of "
                         f"{[c['name'] for c in spec['containers']]}")
    c = containers[0]
    pod = Pod(pod_name, namespace, node, ip, host_ip, root, dict(template["metadata"].get("labels") or {}), c, spec)
    root.mkdir(parents=True, exist_ok=True)
    for path, source in (kernel_files or {}).items():
        target = pod.local(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_symlink():
            target.symlink_to(source)
        pod.mounts.append(path)
    _mount(pod, docs, host_paths, token)
    pod.env = _env(pod, docs)
    for item in c.get("envFrom") or []:
        raise Unfaithful(f"envFrom is not supported here: {item}")
    argv = [expand(a, pod.env) for a in (c.get("command") or []) + (c.get("args") or [])]
    if not argv:
        raise Unfaithful(f"container {c['name']}: no command (the image's entrypoint is not known here)")
    pod.argv = [argv[0], *(pod._rewrite_arg(a) for a in argv[1:])]
    return pod


def _env(pod: Pod, docs: list[Obj]) -> dict[str, str]:
    fields = {"spec.nodeName": pod.node, "status.hostIP": pod.host_ip, "status.podIP": pod.ip,
              "metadata.name": pod.name, "metadata.namespace": pod.namespace,
              "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default")}
    env: dict[str, str] = {}
    for var in pod.container.get("env") or []:
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = expand(str(var.get("value", "")), env)
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in fields:
                raise Unfaithful(f"env {var['name']}: fieldRef {path} is not supported here")
            env[var["name"]] = fields[path]
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            kind, ref = ("Secret", source["secretKeyRef"]) if "secretKeyRef" in source else (
                "ConfigMap", source["configMapKeyRef"])
            value = _key(docs, kind, pod.namespace, ref)
            if value is not None:
                env[var["name"]] = value
        else:
            raise Unfaithful(f"env {var['name']}: {sorted(source)} is not supported here")
    return env


def _mount(pod: Pod, docs: list[Obj], host_paths: dict[str, Path], token: str | None) -> None:
    volumes = {v["name"]: v for v in pod.spec.get("volumes") or []}
    mounts = list(pod.container.get("volumeMounts") or [])
    if token is not None and pod.spec.get("automountServiceAccountToken", True):
        mounts.append({"name": "__sa", "mountPath": SA_MOUNT})
        volumes["__sa"] = {"name": "__sa", "__token": token}
    for m in mounts:
        if m.get("subPath") or m.get("subPathExpr"):
            raise Unfaithful(f"volumeMount {m['name']}: subPath is not supported here")
        volume = volumes.get(m["name"])
        if volume is None:
            raise Unfaithful(f"volumeMount {m['name']}: no such volume in the pod")
        target = pod.local(m["mountPath"])
        target.parent.mkdir(parents=True, exist_ok=True)
        if "__token" in volume:
            target.mkdir(parents=True, exist_ok=True)
            (target / "token").write_text(volume["__token"])
            (target / "namespace").write_text(pod.namespace)
        elif "configMap" in volume or "secret" in volume:
            kind, ref = ("ConfigMap", volume["configMap"]) if "configMap" in volume else ("Secret", volume["secret"])
            name = ref["name"] if kind == "ConfigMap" else ref["secretName"]
            data = _data(docs, kind, pod.namespace, name)
            if data is None:
                if ref.get("optional"):
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                raise Unfaithful(f"volume {m['name']}: {kind} {pod.namespace}/{name} is not rendered")
            items = ref.get("items") or [{"key": k, "path": k} for k in data]
            target.mkdir(parents=True, exist_ok=True)
            for item in items:
                if item["key"] not in data:
                    raise Unfaithful(f"volume {m['name']}: {kind} {name} has no key {item['key']!r}")
                dest = target / item["path"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(data[item["key"]])
        elif "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
        elif "hostPath" in volume:
            path = volume["hostPath"]["path"]
            if path not in host_paths:
                raise Unfaithful(f"volume {m['name']}: hostPath {path} is not provided by the simulated node")
            if not target.is_symlink():  # else the pod restarted on the same node: its mount is in place
                target.symlink_to(host_paths[path])
        else:
            raise Unfaithful(f"volume {m['name']}: {sorted(k for k in volume if k != 'name')} is not supported here")
        pod.mounts.append(m["mountPath"])
    pod.mounts.sort(key=len, reverse=True)
    # Mounted configuration files name container paths: make those local too, as the mount makes them real.
    for m in mounts:
        volume = volumes[m["name"]]
        if "configMap" not in volume:
            continue
        for path in pod.local(m["mountPath"]).rglob("*.yaml"):
            path.write_text(yaml.safe_dump(_rewrite_paths(pod, yaml.safe_load(path.read_text())), sort_keys=False))


def _rewrite_paths(pod: Pod, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rewrite_paths(pod, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite_paths(pod, v) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        return pod.rewrite(value)
    return value


class ServiceProxy:
    """A Service: a TCP proxy on its own address and port, to the ready pods its selector picks, at the
    targetPort. Readiness is the pods' readinessProbe, checked every `period` seconds."""

    def __init__(self, service: Obj, port: int, ip: str, pods: list[Pod], period: float = 1.0) -> None:
        selector = service["spec"].get("selector") or {}
        spec = next((p for p in service["spec"]["ports"] if int(p["port"]) == port), None)
        if spec is None:
            raise Unfaithful(f"Service {service['metadata']['name']} has no port {port}")
        self.name = service["metadata"]["name"]
        self.ip, self.port = ip, port
        self.target = spec.get("targetPort", port)
        self.pods = [p for p in pods if all(p.labels.get(k) == v for k, v in selector.items())]
        if not self.pods:
            raise Unfaithful(f"Service {self.name}: its selector {selector} picks none of the pods")
        self.period = period
        self._ready: list[Pod] = []
        self._turn = 0
        self._stop = threading.Event()
        self._sock = socket.create_server((ip, port))
        self._threads = [threading.Thread(target=self._accept, daemon=True, name=f"svc-{self.name}"),
                         threading.Thread(target=self._probe, daemon=True, name=f"svc-{self.name}-ready")]
        for t in self._threads:
            t.start()

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def _endpoint(self, pod: Pod) -> tuple[str, int]:
        if isinstance(self.target, int) or str(self.target).isdigit():
            return pod.ip, int(self.target)
        if self.target not in pod.ports:
            raise Unfaithful(f"Service {self.name}: targetPort {self.target!r} is not a port of pod {pod.name}")
        return pod.ip, pod.ports[self.target]

    def ready(self) -> list[str]:
        return [p.name for p in self._ready]

    def _probe(self) -> None:
        while not self._stop.is_set():
            ready = []
            for pod in self.pods:
                url = pod.readiness_url()
                if url is None:
                    ready.append(pod)
                    continue
                with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=1) as r:
                    if 200 <= r.status < 400:
                        ready.append(pod)
            self._ready = ready
            self._stop.wait(self.period)

    def _accept(self) -> None:
        self._sock.settimeout(0.5)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._forward, args=(conn,), daemon=True).start()

    def _forward(self, conn: socket.socket) -> None:
        ready = list(self._ready)
        if not ready:
            conn.close()  # no endpoints: the connection is refused, as with an empty Endpoints object
            return
        self._turn += 1
        pod = ready[self._turn % len(ready)]
        try:
            upstream = socket.create_connection(self._endpoint(pod), timeout=5)
        except OSError:
            conn.close()
            return
        with conn, upstream:
            pair = {conn: upstream, upstream: conn}
            while not self._stop.is_set():
                readable, _, _ = select.select(list(pair), [], [], 0.5)
                for s in readable:
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        return
                    pair[s].sendall(data)

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for t in self._threads:
            t.join(2)


def _blocks_in_use() -> set[int]:
    """The second octets of 127.x.y.z addresses that a socket on this machine is bound to (/proc/net/tcp holds
    the local address as little-endian hex)."""
    used = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            address = line.split()[1].partition(":")[0]
            octets = bytes.fromhex(address)[::-1]
            if octets[0] == 127:
                used.add(octets[1])
    return used


_BLOCKS = range(20, 250)
_blocks_taken: set[int] = set()
_blocks_lock = threading.Lock()


def fresh_block() -> int:
    """A 127.<block>.0.0/16 that no stack in this process has had and no socket on the machine is bound in. The
    xdist workers start at different places, so two workers' stacks do not meet either."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = (int(worker) if worker.isdigit() else 0) * 97
    with _blocks_lock:
        busy = _blocks_in_use() | _blocks_taken
        for i in range(len(_BLOCKS)):
            block = _BLOCKS[(start + i) % len(_BLOCKS)]
            if block not in busy:
                _blocks_taken.add(block)
                return block
    raise RuntimeError("every 127.x.0.0/16 block for the e2e stacks is taken")


class Addresses:
    """Loopback addresses handed out as pod, host and Service IPs (127.0.0.0/8 is all loopback on Linux), from
    a block of their own (`fresh_block`)."""

    def __init__(self, block: int | None = None) -> None:
        self._block, self._next = fresh_block() if block is None else block, 1
        self._lock = threading.Lock()

    def take(self) -> str:
        with self._lock:
            n = self._next
            self._next += 1
        if n > 65000:
            raise RuntimeError("out of loopback addresses")
        return f"127.{self._block}.{n // 250}.{n % 250 + 1}"


def wait_listening(ip: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {ip}:{port} after {timeout:g}s")
