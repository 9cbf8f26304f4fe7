# The MaxClaw image used by docker-compose.yml: `maxclaw` is the entrypoint, `serve` the default.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY alembic ./alembic
COPY src ./src
# a regular (non-editable) install: the migrations travel inside the wheel as maxclaw/_alembic
RUN pip install . && rm -rf /src

RUN useradd --system --create-home --home-dir /var/lib/maxclaw --uid 10001 maxclaw
USER maxclaw
WORKDIR /var/lib/maxclaw

# Compose always sets MAXCLAW_DATABASE_URL; without it the image would start the embedded
# PostgreSQL in this (ephemeral) data directory, which suits a quick look, not production.
ENV MAXCLAW_HOST=0.0.0.0 \
    MAXCLAW_PORT=8765 \
    MAXCLAW_DATA_DIR=/var/lib/maxclaw/data \
    MAXCLAW_LOG_JSON=true
EXPOSE 8765

# ready: the process answers and its database round trip succeeds
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import os, sys, urllib.request; url = 'http://127.0.0.1:' + os.environ.get('MAXCLAW_PORT', '8765') + '/readyz'; sys.exit(urllib.request.urlopen(url, timeout=3).status != 200)"

ENTRYPOINT ["maxclaw"]
CMD ["serve"]
