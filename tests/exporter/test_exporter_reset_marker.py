"""The exporter lets go of the GPUs while its Node carries gpuhealth's GPU reset marker, and says so on the Node
(gpuhealth/exporter/gpu_reset.py; the remediator's side is gpuhealth/remediator/decide/reset.py).

The node agent runs in-process with its real parts: the nvml probe over tests/fakes/nvml.py (the GPUs are the only
stand-in), the dcgm and diag probes running a stand-in `dcgmi` script that prints recorded real outputs, the kmsg
probe following a kernel-log file, the runners, the snapshot, the conditions, the collector, the watch of its Node
(gpuhealth/exporter/node_watch.py) and the NodeConditionWriter over HTTP against the fake API server, which enforces the
chart's RBAC and admission policy for the exporter's ServiceAccount.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter.cli import build_parser, settings_from_args
from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.conditions import evaluate
from gpuhealth.exporter.config import ConfigError, Settings, load_file
from gpuhealth.exporter.gpu_reset import ANNOTATION, RELEASED_REASON, GpuResetRelease, released_message
from gpuhealth.exporter.node_status import KubeError, NodeConditionWriter
from gpuhealth.exporter.node_watch import NodeWatch
from gpuhealth.exporter.probes.base import ProbePaused
from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.probes.registry import BY_NAME
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.serve import _node_loop
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.apiserver import FakeCluster
from tests.fakes.nvml import P5_BUS_IDS, FakeGpu, FakeNvml, uuid_of
from tests.support import paths
from tests.support.chart_render import NAMESPACE, render
from tests.support.polling import wait_for

FIXTURES = paths.FIXTURES / "dcgm"
NODE, OTHER = "gpu-a", "gpu-b"
EXPORTER_SA = "gpuhealth-exporter"
REQUEST = "gpuhealth-reset-gpu-a-7f3c"  # the reset Job's name, as the remediator sets it
PROBES_CONDITION = "GpuhealthProbesHealthy"
MANIFESTS = render()

Scrape = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for node in (NODE, OTHER):
            c.add_node(node)
        c.add_service_account_token("token-a", NAMESPACE, EXPORTER_SA, node=NODE, pod="exporter-a")
        c.load_admission(MANIFESTS)
        c.load_rbac(MANIFESTS)
        yield c
        assert c.forbidden == []  # the chart grants every call the exporter made


def dcgmi(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in dcgmi: logs its arguments, sets watches, prints the recorded health and diag reports; fails while
    the file `down` exists (nv-hostengine gone)."""
    calls = tmp_path / "dcgmi-calls"
    calls.write_text("")
    health = FIXTURES / "virtualclient_DCGMIHealthCheckResults.json"
    diag = FIXTURES / "diag4x_passing_constructed.json"
    script = tmp_path / "dcgmi"
    script.write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> '{calls}'\n"
        f"[ -e '{tmp_path}/down' ] && {{ echo 'Error: unable to establish a connection' >&2; exit 1; }}\n"
        '[ "$*" = "health -s a" ] && { echo "Health monitor systems set successfully."; exit 0; }\n'
        f'case "$1" in health) cat \'{health}\' ;; diag) cat \'{diag}\' ;; *) exit 64 ;; esac\n')
    script.chmod(0o755)
    return script, calls


