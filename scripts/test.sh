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
# winsim's own tests (unit tests, and its l2bridge handlers in namespaces
# of their own: 5-10 s)
winsim/setup-venv.sh --dev
timeout 300 winsim/.venv/bin/python -m pytest -q winsim/tests
cargo build --ignore-rust-version --all-targets --locked
# scripts/build-deps.sh asks for what the build lacks: each of libclang,
# its builtin headers, the GSS-API headers, pkg-config and cc hidden in a
# mount namespace, the real libgssapi-sys build script as the oracle (20 s)
scripts/tests/build-deps.sh
cargo test --ignore-rust-version --locked -- --test-threads="${KWINCTL_TEST_THREADS:-4}"
