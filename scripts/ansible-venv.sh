#!/usr/bin/env bash
# Create the venv with ansible-core that tests/cli/ansible_differential.rs runs
# as its oracle (`ansible-inventory --list`), at a pinned version, once
# (idempotent). KWINCTL_ANSIBLE_VENV overrides where.
set -euo pipefail
version=2.19.14
venv=${KWINCTL_ANSIBLE_VENV:-/var/cache/kwinctl-ansible/venv}
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv" 2>/dev/null || {
    apt-get install -y -qq python3-venv >/dev/null && "$py" -m venv "$venv"
  }
fi
if [ "$("$venv/bin/python" -c 'import ansible.release as r; print(r.__version__)' 2>/dev/null)" != "$version" ]; then
  "$venv/bin/pip" install -q --disable-pip-version-check "ansible-core==$version"
fi
