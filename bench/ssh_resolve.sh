#!/usr/bin/env bash
# Controller CPU (user + sys, children included: every `ssh -G` kwinctl
# runs) of `kwinctl verify` at N hosts (default 200), per host, with
#   debian   --ssh-config /etc/ssh/ssh_config (Debian's default file: an
#            Include of ssh_config.d/*.conf and one `Host *` block)
#   blocks   --ssh-config FILE with 100 Host blocks (aliases with their own
#            HostName, User, Port), 10 pattern blocks with negation giving
#            the hosts 10 different keys, and `Host *`
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
W=$(mktemp -d -t kwinctl-ssh-resolve.XXXXXX)
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
  # 100 aliases with their own HostName, User and Port; the hosts fall in
  # 10 groups with a key of their own (distinct answers to ask ssh -G for)
  for i in $(seq 0 99); do
    printf 'Host n%d\n  HostName 198.18.%d.%d\n  User ops%d\n  Port %d\n' \
      "$i" $((10 + i / 200)) $((10 + i % 200)) $((i % 7)) $((2200 + i % 3))
  done
  for g in $(seq 0 9); do
    printf 'Host n%d? !n%d9\n  IdentityFile ~/.ssh/group%d_ed25519\n' "$g" "$g" "$g"
  done
  printf 'Host *\n  ConnectTimeout 5\n  ServerAliveInterval 30\n'
} > "$blocks"

# CPU of the kwinctl process and every child it waited for (getrusage
# RUSAGE_CHILDREN of a parent inside the namespace that runs only kwinctl),
# microsecond precision
cpu_of() {
  ip netns exec "$NS" env -u SSH_AUTH_SOCK python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out, open(sys.argv[2], "w") as err:
    subprocess.run(sys.argv[3:], stdout=out, stderr=err)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.4f" % (r.ru_utime + r.ru_stime))' "$@"
}
measure() { # label ssh-config
  local label=$1 c=$2 cpu n_ssh
  for r in $(seq "$RUNS"); do
    cpu=$(cpu_of "$W/out" "$W/err" \
      "$KW" verify -i "$inv" --ssh-config "$c" --timeout 1 --retries 0 --output json)
    if grep -q 'ssh config' "$W/err"; then echo "$label: refused: $(head -3 "$W/err")" >&2; exit 1; fi
    grep -q '"event":"summary"' "$W/out" || { echo "$label: no summary: $(head -3 "$W/err")" >&2; exit 1; }
    echo "$label run $r: cpu $cpu s, $(echo "$cpu $N" | awk '{printf "%.3f", 1000 * $1 / $2}') ms/host"
  done
  # how many `ssh -G` it ran (one run under strace, not timed)
  n_ssh=$(ip netns exec "$NS" env -u SSH_AUTH_SOCK strace -f -qq -e trace=execve -o "$W/trace" \
    "$KW" verify -i "$inv" --ssh-config "$c" --timeout 1 --retries 0 --output json >/dev/null 2>&1; \
    grep -c 'execve(".*ssh", \["[^"]*", "-G"' "$W/trace" || true)
  echo "$label: $n_ssh ssh -G processes for $N hosts"
}
echo "kwinctl verify, $N hosts, none reachable ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)), $("$KW" --version 2>/dev/null || echo kwinctl)"
measure debian /etc/ssh/ssh_config
measure blocks "$blocks"
measure none none
