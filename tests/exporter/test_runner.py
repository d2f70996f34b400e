"""Fail closed: a probe that hangs, raises or returns garbage reports 0 with a reason; scrapes never wait."""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter.catalog import FAMILIES, Family
from gpuhealth.exporter.collector import Expectations, GpuhealthCollector
from gpuhealth.exporter.probes.base import ProbeError
from gpuhealth.exporter.runner import ProbeRunner
from gpuhealth.exporter.samples import ProbeResult, Sample
from gpuhealth.exporter.snapshot import Snapshot
from tests.fakes.probe import FakeProbe

Scrape = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(snapshot: Snapshot, expect: Expectations | None = None) -> Scrape:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, expect or Expectations()))
    out: Scrape = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def run(probe: FakeProbe, deadline: float = 0.2) -> Snapshot:
    snapshot = Snapshot()
    ProbeRunner(probe, snapshot, interval=1, deadline=deadline).run_once()
    return snapshot


def test_a_healthy_probe_reports_success_and_its_samples() -> None:
    result = ProbeResult([Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, 4)])
    metrics = scrape(run(FakeProbe("efa", result)))
    assert metrics["gpuhealth_probe_success"] == {(("probe", "efa"),): 1}
    assert metrics["gpuhealth_efa_devices_visible"] == {(): 4}
    assert "gpuhealth_probe_error" not in metrics


def test_a_hung_probe_is_a_timeout_and_returns_control_at_the_deadline() -> None:
    probe = FakeProbe("nvml", "hang")
    started = time.monotonic()
    snapshot = run(probe, deadline=0.1)
    assert time.monotonic() - started < 3
    metrics = scrape(snapshot)
    assert metrics["gpuhealth_probe_success"] == {(("probe", "nvml"),): 0}
    assert metrics["gpuhealth_probe_error"] == {(("probe", "nvml"), ("reason", "timeout")): 1}
    probe.release.set()


def test_a_still_hung_probe_is_not_started_twice() -> None:
    probe = FakeProbe("nvml", "hang")
    snapshot = Snapshot()
    runner = ProbeRunner(probe, snapshot, interval=1, deadline=0.05)
    runner.run_once()
    runner.run_once()
    assert probe.calls == 1
    assert scrape(snapshot)["gpuhealth_probe_failures_total"] == {(("probe", "nvml"), ("reason", "timeout")): 2}
    probe.release.set()


def test_an_exception_is_a_failure_with_a_stable_reason() -> None:
    cases = {
        "missing_tool": ProbeError("missing_tool", "dcgmi: not found"),
        "permission_denied": PermissionError(13, "Permission denied", "/dev/kmsg"),
        "not_found": FileNotFoundError(2, "No such file", "/x"),
        "bad_output": ValueError("not a number"),
        "error": RuntimeError("boom"),
    }
    for reason, exc in cases.items():
        metrics = scrape(run(FakeProbe("dcgm", exc)))
        assert metrics["gpuhealth_probe_error"] == {(("probe", "dcgm"), ("reason", reason)): 1}


def test_garbage_results_are_refused() -> None:
    garbage = [
        ProbeResult([Sample(Family("gpuhealth_not_a_metric", "gauge", (), "Declared nowhere."), {}, 1)]),
        ProbeResult([Sample(FAMILIES["gpuhealth_efa_devices_visible"], {"extra": "x"}, 1)]),
        ProbeResult([Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, float("nan"))]),
        "not a result",
    ]
    for result in garbage:
        metrics = scrape(run(FakeProbe("efa", result if isinstance(result, ProbeResult) else ValueError(result))))
        assert metrics["gpuhealth_probe_success"] == {(("probe", "efa"),): 0}
        assert "gpuhealth_efa_devices_visible" not in metrics


def test_a_sample_of_a_family_made_outside_the_catalog_is_refused_even_under_a_declared_name() -> None:
    """A family is declared once, as its catalog handle: one made elsewhere under the same name (its help or labels
    could differ from what rules and dashboards read), or a bare name, is garbage, not data."""
    impostor = Family("gpuhealth_efa_devices_visible", "gauge", (), "EFA devices present in sysfs.")
    for family in (impostor, "gpuhealth_efa_devices_visible"):
        metrics = scrape(run(FakeProbe("efa", ProbeResult([Sample(family, {}, 4)]))))  # type: ignore[arg-type]
        assert metrics["gpuhealth_probe_success"] == {(("probe", "efa"),): 0}, family
        assert metrics["gpuhealth_probe_error"] == {(("probe", "efa"), ("reason", "bad_output")): 1}, family
        assert "gpuhealth_efa_devices_visible" not in metrics, family


