"""`gpuhealth-exporter` as on-call runs it: the real console script, in a subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.recorded_node import EXPORTER, fixture_node_args, run_exporter
from tests.support import paths, process_tree

ROOT = paths.REPO
run = run_exporter


def families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_once_on_the_kernel_log_samples_prints_an_xid_counter_per_gpu_and_xid(fixtures: Path) -> None:
    proc = run("--once", "--kmsg-file", str(fixtures / "kmsg" / "samples.txt"))
    assert proc.returncode == 0, proc.stderr
    xids = {(dict(k)["pci_bus_id"], dict(k)["xid"]): v
            for k, v in families(proc.stdout)["gpuhealth_xid_errors_total"].items()}
    assert xids[("00000000:38:00.0", "13")] == 3
    assert xids[("00000000:05:00.0", "79")] == 1
    assert xids[("00000000:B3:00.0", "79")] == 1  # the multi-line "fallen off the bus" record
    assert len(xids) == 18


def test_once_on_the_fixture_node_reports_every_probe(fixtures: Path, tmp_path: Path) -> None:
    proc = run("--once", *fixture_node_args(fixtures, tmp_path))
    assert proc.returncode == 0, proc.stderr
    m = families(proc.stdout)
    success = {dict(k)["probe"]: v for k, v in m["gpuhealth_probe_success"].items()}
    # No driver here: NVML fails closed; everything fed from recordings works.
    assert success == {"kmsg": 1, "nvml": 0, "dcgm": 1, "diag": 1, "dcgm_exporter": 1, "efa": 1}
    assert m["gpuhealth_probe_error"] == {(("probe", "nvml"), ("reason", "missing_tool")): 1}
    assert m["gpuhealth_efa_devices_visible"] == {(): 3}
    # A p4d.24xlarge can take 4 EFA interfaces; nothing says this node was given any (no Node, no setting), so what
    # is expected is what was attached: the 3 seen. The instance type's 4 is only the upper bound.
    assert m["gpuhealth_efa_devices_expected"] == {(("source", "attached"),): 3}
    assert m["gpuhealth_efa_devices_max"] == {(): 4}
    assert m["gpuhealth_gpus_expected"] == {(): 8}
    assert m["gpuhealth_gpus_visible"] == {(): 1}  # dcgm-exporter's one L4 stands in for NVML
    assert m["gpuhealth_dcgm_health_status"] == {(("gpu", ""), ("system", "")): 0}


def test_help_explains_the_probes_and_the_flags() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for words in ("fail closed", "--once", "--kmsg-file", "--sysfs-root", "--dcgmi", "--dcgm-exporter-url",
                  "--efa-counters", "--config", "probes: kmsg"):
        assert words in proc.stdout


def test_bad_arguments_give_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    cases = [
        (["--once", "--kmsg-file", str(tmp_path / "missing.log")], "--kmsg-file", "No such file or directory"),
        (["--once", "--sysfs-root", str(tmp_path / "nowhere")], "--sysfs-root", "not a directory"),
        (["--once", "--dcgmi", str(tmp_path / "no-dcgmi")], "--dcgmi", "not an executable file"),
        (["--once", "--disable", "gpu"], "--disable", "unknown probe gpu"),
        (["--once", "--gpus-expected", "eight"], "--gpus-expected", "expected a whole number"),
        (["--once", "--efa-counters", "default,tx_byte"], "--efa-counters", "unknown EFA counter 'tx_byte'"),
        (["--once", "--listen", "localhost"], "--listen", "expected [ADDR]:PORT"),
        (["--once", "--config", str(tmp_path / "none.yaml")], "none.yaml", "cannot read"),
    ]
    for args, flag, why in cases:
        proc = run(*args)
        assert proc.returncode == 2, args
        assert proc.stdout == ""
        lines = [line for line in proc.stderr.splitlines() if "error" in line]
        assert len(lines) == 1 and flag in lines[0] and why in lines[0], proc.stderr


def test_efa_counters_by_default_are_the_health_signals_and_the_flag_or_config_widens_them(
        fixtures: Path, tmp_path: Path) -> None:
    def exported(*args: str) -> set[str]:
        proc = run("--once", "--sysfs-root", str(fixtures / "sysfs" / "p4d"), "--disable", "kmsg,nvml,dcgm,diag",
                   *args)
        assert proc.returncode == 0, proc.stderr
        return {dict(k)["counter"] for k in families(proc.stdout)["gpuhealth_efa_hw_counter_total"]}

    default = exported()
    assert "rdma_read_wr_err" in default and "cmds_err" in default and "tx_bytes" not in default
    assert len(default) == 17
    assert exported("--efa-counters", "all") >= default | {"tx_bytes", "keep_alive_rcvd"}
    assert exported("--efa-counters", "default,tx_bytes") == default | {"tx_bytes"}
    config = tmp_path / "exporter.yaml"
    config.write_text("efa_counters: [rx_drops, tx_pkts]\n")
    assert exported("--config", str(config)) == {"rx_drops", "tx_pkts"}
    assert exported("--config", str(config), "--efa-counters", "cmds_err") == {"cmds_err"}


def test_a_dcgm_exporter_url_turns_its_probe_on_whatever_else_is_disabled(fixtures: Path) -> None:
    scrape = str(fixtures / "dcgm" / "metrics_kops_aws_L4_580.105.08.prom")
    proc = run("--once", "--dcgm-exporter-url", scrape, "--node", "i-030791dc5a37cd257", "--no-conditions",
               "--disable", "kmsg,nvml,dcgm,diag,efa")
    assert families(proc.stdout)["gpuhealth_probe_success"] == {(("probe", "dcgm_exporter"),): 1}
    proc = run("--once", "--dcgm-exporter-url", scrape, "--disable", "kmsg,nvml,dcgm,diag,efa,dcgm_exporter")
    assert "gpuhealth_probe_success" not in families(proc.stdout)


def test_a_bad_kernel_pattern_file_is_refused_at_start_naming_the_pattern_and_why(tmp_path: Path) -> None:
    patterns = tmp_path / "patterns.yaml"
    patterns.write_text("patterns:\n  - {name: oom, kind: event, event: oom_kill, regex: '^Out of memory', "
                        "condition: GpuhealthMemoryHealthy}\n")
    # refused whether or not the kmsg probe is on, as before the patterns named conditions
    for disable in ("nvml,dcgm,diag,efa", "kmsg,nvml,dcgm,diag,efa"):
        proc = run("--once", "--kernel-patterns", str(patterns), "--disable", disable)
        assert proc.returncode == 2 and proc.stdout == ""
        (line,) = [line for line in proc.stderr.splitlines() if "error" in line]
        assert f"{patterns}: pattern 'oom': condition must be one of" in line
        assert "not 'GpuhealthMemoryHealthy'" in line


def test_a_kernel_pattern_file_of_ones_own_sets_the_condition_it_names(tmp_path: Path) -> None:
    patterns = tmp_path / "patterns.yaml"
    patterns.write_text("patterns:\n  - {name: oom, kind: event, event: oom_kill, regex: '^Out of memory', "
                        "condition: GpuhealthKernelHealthy}\n")
    log = tmp_path / "kern.log"
    log.write_text("[ 5.0] Out of memory: Killed process 4242 (python)\n")
    proc = run("--once", "--show-conditions", "--kernel-patterns", str(patterns), "--kmsg-file", str(log),
               "--disable", "nvml,dcgm,diag,efa")
    assert proc.returncode == 0, proc.stderr
    assert families(proc.stdout)["gpuhealth_kernel_events_total"] == {(("device", ""), ("event", "oom_kill")): 1}
    assert "condition GpuhealthKernelHealthy=False KernelFault: oom_kill" in proc.stderr


def test_an_unreadable_kmsg_file_is_refused_at_start(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    proc = run("--once", "--kmsg-file", str(directory))
    assert proc.returncode == 2 and "--kmsg-file" in proc.stderr and "Is a directory" in proc.stderr


def test_a_config_file_holds_the_same_settings_and_flags_override_it(fixtures: Path, tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text(f"""
kmsg_file: {fixtures / "kmsg" / "samples.txt"}
gpus_expected: 4
probes:
  nvml: {{enabled: false}}
  dcgm: {{enabled: false}}
  diag: {{enabled: false}}
  efa: {{enabled: false}}
