#!/usr/bin/env bash
# Debian's caddy and docker-compose, for the deploy step of .ci/run: `caddy validate` on
# deploy/caddy/Caddyfile and `docker-compose config` on the compose files (Docker itself cannot
# run here). Installs with apt-get as root, or through sudo; does nothing for what is there.
set -euo pipefail
missing=()
command -v caddy >/dev/null || missing+=(caddy)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 \
    || missing+=(docker-compose)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null; then
    SUDO="sudo"
else
    echo "install-deploy-tools: need root or sudo to apt-get install ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
# the caddy package's own service is not ours: CI only validates the configuration
if command -v systemctl >/dev/null && systemctl is-active --quiet caddy 2>/dev/null; then
    $SUDO systemctl stop caddy || true
fi
