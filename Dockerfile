# The advisor controller image. Build and load it into a local cluster in one command:
#   docker build -t advisor:0.1.0 . && kind load docker-image advisor:0.1.0     (minikube: minikube image load advisor:0.1.0)
# then install the chart with --set image.repository=advisor (docs/deploy.md).
#
# Reproducible: every Python package comes from a lock file with sha256 hashes
# (requirements/*.lock, made by scripts/lock.sh from pyproject.toml) and pip refuses anything
# else (--require-hashes, --no-deps). Layers: the dependencies are installed before the source
# is copied, so a change to the code rebuilds only the last, small layer.
#
# Stage "build" installs the locked dependencies into a virtual environment, builds the advisor
# wheel with the locked build backend, installs it, and removes what never runs
# (scripts/slim_venv.py: pip, setuptools, the packages' test suites, the Kubernetes client's
# asyncio half). The final stage copies only that environment onto the same slim base (so the
# venv's interpreter path is the same), removes the base's own pip and setuptools, runs as a
# numeric non-root user and works with a read-only root filesystem: the writable paths are /tmp
# (where the shipped read-only numba cache is copied, temporary files) and the store at /var/lib/advisor, both volumes in
# the Helm chart (helm/advisor/templates/deployment.yaml).
#
# Size: see docs/deploy.md "The image" (python -m benchmarks.image_size measures the environment).
#
# No HEALTHCHECK: Kubernetes ignores it. The chart's Deployment probes the controller's metrics
# port (8081): GET /healthz (liveness) and GET /readyz (readiness); /metrics is there too. Port
# 8080 takes trace uploads and the prediction Jobs' requests.
#
# The base is pinned to an exact Python patch release and Debian release; pin it by digest
# (python:3.11.13-slim-bookworm@sha256:...) where the build has registry access to resolve it.

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/advisor && python -m venv /opt/build
WORKDIR /src
# 1. Dependencies (this layer changes only with the lock files).
COPY requirements/controller.lock requirements/build.lock requirements/
RUN /opt/advisor/bin/pip install --require-hashes --no-deps -r requirements/controller.lock \
 && /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.lock
# 2. The package itself.
COPY pyproject.toml README.md ./
COPY scripts/slim_venv.py scripts/
COPY advisor ./advisor
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation -w /wheels . \
 && /opt/advisor/bin/pip install --no-deps /wheels/advisor-*.whl \
 && /opt/advisor/bin/advisor --help > /dev/null \
 && /opt/advisor/bin/python scripts/slim_venv.py /opt/advisor \
 && /opt/advisor/bin/python -c "import advisor.cli, advisor.controller.main, advisor.controller.app" \
 && NUMBA_CPU_NAME=generic /opt/advisor/bin/python -m advisor.jit_cache build /opt/advisor/numba-cache
# ^ the simulation engine for any x86-64 CPU (NUMBA_CPU_NAME=generic), so that pods and prediction Jobs
#   never compile it: the wheel ships it prebuilt (advisor/core/models/ps_des/simulator/engine_cache.py),
#   and this step loads that and writes nothing; where the prebuilt copy does not fit (engine sources
#   edited without `python -m advisor.jit_cache prebuild`, another numba), it compiles the engine here,
#   into the directory pods read (advisor.jit_cache copies it to /tmp).

FROM python:3.11.13-slim-bookworm
LABEL org.opencontainers.image.title="advisor" \
      org.opencontainers.image.description="Throughput advisor for TensorFlow parameter-server TFJobs (Kubernetes controller)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/advisor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/opt/advisor/numba-cache \
    NUMBA_CPU_NAME=generic \
    MPLCONFIGDIR=/tmp/matplotlib
# No installer in the final stage: the base's pip, setuptools and wheel go (the image installs
# nothing at run time); then the non-root user.
RUN python -m pip uninstall --yes --quiet pip setuptools wheel \
 && rm -rf /usr/local/lib/python3.11/ensurepip /usr/local/bin/pip* \
 && groupadd --system --gid 65532 advisor \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin advisor \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/advisor
COPY --from=build /opt/advisor /opt/advisor
USER 65532:65532
WORKDIR /var/lib/advisor
EXPOSE 8080 8081
ENTRYPOINT ["advisor"]
CMD ["controller"]
