"""The node agent served (the DaemonSet): every probe on its interval, /metrics, this Node's conditions and its GPU
reset marker; or, when it refuses its settings, up and plainly not probing (`serve_refused`)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import replace

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpuhealth.exporter import __version__
from gpuhealth.exporter.agent import build_probes, expectations, pod_resources_reader
from gpuhealth.exporter.collector import Expectations, GpuhealthCollector, RefusedSettingsCollector
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.config import Settings
from gpuhealth.exporter.efa_expected import Node
from gpuhealth.exporter.exposition import start_server
from gpuhealth.exporter.gpu_reset import ANNOTATION, GpuResetRelease
from gpuhealth.exporter.node_status import KubeError, NodeConditionWriter, in_cluster_api
from gpuhealth.exporter.node_watch import NodeWatch
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot

log = logging.getLogger("gpuhealth.exporter")


def _node_loop(writer: NodeConditionWriter, snapshot: Snapshot, s: Settings, stop: threading.Event,
               release: GpuResetRelease, expect: Expectations, changed: threading.Event) -> None:
    """This node's conditions every condition_interval (when on); its GPU reset marker as soon as the watch of its
    Node sees a change (`changed`), and every reset_marker_interval (a probe that a run in progress kept from
    pausing is paused then). A change of the reset acknowledgement writes the conditions at once."""
    never = float("inf")
    now = time.monotonic()
    next_sync = now + s.condition_interval if s.conditions else never
    next_poll = now + s.reset_marker_interval
    while not stop.is_set():
        woken = changed.wait(max(0.0, min(next_sync, next_poll) - time.monotonic()))
        if stop.is_set():
            return
        now = time.monotonic()
        acknowledged = False
        if woken or now >= next_poll:
            changed.clear()
            next_poll = now + s.reset_marker_interval
            try:
                acknowledged = release.poll()
            except Exception:  # the loop must outlive any bug; a failed read leaves the probes as they were
                log.exception("GPU reset marker not read (will retry)")
        if now >= next_sync or (acknowledged and s.conditions):
            next_sync = now + s.condition_interval
            try:
                writer.sync(release.acknowledge(evaluate(snapshot.view(), expect, s.fault_window)))
            except KubeError as exc:
                log.warning("node conditions not written (will retry): %s", exc)
            except Exception:  # the loop must outlive any bug: conditions are how the node reports itself
                log.exception("node conditions not written (will retry)")


INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def _with_instance_type_from_node(s: Settings, node: Node | None) -> Settings:
    """A DaemonSet cannot pass node labels down: the instance type is the Node's label."""
    labels = (node or {}).get("metadata", {}).get("labels") or {}
    instance_type = str(labels.get(INSTANCE_TYPE_LABEL, ""))
    if instance_type:
        log.info("node %s is a %s", s.node, instance_type)
        return replace(s, instance_type=instance_type)
    log.warning("no %s on node %s (%s): expected GPU count stays as configured", INSTANCE_TYPE_LABEL, s.node,
                "label missing" if node is not None else "the Node could not be read")
    return s


def serve(s: Settings) -> None:
    snapshot = Snapshot()
    stop = threading.Event()
    changed = threading.Event()  # the watched Node changed: read the reset marker now
    api = s.kube_api or in_cluster_api()
    watch = (NodeWatch(api, s.node, sa_dir=s.service_account_dir, on_change=changed.set) if s.node and api
             else None)
    writer = (NodeConditionWriter(api, s.node, sa_dir=s.service_account_dir, read_node=watch.node)
              if watch is not None else None)
    if watch is not None:
        try:
            watch.list()  # before the probes start: a restart during a GPU reset must not take NVML again
        except KubeError as exc:  # counted; the watch's thread lists again
            log.warning("cannot read node %s (%s): will retry", s.node, exc)
        if not s.instance_type:
            s = _with_instance_type_from_node(s, watch.node())
    release = _start_probes(s, snapshot, watch, stop)
    reader = pod_resources_reader(s)
    if reader is not None:
        reader.start(stop)
    expect = expectations(s, watch.node if watch is not None else None, remember=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, expect, extra=release.samples if release else None,
                                         pod_resources=reader))
    _listen(s.listen, registry)
    log.info("gpuhealth-exporter %s serving on %s", __version__, s.listen)
    if writer is not None and release is not None and watch is not None:
        if not s.conditions:
            log.info("node conditions off: a GPU reset request (%s) still releases the GPUs, unacknowledged",
                     ANNOTATION)
        watch.start(stop)
        threading.Thread(target=_node_loop, args=(writer, snapshot, s, stop, release, expect, changed),
                         daemon=True).start()
    elif s.conditions:
        log.info("node conditions off: %s", "no node name (--node/NODE_NAME)" if not s.node else "no API server")
    if watch is None:
        log.info("no GPU reset marker is read (%s): the GPU probes never pause for a reset", ANNOTATION)

    def shut_down(*_: object) -> None:
        stop.set()
        changed.set()  # the node loop waits on it

    signal.signal(signal.SIGTERM, shut_down)
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()


def _start_probes(s: Settings, snapshot: Snapshot, watch: NodeWatch | None,
                  stop: threading.Event) -> GpuResetRelease | None:
    """Every probe's runner, started once a GPU reset marker already on the Node is obeyed; the reset release that
    pauses them (None without the Node's watch)."""
    runners = [ProbeRunner(probe, snapshot, interval, deadline) for probe, interval, deadline in build_probes(s, False)]
    release = GpuResetRelease(runners, snapshot, watch.annotations) if watch is not None else None
    if release is not None:
        try:
            release.poll()  # a marker already there is obeyed before any probe runs
        except Exception:  # a failed read is handled inside (the probes run); anything else must not stop start-up
            log.exception("GPU reset marker not read at start-up (will retry)")
    for runner in runners:
        runner.start(stop)
    return release


def serve_refused(line: str, listen: str) -> None:
    """Up, and plainly not probing: a crash loop would read as the node's fault (GpuhealthExporterDown, cordon), this
    reads as gpuhealth's own (GpuhealthExporterMisconfigured). Nothing is written to the Node."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RefusedSettingsCollector())
    _listen(listen, registry)
    log.error("%s", line)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()




def _listen(listen: str, registry: CollectorRegistry) -> None:
    """/metrics on [ADDR]:PORT (cli.check_settings has checked it), with the process's own metrics."""
    registry.register(ProcessCollector(registry=None))
    host, _, port = listen.rpartition(":")
    start_server(int(port), host.strip("[]") or "0.0.0.0", registry)
