"""Every probe, registered in one place, as node_exporter registers its collectors.

A probe's entry says everything the rest of the exporter needs to know about it: its name (the
`--enable`/`--disable` word, the config file's `probes.<name>` section and the `probe` label), its
section's defaults, how it is built from the settings, what it checks before the exporter starts,
the node conditions its results feed, and the metric families it fills (gpuhealth/exporter/catalog.py).
config.py, cli.py, agent.py, collector.py, conditions.py and the catalog's table read these entries; none of
them names a probe. A new probe is a module under gpuhealth/exporter/probes/ (or a room of its own, as
gpuhealth/exporter/kernel/ is) and one entry here.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuhealth.exporter import catalog, condition_types
from gpuhealth.exporter.catalog import Family
from gpuhealth.exporter.kernel.patterns import KernelEventMatcher, load_patterns
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.probes.base import Probe
from gpuhealth.exporter.probes.dcgm import DcgmDiagProbe, DcgmExporterProbe, DcgmHealthProbe
from gpuhealth.exporter.probes.efa import EfaProbe, counter_selection
from gpuhealth.exporter.probes.nvml import NvmlProbe
from gpuhealth.exporter.probes.settings import DEFAULTS, ProbeSettings

if TYPE_CHECKING:
    from gpuhealth.exporter.config import Settings


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    about: str  # what it reads, for --help
    defaults: ProbeSettings
    build: Callable[[Settings, bool], Probe]  # (settings, once): once is --once, read-only (no state kept)
    families: tuple[Family, ...]  # the metric families it fills
    # The node conditions built from its results: while it fails and shows no fault, they are Unknown.
    conditions: tuple[str, ...] = ()
    # Its GPU list gives gpuhealth_gpus_visible; where several can, the first in PROBES that has one wins.
    counts_gpus: bool = False
    enabled_by: Callable[[Settings], bool] | None = None  # a setting that turns it on (--disable still wins)
    check: Callable[[Settings], str | None] | None = None  # why it cannot run with these settings, if it cannot
    # It holds the GPUs (NVML) or talks to what a GPU reset stops (nv-hostengine, dcgm-exporter): it is paused
    # while the node carries the reset marker (gpuhealth/exporter/gpu_reset.py), and its build is a PausableProbe.
    paused_for_gpu_reset: bool = False


def _kmsg(s: Settings, once: bool) -> Probe:
    matcher = KernelEventMatcher(load_patterns(Path(s.kernel_patterns)) if s.kernel_patterns else None)
    return KmsgProbe.for_path(s.kmsg_file or s.kmsg_device, bool(s.kmsg_file), matcher=matcher,
                              state_file=None if once else s.state_file, boot_id_file=s.boot_id_file)


def _dcgmi_runs(s: Settings) -> str | None:
    """A dcgmi given as a path must be there; one looked up on PATH may be missing (the probe fails closed)."""
    command = shlex.split(s.dcgmi)[0]  # cli.check_settings refuses a command that does not split
    if "/" in command and not shutil.which(command):
        return f"--dcgmi {command}: not an executable file"
    return None


def _has_dcgm_exporter_url(s: Settings) -> str | None:
    if s.dcgm_exporter:
        return None
    return "the dcgm_exporter probe needs --dcgm-exporter-url (or dcgm_exporter: in the config)"


def _sysfs_root_is_a_directory(s: Settings) -> str | None:
    return None if Path(s.sysfs_root).is_dir() else f"--sysfs-root {s.sysfs_root}: not a directory"


# In this order the probes are built, run and reported.
PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec(
        "kmsg", "kernel log", DEFAULTS["kmsg"], _kmsg, catalog.KERNEL_LOG,
        # The kernel log sees every kind of fault; which one a line is, kernel_patterns.yaml says.
        conditions=condition_types.FAULTS,
    ),
    ProbeSpec(
        "nvml", "nvidia-ml-py", DEFAULTS["nvml"], lambda s, once: NvmlProbe(),
        (*catalog.GPU_STATE, *catalog.NVML_ONLY),
        conditions=(condition_types.GPU, condition_types.NVLINK), counts_gpus=True, paused_for_gpu_reset=True,
    ),
    ProbeSpec(
        "dcgm", "dcgmi health", DEFAULTS["dcgm"],
        lambda s, once: DcgmHealthProbe(shlex.split(s.dcgmi)), catalog.DCGM_HEALTH,
        conditions=(condition_types.GPU,), check=_dcgmi_runs, paused_for_gpu_reset=True,
    ),
    ProbeSpec(
        "diag", "dcgmi diag", DEFAULTS["diag"],
        lambda s, once: DcgmDiagProbe(shlex.split(s.dcgmi), level=s.diag_level), catalog.DCGM_DIAG,
        conditions=(condition_types.GPU,), check=_dcgmi_runs, paused_for_gpu_reset=True,
    ),
    ProbeSpec(
        "dcgm_exporter", "a local dcgm-exporter's /metrics; on when --dcgm-exporter-url is given",
        DEFAULTS["dcgm_exporter"],
        lambda s, once: DcgmExporterProbe(s.dcgm_exporter, node=s.node,
                                          aliases=tuple(s.dcgm_exporter_hostnames.split(",")),
                                          trust_unverified=s.dcgm_exporter_trust_unverified),
        (*catalog.GPU_STATE, *catalog.DCGM_EXPORTER),
        conditions=(condition_types.GPU,), counts_gpus=True,
        enabled_by=lambda s: bool(s.dcgm_exporter), check=_has_dcgm_exporter_url, paused_for_gpu_reset=True,
    ),
    ProbeSpec(
        "efa", "sysfs", DEFAULTS["efa"],
        lambda s, once: EfaProbe(s.sysfs_root, counter_selection(s.efa_counters)), catalog.EFA,
        conditions=(condition_types.EFA,), check=_sysfs_root_is_a_directory,
    ),
)

BY_NAME: dict[str, ProbeSpec] = {spec.name: spec for spec in PROBES}
NAMES = tuple(BY_NAME)
EXPORTER = "exporter"  # what fills the families no probe fills: the exporter itself


def filled_by(family: str) -> tuple[str, ...]:
    """The probes that fill a metric family, in PROBES order; ("exporter",) for the exporter's own."""
    return tuple(spec.name for spec in PROBES if any(f.name == family for f in spec.families)) or (EXPORTER,)


def feeding(condition: str) -> tuple[str, ...]:
    """The probes whose results a node condition is built from."""
    return tuple(spec.name for spec in PROBES if condition in spec.conditions)


def gpu_counters() -> tuple[str, ...]:
    """The probes whose GPU list can give gpuhealth_gpus_visible, in order of preference."""
    return tuple(spec.name for spec in PROBES if spec.counts_gpus)
