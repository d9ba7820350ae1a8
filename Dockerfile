# One image for every process: `controlplane operator`, `controlplane router-proxy` and
# `controlplane sim` are subcommands of the same console script.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY controlplane ./controlplane
RUN pip install . \
    && rm -rf /src \
    && useradd --system --uid 65532 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin controlplane

WORKDIR /
# Numeric, so that the pod's runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["controlplane"]
CMD ["--help"]
