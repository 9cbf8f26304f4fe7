#!/usr/bin/env bash
# Create .venv with Python >= 3.11 if it is missing (used by `make run` and `make test`).
set -euo pipefail

venv="${1:-.venv}"
python="${PYTHON:-python3}"

if [ -x "$venv/bin/python" ]; then
    exit 0
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "maxclaw needs Python 3.11 or newer; set PYTHON=/path/to/python3.11 (found: $("$python" --version 2>&1 || echo none))" >&2
    exit 1
fi
if ! "$python" -m venv "$venv" 2>/dev/null; then
    # Debian and Ubuntu ship venv separately (python3-venv); install it when we may
    rm -rf "$venv"
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        ver="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
        apt-get install -y "python${ver}-venv" || { apt-get update && apt-get install -y "python${ver}-venv"; }
        "$python" -m venv "$venv"
    else
        echo "cannot create a virtualenv: install python3-venv (Debian/Ubuntu) and retry" >&2
        exit 1
    fi
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
