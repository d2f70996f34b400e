"""The pipeline with Prometheus sharded by node, as docs/scaling.md configures it, on real processes.

- two shard Prometheus servers (Debian's), each scraping its half of the nodes: the chart's PodMonitor for the
  exporters and docs/scaling.md's PodMonitor for dcgm-exporter, translated as the Prometheus Operator does with
  `shards: 2` (its sharding relabelings appended; the monitors hash the node label); each evaluates the chart's node
  rule groups (monitoring.prometheusRule.sets: split, gpuhealth-node) and remote-writes the series the fleet groups
  read (docs/scaling.md's write_relabel_configs: `up`, the alerts, and the node groups' records they read) to
- a global Prometheus with its remote-write receiver on, which scrapes the remediator (the ServiceMonitor) and
  evaluates the fleet rule groups (gpuhealth-fleet) over both shards' series;
- an HA pair of Alertmanagers (Debian's), clustered with --cluster.peer, both sent every alert by all three;
- the remediator, exporters and fake API server of tests/e2e/stack.py, and (start_training_job) a training job's ranks,
  each scraped by its node's shard with docs/scaling.md's training PodMonitor.

Durations are scaled as in stack.py (rules / TIME_SCALE). Test-only settings: remote write sends every 1 s
(batch_send_deadline; 5 s by default) and the Alertmanagers gossip every 50 ms, so the test stays short.
"""

from __future__ import annotations

import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.operator_prometheus import pod_monitor, rule_groups, service_monitor, shard
from tests.e2e.stack import (
    NAMESPACE,
    Stack,
    _scaled,
    alertmanager_config,
    deep_merge,
    free_port,
    http_get,
    http_json,
    scale_route,
    scale_rule_groups,
    wait_for,
)
from tests.support import kube_prometheus_stack as kps
from tests.support.rule_sets import scaling_doc_yaml

SHARDS = 2


@dataclass
class DcgmExporterPod:
    """A node's dcgm-exporter pod as Kubernetes SD sees it (the GPU Operator's DaemonSet): what pod_monitor reads."""

    node: str
    ip: str
    name: str = ""
    namespace: str = "gpu-operator"
    labels: dict[str, str] = field(default_factory=lambda: {"app": "nvidia-dcgm-exporter"})
    container: dict[str, Any] = field(default_factory=lambda: {"name": "nvidia-dcgm-exporter"})
    ports: dict[str, int] = field(default_factory=lambda: {"metrics": 9400})


@dataclass
class TrainingPod:
    """A training job's rank pod (tests/e2e/training_rank.py) as Kubernetes SD sees it: what pod_monitor reads."""

    node: str
    port: int
    name: str
    namespace: str = "ml"
    ip: str = "127.0.0.1"
    labels: dict[str, str] = field(default_factory=lambda: {"gpuhealth.io/training": "true"})
    container: dict[str, Any] = field(default_factory=lambda: {"name": "train"})

    @property
    def ports(self) -> dict[str, int]:
        return {"gpuhealth": self.port}


