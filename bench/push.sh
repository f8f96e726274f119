#!/usr/bin/env bash
# The push benchmark (issue 37 item 4): kwinctl's push of one file to 4
# simulated Windows hosts over WinRM (NTLM, sealed), 4 over SSH and 4 Linux
# hosts over SSH, beside scp of the same size to the same Linux hosts, in one
# lab and one run, at two sizes. Needs root; not part of the test suite. See
# bench/push.py for what it measures; the figures go to bench/RESULTS.md
# ("Push beside scp").
#
#   sudo bench/push.sh [--sizes 50,150] [--runs 2] [--hosts 4] [--modes M,...]
#                      [--out FILE] [--json FILE]
#
# The default takes about 10 minutes on 2 shared cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=bench/lib.sh
. bench/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "bench/push.sh needs root (network namespaces, sshd)" >&2; exit 2; }
scripts/setup.sh
for t in ssh scp sshd ip sha256sum; do
  command -v "$t" >/dev/null 2>&1 || { echo "bench: $t is missing" >&2; exit 2; }
done
[ -x winsim/.venv/bin/python ] || winsim/setup-venv.sh

# kwinctl's push, release build (examples/pushbench.rs)
bench_cargo
cargo build --release --ignore-rust-version --example pushbench
PB=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/pushbench
[ -x "$PB" ] || { echo "bench: no pushbench binary at $PB" >&2; exit 2; }
REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || REV="$REV+changes"

bench_work kwinctl-pushbench

bench_run python3 bench/push.py --pushbench "$PB" --work "$WORK" --kwinctl-rev "$REV" \
  --command "bench/push.sh $*" "$@"
