#!/usr/bin/env bash
# A newcomer's first run: installs what is needed, builds kwinctl, creates a
# local lab (network namespaces, one sshd or simulated WinRM server each,
# addresses in 198.18.0.0/15) and runs kwinctl against it.
#
# The modern profile (the default): a Linux control plane and a Linux worker,
# simulated Windows Server 2019 and 2022 hosts (winsim/) on the l2bridge
# profile with containerd and Kubernetes 1.34 (the newest release whose nodes
# may be Windows Server 2019 as well as 2022); runs check, plan, up (which
# restarts the Windows hosts once for their Containers feature), up again
# (0 changed), verify, verify --pods (a test pod on every node, through the
# lab's kubectl stand-in: an IP of the node's block, reaching the others,
# the cluster DNS) and prints graph (the cluster as a Mermaid picture).
#
# Usage (as root): lab/demo.sh [--transparent] [N] [M]
#   N Linux hosts (default 2; h1 is the control plane), M simulated Windows
#   hosts (default 2: Server 2019, then 2022 for the rest)
#   --transparent  the seeds' topology instead (Kubernetes 1.10, Docker's
#                  transparent network, Windows Server 2016; default 4 Linux
#                  and 2 Windows hosts): check, plan, up, up again, verify,
#                  graph (no verify --pods: no pod-check image is published
#                  for Windows Server 2016)
# Environment:
#   KWINCTL_DEMO_DIR   the lab folder (default: a new private one under /tmp)
#   KWINCTL_DEMO_BIN   a kwinctl binary to run instead of building one (and
#                      then scripts/setup.sh is not run: the lab test's way)
#   KWINCTL_LAB_OWNER  the process whose end lets `lab/lab.sh gc` remove the
#                      lab (default 1: never; the lab stays for you to try)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "lab/demo.sh needs root (it creates network namespaces and sshd servers): run it as root (or with sudo)" >&2
  exit 2
fi
PROFILE=l2bridge
if [ "${1:-}" = --transparent ]; then
  PROFILE=transparent
  shift
fi
case "${1:-}${2:-}" in
  *[!0-9]*) echo "usage: lab/demo.sh [--transparent] [N] [M]   (N Linux hosts, M simulated Windows hosts)" >&2; exit 2 ;;
esac
if [ "$PROFILE" = l2bridge ]; then
  N=${1:-2}
  W=${2:-2}
  # win1 Windows Server 2019, win2 (and any after it) 2022
  export KWINCTL_LAB_WIN_BUILDS=2019,2022
else
  N=${1:-4}
  W=${2:-2}
fi
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

if [ -n "${KWINCTL_DEMO_BIN:-}" ]; then
  K=$KWINCTL_DEMO_BIN
  [ -x "$K" ] || { echo "KWINCTL_DEMO_BIN: $K is not an executable" >&2; exit 2; }
else
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
fi

echo "== creating a lab of $N Linux and $W simulated Windows hosts ($PROFILE profile) in $DIR"
# Owned by pid 1 unless told otherwise: `lab.sh gc` leaves the demo lab alone.
KWINCTL_LAB_OWNER=${KWINCTL_LAB_OWNER:-1} lab/lab.sh up "$DIR" --linux "$N" --windows "$W" --profile "$PROFILE"
INV=$DIR/inventory.yaml
# A step that fails leaves the lab up to look at: say how to remove it.
trap 'echo "lab/demo.sh: a step failed; the lab is still up in $DIR: look at it (lab/lab.sh exec $DIR h1 ip route), then lab/lab.sh down $DIR" >&2' ERR

step() { echo; echo "== kwinctl $*"; "$K" "$@"; }
# The control plane's kubectl: the lab's stand-in, which answers `get
# nodes` (up and verify check that the Windows nodes are Ready at the
# declared release) and starts the test pods of `verify --pods` on the nodes
# as their kubelets would, with the cluster DNS at the 10th address of the
# lab's service CIDR 198.18.240.0/20 (as kubeadm). A Windows node turns
# Ready 5 s after its kubelet starts, as a real one takes a while
# (docs/research/kubernetes.md#k9): `up` waits for the nodes it changed.
echo
echo "== the control plane's kubectl: the lab's stand-in (lab/kubectl-standin)"
lab/lab.sh kubectl "$DIR" h1 --dns-ip 198.18.240.10 --domain cluster.local --ready-after 5
step check -i "$INV"
step plan -i "$INV"
# --reboot: a fresh Windows host needs one restart after the Containers
# feature is installed (l2bridge); up restarts it, waits and goes on
step up -i "$INV" --reboot
echo "(again: nothing to change)"
step up -i "$INV"
step verify -i "$INV"
if [ "$PROFILE" = l2bridge ]; then
  step verify -i "$INV" --pods
fi
step graph -i "$INV"
trap - ERR

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
  # the cluster as a Graphviz picture
  $K graph -i $INV --format dot
  # look inside a host
  lab/lab.sh exec $DIR h1 ip route
Tear it down with:
  lab/lab.sh down $DIR
MSG
