#!/usr/bin/env bash
# A clean checkout (HEAD, nothing uncommitted) installed into an empty virtualenv with only
# what pyproject.toml declares (the package and its test extra): the app, the client and the
# MCP server import, and pytest collects every test. An import nobody declared fails here even
# when the developer's venv happens to have it. Bounded: the install by CLEAN_INSTALL_TIMEOUT_S
# (default 900), the checks by 300 s.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-hardlinks . "$work/checkout"
"$python" -m venv "$work/venv"
timeout "${CLEAN_INSTALL_TIMEOUT_S:-900}" "$work/venv/bin/python" -m pip install --quiet \
    "$work/checkout[test]"
cd "$work/checkout"
timeout 300 "$work/venv/bin/python" -c "import maxclaw.app, maxclaw.client, maxclaw.mcp"
timeout 300 "$work/venv/bin/python" -m pytest --collect-only -q -p no:cacheprovider >/dev/null
echo "clean install: imports and test collection work with the declared dependencies only"