@dataclass
class ShardedStack(Stack):
    def __post_init__(self) -> None:
        self.values = deep_merge({"monitoring": {"prometheusRule": {"sets": "split"}}}, self.values)
        super().__post_init__()
        self.shard_ports = [free_port() for _ in range(SHARDS)]
        self.am_ports = [self.am_port, free_port()]
        self.cluster_ports = [free_port(), free_port()]
        self.training_pods: list[TrainingPod] = []

    # --- URLs: `prometheus` (Stack's queries and alerts) is the global one ---
    def shard_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.shard_ports[index]}"

    def alertmanager_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.am_ports[index]}"

    def _rules(self, name: str) -> Path:
        """The chart's PrometheusRule `name`, scaled, in a directory of its own."""
        directory = self.workdir / f"rules-{name}"
        directory.mkdir()
        (rule,) = [d for d in self.docs if d["kind"] == "PrometheusRule" and d["metadata"]["name"] == name
                   and kps.selects(d)]
        scale_rule_groups(rule_groups(rule), directory / f"{name}.yaml")
        return directory

    def _start_prometheus(self) -> None:
        node_rules, fleet_rules = self._rules("gpuhealth-node"), self._rules("gpuhealth-fleet")
        self._shard_configs: list[Path] = []
        alerting = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{p}" for p in self.am_ports]}]}]}
        timing = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
        remote = scaling_doc_yaml("### The shards' remote write")[0]["remote_write"][0]
        remote = {**remote, "url": f"{self.prometheus}/api/v1/write",
                  "queue_config": {"batch_send_deadline": "1s"}}  # test-only: 5 s by default
        # The global first: parts are stopped in the reverse order, and a shard stopped after its receiver waits
        # for its remote-write queue to flush (up to 1 min) before it exits.
        global_config = {"global": timing, "rule_files": [str(fleet_rules / "*.yaml")], "alerting": alerting,
                         "scrape_configs": self._remediator_scrapes()}
        self._prometheus("prometheus", self.prom_port, global_config, "--web.enable-remote-write-receiver")
        for index in range(SHARDS):
            config = {"global": timing, "rule_files": [str(node_rules / "*.yaml")], "alerting": alerting,
                      "scrape_configs": shard(self._node_scrapes(), SHARDS, index), "remote_write": [remote]}
            self._prometheus(f"shard-{index}", self.shard_ports[index], config, "--web.enable-lifecycle")  # reload
            self._shard_configs.append(self.workdir / f"shard-{index}.yml")

    def _prometheus(self, name: str, port: int, config: dict[str, Any], *flags: str) -> None:
        path = self.workdir / f"{name}.yml"
        path.write_text(yaml.safe_dump(config))
        self._spawn(name, ["prometheus", f"--config.file={path}", f"--storage.tsdb.path={self.workdir}/tsdb-{name}",
                           f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *flags])

    def _node_scrapes(self) -> list[dict[str, Any]]:
        """What every shard is given (the operator gives each shard every monitor): the chart's PodMonitor over the
        exporter pods and docs/scaling.md's over the nodes' dcgm-exporters."""
        exporters = [n.pod for n in self.nodes.values() if n.pod is not None]
        dcgm = [DcgmExporterPod(n.name, n.host_ip, name=f"nvidia-dcgm-exporter-{n.name}") for n in self.nodes.values()]
        scale = lambda d: _scaled(d, 1)  # noqa: E731
        jobs: list[dict[str, Any]] = []
        for monitor in (d for d in self.docs if d["kind"] == "PodMonitor" and kps.selects(d)):
            jobs += pod_monitor(monitor, exporters, self._node_labels, scale)
        for monitor in scaling_doc_yaml("### dcgm-exporter on the node's shard"):
            jobs += pod_monitor(monitor, dcgm, self._node_labels, scale)
        if self.training_pods:
            for monitor in scaling_doc_yaml("### Training ranks on their node's shard"):
                jobs += pod_monitor(monitor, list(self.training_pods), self._node_labels, scale)
        return jobs

    def start_training_job(self, job: str, ranks: list[tuple[str, float]], namespace: str = "ml") -> None:
        """A training job's ranks (node, step seconds each), each a process serving gpuhealth_training's metrics,
        scraped by docs/scaling.md's training PodMonitor: each rank by its node's shard, which reloads."""
        for rank, (node, seconds) in enumerate(ranks):
            port = free_port()
            self._spawn(f"train-{job}-{rank}", [sys.executable, str(Path(__file__).with_name("training_rank.py")),
                                                "--job", job, "--rank", str(rank), "--node", node,
                                                "--port", str(port), "--step-seconds", str(seconds)])
            self.training_pods.append(TrainingPod(node, port, f"{job}-{rank}", namespace))
        for index, path in enumerate(self._shard_configs):
            config = yaml.safe_load(path.read_text())
            config["scrape_configs"] = shard(self._node_scrapes(), SHARDS, index)
            path.write_text(yaml.safe_dump(config))
            request = urllib.request.Request(f"{self.shard_url(index)}/-/reload", method="POST")
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200

    def _remediator_scrapes(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = []
        for monitor in (d for d in self.docs if d["kind"] == "ServiceMonitor" and kps.selects(d)):
            svc = next(d for d in self.docs if d["kind"] == "Service" and d["metadata"]["name"] ==
                       monitor["metadata"]["name"] and d["metadata"]["namespace"] == NAMESPACE)
            jobs += service_monitor(monitor, svc, list(self.remediators.values()), lambda d: _scaled(d, 1))
        return jobs

    def _start_alertmanager(self) -> None:
        """Two Alertmanagers in one cluster (each --cluster.peer the other), the same configuration."""
        config = alertmanager_config(self.docs, self.workdir / "am-secrets", self._service_url)
        scale_route(config["route"])
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config))
        for index, port in enumerate(self.am_ports):
            peer = self.cluster_ports[1 - index]
            self._spawn(f"alertmanager-{index}" if index else "alertmanager", [
                "prometheus-alertmanager", f"--config.file={path}", f"--storage.path={self.workdir}/am-{index}",
                f"--web.listen-address=127.0.0.1:{port}", f"--web.external-url={self.alertmanager_url(index)}",
                f"--cluster.listen-address=127.0.0.1:{self.cluster_ports[index]}",
                f"--cluster.peer=127.0.0.1:{peer}", "--cluster.gossip-interval=50ms",
                "--cluster.pushpull-interval=1s", "--log.level=warn"])

    def wait_ready(self) -> None:
        names = ["prometheus", *(f"shard-{i}" for i in range(SHARDS)), "alertmanager", "alertmanager-1"]
        urls = [self.prometheus, *(self.shard_url(i) for i in range(SHARDS)), *map(self.alertmanager_url, (0, 1))]
        for name, url in zip(names, urls, strict=True):
            wait_for(f"{name} ready", lambda n=name, u=url: self.alive(n) or http_get(f"{u}/-/ready"))
        for name in self.remediators:
            wait_for(f"{name} ready", lambda n=name: self.alive(n) or n in self.services[0].ready())
        wait_for("a remediator to lead", self.leader_url)
        wait_for("the Alertmanagers to form one cluster", lambda: all(
            len(http_json(f"{self.alertmanager_url(i)}/api/v2/status")["cluster"]["peers"]) == 2 for i in (0, 1)))
        for url in (self.prometheus, *(self.shard_url(i) for i in range(SHARDS))):
            wait_for(f"{url} to discover both Alertmanagers", lambda u=url: len(
                http_json(f"{u}/api/v1/alertmanagers")["data"]["activeAlertmanagers"]) == 2)
        wait_for("every exporter scraped by one shard", lambda: sorted(
            node for i in range(SHARDS) for node in self.shard_nodes(i)) == sorted(self.nodes), timeout=90)
        wait_for("every node's exporter up at the global Prometheus (remote write)", lambda: self.query_value(
            'count(up{job="gpuhealth-exporter"} == 1)') == len(self.nodes), timeout=60)

    def shard_query(self, index: int, promql: str) -> list[dict[str, Any]]:
        url = f"{self.shard_url(index)}/api/v1/query?query={urllib.parse.quote(promql)}"
        return list(http_json(url)["data"]["result"])

    def shard_nodes(self, index: int) -> list[str]:
        """The nodes whose exporter this shard scrapes, and that answered."""
        return sorted(r["metric"]["node"] for r in self.shard_query(index, 'up{job="gpuhealth-exporter"} == 1'))

