#!/usr/bin/env bash
# A newcomer's first run: installs what is needed, builds kwinctl, creates a
# local lab of N Linux hosts (network namespaces, one sshd each, addresses in
# 198.18.0.0/15) and runs check, up, up again, verify against it.
# Usage (as root): lab/demo.sh [N] [M]   (N Linux hosts, default 4; M simulated Windows hosts, default 2; the lab folder is $KWINCTL_DEMO_DIR, or a new private one under /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "lab/demo.sh needs root (it creates network namespaces and sshd servers): run it as root (or with sudo)" >&2
  exit 2
fi
N=${1:-4}
W=${2:-2}
# A folder of this run's own unless one is given: a machine shared by
# several people runs several demos.
if [ -n "${KWINCTL_DEMO_DIR:-}" ]; then
  DIR=$KWINCTL_DEMO_DIR
  if [ -e "$DIR/lab.env" ]; then
    echo "$DIR already holds a lab (maybe someone else's): tear it down with lab/lab.sh down $DIR, or leave KWINCTL_DEMO_DIR unset for a folder of this run's own" >&2
    exit 2
  fi
else
  DIR=$(mktemp -d /tmp/kwinctl-demo.XXXXXX)
fi
if ! command -v cargo >/dev/null 2>&1; then
  for d in "${SUDO_USER:+$(getent passwd "$SUDO_USER" | cut -d: -f6)/.cargo/bin}" /root/.cargo/bin; do
    [ -n "$d" ] && [ -x "$d/cargo" ] && PATH="$d:$PATH" && break
  done
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup) first" >&2; exit 2; }

scripts/setup.sh
echo "== building kwinctl (release)"
cargo build --release --ignore-rust-version --locked
K=$PWD/target/release/kwinctl
echo "== creating a lab of $N Linux and $W simulated Windows hosts in $DIR"
# Owned by pid 1: `lab.sh gc` leaves the demo lab alone.
KWINCTL_LAB_OWNER=1 lab/lab.sh up "$DIR" --linux "$N" --windows "$W"
INV=$DIR/inventory.yaml
echo "== kwinctl check -i $INV"
"$K" check -i "$INV"
echo "== kwinctl up -i $INV"
"$K" up -i "$INV"
echo "== kwinctl up -i $INV   (again: nothing to change)"
"$K" up -i "$INV"
echo "== kwinctl verify -i $INV"
"$K" verify -i "$INV"
cat <<MSG

The lab is still running. Try:
  # what would change (nothing):
  $K plan -i $INV
  # "reboot" h2: its routes and forwarding are gone, its sshd restarts
  lab/lab.sh reboot $DIR h2
  # exit 1, naming h2 and what it lacks
  $K verify -i $INV
  # repairs only h2
  $K up -i $INV
  # a Windows reboot that loses the HNS network, then repair it
  lab/lab.sh reboot $DIR win1 --drop-hns
  $K up -i $INV
  # look inside a host
  lab/lab.sh exec $DIR h1 ip route
Tear it down with:
  lab/lab.sh down $DIR
MSG
