#!/usr/bin/env bash
# Create winsim/.venv with the simulator's Python packages (idempotent).
# --dev: also the lint and test tools (requirements-dev.txt: ruff, pytest).
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv 2>/dev/null || {
    apt-get install -y -qq python3-venv >/dev/null && "$py" -m venv .venv
  }
fi
if ! .venv/bin/python -c 'import spnego, cryptography, gssapi, krb5, pybase64' 2>/dev/null; then
  # gssapi and krb5 build from source against MIT's headers
  ../scripts/build-deps.sh
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
fi
if [ "${1:-}" = "--dev" ]; then
  missing=$(comm -23 <(grep -v '^#' requirements-dev.txt | grep . | sort) \
    <(.venv/bin/python -m pip freeze --disable-pip-version-check 2>/dev/null | sort))
  if [ -n "$missing" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  fi
fi
