"""gpuhealth node exporter: GPU, EFA and kernel-log health as Prometheus metrics and node conditions."""

__version__ = "0.1.0"
