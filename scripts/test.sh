#!/usr/bin/env bash
# The test command: installs what the lab needs, builds once, runs every test
# (unit, CLI, and end to end on network-namespace hosts). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh needs root (network namespaces, sshd): run it as root (or with sudo)" >&2
  exit 2
fi
scripts/setup.sh
# Labs left behind by a crashed earlier run.
lab/lab.sh gc || true
# winsim's l2bridge handlers on their own (5-10 s, namespaces of its own)
timeout 120 python3 winsim/selftest_l2bridge.py
cargo build --ignore-rust-version --all-targets --locked
cargo test --ignore-rust-version --locked -- --test-threads="${KWINCTL_TEST_THREADS:-4}"
