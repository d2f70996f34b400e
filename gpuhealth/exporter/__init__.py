"""gpuhealth node exporter: GPU, EFA and kernel-log health as Prometheus metrics and node conditions."""

from importlib import metadata

try:  # the package's version (pyproject.toml), which the chart's appVersion and the image tag follow
    __version__ = metadata.version("gpuhealth")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
