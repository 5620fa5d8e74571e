# egress: the API (`serve`), workers (`worker`) and migrations (`migrate`) from one image.
# Build from the repository's root:  docker build -t egress:dev .
# Stage 1 builds the wheel and installs it into a virtual environment; stage 2 copies only
# that environment onto a clean base: no compiler, no build tools, no source tree.

FROM python:3.11.10-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN pip install build==1.2.2
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m build --wheel --outdir /dist . \
    && python -m venv /opt/egress \
    && /opt/egress/bin/pip install /dist/*.whl

FROM python:3.11.10-slim-bookworm
# a fixed uid/gid, so that volumes and securityContext can name them
RUN groupadd --system --gid 10001 egress \
    && useradd --system --uid 10001 --gid egress --home-dir /var/lib/egress --create-home \
        --shell /usr/sbin/nologin egress
COPY --from=build /opt/egress /opt/egress
ENV PATH=/opt/egress/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    EGRESS_HOME=/var/lib/egress \
    EGRESS_LOG_FORMAT=json \
    EGRESS_WORKER_METRICS_HOST=0.0.0.0
USER 10001:10001
WORKDIR /var/lib/egress
# 8080: the API (egress serve); 9464: a worker's /metrics, /healthz and /readyz.
# No HEALTHCHECK: the one image runs three roles (API, worker, migrate) with different
# probes; deploy/compose.yaml and the Kubernetes manifests give each role its own.
EXPOSE 8080 9464
ENTRYPOINT ["egress"]
CMD ["serve", "--host", "0.0.0.0", "--no-worker"]
