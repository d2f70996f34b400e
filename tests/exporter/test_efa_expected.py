"""EFA devices are expected as the node was provisioned, never as many as its instance type can take
(gpuhealth/exporter/efa_expected.py): Karpenter attaches EFA interfaces only when a pod asks for vpc.amazonaws.com/efa
or the EC2NodeClass sets networkInterfaces, so a p5.48xlarge may have 0 of its 32 and be healthy.

The efa probe reads sysfs trees laid out as the efa driver lays them out (tests/support/sysfs_tree.py); the Node, with
its labels and the EFA device plugin's capacity, is served by the fake API server under the chart's RBAC and read by
the exporter's own watch (gpuhealth/exporter/node_watch.py). The conditions and the metrics are the exporter's.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter.agent import expectations
from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.config import DEFAULT_PROBES, Settings
from gpuhealth.exporter.efa_expected import CAPACITY, EFA_COUNTS_FILE, LABEL, EfaExpectation, Expected
from gpuhealth.exporter.instance_types import lookup
from gpuhealth.exporter.node_watch import NodeWatch
from gpuhealth.exporter.probes.efa import EfaProbe
from gpuhealth.exporter.probes.settings import ProbeSettings
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.polling import wait_for
from tests.support.sysfs_tree import build_efa_sysfs

NODE = "p5-node-1"
TOKEN = "exporter-token"
P5_MAX = 32  # gpuhealth/exporter/data/instance_types.csv: p5.48xlarge takes at most 32 EFA interfaces


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node(NODE, labels={"node.kubernetes.io/instance-type": "p5.48xlarge"})
        chart_rbac.enforce(c)
        c.add_service_account_token(TOKEN, chart_rbac.NAMESPACE, chart_rbac.EXPORTER_SA, node=NODE, pod="exp-1")
        yield c
        assert c.forbidden == []


def efa_devices(root: Path, count: int) -> Path:
    """A node's sysfs with `count` EFA devices (p5 names, one per PCI bus)."""
    build_efa_sysfs(root, [(f"rdmap{16 + i}s27", "0xefa1", {}) for i in range(count)])
    return root


def provision(cluster: FakeCluster, capacity: int | None = None, label: str | None = None) -> None:
    """What the node was given: the EFA device plugin's capacity, and the operator's label (NodePool template)."""
    def change(node: dict[str, Any]) -> None:
        if capacity is not None:
            node["status"].setdefault("capacity", {})[CAPACITY] = str(capacity)
            node["status"].setdefault("allocatable", {})[CAPACITY] = str(capacity)
        if label is not None:
            node["metadata"]["labels"][LABEL] = label
    cluster.update_node(NODE, change)


class Agent:
    """The exporter's parts that judge the EFA count: the efa probe, the watch of its Node, the expectation, the
    conditions and the collector, wired as `gpuhealth-exporter` wires them (gpuhealth/exporter/cli.py)."""

    def __init__(self, cluster: FakeCluster, sysfs: Path, tmp_path: Path, setting: int | None = None,
                 remembered: Path | None = None) -> None:
        sa_dir = tmp_path / "sa"
        sa_dir.mkdir(exist_ok=True)
        (sa_dir / "token").write_text(TOKEN + "\n")
        self.watch = NodeWatch(cluster.url, NODE, sa_dir=str(sa_dir), backoff=(0.05, 0.2))
        self.watch.list()
        self.stop = threading.Event()
        cluster.on_close.append(self.stop.set)
        known = lookup("p5.48xlarge")
        assert known is not None
        self.expect = Expectations(gpus=None, efa=EfaExpectation(setting, self.watch.node, known.efa_devices,
                                                                 str(remembered) if remembered else None))
        self.snapshot = Snapshot()
        self.runner = ProbeRunner(EfaProbe(str(sysfs)), self.snapshot, interval=15, deadline=5)

    def run(self) -> None:
        self.runner.run_once()

    def efa_condition(self) -> tuple[str, str, str]:
        c = next(c for c in evaluate(self.snapshot.view(), self.expect, 900) if c.type == "GpuhealthEFAHealthy")
        return c.status, c.reason, c.message

    def scrape(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuhealthCollector(self.snapshot, self.expect))
        out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for fam in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in fam.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return out

    def expected(self) -> dict[str, float]:
        return {dict(k)["source"]: v for k, v in self.scrape()["gpuhealth_efa_devices_expected"].items()}


