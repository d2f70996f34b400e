"""gpuhealth's Grafana dashboards as code (`python -m dashboards.generate`)."""