""")
    proc = run("--once", "--config", str(config), "--gpus-expected", "8")
    assert proc.returncode == 0, proc.stderr
    m = families(proc.stdout)
    assert set(dict(k)["probe"] for k in m["gpuhealth_probe_success"]) == {"kmsg"}
    assert m["gpuhealth_gpus_expected"] == {(): 8}


def test_a_served_exporter_answers_scrapes_and_stops_on_sigterm(fixtures: Path, tmp_path: Path) -> None:
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "kern.log"
    log.write_text("")
    proc = process_tree.spawn([EXPORTER, "--listen", f"127.0.0.1:{port}", "--kmsg-file", str(log),
                             "--state-file", str(tmp_path / "state.json"), "--disable", "nvml,dcgm,diag,efa"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "NODE_NAME": ""})
    try:
        body = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                if 'gpuhealth_probe_success{probe="kmsg"} 1.0' in body:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert 'gpuhealth_probe_success{probe="kmsg"} 1.0' in body
        with log.open("a") as f:
            f.write("[ 9.0] NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n")
        while time.monotonic() < deadline and 'xid="79"' not in body:
            time.sleep(0.2)
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        assert 'pci_bus_id="00000000:9B:00.0"' in body and "process_resident_memory_bytes" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve_and_scrape(*args: str) -> tuple[dict[str, dict[tuple[tuple[str, str], ...], float]], str, int]:
    """Start a served exporter, scrape it once it answers, stop it with SIGTERM: (its metrics, its stderr, its exit
    status). Fails when it exits before answering (a crash loop, as the kubelet would see it)."""
    import signal
    import time
    import urllib.request

    port = _free_port()
    proc = process_tree.spawn([EXPORTER, "--listen", f"127.0.0.1:{port}", *args], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NODE_NAME": ""})
    try:
        deadline, body = time.monotonic() + 20, ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert body, f"the exporter did not serve (exit {proc.poll()}): {proc.stderr.read() if proc.stderr else ''}"
        time.sleep(0.3)  # anything it would log after it started serving
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
        return families(body), stderr, proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _chart_config(tmp_path: Path, extra: str = "") -> Path:
    """The exporter's settings file as the chart renders it by default (tests/support/chart_render.py), plus `extra`."""
    import yaml

    from tests.support.chart_render import render

    config = next(d for d in render() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuhealth-exporter")
    settings = yaml.safe_load(config["data"]["exporter.yaml"])
    settings.update(state_file=str(tmp_path / "state.json"), sysfs_root=str(tmp_path), pod_resources=False,
                    probes={**settings.get("probes", {}), "nvml": {"enabled": False}, "efa": {"enabled": False}})
    log = tmp_path / "kern.log"
    log.write_text("")
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump({**settings, "kmsg_file": str(log)}) + extra)
    return path