def test_a_p5_given_no_efa_is_not_missing_its_32(cluster: FakeCluster, tmp_path: Path) -> None:
    # Launched for a pod that asked for no vpc.amazonaws.com/efa: none attached, none advertised.
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 0), tmp_path)
    agent.run()
    assert agent.efa_condition() == ("True", "EFAHealthy", "EFA devices present, no driver error")
    metrics = agent.scrape()
    assert metrics["gpuhealth_efa_devices_visible"] == {(): 0}
    assert agent.expected() == {"attached": 0}  # not configured: nothing can be missing
    assert metrics["gpuhealth_efa_devices_max"] == {(): P5_MAX}  # what it could take, for on-call to see


def test_one_missing_of_what_the_device_plugin_advertises_is_a_shortfall(cluster: FakeCluster,
                                                                          tmp_path: Path) -> None:
    provision(cluster, capacity=32)
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 31), tmp_path)
    agent.run()
    assert agent.efa_condition() == ("False", "EFADevicesMissing", "31 of 32 EFA devices visible (expected: the "
                                     "most the node's vpc.amazonaws.com/efa capacity advertised)")
    assert agent.expected() == {"capacity": 32}


def test_all_that_was_given_is_healthy(cluster: FakeCluster, tmp_path: Path) -> None:
    provision(cluster, capacity=4)  # an EC2NodeClass with 4 EFA network interfaces
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 4), tmp_path)
    agent.run()
    assert agent.efa_condition()[:2] == ("True", "EFAHealthy")
    assert agent.expected() == {"capacity": 4}


def test_the_operators_label_comes_first(cluster: FakeCluster, tmp_path: Path) -> None:
    provision(cluster, capacity=32, label="2")
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 2), tmp_path, setting=16)
    agent.run()
    assert agent.efa_condition()[:2] == ("True", "EFAHealthy")
    assert agent.expected() == {"label": 2}


def test_the_setting_comes_before_the_capacity(cluster: FakeCluster, tmp_path: Path) -> None:
    provision(cluster, capacity=32)
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 7), tmp_path, setting=8)
    agent.run()
    assert agent.efa_condition()[1:] == ("EFADevicesMissing",
                                         "7 of 8 EFA devices visible (expected: the exporter's efa_expected)")
    assert agent.expected() == {"setting": 8}


def test_a_label_that_is_not_a_count_is_ignored_with_a_warning(cluster: FakeCluster, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    provision(cluster, capacity=32, label="all")
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 32), tmp_path)
    with caplog.at_level(logging.WARNING, logger="gpuhealth.exporter.efa_expected"):
        agent.run()
        assert agent.expected() == {"capacity": 32}
        agent.scrape()
    assert [r.getMessage() for r in caplog.records] == [
        f"node label {LABEL}='all' is not a whole number: ignored, the next source counts"]  # once, not per scrape


def test_more_than_the_instance_type_can_take_is_cut_to_its_maximum(cluster: FakeCluster, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    provision(cluster, label="40")  # a typo: a p5.48xlarge takes 32
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 32), tmp_path)
    with caplog.at_level(logging.WARNING, logger="gpuhealth.exporter.efa_expected"):
        agent.run()
        assert agent.efa_condition()[:2] == ("True", "EFAHealthy")  # no node rebooted for interfaces it cannot have
    assert agent.expected() == {"label": P5_MAX}
    assert "more than the instance type's 32: expecting 32" in caplog.text


def test_without_a_device_plugin_a_device_seen_and_then_gone_is_missing(cluster: FakeCluster,
                                                                        tmp_path: Path) -> None:
    sysfs = efa_devices(tmp_path / "sysfs", 3)
    agent = Agent(cluster, sysfs, tmp_path)
    agent.run()
    assert agent.expected() == {"attached": 3} and agent.efa_condition()[:2] == ("True", "EFAHealthy")
    link = sysfs / "sys" / "class" / "infiniband" / "rdmap17s27"
    shutil.rmtree(link.resolve())
    link.unlink()  # a lost or unbound adapter
    agent.run()
    assert agent.efa_condition()[1:] == ("EFADevicesMissing", "2 of 3 EFA devices visible (expected: the most seen "
                                         "on this node)")
    assert agent.expected() == {"attached": 3}


def test_capacity_advertised_after_start_is_what_counts_from_then_on(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 31), tmp_path)
    agent.watch.start(agent.stop)
    agent.run()
    assert agent.expected() == {"attached": 31}
    provision(cluster, capacity=32)  # the EFA device plugin registers after the exporter started
    assert wait_for(lambda: agent.expected() == {"capacity": 32})
    assert agent.efa_condition()[1] == "EFADevicesMissing"


