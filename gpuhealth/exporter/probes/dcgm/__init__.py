"""DCGM probes: `dcgmi health -c -j`, `dcgmi diag -r N -j` and a local dcgm-exporter's /metrics.

Each probe turns one reading into samples of gpuhealth.exporter.catalog families, or raises ProbeError.

All three pause for a GPU reset (`pause`/`resume`, gpuhealth/exporter/gpu_reset.py): while paused no dcgmi runs and
dcgm-exporter is not read (the reset stops nv-hostengine and dcgm-exporter too). `dcgmi health` sets its
watches again after a pause, since a restarted nv-hostengine has forgotten them.
"""

from __future__ import annotations

from gpuhealth.exporter.probes.dcgm.diag import DcgmDiagProbe, parse_diag
from gpuhealth.exporter.probes.dcgm.health import DcgmHealthProbe, parse_health
from gpuhealth.exporter.probes.dcgm.scrape import MAX_SCRAPE_BYTES, DcgmExporterProbe, parse_dcgm_exporter

__all__ = [
    "MAX_SCRAPE_BYTES",
    "DcgmDiagProbe",
    "DcgmExporterProbe",
    "DcgmHealthProbe",
    "parse_dcgm_exporter",
    "parse_diag",
    "parse_health",
]
