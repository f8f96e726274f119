#!/usr/bin/env bash
# Controller CPU of a full `verify` sweep, kwinctl beside pyinfra, on one lab
# of N Linux hosts (default 60): user + sys of the tool and every child it
# waited for (getrusage RUSAGE_CHILDREN of a parent that runs only the
# tool), so the ssh clients a tool starts count and the hosts' sshds do
# not. kwinctl: `verify` (routes, forwarding, boot script, pings), after
# one `up`; pyinfra: `exec -- ip -4 route show` (bench/bench.py's verify,
# one command per host). Runs alternate the tools; medians. Needs root (a
# lab); not part of the test suite. Results go to bench/RESULTS.md
# ("verify: controller CPU beside pyinfra"). With BEFORE (another kwinctl
# binary, e.g. a build of an older commit) it runs too, in the same rounds:
# before/after and both beside pyinfra in one run. With COUNT=1 it then
# counts, for kwinctl (and BEFORE), what load does not move: one `verify`
# under `perf stat` (task-clock, context switches, page faults; three runs,
# medians) and one under `strace -f -c` (system calls by name).
#
#   [COUNT=1] bench/verify_cpu.sh [KWINCTL [N [RUNS [PYINFRA [BEFORE]]]]]
set -euo pipefail
cd "$(dirname "$0")/.."
KW=$(realpath "${1:-target/release/kwinctl}")
N=${2:-60}
RUNS=${3:-5}
PYINFRA=${4:-bench/.venv/bin/pyinfra}
PYINFRA=$(realpath "$PYINFRA")
BEFORE=${5:+$(realpath "$5")}
[ "$(id -u)" -eq 0 ] || { echo "verify_cpu.sh needs root (a lab)" >&2; exit 2; }
[ -x "$PYINFRA" ] || { echo "no pyinfra at $PYINFRA (bench/run.sh makes bench/.venv)" >&2; exit 2; }
W=$(mktemp -d -t kwinctl-verify-cpu.XXXXXX)
cleanup() { lab/lab.sh down "$W/lab" >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
lab/lab.sh up "$W/lab" --linux "$N" >/dev/null
inv=$W/lab/inventory.yaml
kh=$W/lab/known_hosts
key=$W/lab/id_ed25519
{
  echo "lab = ["
  while IFS=$'\t' read -r name ip _; do
    printf "    (%s, {'ssh_hostname': %s, 'ssh_user': 'root', 'ssh_key': %s, 'ssh_known_hosts_file': %s, 'ssh_strict_host_key_checking': 'yes', 'ssh_config_file': '/dev/null'}),\n" \
      "'$name'" "'$ip'" "'$key'" "'$kh'"
  done < "$W/lab/hosts.tsv"
  echo "]"
} > "$W/pyinfra_inventory.py"

# The difference of RUSAGE_CHILDREN across the run: a `python3` that is a
# launcher (pyenv's shim is a shell script that runs helper processes,
# then execs Python in the same process) starts with their CPU already in
# RUSAGE_CHILDREN: about 80 ms on the bench machine, counted for every run
# of every tool in bench/RESULTS.md's figures before its "third pass".
cpu_of() { # out err command...
  env -u SSH_AUTH_SOCK python3 -c '
import resource, subprocess, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
before = cpu()
with open(sys.argv[1], "w") as out, open(sys.argv[2], "w") as err:
    rc = subprocess.run(sys.argv[3:], stdout=out, stderr=err).returncode
if rc != 0:
    sys.exit("exit %d" % rc)
print("%.4f" % (cpu() - before))' "$@"
}
kw() { cpu_of "$W/out" "$W/err" "${1:-$KW}" verify -i "$inv" --ssh-config none --output json; }
py() { (cd "$W" && cpu_of "$W/out" "$W/err" "$PYINFRA" -y --parallel "$N" pyinfra_inventory.py exec -- ip -4 route show); }

"$KW" up -i "$inv" --ssh-config none >/dev/null 2>&1
kw >/dev/null; py >/dev/null  # warm-up, untimed
[ -z "$BEFORE" ] || kw "$BEFORE" >/dev/null
: > "$W/kw"; : > "$W/py"; : > "$W/before"
for _ in $(seq "$RUNS"); do
  kw >> "$W/kw" || { echo "kwinctl verify failed: $(tail -3 "$W/err")" >&2; exit 1; }
  py >> "$W/py" || { echo "pyinfra failed: $(tail -3 "$W/err")" >&2; exit 1; }
  [ -z "$BEFORE" ] || kw "$BEFORE" >> "$W/before" ||
    { echo "BEFORE's verify failed: $(tail -3 "$W/err")" >&2; exit 1; }
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
per_host() { echo "$1 $N" | awk '{printf "%.2f", 1000 * $1 / $2}'; }
k=$(median "$W/kw"); p=$(median "$W/py")
echo "N=$N, $RUNS runs each, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $("$KW" --version), $("$PYINFRA" --version)"
echo "kwinctl verify CPU s: $(tr '\n' ' ' < "$W/kw")median $k ($(per_host "$k") ms/host)"
echo "pyinfra exec  CPU s: $(tr '\n' ' ' < "$W/py")median $p ($(per_host "$p") ms/host)"
echo "kwinctl/pyinfra: $(echo "$k $p" | awk '{printf "%.3f", $1 / $2}')"
if [ -n "$BEFORE" ]; then
  b=$(median "$W/before")
  echo "before  verify CPU s: $(tr '\n' ' ' < "$W/before")median $b ($(per_host "$b") ms/host)"
  echo "before/pyinfra: $(echo "$b $p" | awk '{printf "%.3f", $1 / $2}'), kwinctl/before: $(echo "$k $b" | awk '{printf "%.3f", $1 / $2}')"
fi
[ "${COUNT:-0}" = 1 ] || exit 0
counts() { # LABEL BINARY
  local i
  for i in 1 2 3; do
    env -u SSH_AUTH_SOCK perf stat -x, -e task-clock,context-switches,cpu-migrations,page-faults \
      -o "$W/perf.$i" "$2" verify -i "$inv" --ssh-config none --output json >/dev/null 2>&1
  done
  for ev in task-clock context-switches page-faults; do
    printf '%s %s (3 runs): ' "$1" "$ev"
    for i in 1 2 3; do grep ",$ev" "$W/perf.$i" | cut -d, -f1; done | sort -n | tr '\n' ' '
    echo
  done
  env -u SSH_AUTH_SOCK strace -f -c -o "$W/strace" "$2" verify -i "$inv" --ssh-config none \
    --output json >/dev/null 2>&1 || true
  echo "$1 system calls: $(awk '$NF == "total" {print $4 " calls, " (NF == 6 ? $5 : 0) " errors"}' "$W/strace")"
  awk -v l="$1" '$1 ~ /^[0-9.]+$/ && $NF != "total" {print l "   " $NF " " $4}' "$W/strace" |
    sort -k3 -nr | head -12
}
counts kwinctl "$KW"
[ -z "$BEFORE" ] || counts before "$BEFORE"

