# The image the Helm chart runs: both gpuhealth programs, gpuhealth-exporter (the node agent, run by
# the DaemonSet) and gpuhealth-remediator (the Alertmanager receiver, run by the Deployment), and
# gpuhealth-sim (the fleet simulator; give it --rules, --alertmanager-config and --values: its defaults are
# a checkout's files, docs/simulation.md).
#
#   docker build -t ghcr.io/gpuhealth/gpuhealth:0.2.0 .
#
# NVML's library (libnvidia-ml.so) is not in the image: the NVIDIA container runtime mounts the
# node driver's copy into the exporter's container. dcgmi is not in it either: the chart turns the
# dcgm and diag probes off unless an image with DCGM's tools is used (helm/gpuhealth/values.yaml).
#
# Reproducible: the base image by digest, and every Python package (and the build backend) at the version
# requirements/image.txt pins (`make image-lock` resolves it afresh; review its diff). The digest is the
# multi-arch index of python:3.11-slim (Python 3.11.16, Debian 13 trixie) as Docker Hub served the tag on
# 2026-09-13. To take a newer one (Debian and Python security fixes): `docker buildx imagetools inspect
# python:3.11-slim`, and its "Digest:" replaces the one in both FROM lines (the tag is kept for the reader:
# with a digest, Docker ignores it). tests/release/test_image.py checks both pins, and that the package built from
# exactly what the build stage copies runs every console script.
FROM python:3.11-slim@sha256:9534e5a8e315485d4061ed659af0fd78a284c015f9b73661b41d6bab25604534 AS build
WORKDIR /src
COPY requirements/image.txt ./requirements/image.txt
RUN pip install --no-cache-dir -c requirements/image.txt setuptools wheel
COPY pyproject.toml README.md ./
COPY gpuhealth ./gpuhealth
RUN pip wheel --no-cache-dir --no-build-isolation --wheel-dir /wheels -c requirements/image.txt '.[nvml]'

FROM python:3.11-slim@sha256:9534e5a8e315485d4061ed659af0fd78a284c015f9b73661b41d6bab25604534
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels 'gpuhealth[nvml]' \
    && gpuhealth-exporter --version && gpuhealth-remediator --help >/dev/null && gpuhealth-sim --help >/dev/null && gpuhealth-diagnose --help >/dev/null
# The remediator runs as this user (the chart sets runAsUser 65532); the exporter runs as root
# because it reads /dev/kmsg (see the DaemonSet's comments).
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin gpuhealth
USER 65532
EXPOSE 9842 9095
ENTRYPOINT []
CMD ["gpuhealth-exporter", "--help"]