def test_a_failed_probe_serves_none_of_its_old_samples() -> None:
    probe = FakeProbe("efa", ProbeResult([Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, 4)]))
    snapshot = Snapshot()
    runner = ProbeRunner(probe, snapshot, interval=1, deadline=0.2)
    runner.run_once()
    probe.behaviour = RuntimeError("sysfs vanished")
    runner.run_once()
    assert "gpuhealth_efa_devices_visible" not in scrape(snapshot)


def test_a_result_older_than_its_tolerance_is_stale() -> None:
    snapshot = run(FakeProbe("efa", ProbeResult()))
    snapshot._states["efa"].last_finish = time.monotonic() - 60  # interval 1 s, deadline 0.2 s
    metrics = scrape(snapshot)
    assert metrics["gpuhealth_probe_success"] == {(("probe", "efa"),): 0}
    assert metrics["gpuhealth_probe_error"] == {(("probe", "efa"), ("reason", "stale")): 1}


def test_a_scrape_while_a_probe_hangs_answers_at_once() -> None:
    probe = FakeProbe("nvml", "hang")
    snapshot = Snapshot()
    runner = ProbeRunner(probe, snapshot, interval=1, deadline=5)
    thread = threading.Thread(target=runner.run_once)
    thread.start()
    started = time.monotonic()
    metrics = scrape(snapshot)
    assert time.monotonic() - started < 0.5
    assert metrics["gpuhealth_probe_success"] == {(("probe", "nvml"),): 0}  # not yet run: not healthy
    probe.release.set()
    thread.join()


def test_kernel_log_xids_gain_the_gpu_index_nvml_knows() -> None:
    from gpuhealth.exporter.samples import GpuIdentity

    snapshot = Snapshot()
    kmsg = ProbeResult([Sample(FAMILIES["gpuhealth_xid_errors"], {"xid": "79", "gpu": "", "uuid": "",
                                                        "pci_bus_id": "00000000:9B:00.0", "gpu_instance": "",
                                                        "fatal": ""}, 1)])
    nvml = ProbeResult(gpus=[GpuIdentity("00000000:9B:00.0", "4", "GPU-abc"), GpuIdentity("00000000:05:00.0", "0")])
    for probe in (FakeProbe("kmsg", kmsg), FakeProbe("nvml", nvml)):
        ProbeRunner(probe, snapshot, interval=1, deadline=1).run_once()
    metrics = scrape(snapshot, Expectations(gpus=8))
    assert metrics["gpuhealth_xid_errors_total"] == {
        (("fatal", ""), ("gpu", "4"), ("gpu_instance", ""), ("pci_bus_id", "00000000:9B:00.0"), ("uuid", "GPU-abc"),
         ("xid", "79")): 1
    }
    assert metrics["gpuhealth_gpus_visible"] == {(): 2}
    assert metrics["gpuhealth_gpus_expected"] == {(): 8}


def test_xid_counters_keep_their_gpu_labels_when_nvml_fails_later() -> None:
    from gpuhealth.exporter.samples import GpuIdentity

    snapshot = Snapshot()
    kmsg = ProbeResult([Sample(FAMILIES["gpuhealth_xid_errors"], {"xid": "79", "gpu": "", "uuid": "",
                                                        "pci_bus_id": "00000000:9B:00.0", "gpu_instance": "",
                                                        "fatal": ""}, 1)])
    nvml = FakeProbe("nvml", ProbeResult(gpus=[GpuIdentity("00000000:9B:00.0", "4", "GPU-abc")]))
    ProbeRunner(FakeProbe("kmsg", kmsg), snapshot, interval=1, deadline=1).run_once()
    nvml_runner = ProbeRunner(nvml, snapshot, interval=1, deadline=1)
    nvml_runner.run_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuhealthCollector(snapshot, Expectations()))
    before = generate_latest(registry).decode()
    nvml.behaviour = RuntimeError("GPU is lost")
    nvml_runner.run_once()
    after = generate_latest(registry).decode()
    line = [x for x in before.splitlines() if x.startswith("gpuhealth_xid_errors_total{")]
    assert line == [x for x in after.splitlines() if x.startswith("gpuhealth_xid_errors_total{")]
    assert 'gpu="4"' in line[0] and 'uuid="GPU-abc"' in line[0]


def test_a_probe_can_ask_to_run_again_sooner_than_its_interval() -> None:
    result = ProbeResult([Sample(FAMILIES["gpuhealth_dcgm_diag_failed_tests"], {}, 1)], run_again_after=0.05)
    probe = FakeProbe("diag", result)
    runner = ProbeRunner(probe, Snapshot(), interval=3600, deadline=1)
    stop = threading.Event()
    thread = runner.start(stop)
    deadline = time.monotonic() + 5
    while probe.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(5)
    assert probe.calls >= 3  # an hourly probe, re-run within seconds because it asked to
