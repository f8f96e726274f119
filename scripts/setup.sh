#!/usr/bin/env bash
# Install what kwinctl's lab and tests need on a fresh Debian machine (root).
# Idempotent: packages already present are not reinstalled.
# --packages-only: install the system packages (these and
# scripts/build-deps.sh's) and stop, before the Python venvs and the lab's
# Debian root (scripts/clean-root-check.sh proves them on a clean Debian 12).
set -euo pipefail
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
# the flock(1) of the cluster lock's scripts (util-linux too)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
# jq: the JSON output's tests decode it as an operator's script would
command -v jq >/dev/null 2>&1 || need+=(jq)
# real sudo(8) for lab hosts with a non-root user (lab.sh user)
command -v sudo >/dev/null 2>&1 || need+=(sudo)
# The lab's systemd hosts (Debian containers booting systemd, lab/lab.sh).
command -v systemd-nspawn >/dev/null 2>&1 || need+=(systemd-container)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# The lab's Kerberos realm (lab/kdc.sh): an MIT KDC and its admin tools
# (kadmin.local), the client tools for tests (kinit, klist), faketime for a
# KDC whose clock is off
command -v krb5kdc >/dev/null 2>&1 || [ -x /usr/sbin/krb5kdc ] || need+=(krb5-kdc)
command -v kadmin.local >/dev/null 2>&1 || [ -x /usr/sbin/kadmin.local ] || need+=(krb5-admin-server)
command -v kinit >/dev/null 2>&1 || need+=(krb5-user)
command -v faketime >/dev/null 2>&1 || need+=(faketime)
# pgrep (procps): lab.sh finds the systemd hosts' processes with it
command -v pgrep >/dev/null 2>&1 || need+=(procps)
# CI lints the shell scripts with shellcheck (.ci/run, .shellcheckrc)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
# winsim's and the Ansible oracle's venvs: a Python whose venv can install
# pip (Debian ships ensurepip in python3-venv, not python3) and its headers
# (python3-dev), which winsim's gssapi and krb5 packages compile against
py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  need+=(python3 python3-venv python3-dev)
else
  "$py" -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  "$py" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need+=(python3-dev)
fi
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
"$(dirname "$0")/build-deps.sh"
mkdir -p /run/sshd
[ "${1:-}" != --packages-only ] || exit 0
# The simulated Windows hosts' Python environment (winsim/.venv), created once
# here so that parallel lab tests do not race to create it.
"$(dirname "$0")/../winsim/setup-venv.sh"
# The lab's systemd hosts' Debian root, built once per machine (about a
# minute, from Debian's mirror) and cached in /var/cache/kwinctl-lab, so that
# tests only start it.
"$(dirname "$0")/../lab/lab.sh" build-root >/dev/null
# ansible-core, the oracle of tests/cli/ansible_differential.rs (a pinned version
# in its own venv, once per machine).
"$(dirname "$0")/ansible-venv.sh"