def lose_one(sysfs: Path, device: str = "rdmap17s27") -> None:
    """An adapter that did not come back (off the bus, unbound)."""
    link = sysfs / "sys" / "class" / "infiniband" / device
    shutil.rmtree(link.resolve())
    link.unlink()


def test_an_interface_lost_in_a_reboot_is_missing_after_it_though_the_device_plugin_advertises_fewer(
        cluster: FakeCluster, tmp_path: Path) -> None:
    """A reboot restarts the exporter and the EFA device plugin: the plugin then advertises only the adapters that
    came back. The most it advertised before is kept on the host (the chart's hostStateDir)."""
    state = tmp_path / "host-state" / EFA_COUNTS_FILE
    sysfs = efa_devices(tmp_path / "sysfs", 32)
    provision(cluster, capacity=32)
    before = Agent(cluster, sysfs, tmp_path, remembered=state)
    before.run()
    assert before.expected() == {"capacity": 32} and before.efa_condition()[:2] == ("True", "EFAHealthy")
    lose_one(sysfs)  # the reboot: one adapter does not come back, and the plugin counts what it finds
    provision(cluster, capacity=31)
    after = Agent(cluster, sysfs, tmp_path, remembered=state)
    after.run()
    assert after.expected() == {"capacity": 32}
    assert after.efa_condition()[1:] == ("EFADevicesMissing", "31 of 32 EFA devices visible (expected: the most the "
                                         f"node's {CAPACITY} capacity advertised)")


def test_a_new_machine_expects_what_its_device_plugin_advertises(cluster: FakeCluster, tmp_path: Path) -> None:
    """The control: no file on the host (a new machine, a new disk), 31 advertised and 31 seen is healthy."""
    provision(cluster, capacity=31)
    agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 31), tmp_path, remembered=tmp_path / "new" / "c.json")
    agent.run()
    assert agent.expected() == {"capacity": 31} and agent.efa_condition()[:2] == ("True", "EFAHealthy")


def test_without_a_device_plugin_a_device_lost_in_a_reboot_is_missing_after_it(cluster: FakeCluster,
                                                                              tmp_path: Path) -> None:
    state = tmp_path / "host-state" / EFA_COUNTS_FILE
    sysfs = efa_devices(tmp_path / "sysfs", 3)
    before = Agent(cluster, sysfs, tmp_path, remembered=state)
    before.run()
    assert before.expected() == {"attached": 3}
    lose_one(sysfs)
    after = Agent(cluster, sysfs, tmp_path, remembered=state)
    after.run()
    assert after.expected() == {"attached": 3} and after.efa_condition()[1] == "EFADevicesMissing"


def test_an_unreadable_counts_file_is_counted_afresh_with_a_warning(cluster: FakeCluster, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / EFA_COUNTS_FILE
    state.write_text("{not json")
    provision(cluster, capacity=2)
    with caplog.at_level(logging.WARNING):
        agent = Agent(cluster, efa_devices(tmp_path / "sysfs", 2), tmp_path, remembered=state)
        agent.run()
    assert agent.expected() == {"capacity": 2} and agent.efa_condition()[:2] == ("True", "EFAHealthy")
    assert any("unreadable" in r.getMessage() and str(state) in r.getMessage() for r in caplog.records)
    assert json.loads(state.read_text()) == {"capacity": 2, "attached": 2}


def test_the_serving_exporter_keeps_the_counts_beside_the_kernel_logs_state_and_only_there(tmp_path: Path) -> None:
    """As `gpuhealth-exporter` builds its expectations (gpuhealth/exporter/cli.py): the file sits in the state file's
    directory (the chart's hostStateDir, mounted for the kernel log); without the kernel log, or for --once, nothing is
    written."""
    state = tmp_path / "host" / "kmsg-state.json"
    served = expectations(Settings(state_file=str(state)), remember=True)
    assert served.efa.expected(4) == Expected(4, "attached")
    assert json.loads((state.parent / EFA_COUNTS_FILE).read_text()) == {"attached": 4}
    no_kmsg = Settings(state_file=str(tmp_path / "off" / "kmsg-state.json"),
                       probes={**DEFAULT_PROBES, "kmsg": ProbeSettings(enabled=False)})
    once = Settings(state_file=str(tmp_path / "once" / "kmsg-state.json"))
    for settings, remember in ((no_kmsg, True), (once, False)):
        assert expectations(settings, remember=remember).efa.expected(4) == Expected(4, "attached")
    assert not (tmp_path / "off").exists() and not (tmp_path / "once").exists()
