# The image the Helm chart runs: both gpuhealth programs, gpuhealth-exporter (the node agent, run by
# the DaemonSet) and gpuhealth-remediator (the Alertmanager receiver, run by the Deployment).
#
#   docker build -t ghcr.io/gpuhealth/gpuhealth:0.1.0 .
#
# NVML's library (libnvidia-ml.so) is not in the image: the NVIDIA container runtime mounts the
# node driver's copy into the exporter's container. dcgmi is not in it either: the chart turns the
# dcgm and diag probes off unless an image with DCGM's tools is used (helm/gpuhealth/values.yaml).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY remediator ./remediator
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[nvml]'

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels 'gpuhealth[nvml]' \
    && gpuhealth-exporter --version && gpuhealth-remediator --help >/dev/null
# The remediator runs as this user (the chart sets runAsUser 65532); the exporter runs as root
# because it reads /dev/kmsg (see the DaemonSet's comments).
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin gpuhealth
USER 65532
EXPOSE 9842 9095
ENTRYPOINT []
CMD ["gpuhealth-exporter", "--help"]
