#!/usr/bin/env bash
# The browser tests drive the Debian chromium package at /usr/bin/chromium (never a browser
# downloaded by playwright). Install it with apt-get when it is missing.
set -euo pipefail

# the screenshots of the zh-CN WebUI (docs/screenshots/) need a CJK font: fonts-wqy-zenhei
have_cjk_font() {
    fc-list 2>/dev/null | grep -qi "wqy\|zenhei\|noto sans cjk"
}
if [ -x /usr/bin/chromium ] && have_cjk_font; then
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
$sudo apt-get install -y chromium fonts-wqy-zenhei \
    || { $sudo apt-get update && $sudo apt-get install -y chromium fonts-wqy-zenhei; }
