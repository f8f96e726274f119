#!/usr/bin/env bash
# The benchmark: kwinctl beside Ansible, pyinfra and plain OpenSSH on the same
# local lab (network namespaces, one sshd each). Needs root; not part of the
# test suite. Writes bench/RESULTS.md. See bench/bench.py for what it measures.
#
#   sudo bench/run.sh [--sizes 10,50,100,200] [--runs 3] [--ansible-sizes 10,50,100]
#                     [--tools kwinctl,ssh,pyinfra,ansible[,ansible-command]]
#                     [--profile 100] [--quiet-wait 3] [--winrm] [--out FILE]
#                     [--wan RTT_MS_LIST [--target-runs 3] [--winrm-hosts 4]]
#   bench/run.sh --report-from bench/RESULTS.json [--out FILE]   (re-render only)
#
# The default (sizes 10,50,100,200, 3 runs, Ansible up to 100) takes about
# 15-20 minutes on 2 cores. A quick look: bench/run.sh --sizes 10,50 --runs 1
#
# WAN mode (issue 16): every tool through bench/delayproxy.py (see bench/wan.py)
#
#   sudo bench/run.sh --wan 0,50,100 --winrm      # the documented full WAN run
#
# N = 20, 50, 200 at each RTT; kwinctl verify, first up, no-op up and reset
# beside pyinfra, Ansible (-m raw and the default module; N = 20 only, as its
# CPU bounds it on 2 cores; --ansible-sizes 20,50 adds ~7 minutes) and plain
# OpenSSH; 3 runs at the target cell (N=20, 100 ms), 1 elsewhere
# (--target-runs, --runs); --winrm: kwinctl verify of 4 simulated Windows
# hosts through the proxy at each RTT. About 20-25 minutes on 2 cores.
# Writes bench/RESULTS.md: the WAN table (wall, wall/RTT, kwinctl/pyinfra)
# and, from the lowest RTT's cells, the CPU-per-host table.
# Smoke check of the plumbing (about 2 minutes; exits 1 if a tool's run took
# under 2 RTT or fewer than N connections went through the proxy):
#   sudo bench/run.sh --wan 100 --sizes 2 --runs 1 --target-runs 1 --tools kwinctl,ssh,pyinfra,ansible --ansible-sizes 2 --out wan-smoke.md
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=bench/lib.sh
. bench/lib.sh
if [ "${1:-}" = "--report-from" ]; then  # re-render a report from saved measurements
  exec bench/.venv/bin/python bench/bench.py "$@"
fi
[ "$(id -u)" -eq 0 ] || { echo "bench/run.sh needs root (network namespaces, sshd)" >&2; exit 2; }

# what the lab and the benchmark need: sshd, ip, ping (scripts/setup.sh), GNU time
scripts/setup.sh
if [ ! -x /usr/bin/time ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends time >/dev/null
fi
for t in ssh sshd ip ping /usr/bin/time; do
  command -v "$t" >/dev/null 2>&1 || [ -x "$t" ] || { echo "bench: $t is missing" >&2; exit 2; }
done

# Ansible and pyinfra, pinned, in bench/.venv
if [ ! -x bench/.venv/bin/python ]; then python3 -m venv bench/.venv; fi
bench/.venv/bin/pip install -q --disable-pip-version-check -r bench/requirements.txt

# kwinctl, release build
bench_cargo
cargo build --release --ignore-rust-version
KW=${CARGO_TARGET_DIR:-$ROOT/target}/release/kwinctl
[ -x "$KW" ] || { echo "bench: no kwinctl binary at $KW" >&2; exit 2; }

# Every lab is torn down at the end, whatever happens.
bench_work kwinctl-bench
bench_run bench/.venv/bin/python bench/bench.py --kwinctl "$KW" --work "$WORK" "$@"
