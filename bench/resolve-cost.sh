#!/usr/bin/env bash
# What resolving every host through OpenSSH (`ssh -G`) costs `kwinctl plan`
# at N hosts (default 200), with and without an ssh config. Needs root (a
# network namespace); not part of the test suite. docs/performance.md
# ("Resolving hosts through OpenSSH") quotes its numbers.
#
#   bench/resolve-cost.sh [KWINCTL [N [RUNS [OLD_KWINCTL]]]]
#
# kwinctl runs inside a namespace of its own whose only route to the hosts'
# 198.18.0.0/15 is `unreachable`, so every connection fails at once ("no
# route") and the wall time is what comes before contact (loading, resolving)
# plus the run's own bookkeeping, the same in every case. Cases:
#   config   --ssh-config FILE: 200 Host blocks (aliases) for half the hosts,
#            address patterns, an Include, a Match, Host * (one ssh -G for each
#            alias, two for each host reached by address)
#   none     --ssh-config none: OpenSSH's defaults, no process run
#   old      OLD_KWINCTL (e.g. the fbe0578 build) with the same config, which
#            it read with the ssh2-config crate (and got Match wrong)
set -euo pipefail
KW=${1:-target/release/kwinctl}
N=${2:-200}
RUNS=${3:-5}
OLD=${4:-}
[ "$(id -u)" -eq 0 ] || { echo "resolve-cost.sh needs root (a network namespace)" >&2; exit 2; }
W=$(mktemp -d /tmp/kwinctl-resolve-cost.XXXXXX)
NS=kwrc$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ip route add unreachable 198.18.0.0/15

mkdir -p "$W/conf.d"
inv=$W/inv.yaml
cfg=$W/config
{
  printf 'cluster:\n  name: cost\n  cluster_cidr: 198.19.0.0/16\n  node_prefix: 24\n'
  printf '  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.10.10:6443\nhosts:\n'
  for i in $(seq 0 $((N - 1))); do
    printf '  - name: n%d\n    os: linux\n    address: 198.18.%d.%d\n' "$i" $((10 + i / 200)) $((10 + i % 200))
  done
} > "$inv"
{
  printf 'Include %s/conf.d/*.conf\n' "$W"
  printf 'Match host some-other-host\n  User nobody\n'
  for i in $(seq 0 2 $((N - 1))); do
    printf 'Host n%d\n  HostName 198.18.%d.%d\n' "$i" $((10 + i / 200)) $((10 + i % 200))
  done
  printf 'Host 198.18.* !198.18.99.*\n  UserKnownHostsFile %s/known_hosts\n' "$W"
  printf 'Host *\n  IdentityFile ~/.ssh/id_ed25519\n  ConnectTimeout 5\n'
} > "$cfg"
printf 'Host 198.18.1*\n  Port 22\n' > "$W/conf.d/10-port.conf"

measure() { # label binary ssh-config
  local label=$1 bin=$2 c=$3 t
  for r in $(seq "$RUNS"); do
    ip netns exec "$NS" env -u SSH_AUTH_SOCK /usr/bin/time -f '%e %U %S' \
      "$bin" plan -i "$inv" --ssh-config "$c" --timeout 1 --retries 0 --output json \
      >"$W/out" 2>"$W/err" || true
    t=$(tail -1 "$W/err")
    grep -q 'ssh config' "$W/err" && { echo "$label: refused: $(head -3 "$W/err")" >&2; exit 1; }
    echo "$label run $r: wall ${t%% *} s, user+sys $(echo "$t" | awk '{print $2 + $3}') s"
  done
}
echo "kwinctl plan, $N hosts, none reachable ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
measure config "$KW" "$cfg"
measure none "$KW" none
if [ -n "$OLD" ]; then measure old "$OLD" "$cfg"; fi