class Agent:
    """The node agent's parts as `gpuhealth-exporter` wires them (gpuhealth/exporter/cli.py serve), one step at a
    time."""

    def __init__(self, cluster: FakeCluster, tmp_path: Path, wait: float = 0.2, interval: float = 10.0) -> None:
        self.cluster = cluster
        self.nvml = FakeNvml([FakeGpu(uuid_of(i), P5_BUS_IDS[i]) for i in range(2)])
        self.kernel_log = tmp_path / "kern.log"
        self.kernel_log.write_text("")
        script, self.dcgmi_calls = dcgmi(tmp_path)
        self.settings = Settings(node=NODE, kmsg_file=str(self.kernel_log), dcgmi=str(script),
                                 condition_interval=interval, reset_marker_interval=interval)
        probes = [BY_NAME["kmsg"].build(self.settings, True), NvmlProbe(self.nvml),
                  BY_NAME["dcgm"].build(self.settings, False), BY_NAME["diag"].build(self.settings, False)]
        self.snapshot = Snapshot()
        self.runners = {p.name: ProbeRunner(p, self.snapshot, interval, BY_NAME[p.name].defaults.deadline)
                        for p in probes}
        sa_dir = tmp_path / "sa"
        sa_dir.mkdir()
        (sa_dir / "token").write_text("token-a\n")
        # As serve() wires them: the Node listed before anything runs, then watched on a thread of its own.
        self.changed = threading.Event()
        self.stop = threading.Event()
        cluster.on_close.append(self.stop.set)
        self.watch = NodeWatch(cluster.url, NODE, sa_dir=str(sa_dir), on_change=self.changed.set,
                               watch_seconds=(1, 2), backoff=(0.05, 0.2))
        with contextlib.suppress(KubeError):
            self.watch.list()
        self.watch.start(self.stop)
        self.writer = NodeConditionWriter(cluster.url, NODE, sa_dir=str(sa_dir), read_node=self.watch.node)
        self.release = GpuResetRelease(list(self.runners.values()), self.snapshot, self.watch.annotations,
                                       wait=wait)
        self.expect = Expectations(gpus=2)

    def mark(self, request: str | None) -> None:
        """The remediator's write on this node, once the watch has delivered it."""
        rv = int(mark(self.cluster, NODE, request))
        assert wait_for(lambda: self.seen() >= rv), "the watch did not deliver the change"

    def seen(self) -> int:
        """The resourceVersion of the Node as the watch last delivered it."""
        node = self.watch.node()
        return int(node["metadata"]["resourceVersion"]) if node else 0

    def run_probes(self) -> None:
        for runner in self.runners.values():
            runner.run_once()

    def write_conditions(self) -> None:
        self.writer.sync(self.release.acknowledge(evaluate(self.snapshot.view(), self.expect, 900)))

    def cycle(self) -> None:
        """What the agent's threads do in one interval: read the marker, run the probes, write the conditions."""
        self.release.poll()
        self.run_probes()
        self.write_conditions()

    def condition(self, ctype: str = PROBES_CONDITION) -> dict[str, str]:
        return next(c for c in self.cluster.node(NODE)["status"]["conditions"] if c["type"] == ctype)

    def scrape(self) -> Scrape:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuhealthCollector(self.snapshot, self.expect, extra=self.release.samples))
        out: Scrape = {}
        for fam in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in fam.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return out

    def dcgmi_ran(self) -> list[str]:
        return self.dcgmi_calls.read_text().splitlines()


def mark(cluster: FakeCluster, node: str, request: str | None) -> str:
    """The remediator's write: the marker set to a request id, or removed; the Node's new resourceVersion."""
    def change(n: dict[str, Any]) -> None:
        annotations = n["metadata"].setdefault("annotations", {})
        if request is None:
            annotations.pop(ANNOTATION, None)
        else:
            annotations[ANNOTATION] = request
    return str(cluster.update_node(node, change)["metadata"]["resourceVersion"])


def by_probe(series: dict[tuple[tuple[str, str], ...], float]) -> dict[str, float]:
    return {dict(labels)["probe"]: value for labels, value in series.items()}


