#!/usr/bin/env bash
# Controller CPU (user + sys, children included: every `ssh -G` kwinctl
# runs) of `kwinctl verify` at N hosts (default 200), per host, with
#   debian   --ssh-config /etc/ssh/ssh_config (Debian's default file: an
#            Include of ssh_config.d/*.conf and one `Host *` block)
#   blocks   --ssh-config FILE with 100 Host blocks (aliases with HostName,
#            patterns, negation, `?`, a ProxyJump-free `Host *`)
#   none     --ssh-config none (no config: no process at all), the floor
# Needs root (a network namespace); not part of the test suite. Results go
# to bench/RESULTS.md ("SSH resolution: controller CPU").
#
# kwinctl runs in a namespace whose only route to the hosts' 198.18.0.0/15
# is `unreachable`: every connection fails at once ("no route"), so the CPU
# is what a run spends before and around contact (loading, resolving every
# host, the failed connects, the report), the same work in every case but
# the resolution.
#
#   bench/ssh_resolve.sh [KWINCTL [N [RUNS]]]
set -euo pipefail
KW=${1:-target/release/kwinctl}
N=${2:-200}
RUNS=${3:-5}
[ "$(id -u)" -eq 0 ] || { echo "ssh_resolve.sh needs root (a network namespace)" >&2; exit 2; }
W=$(mktemp -d /tmp/kwinctl-ssh-resolve.XXXXXX)
NS=kwsr$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ip route add unreachable 198.18.0.0/15

inv=$W/inv.yaml
{
  printf 'cluster:\n  name: cost\n  cluster_cidr: 198.19.0.0/16\n  node_prefix: 24\n'
  printf '  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.10.10:6443\nhosts:\n'
  for i in $(seq 0 $((N - 1))); do
    printf '  - name: n%d\n    os: linux\n    address: 198.18.%d.%d\n' "$i" $((10 + i / 200)) $((10 + i % 200))
  done
} > "$inv"
blocks=$W/blocks.config
{
  for i in $(seq 0 99); do
    case $((i % 4)) in
      0) printf 'Host n%d\n  HostName 198.18.%d.%d\n  User ops\n' "$i" $((10 + i / 200)) $((10 + i % 200)) ;;
      1) printf 'Host n%d? !n%d9\n  Port 22\n' "$i" "$i" ;;
      2) printf 'Host 198.18.10.%d\n  IdentityFile ~/.ssh/id_ed25519\n' "$i" ;;
      3) printf 'Host other%d.example.test\n  User nobody\n' "$i" ;;
    esac
  done
  printf 'Host *\n  ConnectTimeout 5\n  ServerAliveInterval 30\n'
} > "$blocks"

measure() { # label ssh-config
  local label=$1 c=$2 t cpu
  for r in $(seq "$RUNS"); do
    ip netns exec "$NS" env -u SSH_AUTH_SOCK /usr/bin/time -f '%e %U %S' \
      "$KW" verify -i "$inv" --ssh-config "$c" --timeout 1 --retries 0 --output json \
      >"$W/out" 2>"$W/err" || true
    t=$(tail -1 "$W/err")
    if grep -q 'ssh config' "$W/err"; then echo "$label: refused: $(head -3 "$W/err")" >&2; exit 1; fi
    cpu=$(echo "$t" | awk '{print $2 + $3}')
    echo "$label run $r: wall ${t%% *} s, cpu $cpu s, $(echo "$cpu $N" | awk '{printf "%.3f", 1000 * $1 / $2}') ms/host"
  done
}
echo "kwinctl verify, $N hosts, none reachable ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)), $("$KW" --version 2>/dev/null || echo kwinctl)"
measure debian /etc/ssh/ssh_config
measure blocks "$blocks"
measure none none
