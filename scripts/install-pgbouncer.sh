#!/usr/bin/env bash
# Debian's pgbouncer for the PgBouncer CI step (tests/pooler.py starts it per test worker).
# Installs with apt-get as root, or through sudo; does nothing when it is already there.
set -euo pipefail
if command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null; then
    SUDO="sudo"
else
    echo "install-pgbouncer: need root or sudo to apt-get install pgbouncer" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq pgbouncer >/dev/null
# the package's own service is not ours: the tests start their own pgbouncer on a free port
if command -v systemctl >/dev/null && systemctl is-active --quiet pgbouncer 2>/dev/null; then
    $SUDO systemctl stop pgbouncer || true
fi