def test_the_marker_releases_nvml_pauses_dcgm_and_is_acknowledged_with_the_request_id(
        cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    assert (agent.nvml.init_calls, agent.nvml.shutdown_calls, agent.nvml.initialised) == (1, 0, True)
    assert agent.condition()["reason"] == "ProbesHealthy"
    assert agent.dcgmi_ran() == ["health -s a", "health -c -j", "diag -r 1 -j"]

    agent.mark(REQUEST)
    assert agent.release.poll() is True  # acknowledged now: the conditions are due at once
    assert (agent.nvml.shutdown_calls, agent.nvml.initialised) == (1, False)  # every nvmlInit balanced

    touches, ran = agent.nvml.touches, agent.dcgmi_ran()
    for _ in range(3):  # the runners keep to their intervals while paused
        agent.cycle()
    assert agent.nvml.touches == touches and agent.nvml.init_calls == 1  # not one NVML call while paused
    assert agent.dcgmi_ran() == ran  # nor a dcgmi
    assert sum(agent.snapshot.view()["nvml"].failures.values()) == 0  # and no failure: paused is not failed

    probes = agent.condition()
    assert (probes["status"], probes["reason"]) == ("True", RELEASED_REASON)
    assert probes["message"] == f"released NVML and paused DCGM for GPU reset request {REQUEST}"
    assert probes["message"] == released_message(REQUEST)
    assert agent.condition("GpuhealthGPUHealthy")["status"] == "True"  # kept, not Unknown for want of data

    metrics = agent.scrape()
    assert by_probe(metrics["gpuhealth_probe_paused"]) == {"kmsg": 0, "nvml": 1, "dcgm": 1, "diag": 1}
    assert by_probe(metrics["gpuhealth_probe_success"]) == {"kmsg": 1}  # paused: neither 1 nor 0
    assert "gpuhealth_probe_error" not in metrics
    assert "gpuhealth_gpu_info" not in metrics and "gpuhealth_dcgm_health_status" not in metrics  # not served stale
    assert set(by_probe(metrics["gpuhealth_probe_last_success_timestamp_seconds"])) == {"kmsg", "nvml", "dcgm",
                                                                                        "diag"}


def test_the_kernel_log_is_read_throughout_a_pause(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    agent.mark(REQUEST)
    agent.cycle()
    with agent.kernel_log.open("a") as f:
        f.write(f"[ 9.0] NVRM: Xid (PCI:0000:{P5_BUS_IDS[1][9:11]}:00): 79, GPU has fallen off the bus.\n")
    agent.cycle()
    gpu = agent.condition("GpuhealthGPUHealthy")
    assert (gpu["status"], gpu["reason"]) == ("False", "FatalXid")  # fresh kernel-log evidence still counts
    assert agent.condition()["reason"] == RELEASED_REASON
    xids = agent.scrape()["gpuhealth_xid_errors_total"]
    assert [dict(k)["xid"] for k, v in xids.items() if v] == ["79"]


def test_removing_the_marker_reinitialises_nvml_and_restores_the_condition(cluster: FakeCluster,
                                                                            tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    agent.mark(REQUEST)
    agent.cycle()
    ran = agent.dcgmi_ran()

    agent.mark(None)
    assert agent.release.poll() is True
    assert agent.nvml.init_calls == 1  # not before the next run: nvmlInit again on next use
    assert by_probe(agent.scrape()["gpuhealth_probe_paused"])["nvml"] == 1  # until that run
    agent.run_probes()
    agent.write_conditions()
    assert (agent.nvml.init_calls, agent.nvml.shutdown_calls, agent.nvml.initialised) == (2, 1, True)
    assert agent.dcgmi_ran()[len(ran):] == ["health -s a", "health -c -j", "diag -r 1 -j"]  # watches set again
    probes = agent.condition()
    assert (probes["status"], probes["reason"], probes["message"]) == ("True", "ProbesHealthy",
                                                                       "every probe reports in time")
    metrics = agent.scrape()
    assert by_probe(metrics["gpuhealth_probe_paused"]) == {"kmsg": 0, "nvml": 0, "dcgm": 0, "diag": 0}
    assert by_probe(metrics["gpuhealth_probe_success"]) == dict.fromkeys(("kmsg", "nvml", "dcgm", "diag"), 1)
    assert len(metrics["gpuhealth_gpu_info"]) == 2


def break_the_watch(cluster: FakeCluster, agent: Agent) -> None:
    """The API server restarts and answers every list and watch with an error until `cluster.heal()`."""
    failures = agent.watch.failures
    cluster.fail("GET", "^/api/v1/nodes$", 503, times=10_000)
    cluster.drop_watches()
    assert wait_for(lambda: agent.watch.failures > failures), "the watch did not notice"


def test_a_broken_watch_changes_nothing_either_way(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    break_the_watch(cluster, agent)
    mark(cluster, NODE, REQUEST)  # set while the exporter cannot see it
    assert agent.release.poll() is False
    agent.run_probes()
    assert (agent.nvml.shutdown_calls, agent.nvml.initialised) == (0, True)  # no release on no evidence
    assert agent.release.read_failures == 1

    cluster.heal()  # the watch resumes where it stopped, and the change comes first
    assert wait_for(lambda: ANNOTATION in (agent.watch.node() or {})["metadata"]["annotations"])
    assert agent.release.poll() is True  # released
    assert agent.nvml.shutdown_calls == 1
    agent.write_conditions()
    break_the_watch(cluster, agent)
    mark(cluster, NODE, None)
    for _ in range(2):
        assert agent.release.poll() is False
        agent.run_probes()
        agent.write_conditions()
    assert agent.nvml.init_calls == 1 and not agent.nvml.initialised  # no resume on no evidence
    assert agent.condition()["reason"] == RELEASED_REASON
    assert agent.scrape()["gpuhealth_reset_marker_read_failures_total"] == {(): 3}
    cluster.heal()
    assert wait_for(lambda: agent.release.poll() and agent.release.requested is None)  # back: resumed


def test_a_deleted_node_changes_nothing(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    agent.mark(REQUEST)
    assert agent.release.poll() is True
    cluster.delete_node(NODE)  # deleted mid-reset (a person, Karpenter): the marker goes with it
    assert wait_for(lambda: agent.watch.failures > 0)
    touches = agent.nvml.touches
    assert agent.release.poll() is False and agent.release.released_for == REQUEST
    agent.run_probes()
    assert agent.nvml.touches == touches and not agent.nvml.initialised  # NVML is not taken back on no evidence


def test_a_watch_too_old_to_resume_lists_the_node_again(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    break_the_watch(cluster, agent)
    mark(cluster, NODE, REQUEST)
    cluster.compact()  # the changes since the watch's resourceVersion are gone: resuming gets 410 Gone
    lists = cluster.calls[("list", "nodes")]
    cluster.heal()
    assert wait_for(lambda: agent.release.poll() and agent.release.released_for == REQUEST)
    assert cluster.calls[("list", "nodes")] == lists + 1  # one list after the 410, then it watches again
    assert wait_for(lambda: cluster.calls[("watch", "nodes")] >= 2)
    relist = [q for method, path, q in cluster.queries if path == "/api/v1/nodes" and not q.get("watch")][-1]
    assert "resourceVersion" not in relist  # a consistent read: the cache (rv=0) may be older than the watch had seen


def test_the_answer_must_be_this_node(cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent(cluster, tmp_path)
    agent.stop.set()
    other = cluster.node(OTHER)
    other["metadata"]["annotations"][ANNOTATION] = REQUEST
    answer = {"kind": "NodeList", "metadata": {"resourceVersion": str(cluster.rv)}, "items": [other]}
    monkeypatch.setattr(agent.watch.http, "request", lambda method, path, body=None: answer)  # a wrong answer
    with pytest.raises(KubeError, match="1 Nodes, 0 of them gpu-a"):
        agent.watch.list()
    assert agent.release.poll() is False
    assert agent.release.read_failures == 1 and agent.release.requested is None


def test_a_marker_on_another_node_releases_nothing_and_reads_only_its_own(cluster: FakeCluster,
                                                                        tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    mark(cluster, OTHER, REQUEST)
    agent.cycle()
    assert (agent.nvml.shutdown_calls, agent.nvml.initialised) == (0, True)
    assert agent.condition()["reason"] == "ProbesHealthy"
    reads = [(path, query) for method, path, query in cluster.queries if method == "GET"]
    assert reads and all(path == "/api/v1/nodes" and query["fieldSelector"] == f"metadata.name={NODE}"
                         for path, query in reads)
    lists = [query for _, query in reads if "watch" not in query]
    assert lists == [{"fieldSelector": f"metadata.name={NODE}", "resourceVersion": "0"}]  # from the cache


def test_a_run_in_progress_delays_the_release_and_its_acknowledgement(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path, wait=0.05)
    agent.cycle()
    blocker = threading.Event()
    agent.nvml.gpus[0].blocker = blocker  # the next NVML run waits inside a call
    run = threading.Thread(target=agent.runners["nvml"].run_once)
    run.start()
    assert agent.nvml.gpus[0].blocked.wait(5)
    agent.mark(REQUEST)
    assert agent.release.poll() is False
    assert agent.nvml.shutdown_calls == 0  # never shut down under a call in progress
    touches = agent.nvml.touches
    with pytest.raises(ProbePaused):  # but no new run starts meanwhile
        agent.runners["nvml"].probe.collect(1)
    assert agent.nvml.touches == touches
    agent.write_conditions()
    assert agent.condition()["reason"] == "ProbesHealthy"  # not acknowledged: NVML is still open
    assert by_probe(agent.scrape()["gpuhealth_probe_paused"]) == {"kmsg": 0, "nvml": 0, "dcgm": 1, "diag": 1}
    blocker.set()
    run.join(5)
    assert agent.release.poll() is True
    agent.write_conditions()
    assert agent.nvml.shutdown_calls == 1 and agent.condition()["reason"] == RELEASED_REASON


def test_a_marker_removed_before_a_run_in_progress_ends_leaves_the_probe_running(cluster: FakeCluster,
                                                                                tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path, wait=0.05)
    agent.cycle()
    blocker = threading.Event()
    agent.nvml.gpus[0].blocker = blocker
    run = threading.Thread(target=agent.runners["nvml"].run_once)
    run.start()
    assert agent.nvml.gpus[0].blocked.wait(5)
    agent.mark(REQUEST)
    assert agent.release.poll() is False  # still waiting for the run
    agent.mark(None)
    agent.release.poll()
    blocker.set()
    run.join(5)
    touches = agent.nvml.touches
    agent.cycle()
    assert agent.nvml.touches > touches  # runs are allowed again
    assert agent.nvml.shutdown_calls == 0 and agent.nvml.init_calls == 1  # never let go, so nothing to take back
    assert agent.condition()["reason"] == "ProbesHealthy"


def test_the_status_stays_what_the_probes_health_makes_it(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    (tmp_path / "down").write_text("")  # nv-hostengine is gone before the reset
    agent.cycle()
    assert (agent.condition()["status"], agent.condition()["reason"]) == ("False", "ProbeFailed")
    agent.mark(REQUEST)
    agent.cycle()
    probes = agent.condition()
    assert (probes["status"], probes["reason"], probes["message"]) == ("False", RELEASED_REASON,
                                                                       released_message(REQUEST))
    assert agent.condition("GpuhealthGPUHealthy")["status"] == "Unknown"  # its failing source stays failing


def test_a_restart_during_a_reset_never_takes_nvml(cluster: FakeCluster, tmp_path: Path) -> None:
    mark(cluster, NODE, REQUEST)
    agent = Agent(cluster, tmp_path)
    agent.cycle()  # the marker is read before the probes first run (serve does the same)
    assert agent.nvml.touches == 0 and agent.dcgmi_ran() == []
    probes = agent.condition()
    assert (probes["reason"], probes["message"]) == (RELEASED_REASON, released_message(REQUEST))
    assert probes["status"] == "False"  # nvml, dcgm and diag have never run: not healthy
    assert agent.condition("GpuhealthGPUHealthy")["status"] == "Unknown"


def test_a_new_request_id_is_acknowledged_without_a_second_release(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path)
    agent.cycle()
    agent.mark(REQUEST)
    agent.cycle()
    agent.mark("gpuhealth-reset-gpu-a-9d01")
    assert agent.release.poll() is True
    agent.write_conditions()
    assert agent.condition()["message"] == released_message("gpuhealth-reset-gpu-a-9d01")
    assert (agent.nvml.init_calls, agent.nvml.shutdown_calls) == (1, 1)


def run_agent(agent: Agent, stop: threading.Event) -> None:
    """The threads `gpuhealth-exporter` runs (serve): the runners on their intervals, and the node loop."""
    for runner in agent.runners.values():
        runner.start(stop)
    threading.Thread(target=_node_loop, args=(agent.writer, agent.snapshot, agent.settings, stop, agent.release,
                                              agent.expect, agent.changed), daemon=True).start()


def test_the_agents_loop_acknowledges_and_resumes(cluster: FakeCluster, tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path, interval=0.1)
    stop = threading.Event()
    try:
        run_agent(agent, stop)
        assert wait_for(lambda: _has(cluster) and agent.condition()["reason"] == "ProbesHealthy")
        agent.mark(REQUEST)
        assert wait_for(lambda: agent.condition()["reason"] == RELEASED_REASON)
        assert agent.condition()["message"] == released_message(REQUEST)
        assert agent.nvml.shutdown_calls == 1 and not agent.nvml.initialised
        agent.mark(None)
        assert wait_for(lambda: agent.condition()["reason"] == "ProbesHealthy" and agent.nvml.initialised)
        assert agent.nvml.init_calls == 2
    finally:
        stop.set()
        agent.changed.set()


def test_the_marker_is_acted_on_when_the_watch_delivers_it_not_at_the_next_interval(cluster: FakeCluster,
                                                                                     tmp_path: Path) -> None:
    agent = Agent(cluster, tmp_path, interval=3600.0)  # nothing runs again on its interval within this test
    stop = threading.Event()
    try:
        agent.cycle()
        run_agent(agent, stop)
        started = time.monotonic()
        mark(cluster, NODE, REQUEST)
        assert wait_for(lambda: agent.condition()["reason"] == RELEASED_REASON, seconds=5)
        assert time.monotonic() - started < 5  # before: up to reset_marker_interval (10 s by default)
        assert agent.nvml.shutdown_calls == 1
        mark(cluster, NODE, None)
        assert wait_for(lambda: agent.condition()["reason"] == "ProbesHealthy", seconds=5)  # and back at once
    finally:
        stop.set()
        agent.changed.set()


def _has(cluster: FakeCluster) -> bool:
    return any(c["type"] == PROBES_CONDITION for c in cluster.node(NODE)["status"]["conditions"])


def test_the_interval_is_a_flag_and_a_setting() -> None:
    assert "--reset-marker-interval" in build_parser().format_help()
    args = build_parser().parse_args(["--reset-marker-interval", "2.5"])
    assert settings_from_args(args, {}).reset_marker_interval == 2.5
    assert Settings().reset_marker_interval == 10.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--reset-marker-interval", "0"])


def test_a_zero_interval_in_the_config_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("reset_marker_interval: 0\n")
    with pytest.raises(ConfigError, match="reset_marker_interval: must be > 0"):
        load_file(str(config))


def test_every_probe_the_registry_pauses_can_pause() -> None:
    paused = {name for name, spec in BY_NAME.items() if spec.paused_for_gpu_reset}
    assert paused == {"nvml", "dcgm", "diag", "dcgm_exporter"}  # kmsg and efa run throughout
    settings = Settings(dcgm_exporter="http://127.0.0.1:9/metrics")
    runners = [ProbeRunner(BY_NAME[n].build(settings, True), Snapshot(), 1, 1) for n in sorted(paused)]
    assert set(GpuResetRelease(runners, Snapshot(), dict).probes) == paused


def test_the_contract_matches_the_remediators() -> None:
    from gpuhealth.remediator.decide import nodestate

    assert nodestate.RESET_REQUEST_ANNOTATION == ANNOTATION
    assert nodestate.RELEASED_REASON == RELEASED_REASON
    assert json.dumps(released_message(REQUEST)).endswith(f' {REQUEST}"')