def _refused(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> None:
    assert metrics["gpuhealth_exporter_config_error"] == {(): 1}
    from gpuhealth.exporter import __version__
    assert metrics["gpuhealth_exporter_build_info"] == {(("version", __version__),): 1}
    # nothing a node-fault alert reads: no probe ran, so no probe, GPU or EFA series at all
    assert not [name for name in metrics if name.startswith("gpuhealth_") and name not in (
        "gpuhealth_exporter_config_error", "gpuhealth_exporter_build_info")]


def test_a_served_exporter_refuses_a_setting_it_does_not_know_with_one_line_and_stays_up(tmp_path: Path) -> None:
    """A newer chart's setting on a node that runs an older (cached) image: not a crash loop, which reads as a node
    fault (GpuhealthExporterDown, cordon), but one line that says what and what to do, and a metric of its own."""
    from gpuhealth.exporter import __version__

    config = _chart_config(tmp_path, extra="efa_expected_from: node\n")
    metrics, stderr, status = _serve_and_scrape("--config", str(config))
    _refused(metrics)
    (line,) = stderr.splitlines()
    assert f"gpuhealth-exporter {__version__}: refusing its settings: {config}:" in line
    assert "efa_expected_from: unknown setting" in line
    assert "newer exporter" in line and "image.tag or image.digest" in line and "GpuhealthExporterMisconfigured" in line
    assert status == 0  # SIGTERM, as from a served exporter that ran its settings


def test_a_served_exporter_refuses_a_flag_it_does_not_know_even_one_that_begins_like_its_own(tmp_path: Path) -> None:
    config = _chart_config(tmp_path)
    for flag in ("--watch-node", "--pod-resources=/run/kubelet.sock"):  # the second begins like --pod-resources-socket
        metrics, stderr, _ = _serve_and_scrape("--config", str(config), flag)
        _refused(metrics)
        (line,) = stderr.splitlines()
        assert f"unknown command-line argument {flag}" in line and "newer exporter" in line


def test_a_served_exporter_refuses_a_bad_value_the_same_way_naming_the_setting(tmp_path: Path) -> None:
    config = _chart_config(tmp_path, extra="fault_window: 0\n")
    metrics, stderr, _ = _serve_and_scrape("--config", str(config))
    _refused(metrics)
    (line,) = stderr.splitlines()
    assert "fault_window: must be > 0, got 0" in line and "fix the setting" in line


def test_a_served_exporter_with_settings_it_knows_says_it_has_no_config_error(tmp_path: Path) -> None:
    metrics, stderr, status = _serve_and_scrape("--config", str(_chart_config(tmp_path)))
    assert metrics["gpuhealth_exporter_config_error"] == {(): 0}
    assert "gpuhealth_probe_success" in metrics and "refusing" not in stderr and status == 0


def test_once_with_a_flag_or_setting_it_does_not_know_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("efa_expected_from: node\n")
    for args, why in ((["--watch-node"], "unknown command-line argument --watch-node"),
                      (["--config", str(config)], "efa_expected_from: unknown setting")):
        proc = run("--once", *args)
        assert proc.returncode == 2 and proc.stdout == ""
        (line,) = proc.stderr.splitlines()
        assert why in line


def test_once_on_a_p5_given_no_efa_reports_it_healthy(tmp_path: Path) -> None:
    # A p5.48xlarge can take 32 EFA interfaces; Karpenter attached none (no pod asked for vpc.amazonaws.com/efa).
    (tmp_path / "kern.log").write_text("")
    (tmp_path / "sys").mkdir()  # no /sys/class/infiniband at all
    proc = run("--once", "--show-conditions", "--instance-type", "p5.48xlarge", "--sysfs-root", str(tmp_path),
               "--kmsg-file", str(tmp_path / "kern.log"), "--disable", "nvml,dcgm,diag", "--no-pod-resources")
    assert proc.returncode == 0, proc.stderr
    assert "condition GpuhealthEFAHealthy=True EFAHealthy" in proc.stderr  # before: EFADevicesMissing, 0 of 32
    m = families(proc.stdout)
    assert m["gpuhealth_efa_devices_expected"] == {(("source", "attached"),): 0}  # EFA not configured here
    assert m["gpuhealth_efa_devices_max"] == {(): 32}
