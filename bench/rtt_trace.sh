#!/usr/bin/env bash
# Round trips of one kwinctl command, per protocol step (issue 16): runs
# `kwinctl COMMAND -v` against an up lab (lab/lab.sh) with every host behind
# bench/delayproxy.py at RTT_MS, and prints each host's trace (times in ms
# since the host's start, the request/reply exchanges each step waited for)
# and the wall time in RTTs.
#
#   bench/rtt_trace.sh LAB_DIR RTT_MS COMMAND [KWINCTL] [extra args...]
#
# The proxy runs inside each host's network namespace, in front of its sshd
# (port 2222 -> 22) or its WinRM listener (15985 -> 5985), so the inventory
# keeps the hosts' addresses; known_hosts gets the `[addr]:2222` names.
# The proxied inventory, its state file and run records are in LAB_DIR/wan.
# Needs root (ip netns exec).
set -euo pipefail
lab=${1:?LAB_DIR}
rtt=${2:?RTT_MS}
cmd=${3:?COMMAND}
bin=${4:-$(dirname "$0")/../target/release/kwinctl}
shift $(( $# < 4 ? $# : 4 ))
here=$(cd "$(dirname "$0")" && pwd)
# (kept: the state file and run records of the proxied inventory live here)
work=$lab/wan
mkdir -p "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

while IFS=$'\t' read -r name ip ns; do
    case $name in
        win*) map="$ip:15985=$ip:5985" ;;
        *) map="$ip:2222=$ip:22" ;;
    esac
    ip netns exec "$ns" python3 "$here/delayproxy.py" --rtt-ms "$rtt" "$map" \
        >"$work/proxy-$name.log" 2>&1 &
    pids+=($!)
done <"$lab/hosts.tsv"

awk '{print} !/^\[/ {k=$1; $1="[" k "]:2222"; print}' "$lab/known_hosts" >"$work/known_hosts"
sed -e "s#known_hosts: $lab/known_hosts#known_hosts: $work/known_hosts#" \
    -e 's/port: 22,/port: 2222,/' -e 's/port: 5985,/port: 15985,/' \
    "$lab/inventory.yaml" >"$work/inventory.yaml"
# every proxy listening before the clock starts (bounded: 20 s)
while read -r name; do
    for _ in $(seq 200); do
        grep -q 'delayproxy: ready' "$work/proxy-$name.log" 2>/dev/null && break
        sleep 0.1
    done
    grep -q 'delayproxy: ready' "$work/proxy-$name.log" || {
        echo "the delay proxy for $name did not start: $(cat "$work/proxy-$name.log")" >&2
        exit 1
    }
done < <(cut -f1 "$lab/hosts.tsv")

start=$(date +%s.%N)
set +e
KWINCTL_SSH_CONFIG=none "$bin" "$cmd" -v -i "$work/inventory.yaml" "$@" 2>"$work/err" >"$work/out"
rc=$?
set -e
end=$(date +%s.%N)
grep -E ': trace ' "$work/err" || true
python3 - "$start" "$end" "$rtt" "$rc" "$cmd" <<'EOF'
import sys
s, e, rtt, rc, cmd = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
wall = (e - s) * 1000
print(f"kwinctl {cmd}: exit {rc}, wall {wall:.0f} ms = {wall / rtt:.1f} RTT at {rtt:.0f} ms")
EOF
