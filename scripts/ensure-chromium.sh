#!/usr/bin/env bash
# The browser tests drive the Debian chromium package at /usr/bin/chromium (never a browser
# downloaded by playwright). Install it with apt-get when it is missing.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "the browser tests need /usr/bin/chromium; install your distribution's chromium package" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "installing chromium needs root (apt-get install -y chromium)" >&2; exit 1; }
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y chromium || { $sudo apt-get update && $sudo apt-get install -y chromium; }
