# The advisor controller image:  docker build -t REGISTRY/advisor:0.1.0 .
#
# Stage "build" installs the package and its dependencies into a virtual environment; the final
# stage copies only that environment onto the same slim base (so the venv's interpreter path is
# the same), runs as a numeric non-root user and works with a read-only root filesystem: the
# writable paths are /tmp (numba's compilation cache, temporary files) and the store at
# /var/lib/advisor, both volumes in the Helm chart (helm/advisor/templates/deployment.yaml).
#
# No HEALTHCHECK: Kubernetes ignores it. The chart's Deployment probes the controller's one
# HTTP port (8080): GET /healthz (liveness) and GET /readyz (readiness).
#
# The base is pinned to an exact Python patch release and Debian release; pin it by digest
# (python:3.11.13-slim-bookworm@sha256:...) where the build has registry access to resolve it.

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/advisor
WORKDIR /src
COPY pyproject.toml README.md ./
COPY advisor ./advisor
RUN /opt/advisor/bin/pip install . \
 && /opt/advisor/bin/advisor --help > /dev/null

FROM python:3.11.13-slim-bookworm
LABEL org.opencontainers.image.title="advisor" \
      org.opencontainers.image.description="Throughput advisor for TensorFlow parameter-server TFJobs (Kubernetes controller)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/advisor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/tmp/numba-cache \
    MPLCONFIGDIR=/tmp/matplotlib
RUN groupadd --system --gid 65532 advisor \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin advisor \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/advisor
COPY --from=build /opt/advisor /opt/advisor
USER 65532:65532
WORKDIR /var/lib/advisor
EXPOSE 8080
ENTRYPOINT ["advisor"]
CMD ["controller"]
