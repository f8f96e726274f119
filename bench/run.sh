#!/usr/bin/env bash
# The benchmark: kwinctl beside Ansible, pyinfra and plain OpenSSH on the same
# local lab (see bench/bench.py). Needs root. Not part of the test suite.
#   sudo bench/run.sh [--sizes 10,50,100,200] [--runs 3] [--peer-sizes 10,50,100]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench/run.sh needs root (network namespaces, sshd)" >&2; exit 2; }
scripts/setup.sh
[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
if [ ! -x bench/.venv/bin/python ]; then python3 -m venv bench/.venv; fi
bench/.venv/bin/pip install -q --disable-pip-version-check -r bench/requirements.txt
cargo build --release --ignore-rust-version --locked
exec bench/.venv/bin/python bench/bench.py "$@"
