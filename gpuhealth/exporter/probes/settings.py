"""A probe's section of the config file (`probes.<name>`) and each probe's defaults.

Apart from the registry (gpuhealth/exporter/probes/registry.py) because the config file is read before any
probe is built: config.py needs these, and the registry's build functions need config.py's Settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeSettings:
    """A probe's section of the config file (`probes.<name>`): whether it runs, how often, how long it may take."""

    enabled: bool = True
    interval: float = 15.0
    deadline: float = 10.0


# Every probe of the registry, in its order (tests/exporter/probes/test_probe_registry.py holds them to it).
DEFAULTS: dict[str, ProbeSettings] = {
    "kmsg": ProbeSettings(interval=1.0, deadline=5.0),
    "nvml": ProbeSettings(interval=15.0, deadline=10.0),
    "dcgm": ProbeSettings(interval=30.0, deadline=20.0),
    # dcgmi diag -r 1 takes seconds on a healthy node; an hour apart it costs nothing measurable.
    "diag": ProbeSettings(interval=3600.0, deadline=300.0),
    # Off until --dcgm-exporter-url (or dcgm_exporter: in the config) names one.
    "dcgm_exporter": ProbeSettings(enabled=False, interval=15.0, deadline=5.0),
    "efa": ProbeSettings(interval=15.0, deadline=5.0),
}
