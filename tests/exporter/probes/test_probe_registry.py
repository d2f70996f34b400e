"""The probe registry: each probe declared once (name, config section, conditions, metric families), and what
config, the command line, the collector, the conditions and the catalog's table read from it."""

from __future__ import annotations

from pathlib import Path

from gpuhealth.exporter import catalog, cli, collector, conditions
from gpuhealth.exporter.condition_types import EFA, FAULTS, GPU, KERNEL, NVLINK
from gpuhealth.exporter.config import DEFAULT_PROBES, Settings
from gpuhealth.exporter.probes.registry import BY_NAME, PROBES, ProbeSettings, feeding, filled_by


def test_the_probes_and_their_config_sections_are_as_the_config_format_has_them() -> None:
    shipped = {
        "kmsg": ProbeSettings(interval=1.0, deadline=5.0),
        "nvml": ProbeSettings(interval=15.0, deadline=10.0),
        "dcgm": ProbeSettings(interval=30.0, deadline=20.0),
        "diag": ProbeSettings(interval=3600.0, deadline=300.0),
        "dcgm_exporter": ProbeSettings(enabled=False, interval=15.0, deadline=5.0),
        "efa": ProbeSettings(interval=15.0, deadline=5.0),
    }
    assert shipped == DEFAULT_PROBES
    assert list(DEFAULT_PROBES) == [spec.name for spec in PROBES]  # the order they are built and reported in


def test_each_entry_builds_the_probe_it_names_without_touching_hardware(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    s = Settings(kmsg_file=str(log), sysfs_root=str(tmp_path), dcgm_exporter="http://127.0.0.1:9/metrics",
                 node="n1")
    for spec in PROBES:
        assert spec.build(s, True).name == spec.name


def test_every_family_is_filled_by_a_registered_probe_or_by_the_exporter_itself() -> None:
    by_probes = {f.name for spec in PROBES for f in spec.families}
    assert by_probes <= set(catalog.FAMILIES)
    # The exporter's own, and the kubelet's pod-resources read (gpuhealth/exporter/kubelet/: no probe, no probe metrics)
    assert set(catalog.FAMILIES) - by_probes == {f.name for f in (*catalog.EXPORTER, *catalog.POD_RESOURCES)}
    assert filled_by("gpuhealth_gpu_info") == ("nvml", "dcgm_exporter")
    assert filled_by("gpuhealth_xid_errors") == ("kmsg",)
    assert filled_by("gpuhealth_probe_success") == ("exporter",)


def test_the_conditions_each_probe_feeds() -> None:
    assert conditions.SOURCES == {
        GPU: ("kmsg", "nvml", "dcgm", "diag", "dcgm_exporter"),
        NVLINK: ("kmsg", "nvml"),
        EFA: ("kmsg", "efa"),
        KERNEL: ("kmsg",),
    }
    assert all(set(spec.conditions) <= set(FAULTS) for spec in PROBES)
    assert feeding("GpuhealthProbesHealthy") == ()  # every probe's own health, not a source's


def test_gpus_visible_comes_from_nvml_and_else_from_dcgm_exporter() -> None:
    assert collector.VISIBLE_GPU_SOURCES == ("nvml", "dcgm_exporter")


def test_help_names_every_probe_and_what_it_reads() -> None:
    text = " ".join(cli.EPILOG.split())
    assert all(f"{spec.name} ({spec.about})" in text for spec in PROBES)


def test_a_probe_checks_its_settings_only_when_it_is_on(tmp_path: Path) -> None:
    nowhere = Settings(sysfs_root=str(tmp_path / "nowhere"), dcgmi=str(tmp_path / "no-dcgmi"))
    checks = {spec.name: spec.check(nowhere) for spec in PROBES if spec.check is not None}
    assert checks == {
        "dcgm": f"--dcgmi {tmp_path / 'no-dcgmi'}: not an executable file",
        "diag": f"--dcgmi {tmp_path / 'no-dcgmi'}: not an executable file",
        "dcgm_exporter": "the dcgm_exporter probe needs --dcgm-exporter-url (or dcgm_exporter: in the config)",
        "efa": f"--sysfs-root {tmp_path / 'nowhere'}: not a directory",
    }
    off = {name: ProbeSettings(enabled=False) for name in BY_NAME}
    cli.check_settings(Settings(sysfs_root=str(tmp_path / "nowhere"), dcgmi=str(tmp_path / "no-dcgmi"), probes=off))
