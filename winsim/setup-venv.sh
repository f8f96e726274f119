#!/usr/bin/env bash
# Create winsim/.venv with the simulator's Python packages (idempotent).
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv 2>/dev/null || {
    apt-get install -y -qq python3-venv >/dev/null && "$py" -m venv .venv
  }
fi
if ! .venv/bin/python -c 'import spnego, cryptography' 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
fi
