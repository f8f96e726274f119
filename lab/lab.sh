#!/usr/bin/env bash
# kwinctl's local lab: Linux "hosts" as network namespaces on a bridge, each
# with its own OpenSSH server, host key, hostname, /root and /etc/kwinctl.
# Addresses: 198.18.<id>.0/24 (the bridge is .1 in the root namespace, host hJ
# is .J+1). While any lab is up, 198.18.0.0/15 is unreachable in the root
# namespace except on a lab bridge: nothing is routed outside the machine.
# Needs root.
#
#   lab.sh up DIR --linux N [--windows M] [--systemd S] [--profile transparent|l2bridge]
#                                create a lab of N Linux hosts (h1..hN), M
#                                simulated Windows hosts (win1..winM: a WinRM
#                                server from winsim/, see winsim/README.md) and
#                                S Linux hosts booting a real systemd (sd1..sdS:
#                                Debian containers, see "systemd hosts" below);
#                                DIR/inventory.yaml is complete for the
#                                release's Windows profile (see "the lab's
#                                release" below): `kwinctl check` accepts it
#   lab.sh down DIR              remove it (idempotent)
#   lab.sh reboot DIR HOST [--drop-hns | --late-address SECS | --late-subnet SECS]
#                                Linux: drop non-kernel routes and forwarding,
#                                restart sshd; Windows: keep persistent routes,
#                                restart auto-start services, with --drop-hns
#                                lose the HNS network; systemd hosts: a real
#                                reboot (`systemctl reboot` inside), optionally
#                                with the address (or its subnet) SECS late
#   lab.sh build-root            build the systemd hosts' cached Debian root
#   lab.sh rekey DIR HOST        new host key (DIR/known_hosts is NOT updated)
#   lab.sh stop-sshd DIR HOST | start-sshd DIR HOST
#   lab.sh exec DIR HOST CMD...  run a command inside HOST's namespace
#   lab.sh pod DIR winJ ADDR/PREFIX GATEWAY
#                                a "pod" on winJ's transparent network: its
#                                own namespace, a veth on the HNSTransparent
#                                bridge (l2bridge: on the vSwitch HNSVSwitch,
#                                GATEWAY the host endpoint P+2), ADDR,
#                                default route via GATEWAY
#   lab.sh kpod DIR HOST NS NAME [--dns-policy P] [--image I]
#                                a pod as HOST's kubelet would start it (see
#                                "kubelet's pods" below); kpod-del DIR HOST NS NAME
#   lab.sh kubectl DIR HOST --dns-ip IP --domain D [--ready-after S] [--server-version V]
#                                lab/kubectl-standin as HOST's kubectl (a
#                                Windows node Ready S s after its kubelet starts;
#                                its API server at release V, default the
#                                inventory's kubernetes_version)
#   lab.sh gc                    remove labs whose owner process is gone: its
#                                pid is dead, or now another process (its
#                                start time, recorded beside it, differs);
#                                a lab whose owner lives is never removed
#   lab.sh hidden DIR NAME VIA linux|windows
#                                a host reachable only through VIA (a lab host
#                                or another hidden host): its own veth pair
#                                behind VIA, 198.18.(200+K).0/24, no route from
#                                this namespace (for bastion / ProxyJump tests)
#   lab.sh user DIR HOST USER nopasswd|password
#                                a login user besides root on HOST, with real
#                                sudo: passwordless for /bin/sh, or asking for
#                                a password
#   lab.sh readdress DIR hJ ADDR
#                                move Linux host hJ to ADDR (on the lab's
#                                /24): the new address first, then the old
#                                one goes; its sshd listens on ADDR only
#                                (DIR/known_hosts and hosts.tsv follow)
#   lab.sh win-ssh DIR winJ [cmd|powershell|pwsh]
#                                simulated Windows host winJ reachable over
#                                SSH (its own sshd; DefaultShell cmd.exe, the
#                                default, or powershell.exe); its inventory
#                                entry switches from winrm: to ssh:
#   lab.sh kdc DIR [--clock OFFSET | --stop]
#                                an MIT Kerberos KDC for the lab's realm
#                                KWL<id>.TEST in its own namespace (.254),
#                                principals and keytabs for the operator and
#                                each Windows host (see lab/kdc.sh); again
#                                with --clock: restarted that far off (+2h);
#                                --stop: stopped
#   lab.sh kadmin DIR QUERY      kadmin.local on the lab's KDC database
#   lab.sh sshd-port DIR HOST PORT [CA_KEY]
#                                one more sshd in HOST on PORT with its own host
#                                key, certified by CA_KEY (a host certificate)
#                                when given
#
# Windows hosts run Kubernetes $KWINCTL_LAB_K8S (default 1.10.13, the newest
# release kwinctl's transparent profile runs: from 1.11 its pods get no IP;
# with --profile l2bridge 1.34.2): fake kubelet.exe/kube-proxy.exe that
# report it (see fake_binaries), downloaded from DIR/dl by winsim.
# For the l2bridge profile DIR/dl also holds fake containerd 1.7.20 and
# 1.7.28 tarballs (and $KWINCTL_LAB_CONTAINERD's), a CNI plugins tarball and
# kube-log-runner.exe beside kubelet.exe (see fake_binaries; the archives'
# SHA-256 in DIR/dl/SHA256SUMS).
#   KWINCTL_LAB_K8S=X.Y.Z  the Windows nodes' release; it chooses the profile
#       as kwinctl does (transparent up to 1.10, l2bridge from 1.24)
#   KWINCTL_LAB_CONTAINERD=X.Y.Z  l2bridge: the containerd release in the
#       inventory (default: one containerd supports for the release)
#   KWINCTL_LAB_LOG_RUNNER=X.Y.Z  l2bridge from 1.26: kube-log-runner.exe
#       from that release, named in cluster.log_runner_version (default:
#       the cluster's release, no log_runner_version)
#   KWINCTL_LAB_IDENTITY=bootstrap  the inventory says `identity: bootstrap`
#       and names no kubeconfig: each Windows node joins with a certificate of
#       its own (issue 35; the control plane needs `lab.sh kubectl` for its
#       kubeadm); default: the shared kubeconfig DIR/kubeconfig
#   KWINCTL_LAB_K8S_ALSO="X.Y.Z ..."  more releases' fake binaries in DIR/dl
#       (to upgrade to: the inventory keeps naming $KWINCTL_LAB_K8S)
#   KWINCTL_LAB_WIN_BUILDS=2019,2022,...  win1's build, win2's, ... (2016,
#       2019, 2022, 2025 or 10.0.NNNNN; the last one given goes on for the
#       hosts after it); unset: winsim's default (10.0.14393, 2016), on
#       l2bridge 2022
#   KWINCTL_LAB_CONTAINERS=Available|InstallPending|Installed
#       every Windows host's Containers feature when the lab comes up
#       (unset: winsim's default, Available)
set -euo pipefail

REG=/run/kwinctl-lab
GUARD=198.18.0.0/15   # the lab's addresses: never routed out of this machine
GUARD_PROTO=197       # marks the guard route as the lab's
SSHD=$(command -v sshd || echo /usr/sbin/sshd)

die() { echo "lab.sh: $*" >&2; exit 1; }
# A process's start time (clock ticks since boot, /proc/PID/stat field 22):
# with its pid, it names one process, even after the pid is reused.
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  # the command name (field 2) may hold spaces: count from after its ")"
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20}"
}
# Whether the process that owns lab record D still lives: its pid runs and
# is the same process (same start time; a record without one is kept while
# its pid runs).
owner_lives() {
  local d=$1 owner want
  owner=$(cat "$d/pid" 2>/dev/null || echo 0)
  [ "$owner" -gt 0 ] 2>/dev/null && kill -0 "$owner" 2>/dev/null || return 1
  want=$(cat "$d/start" 2>/dev/null || true)
  [ -z "$want" ] || [ "$(start_time "$owner")" = "$want" ]
}
# Labs share the registry, the ARP table size and the guard route: changes to
# them (and the check whether any lab is left) happen under this lock.
LOCKED=0
lock_reg() {
  mkdir -p "$REG"
  exec 9>>"$REG/.lock"
  flock -w 60 9 || die "the lab registry lock $REG/.lock stayed busy for 60 s"
  LOCKED=1
}
unlock_reg() { flock -u 9; exec 9>&-; LOCKED=0; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, sshd)"

# ------------------------------------------------------------------ helpers
load() { # DIR -> LAB_ID BRIDGE SUBNET N
  [ -f "$1/lab.env" ] || die "$1 is not a lab (no lab.env)"
  # shellcheck disable=SC1091
  . "$1/lab.env"
}
ns_of() { echo "kwl${LAB_ID}h$1"; }       # host number -> netns
wns_of() { echo "kwl${LAB_ID}w$1"; }      # windows host number -> netns
num_of() { # host name -> number
  case "$1" in h[0-9]*) echo "${1#h}" ;; *) die "unknown Linux host $1" ;; esac
}
WINSIM="$(cd "$(dirname "$0")/.." && pwd)/winsim"
# glibc's malloc for the simulator's server: keep freed memory instead of
# giving it back to the kernel after every request. Each WinRM request of a
# push allocates and frees a few copies of its half-megabyte body; with
# glibc's defaults the heap is trimmed after each and refilled page by page
# at the next (a quarter of the server's CPU during a push went to page
# faults; bench/README.md, "How push.py measures the hosts' side"). The
# work done per request is the same.
WINSIM_MALLOC="glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=16777216"
# shellcheck source=lab/kdc.sh
. "$(dirname "$0")/kdc.sh"
win_ip() { echo "198.18.$LAB_ID.$((N + $1 + 1))"; }
start_winsim() { # DIR j
  local dir=$1 j=$2 hd="$1/hosts/win$2"
  # Kerberos (lab/kdc.sh): the host's service keys and the realm's
  # krb5.conf, once `lab.sh kdc` made them (until then no Kerberos token
  # is accepted, as on a host outside any domain)
  ip netns exec "$(wns_of "$j")" env WINSIM_PASSWORD="$(cat "$dir/winrm-password")" \
    KRB5_KTNAME="FILE:$hd/http.keytab" KRB5_CONFIG="$dir/kdc/krb5.conf" GLIBC_TUNABLES="$WINSIM_MALLOC" \
    setsid "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" serve --listen "$(win_ip "$j")" \
    --http-port 5985 --https-port 5986 --cert "$hd/cert.pem" --key "$hd/key.pem" \
    --user Administrator --password-env WINSIM_PASSWORD --state "$hd/state.json" \
    --allow-basic --log "$hd/winsim.log" </dev/null >>"$hd/winsim.out" 2>&1 &
}
# The lab's kubelet.exe, kube-proxy.exe and kube-log-runner.exe of release
# $2, under DIR/dl/v$2/: `--version` of such a file is its second line
# (winsim/k8sbin.py); winsim serves DIR/dl as https://dl.lab.invalid/.
# kube-log-runner.exe ships in the release's Windows node archive beside
# kubelet.exe (kubernetes-node-windows-amd64.tar.gz: B for the first release;
# KEP-2845); kwinctl wraps the services in it on l2bridge >= 1.26.
fake_binaries() { # DIR version
  local b
  mkdir -p "$1/dl/v$2"
  for b in kubelet kube-proxy kube-log-runner; do
    printf 'MZ kwinctl lab fake %s.exe\nKubernetes v%s\n' "$b" "$2" > "$1/dl/v$2/$b.exe"
  done
  fake_archives "$1"
}
# The l2bridge profile's downloads, as their projects publish them:
# containerd release tarballs (bin/*.exe, docs/research/containerd.md#d4; the first line of each fake
# binary is its `--version` line) and the CNI plugins' Windows tgz (./*.exe,
# docs/research/cni-plugins.md#c6). containerd 1.7.20 and 1.7.28 (Kubernetes 1.34 needs containerd
# 1.7.28+: containerd RELEASES.md, "Kubernetes support"), plus
# $KWINCTL_LAB_CONTAINERD when it is another. Byte-for-byte the same on
# every run (sorted, mtime 0, gzip -n).
fake_archives() { # DIR
  local dl=$1/dl t b v vs=() files=()
  for v in 1.7.20 1.7.28 "${KWINCTL_LAB_CONTAINERD:-1.7.20}"; do
    case " ${vs[*]} " in *" $v "*) ;; *) vs+=("$v") ;; esac
  done
  t=$(mktemp -d)
  mkdir -p "$t/n"
  for v in "${vs[@]}"; do
    rm -rf "$t/c"
    mkdir -p "$t/c/bin"
    for b in containerd containerd-shim-runhcs-v1 ctr; do
      printf '%s github.com/containerd/containerd v%s 0123456789abcdef\nMZ kwinctl lab fake %s.exe\n' \
        "$b" "$v" "$b" > "$t/c/bin/$b.exe"
    done
    tar -C "$t/c" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - bin \
      | gzip -n > "$dl/containerd-$v-windows-amd64.tar.gz"
    files+=("containerd-$v-windows-amd64.tar.gz")
  done
  for b in win-bridge host-local win-overlay; do
    printf 'MZ kwinctl lab fake %s.exe (CNI plugins v1.6.2)\n' "$b" > "$t/n/$b.exe"
  done
  tar -C "$t/n" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . \
    | gzip -n > "$dl/cni-plugins-windows-amd64-v1.6.2.tgz"
  rm -rf "$t"
  ( cd "$dl" && sha256sum "${files[@]}" cni-plugins-windows-amd64-v1.6.2.tgz > SHA256SUMS )
}
# Windows Server builds by name (docs/research/kubernetes-website.md#w1, docs/research/kubernetes.md#k7: 2019 = 10.0.17763; 2022 =
# 10.0.20348 and 2025 = 10.0.26100: docs/research/l2bridge-profile.md#p1, B)
win_build() { # 2016|2019|2022|2025|10.0.N
  case "$1" in
    2016) echo 10.0.14393 ;; 2019) echo 10.0.17763 ;; 2022) echo 10.0.20348 ;; 2025) echo 10.0.26100 ;;
    10.0.[0-9]*) echo "$1" ;;
    *) die "KWINCTL_LAB_WIN_BUILDS: $1 is not 2016, 2019, 2022, 2025 or 10.0.NNNNN" ;;
  esac
}
win_state_json() { # DIR j: the host's first state file
  local -a builds=()
  local extra="" b
  if [ -n "${KWINCTL_LAB_WIN_BUILDS:-}" ]; then
    IFS=, read -r -a builds <<< "$KWINCTL_LAB_WIN_BUILDS"
    b=${builds[$(( $2 <= ${#builds[@]} ? $2 - 1 : ${#builds[@]} - 1 ))]}
    extra="$extra, \"build\": \"$(win_build "$b")\""
  fi
  case "${KWINCTL_LAB_CONTAINERS:-}" in
    "") ;;
    Available|InstallPending|Installed) extra="$extra, \"features\": {\"Containers\": \"$KWINCTL_LAB_CONTAINERS\"}" ;;
    *) die "KWINCTL_LAB_CONTAINERS: Available, InstallPending or Installed, not $KWINCTL_LAB_CONTAINERS" ;;
  esac
  # Kubernetes 1.24+ (no dockershim: the l2bridge profile, containerd) on a
  # host without Docker, so without Docker's NAT adapter
  case "${KWINCTL_LAB_K8S:-1.10.13}" in
    1.[0-9].*|1.1[0-9].*|1.2[0-3].*) ;;
    *) extra="$extra, \"docker_version\": null"
       # ... whose first vSwitch drops its connections for a few seconds, as
       # Windows' does (docs/research/vswitch-blip.md#vb1; winsim/blip.py):
       # KWINCTL_LAB_VSWITCH_BLACKOUT seconds, 0 for none
       b=${KWINCTL_LAB_VSWITCH_BLACKOUT:-3}
       [[ "$b" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "KWINCTL_LAB_VSWITCH_BLACKOUT: seconds, not $b"
       extra="$extra, \"vswitch_blackout\": $b" ;;
  esac
  # apiserver: the lab cluster's TLS bootstrapping (lab/standin/bootstrap.py)
  echo "{\"hostname\": \"WIN$2\", \"downloads\": \"$1/dl\", \"apiserver\": \"$1/kubectl/apiserver\"$extra}"
}

wait_tcp() { # ip port timeout-seconds
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  return 1
}
kill_nss() { # netns...: end every process in any of them at once (TERM, KILL after 0.4 s), bounded (~3 s)
  local -a inos=()
  local i pids
  [ $# -gt 0 ] || return 0
  mapfile -t inos < <(cd /run/netns && stat -L -c %i "$@" 2>/dev/null || true)
  [ "${#inos[@]}" -gt 0 ] || return 0
  for ((i = 0; i < 30; i++)); do
    pids=$(find /proc/[0-9]*/ns/net -maxdepth 0 -printf '%h %l\n' 2>/dev/null \
      | awk -v list="${inos[*]}" '
          BEGIN { n = split(list, a, " "); for (k = 1; k <= n; k++) want["net:[" a[k] "]"] = 1 }
          ($2 in want) { p = $1; sub("^/proc/", "", p); sub("/ns$", "", p); print p }' || true)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    if ((i < 4)); then kill $pids 2>/dev/null || true; else kill -9 $pids 2>/dev/null || true; fi
    sleep 0.1
  done
  echo "lab.sh: processes still running in the lab's namespaces: $pids" >&2
}
wait_port() { # ip timeout-seconds
  local ip=$1 t=$2 i
  for ((i = 0; i < t * 20; i++)); do
    if (exec 3<>"/dev/tcp/$ip/22") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  return 1
}
start_sshd() { # DIR j
  start_sshd_in "$1/hosts/h$2" "$(ns_of "$2")" "h$2"
}
start_sshd_in() { # hostdir netns name: a lab host's sshd (hidden hosts too)
  # Own mount and UTS namespace: own hostname, own /root, own /etc/kwinctl,
  # own (empty) /usr/local/bin where a test can place tools such as kubectl.
  # shellcheck disable=SC2016 # $1 and $2 are the inner sh's arguments
  ip netns exec "$2" unshare --mount --uts --propagation private sh -c '
    set -e
    hostname "$1"
    mount --bind "$2/root" /root
    mkdir -p /etc/kwinctl 2>/dev/null || true
    mount --bind "$2/etc-kwinctl" /etc/kwinctl
    mkdir -p "$2/usr-local-bin"
    mount --bind "$2/usr-local-bin" /usr/local/bin
    # files of its own over /etc/<name> (lab.sh user: passwd, sudoers, ...)
    if [ -d "$2/etc-over" ]; then
      for f in "$2"/etc-over/*; do mount --bind "$f" "/etc/${f##*/}"; done
    fi
    exec "$3" -f "$2/sshd_config" -E "$2/sshd.log"
  ' sh "$3" "$1" "$SSHD"
}
stop_sshd() { # DIR j
  local hd="$1/hosts/h$2"
  if [ -f "$hd/sshd.pid" ]; then
    kill "$(cat "$hd/sshd.pid")" 2>/dev/null || true
  fi
  # and any session still running in that host
  kill_nss "$(ns_of "$2")"
  rm -f "$hd/sshd.pid"
}
host_ip() { echo "198.18.$LAB_ID.$(($1 + 1))"; }
add_host_ns() { # netns veth ip: a namespace on the bridge with eth0 = ip/24
  ip netns add "$1"
  ip link add "$2" type veth peer name eth0 netns "$1"
  ip link set "$2" master "$BRIDGE" up
  ip -n "$1" link set lo up
  ip -n "$1" addr add "$3/24" dev eth0
  ip -n "$1" link set eth0 up
}

# ------------------------------------------------------------------ systemd hosts
# sd1..sdS: Debian containers booting a real systemd as PID 1
# (systemd-nspawn), each on the lab bridge with the lab's key for root, its
# own sshd host key, hostname and machine id, and its address set at boot by
# kwl-net.service, ordered as ifupdown's networking.service (before
# network.target and network-online.target, wanted by the latter). Their root
# is one Debian tree built once per machine (debootstrap, ~45 s, ~270 MB) in
# $SD_CACHE and shared read-only; each host writes to its own overlay upper
# layer in DIR/hosts/sdJ, so what kwinctl installs survives the host's
# reboots. A reboot is real: `systemctl reboot` inside ends the container
# (nspawn exits 133) and the host's supervisor starts it again (new network
# namespace, units run again). Needs systemd-container and debootstrap
# (scripts/setup.sh installs them). Facts: docs/research/lab.md, and
# systemd-nspawn(1): --keep-unit --register=no (no machined or system bus
# here), exit status 133 on reboot.
SD_CACHE=${KWINCTL_LAB_CACHE:-/var/cache/kwinctl-lab}
SD_SUITE=bookworm
SD_MIRROR=${KWINCTL_LAB_MIRROR:-http://deb.debian.org/debian}
SD_VERSION=1   # bump when sd_customize changes: a new root is built
SD_PACKAGES=systemd,systemd-sysv,openssh-server,iproute2,iputils-ping
sd_root() { echo "$SD_CACHE/$SD_SUITE-v$SD_VERSION"; }
sd_ip() { echo "198.18.$LAB_ID.$((N + ${M:-0} + $1 + 1))"; }
sd_machine() { echo "kwl${LAB_ID}s$1"; }
sd_num() { case "$1" in sd[0-9]*) echo "${1#sd}" ;; *) return 1 ;; esac; }

# The cached root: built once, under a lock (parallel labs wait for it), in a
# temporary folder renamed when complete; `.ready` beside it marks it usable.
sd_build_root() {
  local root tmp
  root=$(sd_root)
  [ -f "$root.ready" ] && return 0
  command -v systemd-nspawn >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 \
    || die "systemd hosts need systemd-nspawn and debootstrap: apt-get install systemd-container debootstrap (scripts/setup.sh does)"
  mkdir -p "$SD_CACHE"
  exec 8>>"$SD_CACHE/.lock"
  flock -w 900 8 || die "the lab root lock $SD_CACHE/.lock stayed busy for 15 min"
  if [ ! -f "$root.ready" ]; then
    tmp="$SD_CACHE/.build"
    rm -rf "$tmp" "$root"
    echo "lab.sh: building the systemd hosts' root $root (once per machine; ~1 min)" >&2
    if ! timeout 900 debootstrap --variant=minbase --include="$SD_PACKAGES" "$SD_SUITE" "$tmp" "$SD_MIRROR" \
      > "$SD_CACHE/build.log" 2>&1; then
      rm -rf "$tmp"
      die "debootstrap of $SD_SUITE from $SD_MIRROR failed (set KWINCTL_LAB_MIRROR for another mirror); last lines of $SD_CACHE/build.log: $(tail -3 "$SD_CACHE/build.log")"
    fi
    sd_customize "$tmp"
    mv "$tmp" "$root"
    touch "$root.ready"
  fi
  flock -u 8
  exec 8>&-
}

sd_customize() { # ROOT: what every systemd host shares
  local r=$1 u
  # per host: host keys, machine id, hostname (written in its overlay)
  rm -f "$r"/etc/ssh/ssh_host_*
  : > "$r/etc/machine-id"
  rm -f "$r/etc/hostname"
  cat > "$r/etc/ssh/sshd_config.d/kwl-lab.conf" <<'EOF'
# kwinctl lab (see lab/lab.sh): root logs in with the lab's key only
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
EOF
  mkdir -p "$r/etc/kwl-lab"
  cat > "$r/usr/local/sbin/kwl-net" <<'EOF'
#!/bin/sh
# kwinctl lab: this host's address on host0, set the way a distro's
# networking service sets it. /etc/kwl-lab/late, when present, applies to
# this boot only (nothing waits for the late part: network-online.target is
# reached without it):
#   address SECS  the address appears SECS s after this unit finished
#   subnet SECS   the address is up now as a /32 with a route to the lab
#                 machine only (SSH works; the other hosts are not on a
#                 connected network) and its /24 appears SECS s later
set -eu
. /etc/kwl-lab/net   # KWL_ADDR=a.b.c.d/24 KWL_LAB=the lab machine's address
ip link set lo up
ip link set host0 up
mode=none secs=0
if [ -f /etc/kwl-lab/late ]; then
  read -r mode secs < /etc/kwl-lab/late || :
  rm -f /etc/kwl-lab/late
fi
case "$mode" in
  address)
    systemd-run --quiet --no-block --unit=kwl-net-late sh -c "sleep $secs && ip addr add $KWL_ADDR dev host0"
    echo "kwl-net: $KWL_ADDR on host0 in $secs s" ;;
  subnet)
    ip addr add "${KWL_ADDR%/*}/32" dev host0
    ip route add "$KWL_LAB" dev host0
    systemd-run --quiet --no-block --unit=kwl-net-late sh -c "sleep $secs && ip addr add $KWL_ADDR dev host0"
    echo "kwl-net: ${KWL_ADDR%/*}/32 on host0, its subnet in $secs s" ;;
  *)
    ip addr add "$KWL_ADDR" dev host0
    echo "kwl-net: $KWL_ADDR on host0" ;;
esac
EOF
  chmod 0755 "$r/usr/local/sbin/kwl-net"
  # Ordered as ifupdown's networking.service (Debian 12): before network.target
  # and network-online.target, wanted by network-online.target.
  cat > "$r/etc/systemd/system/kwl-net.service" <<'EOF'
[Unit]
Description=kwinctl lab: the host's address (ordered as ifupdown's networking.service)
DefaultDependencies=no
Wants=network.target
After=local-fs.target systemd-sysctl.service
Before=network.target network-online.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/kwl-net

[Install]
WantedBy=multi-user.target network-online.target
EOF
  mkdir -p "$r/etc/systemd/system/multi-user.target.wants" "$r/etc/systemd/system/network-online.target.wants"
  ln -sf ../kwl-net.service "$r/etc/systemd/system/multi-user.target.wants/kwl-net.service"
  ln -sf ../kwl-net.service "$r/etc/systemd/system/network-online.target.wants/kwl-net.service"
  # What a container does not need and would only slow its boot.
  for u in getty@tty1.service console-getty.service apt-daily.timer apt-daily-upgrade.timer \
    dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-pstore.service; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  mkdir -p "$r/root/.ssh"
  chmod 0700 "$r/root/.ssh"
}

sd_prepare() { # DIR j: the host's overlay and its own files
  local dir=$1 j=$2 hd m
  hd="$dir/hosts/sd$j"
  m="$hd/root"
  mkdir -p "$hd/upper" "$hd/work" "$m"
  mountpoint -q "$m" || mount -t overlay "kwl-$(sd_machine "$j")" \
    -o "lowerdir=$(sd_root),upperdir=$hd/upper,workdir=$hd/work" "$m"
  echo "sd$j" > "$m/etc/hostname"
  od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$m/etc/machine-id"
  echo >> "$m/etc/machine-id"
  printf 'KWL_ADDR=%s/24\nKWL_LAB=198.18.%s.1\n' "$(sd_ip "$j")" "$LAB_ID" > "$m/etc/kwl-lab/net"
  install -m 0600 "$dir/id_ed25519.pub" "$m/root/.ssh/authorized_keys"
  rm -f "$hd/ssh_host_ed25519_key" "$hd/ssh_host_ed25519_key.pub"
  ssh-keygen -q -t ed25519 -N '' -C "sd$j" -f "$hd/ssh_host_ed25519_key"
  install -m 0600 "$hd/ssh_host_ed25519_key" "$m/etc/ssh/ssh_host_ed25519_key"
  install -m 0644 "$hd/ssh_host_ed25519_key.pub" "$m/etc/ssh/ssh_host_ed25519_key.pub"
}

# The host's cgroups: nspawn (--keep-unit) puts its "payload" and
# "supervisor" groups under the cgroup it runs in, so each host gets its own
# in the named systemd hierarchy and the unified one (the resource
# controllers are left alone).
sd_cgroups() { # machine
  local h
  for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
    [ -f "$h/cgroup.procs" ] && echo "$h/kwinctl-lab/$1"
  done
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] || echo "/sys/fs/cgroup/kwinctl-lab/$1"
}

# Runs in the background for the host's life: boots the container, and boots
# it again each time it exits for a reboot (133), until DIR/hosts/sdJ/stop.
sd_supervise() { # hd machine bridge
  local hd=$1 machine=$2 bridge=$3 cg rc
  for cg in $(sd_cgroups "$machine"); do
    mkdir -p "$cg" && echo "$BASHPID" > "$cg/cgroup.procs"
  done
  while :; do
    systemd-nspawn -q -D "$hd/root" -b -M "$machine" --keep-unit --register=no \
      --network-bridge="$bridge" --console=passive --link-journal=no \
      </dev/null >>"$hd/console.log" 2>&1 &
    echo $! > "$hd/nspawn.pid"
    rc=0
    wait $! || rc=$?
    echo "$(date +%T) nspawn exited $rc" >> "$hd/supervisor.log"
    [ "$rc" -eq 133 ] && [ ! -e "$hd/stop" ] || break
  done
  rm -f "$hd/nspawn.pid"
}

sd_start() { # DIR j
  local hd="$1/hosts/sd$2"
  rm -f "$hd/stop" "$hd/nspawn.pid"
  setsid bash "$0" _sd-supervise "$hd" "$(sd_machine "$2")" "$BRIDGE" </dev/null >/dev/null 2>&1 &
  echo $! > "$hd/supervisor.pid"
}

sd_leader() { # DIR j -> the container's PID 1, as seen from here
  local p
  p=$(cat "$1/hosts/sd$2/nspawn.pid" 2>/dev/null) || return 1
  pgrep -P "$p" -x systemd | head -n 1
}

sd_exec() { # DIR j CMD...: inside the container (all its namespaces), a clean environment
  local dir=$1 j=$2 leader
  shift 2
  leader=$(sd_leader "$dir" "$j") || true
  [ -n "$leader" ] || die "sd$j is not running"
  exec nsenter --target "$leader" --all -- env -i HOME=/root TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

sd_wait_up() { # DIR j timeout-seconds: sshd answers on the host's address
  wait_port "$(sd_ip "$2")" "$3" \
    || die "sd$2 did not come up within $3 s: $(tail -3 "$1/hosts/sd$2/console.log" 2>/dev/null)"
}

# The processes of a host, found by their command lines (so that a host whose
# folder or pid files are gone is still found): its supervisor and nspawn.
sd_pids() { # hd machine
  pgrep -f -- "_sd-supervise $1 $2 " || true
  pgrep -f -- "-M $2 --keep-unit " || true
}

# Stop hosts: TERM to each container (a clean poweroff, ~1 s), then KILL
# whatever is left after 5 s, then the overlays and cgroups. Takes
# "hostdir machine" pairs, so that gc can call it without lab.env.
sd_stop() { # hd machine [hd machine]...
  local -a hds=() machines=() pids=()
  local hd i p cg
  while [ $# -ge 2 ]; do hds+=("$1"); machines+=("$2"); shift 2; done
  for i in "${!hds[@]}"; do
    touch "${hds[$i]}/stop" 2>/dev/null || true
    # TERM to nspawn: it powers the container off
    for p in $(pgrep -f -- "-M ${machines[$i]} --keep-unit " || true); do kill "$p" 2>/dev/null || true; done
  done
  for ((i = 0; i < 50; i++)); do
    pids=()
    for p in "${!hds[@]}"; do
      # shellcheck disable=SC2207
      pids+=($(sd_pids "${hds[$p]}" "${machines[$p]}"))
    done
    [ "${#pids[@]}" -gt 0 ] || break
    sleep 0.1
  done
  if [ "${#pids[@]}" -gt 0 ]; then
    # Killing a container's PID 1 ends its PID namespace, and all in it.
    for p in "${pids[@]}"; do
      # shellcheck disable=SC2046
      kill -9 $(pgrep -P "$p" -x systemd || true) "$p" 2>/dev/null || true
    done
    sleep 0.2
  fi
  for i in "${!hds[@]}"; do
    hd=${hds[$i]}
    if grep -q " $hd/root overlay " /proc/mounts 2>/dev/null; then
      umount "$hd/root" 2>/dev/null || umount -l "$hd/root" || true
    fi
    rm -f "$hd/supervisor.pid" "$hd/nspawn.pid"
    for cg in $(sd_cgroups "${machines[$i]}"); do
      [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  done
}

# Systemd hosts no lab in the registry owns (their lab was removed by a
# lab.sh from before systemd hosts, or its registry entry was lost).
sd_gc() {
  local pid hd machine id
  # shellcheck disable=SC2034
  { pgrep -af -- "_sd-supervise " || true; } | while read -r pid _ _ _ hd machine _; do
    [ -n "${machine:-}" ] || continue
    id=${machine#kwl}; id=${id%%s*}
    if [ -f "$REG/$id/sd" ] && grep -q "^$hd $machine\$" "$REG/$id/sd"; then continue; fi
    echo "lab.sh gc: stopping systemd host $machine ($hd) of no lab" >&2
    sd_stop "$hd" "$machine"
  done
}

sd_up() { # DIR S: create, start and wait for the systemd hosts
  local dir=$1 s=$2 j
  [ "$s" -gt 0 ] || return 0
  sd_build_root
  for j in $(seq 1 "$s"); do
    printf '%s %s\n' "$dir/hosts/sd$j" "$(sd_machine "$j")" >> "$REG/$LAB_ID/sd"
    sd_prepare "$dir" "$j"
    printf 'sd%s\t%s\t%s\n' "$j" "$(sd_ip "$j")" "$(sd_machine "$j")" >> "$dir/hosts.tsv"
    echo "$(sd_ip "$j") $(cut -d' ' -f1,2 "$dir/hosts/sd$j/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"
    {
      echo "  - name: sd$j"
      echo "    os: linux"
      [ "$N" -eq 0 ] && [ "$j" -eq 1 ] && echo "    role: control-plane"
      echo "    address: $(sd_ip "$j")"
    } >> "$dir/inventory.yaml"
    sd_start "$dir" "$j"
  done
  for j in $(seq 1 "$s"); do sd_wait_up "$dir" "$j" 60; done
}

sd_down() { # DIR (lab.env loaded)
  local j
  local -a args=()
  for j in $(seq 1 "${S:-0}"); do args+=("$1/hosts/sd$j" "$(sd_machine "$j")"); done
  [ "${#args[@]}" -eq 0 ] || sd_stop "${args[@]}"
}

sd_reboot() { # DIR j [--late-address SECS | --late-subnet SECS]
  local dir=$1 j=$2 opt=${3:-} secs=${4:-0} hd old i new
  hd="$dir/hosts/sd$j"
  case "$opt" in
    "") ;;
    --late-address) echo "address $secs" > "$hd/root/etc/kwl-lab/late" ;;
    --late-subnet) echo "subnet $secs" > "$hd/root/etc/kwl-lab/late" ;;
    *) die "usage: lab.sh reboot DIR sdJ [--late-address SECS | --late-subnet SECS]" ;;
  esac
  [[ "$secs" =~ ^[0-9]+$ ]] || die "SECS must be a whole number of seconds"
  old=$(cat "$hd/nspawn.pid" 2>/dev/null) || die "sd$j is not running"
  ( sd_exec "$dir" "$j" systemctl reboot ) 2>/dev/null || true
  for ((i = 0; i < 600; i++)); do
    new=$(cat "$hd/nspawn.pid" 2>/dev/null || true)
    if [ -n "$new" ] && [ "$new" != "$old" ] && [ -n "$(sd_leader "$dir" "$j")" ]; then break; fi
    sleep 0.05
  done
  [ -n "$new" ] && [ "$new" != "$old" ] || die "sd$j did not boot again within 30 s: $(tail -3 "$hd/supervisor.log" 2>/dev/null)"
  if [ "$opt" = --late-address ]; then
    sd_wait_up "$dir" "$j" $((secs + 60))
  else
    sd_wait_up "$dir" "$j" 60
  fi
}

# ------------------------------------------------------------------ the lab's release
# The Windows nodes' release and everything its profile needs in the
# inventory, settled before anything is made. kwinctl chooses the profile by
# release (src/os/windows/k8s.yaml, `profiles:`): transparent up to 1.10,
# l2bridge from 1.24; 1.11-1.23 run neither (kwinctl refuses them; the lab
# still makes them, for that refusal's tests). Exported, so that
# fake_binaries, fake_archives and win_state_json see the same values:
#   KWINCTL_LAB_K8S         --profile transparent: 1.10.13; --profile
#                           l2bridge: 1.34.2, the newest release whose nodes
#                           may be Windows Server 2019 as well as 2022 (from
#                           1.35 only 2022 and 2025:
#                           docs/research/kubernetes-website.md#w3)
#   KWINCTL_LAB_CONTAINERD  l2bridge: a release containerd supports for it
#                           (containerd RELEASES.md, "Kubernetes support";
#                           k8s.yaml `containerd:`): 1.7.28 up to 1.29, 2.1.4
#                           for 1.30-1.34, 2.2.0 for 1.35, 2.3.0 from 1.36
#   KWINCTL_LAB_WIN_BUILDS  l2bridge: 2022 (winsim's 2016 runs no l2bridge)
# and LAB_PROFILE (transparent, l2bridge or none) and LAB_RUNNER (the
# release of the kube-log-runner.exe the inventory names: l2bridge from 1.26,
# where kwinctl wraps kubelet and kube-proxy in it; empty otherwise).
lab_release() { # [transparent|l2bridge]
  local want=${1:-} m
  case "$want" in
    "") ;;
    transparent) : "${KWINCTL_LAB_K8S:=1.10.13}" ;;
    l2bridge) : "${KWINCTL_LAB_K8S:=1.34.2}" ;;
    *) die "--profile: transparent or l2bridge, not $want" ;;
  esac
  export KWINCTL_LAB_K8S=${KWINCTL_LAB_K8S:-1.10.13}
  [[ "$KWINCTL_LAB_K8S" =~ ^1\.([0-9]+)\.[0-9]+$ ]] \
    || die "KWINCTL_LAB_K8S: a release X.Y.Z such as 1.34.2, not $KWINCTL_LAB_K8S"
  m=${BASH_REMATCH[1]}
  if ((m <= 10)); then LAB_PROFILE=transparent; elif ((m >= 24)); then LAB_PROFILE=l2bridge; else LAB_PROFILE=none; fi
  [ -z "$want" ] || [ "$want" = "$LAB_PROFILE" ] \
    || die "--profile $want: Kubernetes $KWINCTL_LAB_K8S (KWINCTL_LAB_K8S) runs the $LAB_PROFILE profile (transparent: 1.5-1.10, l2bridge: from 1.24); unset KWINCTL_LAB_K8S or give a release of the profile"
  LAB_RUNNER=""
  if [ "$LAB_PROFILE" = l2bridge ]; then
    if [ -z "${KWINCTL_LAB_CONTAINERD:-}" ]; then
      if ((m <= 29)); then KWINCTL_LAB_CONTAINERD=1.7.28
      elif ((m <= 34)); then KWINCTL_LAB_CONTAINERD=2.1.4
      elif ((m == 35)); then KWINCTL_LAB_CONTAINERD=2.2.0
      else KWINCTL_LAB_CONTAINERD=2.3.0
      fi
    fi
    export KWINCTL_LAB_CONTAINERD
    export KWINCTL_LAB_WIN_BUILDS=${KWINCTL_LAB_WIN_BUILDS:-2022}
    if ((m >= 26)); then LAB_RUNNER=${KWINCTL_LAB_LOG_RUNNER:-$KWINCTL_LAB_K8S}; fi
  fi
  if [ -n "${KWINCTL_LAB_LOG_RUNNER:-}" ]; then
    [ -n "$LAB_RUNNER" ] || die "KWINCTL_LAB_LOG_RUNNER: Kubernetes $KWINCTL_LAB_K8S runs no kube-log-runner (kwinctl wraps kubelet and kube-proxy in it on l2bridge from 1.26)"
    [[ "$KWINCTL_LAB_LOG_RUNNER" =~ ^1\.[0-9]+\.[0-9]+$ ]] \
      || die "KWINCTL_LAB_LOG_RUNNER: a release X.Y.Z such as 1.34.2, not $KWINCTL_LAB_LOG_RUNNER"
  fi
}
# A Windows host's windows.binaries line for a file of DIR/dl/SHA256SUMS.
dl_line() { # DIR name file
  local sha
  sha=$(awk -v f="$3" '$2 == f { print $1 }' "$1/dl/SHA256SUMS")
  [ -n "$sha" ] || die "$3 is not in $1/dl/SHA256SUMS"
  echo "        $2: { url: \"https://dl.lab.invalid/$3\", sha256: $sha }"
}

# ------------------------------------------------------------------ up
cmd_up() {
  local dir=$1 n=$2 m=${3:-0} s=${4:-0} id="" i j v
  lab_release "${5:-}"
  [ "$n" -ge 0 ] && [ "$m" -ge 0 ] && [ "$s" -ge 0 ] && [ $((n + m + s)) -ge 1 ] && [ $((n + m + s)) -le 200 ] \
    || die "--linux N --windows M --systemd S: 1 to 200 hosts in all"
  [ "$s" -eq 0 ] || sd_build_root
  mkdir -p "$dir" "$REG" /run/sshd
  dir=$(cd "$dir" && pwd)
  [ ! -e "$dir/lab.env" ] || die "$dir already holds a lab: lab.sh down $dir first"
  cmd_gc >/dev/null 2>&1 || true
  lock_reg
  for i in $(seq 1 199); do
    if mkdir "$REG/$i" 2>/dev/null; then id=$i; break; fi
  done
  [ -n "$id" ] || die "no free lab id in $REG"
  echo "$dir" > "$REG/$id/dir"
  owner=${KWINCTL_LAB_OWNER:-$PPID}
  echo "$owner" > "$REG/$id/pid"
  start_time "$owner" > "$REG/$id/start"
  LAB_ID=$id BRIDGE="kwl$id" SUBNET="198.18.$id.0/24" N=$n M=$m S=$s
  printf 'LAB_ID=%s\nBRIDGE=%s\nSUBNET=%s\nN=%s\nM=%s\nS=%s\n' "$LAB_ID" "$BRIDGE" "$SUBNET" "$N" "$M" "$S" > "$dir/lab.env"
  # Any failure from here on (a `die` too) takes down what was made.
  trap 'rc=$?; if [ "$rc" -ne 0 ]; then echo "lab.sh: up failed; tearing down" >&2; cmd_down "$dir" >/dev/null 2>&1 || true; fi' EXIT

  # Every namespace shares the kernel's one ARP table (1024 entries by
  # default): a large lab overflows it and pings start failing. Raise it for
  # the lab's life; the last `down` puts the old values back.
  if [ $((n + m)) -gt 64 ]; then
    local want=$(( (n + m) * 16 ))
    if [ "$(sysctl -n net.ipv4.neigh.default.gc_thresh3)" -lt "$want" ]; then
      [ -f "$REG/neigh.orig" ] || sysctl -n net.ipv4.neigh.default.gc_thresh1 net.ipv4.neigh.default.gc_thresh2 \
        net.ipv4.neigh.default.gc_thresh3 | tr '\n' ' ' > "$REG/neigh.orig"
      sysctl -q -w net.ipv4.neigh.default.gc_thresh1=$((want / 4)) net.ipv4.neigh.default.gc_thresh2=$((want / 2)) \
        net.ipv4.neigh.default.gc_thresh3="$want"
    fi
  fi
  # This namespace forwards and has a default route out of the machine: while
  # any lab is up, 198.18.0.0/15 is unreachable here except on a lab bridge,
  # so lab and pod traffic never leaves (the last `down` removes the guard).
  if [ -z "$(ip -4 route show exact "$GUARD")" ]; then
    ip -4 route add unreachable "$GUARD" proto "$GUARD_PROTO"
  fi
  unlock_reg
  ip link add "$BRIDGE" type bridge
  ip addr add "198.18.$id.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up

  rm -f "$dir/id_ed25519" "$dir/id_ed25519.pub"
  ssh-keygen -q -t ed25519 -N '' -C "kwinctl-lab$id" -f "$dir/id_ed25519"
  : > "$dir/known_hosts"
  : > "$dir/hosts.tsv"
  # Windows nodes' kubeconfig: embedded placeholders, as kwinctl requires
  printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: https://%s:6443\n    certificate-authority-data: TEFCIENB\nusers:\n- name: nodes\n  user:\n    token: lab-placeholder\ncontexts:\n- name: lab\n  context: { cluster: lab, user: nodes }\ncurrent-context: lab\n' \
    "$(host_ip 1)" > "$dir/kubeconfig"
  {
    echo "cluster:"
    echo "  name: lab$id"
    echo "  cluster_cidr: 198.19.0.0/16"
    echo "  node_prefix: 24"
    echo "  service_cidr: 198.18.240.0/20"
    echo "  api_server: https://$(host_ip 1):6443"
    echo "  kubernetes_version: \"$KWINCTL_LAB_K8S\""
    if [ "$LAB_PROFILE" = l2bridge ]; then
      echo "  containerd_version: \"$KWINCTL_LAB_CONTAINERD\""
      [ -z "${KWINCTL_LAB_LOG_RUNNER:-}" ] || echo "  log_runner_version: \"$KWINCTL_LAB_LOG_RUNNER\""
    fi
    # KWINCTL_LAB_IDENTITY=bootstrap: each Windows node joins with its own
    # certificate (issue 35) and gets no shared kubeconfig; else the shared one
    if [ "${KWINCTL_LAB_IDENTITY:-shared}" = bootstrap ]; then
      echo "  identity: bootstrap"
    else
      echo "  kubeconfig: $dir/kubeconfig"
    fi
    echo "defaults:"
    echo "  ssh: { user: root, port: 22, identity: $dir/id_ed25519, known_hosts: $dir/known_hosts }"
    echo "hosts:"
  } > "$dir/inventory.yaml"

  # Per host: files and keys first (in parallel), then links, then sshds.
  for j in $(seq 1 "$n"); do
    (
      hd="$dir/hosts/h$j"
      mkdir -p "$hd/root" "$hd/etc-kwinctl"
      cp -a /etc/skel/. "$hd/root/" 2>/dev/null || true
      rm -f "$hd/ssh_host_ed25519_key" "$hd/ssh_host_ed25519_key.pub"
      ssh-keygen -q -t ed25519 -N '' -C "h$j" -f "$hd/ssh_host_ed25519_key"
      { sshd_config_text "$dir" "$hd" "$(host_ip "$j")" 22; echo "Subsystem sftp internal-sftp"; } \
        > "$hd/sshd_config"
    ) &
    if (( j % 16 == 0 )); then wait; fi
  done
  wait
  for j in $(seq 1 "$n"); do
    ns=$(ns_of "$j")
    add_host_ns "$ns" "kwl${id}v$j" "$(host_ip "$j")"
    printf 'h%s\t%s\t%s\n' "$j" "$(host_ip "$j")" "$ns" >> "$dir/hosts.tsv"
    echo "$(host_ip "$j") $(cut -d' ' -f1,2 "$dir/hosts/h$j/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"
    {
      echo "  - name: h$j"
      echo "    os: linux"
      [ "$j" -eq 1 ] && echo "    role: control-plane"
      echo "    address: $(host_ip "$j")"
    } >> "$dir/inventory.yaml"
  done
  for j in $(seq 1 "$n"); do start_sshd "$dir" "$j"; done
  for j in $(seq 1 "$n"); do
    wait_port "$(host_ip "$j")" 20 || die "sshd of h$j did not come up: $(tail -3 "$dir/hosts/h$j/sshd.log" 2>/dev/null)"
  done
  if [ "$m" -gt 0 ]; then
    "$WINSIM/setup-venv.sh"
    ( umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$dir/winrm-password" )
    local k8s=$KWINCTL_LAB_K8S
    fake_binaries "$dir" "$k8s"
    # other releases to upgrade or downgrade to (served beside it)
    for v in ${KWINCTL_LAB_K8S_ALSO:-}; do
      [[ "$v" =~ ^1\.[0-9]+\.[0-9]+$ ]] || die "KWINCTL_LAB_K8S_ALSO: releases X.Y.Z, not $v"
      fake_binaries "$dir" "$v"
    done
    [ -z "$LAB_RUNNER" ] || [ "$LAB_RUNNER" = "$k8s" ] || fake_binaries "$dir" "$LAB_RUNNER"
    for j in $(seq 1 "$m"); do
      hd="$dir/hosts/win$j"
      mkdir -p "$hd"
      ns=$(wns_of "$j")
      add_host_ns "$ns" "kwl${id}x$j" "$(win_ip "$j")"
      win_state_json "$dir" "$j" > "$hd/state.json"
      "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" gencert --cert "$hd/cert.pem" --key "$hd/key.pem" \
        --ca "$hd/ca.pem" --cn "$(win_ip "$j")" > "$hd/cert.sha256"
      printf 'win%s\t%s\t%s\n' "$j" "$(win_ip "$j")" "$ns" >> "$dir/hosts.tsv"
      {
        echo "  - name: win$j"
        echo "    os: windows"
        echo "    address: $(win_ip "$j")"
        echo "    winrm: { port: 5985, tls: false, auth: ntlm, password_file: $dir/winrm-password }"
        echo "    windows:"
        echo "      binaries:"
        for b in kubelet kube-proxy; do
          echo "        $b: { url: \"https://dl.lab.invalid/v$k8s/$b.exe\", sha256: $(sha256sum "$dir/dl/v$k8s/$b.exe" | cut -c1-64) }"
        done
        if [ -n "$LAB_RUNNER" ]; then
          echo "        kube-log-runner: { url: \"https://dl.lab.invalid/v$LAB_RUNNER/kube-log-runner.exe\", sha256: $(sha256sum "$dir/dl/v$LAB_RUNNER/kube-log-runner.exe" | cut -c1-64) }"
        fi
        if [ "$LAB_PROFILE" = l2bridge ]; then
          dl_line "$dir" containerd "containerd-$KWINCTL_LAB_CONTAINERD-windows-amd64.tar.gz"
          dl_line "$dir" cni-plugins cni-plugins-windows-amd64-v1.6.2.tgz
        fi
      } >> "$dir/inventory.yaml"
      start_winsim "$dir" "$j"
    done
    for j in $(seq 1 "$m"); do
      wait_tcp "$(win_ip "$j")" 5985 20 || die "winsim of win$j did not come up: $(tail -3 "$dir/hosts/win$j/winsim.out" 2>/dev/null)"
      wait_tcp "$(win_ip "$j")" 5986 20 || die "winsim of win$j (https) did not come up"
    done
  fi
  sd_up "$dir" "$s"
  trap - EXIT
  echo "lab.sh: lab $id is up in $dir: $n Linux, $m Windows, $s systemd hosts on 198.18.$id.0/24; inventory $dir/inventory.yaml"
}

# ------------------------------------------------------------------ down
cmd_down() {
  local dir=$1 j
  [ -f "$dir/lab.env" ] || return 0
  load "$dir"
  sd_down "$dir"
  local -a nss=()
  for j in $(seq 1 "$N"); do nss+=("$(ns_of "$j")"); done
  for j in $(seq 1 "${M:-0}"); do nss+=("$(wns_of "$j")"); done
  for j in $(seq 1 "${M:-0}"); do
    if [ -e "/run/netns/$(wns_of "$j")p" ]; then nss+=("$(wns_of "$j")p"); fi
  done
  mapfile -t -O "${#nss[@]}" nss < <(hidden_nss "$dir")
  mapfile -t -O "${#nss[@]}" nss < <(pod_nss)
  if [ -e "/run/netns/$(kdc_ns)" ]; then nss+=("$(kdc_ns)"); fi
  kill_nss "${nss[@]}"
  if j=$(anchor_pid "$dir"); then kill "$j" 2>/dev/null || true; fi
  # Deleting the namespaces first takes their veth pairs with them, in one
  # batch: much faster than deleting hundreds of veths one by one.
  if [ "${#nss[@]}" -gt 0 ]; then
    printf 'netns del %s\n' "${nss[@]}" | ip -force -batch - >/dev/null 2>&1 || true
  fi
  {
    for j in $(seq 1 "$N"); do echo "link del kwl${LAB_ID}v$j"; done
    for j in $(seq 1 "${M:-0}"); do echo "link del kwl${LAB_ID}x$j"; done
  } | ip -force -batch - >/dev/null 2>&1 || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "${REG:?}/$LAB_ID"
  rm -f "$dir/lab.env"
  restore_if_idle
}

# What labs share on this machine goes back once the last lab is gone: the
# ARP table size and the guard route.
restore_if_idle() {
  local t1 t2 t3 mine=0
  if [ "$LOCKED" = 0 ]; then lock_reg; mine=1; fi
  if ls -d "$REG"/[0-9]* >/dev/null 2>&1; then
    if [ "$mine" = 1 ]; then unlock_reg; fi
    return 0
  fi
  if [ -f "$REG/neigh.orig" ]; then
    read -r t1 t2 t3 < "$REG/neigh.orig" || true   # (no newline at its end)
    sysctl -q -w net.ipv4.neigh.default.gc_thresh1="$t1" net.ipv4.neigh.default.gc_thresh2="$t2" \
      net.ipv4.neigh.default.gc_thresh3="$t3"
    rm -f "$REG/neigh.orig"
  fi
  ip -4 route del unreachable "$GUARD" proto "$GUARD_PROTO" 2>/dev/null || true
  rmdir /sys/fs/cgroup/systemd/kwinctl-lab /sys/fs/cgroup/unified/kwinctl-lab /sys/fs/cgroup/kwinctl-lab 2>/dev/null || true
  if [ "$mine" = 1 ]; then unlock_reg; fi
}

cmd_gc() {
  local d dir
  [ -d "$REG" ] || return 0
  for d in "$REG"/*/; do
    [ -d "$d" ] || continue
    dir=$(cat "$d/dir" 2>/dev/null || echo "")
    if owner_lives "$d"; then continue; fi
    echo "lab.sh gc: removing lab $(basename "$d") ($dir)" >&2
    if [ -n "$dir" ] && [ -f "$dir/lab.env" ]; then
      cmd_down "$dir"
    else
      local id n
      local -a nss=()
      id=$(basename "$d")
      if [ -s "$d/sd" ]; then
        # shellcheck disable=SC2046
        sd_stop $(cat "$d/sd")
      fi
      mapfile -t nss < <(ip netns list | awk '{print $1}' | grep -E "^kwl${id}[hwzqk][0-9]+p?$" || true)
      kill_nss "${nss[@]}"
      for n in "${nss[@]}"; do
        ip netns del "$n" 2>/dev/null || true
      done
      ip link del "kwl$id" 2>/dev/null || true
      rm -rf "$d"
    fi
  done
  sd_gc
  restore_if_idle
}

cmd_reboot() {
  local dir=$1 j ns
  load "$dir"
  if j=$(sd_num "$2"); then sd_reboot "$dir" "$j" "${@:3}"; return; fi
  case "$2" in
    win[0-9]*)
      j=${2#win}
      ip netns exec "$(wns_of "$j")" "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" reboot \
        --state "$dir/hosts/$2/state.json" ${3:+"$3"}
      return ;;
  esac
  j=$(num_of "$2")
  ns=$(ns_of "$j")
  local ip routes n=0
  ip=$(awk '$1 == "ListenAddress" { print $2 }' "$dir/hosts/h$j/sshd_config")
  stop_sshd "$dir" "$j"
  # whatever happens from here on, the host gets its sshd back
  trap 'start_sshd "$dir" "$j" || true; echo "lab.sh: reboot of h$j failed; its sshd was restarted" >&2' EXIT
  routes=$(ip -n "$ns" -4 route show table main | { grep -v 'proto kernel' || true; })
  while read -r r; do
    [ -n "$r" ] || continue
    # shellcheck disable=SC2086
    ip -n "$ns" route del $r 2>/dev/null || true
    n=$((n + 1))
  done <<< "$routes"
  ip netns exec "$ns" sh -c 'echo 0 > /proc/sys/net/ipv4/ip_forward'
  trap - EXIT
  start_sshd "$dir" "$j"
  wait_port "$ip" 20 || die "sshd of $2 did not come back on $ip"
  echo "lab.sh: $2 rebooted: $n routes dropped, forwarding off, sshd back on $ip"
}

cmd_pod() { # DIR winJ ADDR/PREFIX GATEWAY
  local j ns pns
  load "$1"
  j=${2#win}
  ns=$(wns_of "$j")
  pns="${ns}p"
  ip netns del "$pns" 2>/dev/null || true
  ip -n "$ns" link del kwpod 2>/dev/null || true
  ip netns add "$pns"
  ip -n "$ns" link add kwpod type veth peer name eth0 netns "$pns"
  # the transparent network's bridge, or (l2bridge) the external vSwitch:
  # the pod's gateway is then the host endpoint, P+2
  local sw=HNSTransparent
  ip -n "$ns" link show HNSTransparent >/dev/null 2>&1 || sw=HNSVSwitch
  ip -n "$ns" link set kwpod master "$sw" up
  ip -n "$pns" link set lo up
  ip -n "$pns" addr add "$3" dev eth0
  ip -n "$pns" link set eth0 up
  ip -n "$pns" route add default via "$4"
}

# A login user USER (uid 4242) on HOST besides root, with real sudo(8):
# `nopasswd` lets USER run /bin/sh as root without a password, `password`
# makes sudo ask for one (which kwinctl's `sudo -n` cannot give). The user
# and the sudoers rule exist only in that host's mount namespace (its own
# passwd, group, shadow, hosts and sudoers over /etc), so nothing on this
# machine changes; its sshd is restarted to see them.
cmd_user() { # DIR HOST USER nopasswd|password
  local dir=$1 name=$2 user=$3 rule j o
  case $4 in
    nopasswd) rule="NOPASSWD: /bin/sh" ;;
    password) rule="ALL" ;;
    *) die "lab.sh user: nopasswd or password, not $4" ;;
  esac
  [ -f /etc/sudoers ] && command -v sudo >/dev/null || die "lab.sh user needs sudo (scripts/setup.sh installs it)"
  load "$dir"
  j=$(num_of "$name")
  o="$dir/hosts/h$j/etc-over"
  mkdir -p "$o" "$dir/hosts/h$j/home-$user"
  chown 4242:4242 "$dir/hosts/h$j/home-$user"
  { cat /etc/passwd; echo "$user:x:4242:4242::$dir/hosts/h$j/home-$user:/bin/sh"; } > "$o/passwd"
  { cat /etc/group; echo "$user:x:4242:"; } > "$o/group"
  # `*`: no password to log in with, but not locked (sudo's PAM account
  # check and sshd both accept it)
  { cat /etc/shadow; echo "$user:*:19000:0:99999:7:::"; } > "$o/shadow"
  chmod 640 "$o/shadow"
  # sudo resolves the host's own name
  { cat /etc/hosts; echo "127.0.1.1 h$j"; } > "$o/hosts"
  printf 'root ALL=(ALL:ALL) ALL\n%s ALL=(root) %s\n' "$user" "$rule" > "$o/sudoers"
  chmod 440 "$o/sudoers"
  stop_sshd "$dir" "$j"
  start_sshd "$dir" "$j"
  wait_port "$(host_ip "$j")" 20 || die "sshd of $name did not come back"
}

cmd_rekey() {
  local dir=$1 j hd
  load "$dir"
  j=$(num_of "$2")
  hd="$dir/hosts/h$j"
  stop_sshd "$dir" "$j"
  rm -f "$hd/ssh_host_ed25519_key" "$hd/ssh_host_ed25519_key.pub"
  ssh-keygen -q -t ed25519 -N '' -C "h$j-rekeyed" -f "$hd/ssh_host_ed25519_key"
  start_sshd "$dir" "$j"
  wait_port "$(host_ip "$j")" 20 || die "sshd of $2 did not come back"
}


# ------------------------------------------------------------------ hidden hosts
# Hosts behind another host (bastion tests): listed in DIR/hidden.tsv as
# name, ip, netns, via, kind. Kept in this section so that other changes to
# the lab merge easily.
lab_tsv() { # DIR -> hosts.tsv and hidden.tsv lines
  cat "$1/hosts.tsv"
  if [ -f "$1/hidden.tsv" ]; then cat "$1/hidden.tsv"; fi
}
hidden_ns_of() { # DIR name -> netns of a lab host or hidden host
  local f
  f=$(lab_tsv "$1" | awk -v n="$2" '$1 == n { print $3 }' | head -1)
  [ -n "$f" ] || die "no lab host $2"
  echo "$f"
}
hidden_nss() { # DIR -> every hidden host's netns
  [ -f "$1/hidden.tsv" ] || return 0
  awk '{ print $3 }' "$1/hidden.tsv"
}
sshd_config_text() { # DIR hostdir ip port: a lab sshd's config
  cat <<EOF
ListenAddress $3
Port $4
HostKey $2/ssh_host_ed25519_key
PidFile $2/sshd.pid
AuthorizedKeysFile $1/id_ed25519.pub
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 100
EOF
}
cmd_hidden() { # DIR NAME VIA KIND
  local dir=$1 name=$2 via=$3 kind=$4 k vns ns ip hd
  load "$dir"
  case "$name" in *[!a-z0-9]*|"") die "hidden host names are [a-z0-9]+" ;; esac
  if [ -f "$dir/hidden.tsv" ] && awk -v n="$name" '$1 == n { f = 1 } END { exit !f }' "$dir/hidden.tsv"; then
    die "$name already exists"
  fi
  vns=$(hidden_ns_of "$dir" "$via")
  k=1
  if [ -f "$dir/hidden.tsv" ]; then k=$(( $(wc -l < "$dir/hidden.tsv") + 1 )); fi
  [ "$k" -le 39 ] || die "at most 39 hidden hosts"
  ns="kwl${LAB_ID}z$k"
  ip="198.18.$((200 + k)).2"
  hd="$dir/hosts/$name"
  mkdir -p "$hd/root" "$hd/etc-kwinctl"
  ip netns add "$ns"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$ip" "$ns" "$via" "$kind" >> "$dir/hidden.tsv"
  ip -n "$vns" link add "kwz$k" type veth peer name eth0 netns "$ns"
  ip -n "$vns" addr add "198.18.$((200 + k)).1/24" dev "kwz$k"
  ip -n "$vns" link set "kwz$k" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
  case "$kind" in
    linux)
      cp -a /etc/skel/. "$hd/root/" 2>/dev/null || true
      ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$hd/ssh_host_ed25519_key"
      sshd_config_text "$dir" "$hd" "$ip" 22 > "$hd/sshd_config"
      echo "$ip $(cut -d' ' -f1,2 "$hd/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"
      start_sshd_in "$hd" "$ns" "$name"
      ip netns exec "$ns" bash -c "$(declare -f wait_tcp); wait_tcp $ip 22 20" \
        || die "sshd of $name did not come up: $(tail -3 "$hd/sshd.log" 2>/dev/null)"
      ;;
    windows)
      "$WINSIM/setup-venv.sh"
      [ -f "$dir/winrm-password" ] || ( umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$dir/winrm-password" )
      echo "{\"hostname\": \"${name^^}\"}" > "$hd/state.json"
      "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" gencert --cert "$hd/cert.pem" --key "$hd/key.pem" \
        --ca "$hd/ca.pem" --cn "$ip" > "$hd/cert.sha256"
      ip netns exec "$ns" env WINSIM_PASSWORD="$(cat "$dir/winrm-password")" \
        KRB5_KTNAME="FILE:$hd/http.keytab" KRB5_CONFIG="$dir/kdc/krb5.conf" GLIBC_TUNABLES="$WINSIM_MALLOC" \
        setsid "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" serve --listen "$ip" \
        --http-port 5985 --https-port 5986 --cert "$hd/cert.pem" --key "$hd/key.pem" \
        --user Administrator --password-env WINSIM_PASSWORD --state "$hd/state.json" \
        --allow-basic --log "$hd/winsim.log" </dev/null >>"$hd/winsim.out" 2>&1 &
      ip netns exec "$ns" bash -c "$(declare -f wait_tcp); wait_tcp $ip 5985 20" \
        || die "winsim of $name did not come up: $(tail -3 "$hd/winsim.out" 2>/dev/null)"
      ;;
    *) die "kind is linux or windows" ;;
  esac
}
cmd_readdress() { # DIR hJ ADDR
  local dir=$1 j ns hd old new=$3
  load "$dir"
  j=$(num_of "$2")
  ns=$(ns_of "$j")
  hd="$dir/hosts/h$j"
  case "$new" in "198.18.$LAB_ID."[0-9]*) ;; *) die "$new is not on the lab's $SUBNET" ;; esac
  old=$(awk '$1 == "ListenAddress" { print $2 }' "$hd/sshd_config")
  [ "$old" != "$new" ] || die "$2 is at $new already"
  if lab_tsv "$dir" | awk -v a="$new" '$2 == a { f = 1 } END { exit !f }'; then die "$new is taken"; fi
  # the old address is the primary one: keep the new one when it goes
  ip netns exec "$ns" sysctl -q -w net.ipv4.conf.eth0.promote_secondaries=1
  ip -n "$ns" addr add "$new/24" dev eth0
  ip -n "$ns" addr del "$old/24" dev eth0
  stop_sshd "$dir" "$j"
  sed -i "s/^ListenAddress .*/ListenAddress $new/" "$hd/sshd_config"
  start_sshd "$dir" "$j"
  wait_port "$new" 20 || die "sshd of $2 did not come back on $new"
  awk -v o="$old" -v n="$new" '$1 == o { $1 = n } { print }' "$dir/known_hosts" > "$dir/known_hosts.new"
  mv "$dir/known_hosts.new" "$dir/known_hosts"
  awk -v h="h$j" -v n="$new" 'BEGIN { FS = OFS = "\t" } $1 == h { $2 = n } { print }' "$dir/hosts.tsv" > "$dir/hosts.tsv.new"
  mv "$dir/hosts.tsv.new" "$dir/hosts.tsv"
  echo "lab.sh: h$j moved from $old to $new"
}
cmd_sshd_port() { # DIR HOST PORT [CA_KEY]
  local dir=$1 host=$2 port=$3 ca=${4:-} ns ip hd
  load "$dir"
  ns=$(hidden_ns_of "$dir" "$host")
  ip=$(lab_tsv "$dir" | awk -v n="$host" '$1 == n { print $2 }' | head -1)
  hd="$dir/hosts/$host/sshd-$port"
  mkdir -p "$hd"
  ssh-keygen -q -t ed25519 -N '' -C "$host:$port" -f "$hd/ssh_host_ed25519_key"
  sshd_config_text "$dir" "$hd" "$ip" "$port" > "$hd/sshd_config"
  if [ -n "$ca" ]; then
    ssh-keygen -q -s "$ca" -I "$host-$port" -h -n "$ip,$host" -V -1h:+1h "$hd/ssh_host_ed25519_key.pub"
    echo "HostCertificate $hd/ssh_host_ed25519_key-cert.pub" >> "$hd/sshd_config"
  fi
  # inside the host's own mount and UTS namespaces when its sshd runs
  local pidf="$dir/hosts/$host/sshd.pid"
  if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    nsenter --target "$(cat "$pidf")" --net --mount --uts -- "$SSHD" -f "$hd/sshd_config" -E "$hd/sshd.log"
  else
    ip netns exec "$ns" "$SSHD" -f "$hd/sshd_config" -E "$hd/sshd.log"
  fi
  ip netns exec "$ns" bash -c "$(declare -f wait_tcp); wait_tcp $ip $port 20" \
    || die "sshd on $host:$port did not come up: $(tail -3 "$hd/sshd.log" 2>/dev/null)"
}

# ------------------------------------------------------------------ Windows hosts over SSH
# A simulated Windows host reached over OpenSSH (issue 30), kept in this
# section so that other changes to the lab merge easily: its own sshd in the
# host's namespace (the Linux hosts' config, sshd_config_text), host key in
# DIR/known_hosts, root logging in with the lab's key, and as ForceCommand
# `winsim.py ssh-session`, which runs the client's command the way Windows'
# OpenSSH server does with DefaultShell cmd.exe (Windows' default) or
# powershell.exe (winsim/sshsession.py). The host's inventory entry gets an
# ssh: block instead of its winrm: line; each session is logged as a JSON
# line in DIR/hosts/winJ/ssh-session.log.
cmd_win_ssh() { # DIR winJ [cmd|powershell|pwsh]
  local dir=$1 name=$2 shell=${3:-cmd} j ip hd
  load "$dir"
  case "$name" in win[0-9]*) j=${name#win} ;; *) die "lab.sh win-ssh: $name is not a Windows host (winJ)" ;; esac
  [ "$j" -ge 1 ] && [ "$j" -le "${M:-0}" ] || die "no Windows host $name"
  case "$shell" in cmd | powershell | pwsh) ;; *) die "lab.sh win-ssh: the shell is cmd, powershell or pwsh, not $shell" ;; esac
  ip=$(win_ip "$j")
  hd="$dir/hosts/$name"
  [ ! -f "$hd/sshd.pid" ] || die "$name already has its sshd"
  rm -f "$hd/ssh_host_ed25519_key" "$hd/ssh_host_ed25519_key.pub"
  ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$hd/ssh_host_ed25519_key"
  {
    sshd_config_text "$dir" "$hd" "$ip" 22
    printf 'ForceCommand exec %q %q ssh-session --state %q --shell %s --log %q\n' \
      "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" "$hd/state.json" "$shell" "$hd/ssh-session.log"
  } > "$hd/sshd_config"
  ip netns exec "$(wns_of "$j")" "$SSHD" -f "$hd/sshd_config" -E "$hd/sshd.log"
  wait_port "$ip" 20 || die "sshd of $name did not come up: $(tail -3 "$hd/sshd.log" 2>/dev/null)"
  echo "$ip $(cut -d' ' -f1,2 "$hd/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"
  # the host's winrm: line (and, were it a block, the lines under it)
  # becomes an ssh: line
  awk -v h="- name: $name" '
    { t = $0; sub(/^ +/, "", t); ind = length($0) - length(t) }
    skip && ind > skip { next }
    { skip = 0 }
    t ~ /^- name: / { inh = (t == h) }
    inh && t ~ /^winrm:/ { print "    ssh: { user: root, port: 22 }"; skip = ind; next }
    { print }' "$dir/inventory.yaml" > "$dir/inventory.yaml.new"
  mv "$dir/inventory.yaml.new" "$dir/inventory.yaml"
  echo "lab.sh: $name answers SSH on $ip:22 (DefaultShell $shell)"
}

# ------------------------------------------------------------------ kubelet's pods
# Pods as a node's kubelet would start them (issue 24), kept in this section
# so that other changes to the lab merge easily. Each pod is a network
# namespace kwl<id>q<seq> behind its node, with a listener on 8080 (as
# `agnhost netexec --http-port=8080`), described in DIR/pods/HOST/NS/NAME.json.
#   Windows host: winsim decides the pod's IP, gateway and DNS from what
#   kwinctl wrote (`winsim.py pod-start`, winsim/pods.py); the namespace
#   hangs on the transparent network's bridge or the l2bridge vSwitch.
#   Linux host: the lab's stand-in for the node's CNI plugin (the bridge
#   plugin's layout: a bridge kwcni0 at P+1 in the node, forwarding on, pods
#   from P+2, P = the node's block from kwinctl's /etc/kwinctl/pod-cidr) and
#   ClusterFirst DNS with the lab cluster's values (cluster.dns_service_ip
#   and cluster.dns_domain of DIR/inventory.yaml, else the 10th address of
#   service_cidr and cluster.local, as kubeadm).
POD_LISTENER='import http.server, sys
name = sys.argv[1].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(name)))
        self.end_headers()
        self.wfile.write(name)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()'

# What the stand-in CNI of a Linux node gives a pod: the decision's JSON.
linux_pod_decision() { # DIR hJ NS NAME POLICY
  python3 - "$@" <<'PY'
import glob, ipaddress, json, os, re, sys
d, host, ns, name, policy = sys.argv[1:]
cidr = open(os.path.join(d, "hosts", host, "etc-kwinctl", "pod-cidr")).read().split()[0]
net = ipaddress.ip_network(cidr)
inv = open(os.path.join(d, "inventory.yaml")).read()
def key(k):
    m = re.search(r"^\s+%s:\s*\"?([^\"\s]+)" % k, inv, re.M)
    return m.group(1) if m else None
dns_ip = key("dns_service_ip") or str(ipaddress.ip_network(key("service_cidr")).network_address + 10)
domain = key("dns_domain") or "cluster.local"
used = set()
for f in glob.glob(os.path.join(d, "pods", host, "*", "*.json")):
    with open(f) as fh:
        used.add(json.load(fh).get("address", "").split("/")[0])
ip = next((str(a) for a in net.hosts() if int(a) >= int(net.network_address) + 2 and str(a) not in used), None)
dec = {"ok": ip is not None, "phase": "Running" if ip else "Pending", "ip": ip, "prefix_len": net.prefixlen,
       "gateway": str(net.network_address + 1), "runtime": "lab stand-in CNI (bridge)", "events": [],
       "error": None if ip else "no IP addresses available in range set: %s" % cidr,
       "namespace": ns, "name": name, "dns_policy": policy,
       "why": ["lab: the node's block %s (/etc/kwinctl/pod-cidr), bridge kwcni0 at .1, pods from .2" % cidr]}
if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
    dec.update(nameservers=[dns_ip], searches=["%s.svc.%s" % (ns, domain), "svc." + domain, domain],
               options=["ndots:5"])
elif policy == "Default":
    servers = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver ")]
    dec.update(nameservers=servers, searches=[], options=[])
else:
    dec.update(nameservers=[], searches=[], options=[])
print(json.dumps(dec, indent=1))
PY
}

pod_field() { # JSON KEY: a field of a decision (address: the container's address)
  python3 -c 'import json, sys
d = json.loads(sys.argv[1])
k = sys.argv[2]
v = d.get("container_ip") or d.get("ip") if k == "address" else d.get(k)
print("" if v is None else v)' "$1" "$2"
}

cmd_kpod() { # DIR HOST NS NAME [--dns-policy P] [--image I]
  local dir=$1 host=$2 ns=$3 name=$4 policy=ClusterFirst image="" j hns sw dec addr plen gw seq pns pid i
  shift 4
  while [ $# -gt 0 ]; do
    case "$1" in
      --dns-policy) policy=$2; shift 2 ;;
      --image) image=$2; shift 2 ;;
      *) die "usage: lab.sh kpod DIR HOST NS NAME [--dns-policy P] [--image I]" ;;
    esac
  done
  [[ "$ns" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || die "namespace $ns is not a DNS label"
  [[ "$name" =~ ^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$ ]] || die "pod name $name is not a DNS subdomain"
  load "$dir"
  cmd_kpod_del "$dir" "$host" "$ns" "$name" >/dev/null 2>&1 || true
  mkdir -p "$dir/pods/$host/$ns"
  case "$host" in
    win[0-9]*)
      j=${host#win}
      [ -f "$dir/hosts/$host/state.json" ] || die "no Windows host $host"
      hns=$(wns_of "$j")
      dec=$("$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" pod-start "$dir/hosts/$host/state.json" \
        --namespace "$ns" --name "$name" --dns-policy "$policy" ${image:+--image "$image"}) || true
      [ -n "$dec" ] || die "winsim pod-start gave no decision"
      sw=HNSTransparent
      ip -n "$hns" link show HNSTransparent >/dev/null 2>&1 || sw=HNSVSwitch
      ;;
    h[0-9]*)
      j=$(num_of "$host")
      hns=$(ns_of "$j")
      [ -f "$dir/hosts/$host/etc-kwinctl/pod-cidr" ] || die "$host has no kwinctl record /etc/kwinctl/pod-cidr (run kwinctl up first)"
      dec=$(linux_pod_decision "$dir" "$host" "$ns" "$name" "$policy")
      sw=kwcni0
      gw=$(pod_field "$dec" gateway)
      if ! ip -n "$hns" link show kwcni0 >/dev/null 2>&1; then
        ip -n "$hns" link add kwcni0 type bridge
        ip -n "$hns" addr add "$gw/$(pod_field "$dec" prefix_len)" dev kwcni0
        ip -n "$hns" link set kwcni0 up
      fi
      # the bridge plugin turns forwarding on when it is the gateway
      ip netns exec "$hns" sysctl -q -w net.ipv4.ip_forward=1
      ;;
    *) die "no lab host $host (winJ or hJ)" ;;
  esac
  addr=$(pod_field "$dec" address)
  plen=$(pod_field "$dec" prefix_len)
  gw=$(pod_field "$dec" gateway)
  pns="" pid=""
  if [ -n "$addr" ]; then
    seq=$( (flock 8; n=$(( $(cat "$dir/pods/.seq" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$dir/pods/.seq"; echo "$n") 8>>"$dir/pods/.lock")
    pns="kwl${LAB_ID}q$seq"
    # a namespace of that name is a leftover of an earlier lab with this id
    # (taken down by a lab.sh that knew no pods): it goes
    if [ -e "/run/netns/$pns" ]; then kill_nss "$pns"; ip netns del "$pns" 2>/dev/null || true; fi
    ip netns add "$pns"
    ip -n "$hns" link add "kwq$seq" type veth peer name eth0 netns "$pns"
    ip -n "$hns" link set "kwq$seq" master "$sw" up
    ip -n "$pns" link set lo up
    ip -n "$pns" addr add "$addr/$plen" dev eth0
    ip -n "$pns" link set eth0 up
    ip -n "$pns" route add default via "$gw"
    ip netns exec "$pns" setsid python3 -c "$POD_LISTENER" "$name" </dev/null >/dev/null 2>&1 &
    pid=$!
    for ((i = 0; i < 100; i++)); do
      if ip netns exec "$pns" bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080' 2>/dev/null; then break; fi
      sleep 0.05
    done
  fi
  python3 -c 'import json, sys
d = json.loads(sys.argv[1])
d.update(host=sys.argv[2], netns=sys.argv[3] or None, address=(sys.argv[4] + "/" + sys.argv[5]) if sys.argv[4] else None,
         listener_pid=int(sys.argv[6]) if sys.argv[6] else None, image=sys.argv[7] or None)
with open(sys.argv[8], "w") as f:
    json.dump(d, f, indent=1)
print(json.dumps(d, indent=1))' "$dec" "$host" "$pns" "$addr" "$plen" "$pid" "$image" "$dir/pods/$host/$ns/$name.json"
}

cmd_kpod_del() { # DIR HOST NS NAME
  local dir=$1 host=$2 ns=$3 name=$4 f pns pid
  load "$dir"
  f="$dir/pods/$host/$ns/$name.json"
  case "$host" in
    win[0-9]*)
      "$WINSIM/.venv/bin/python" "$WINSIM/winsim.py" pod-delete "$dir/hosts/$host/state.json" \
        --namespace "$ns" --name "$name" >/dev/null ;;
  esac
  [ -f "$f" ] || { echo "lab.sh: no pod $ns/$name on $host" >&2; return 1; }
  pns=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("netns") or "")' "$f")
  if [ -n "$pns" ] && [ -e "/run/netns/$pns" ]; then
    kill_nss "$pns"
    ip netns del "$pns" 2>/dev/null || true
  fi
  rm -f "$f"
}

pod_nss() { # every pod namespace of this lab
  ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E "^kwl${LAB_ID}q[0-9]+$" || true
}

# The kubectl stand-in (lab/kubectl-standin) as HOST's /usr/local/bin/kubectl,
# with its configuration beside it: the lab folder, this script and the
# cluster DNS it models (CoreDNS at IP, domain D). A host's sshd runs in a
# mount namespace of its own, which does not see the pod namespaces made
# after it started: the stand-in enters the namespaces of an anchor process
# (`kwinctl-lab-anchor`, started here in this script's, ended by `down`).
ANCHOR=kwinctl-lab-anchor
anchor_pid() { # DIR: the lab's anchor process, if it runs
  local pid
  pid=$(cat "$1/kubectl/anchor.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -1)" = "$ANCHOR" ] \
    && echo "$pid"
}
cmd_kubectl() { # DIR HOST --dns-ip IP --domain D [--ready-after S] [--server-version V]
  local dir=$1 host=$2 dns="" domain="" ready=0 server="" bin anchor
  local usage="usage: lab.sh kubectl DIR HOST --dns-ip IP --domain D [--ready-after S] [--server-version V]"
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --dns-ip) dns=$2; shift 2 ;;
      --domain) domain=$2; shift 2 ;;
      --ready-after) ready=$2; shift 2 ;;
      --server-version) server=$2; shift 2 ;;
      *) die "$usage" ;;
    esac
  done
  [[ "$ready" =~ ^[0-9]+$ ]] || die "--ready-after: a number of seconds"
  [ -n "$dns" ] && [ -n "$domain" ] || die "$usage"
  load "$dir"
  dir=$(cd "$dir" && pwd)
  # the API server's release: the lab's kubernetes_version, unless given
  [ -n "$server" ] || server=$(sed -n 's/^  kubernetes_version: "\(.*\)"$/\1/p' "$dir/inventory.yaml" | head -1)
  [[ "$server" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--server-version: a release X.Y.Z, not '$server'"
  bin="$dir/hosts/$host/usr-local-bin"
  [ -d "$dir/hosts/$host" ] || die "no lab host $host"
  mkdir -p "$bin" "$dir/kubectl"
  if ! anchor=$(anchor_pid "$dir"); then
    setsid bash -c "exec -a $ANCHOR sleep infinity" </dev/null >/dev/null 2>&1 &
    anchor=$!
    echo "$anchor" > "$dir/kubectl/anchor.pid"
  fi
  install -m 0755 "$(dirname "$WINSIM")/lab/kubectl-standin" "$bin/kubectl"
  # the same program answers as kubeadm (bootstrap tokens, lab/standin/bootstrap.py)
  install -m 0755 "$(dirname "$WINSIM")/lab/kubectl-standin" "$bin/kubeadm"
  python3 -c 'import json, sys
json.dump({"lab_dir": sys.argv[1], "lab_sh": sys.argv[2], "winsim": sys.argv[3], "dns_ip": sys.argv[4],
           "domain": sys.argv[5], "self": sys.argv[6], "anchor_pid": int(sys.argv[7]),
           "ready_after": int(sys.argv[9]), "server_version": sys.argv[10]}, open(sys.argv[8], "w"), indent=1)' \
    "$dir" "$(dirname "$WINSIM")/lab/lab.sh" "$WINSIM" "$dns" "$domain" "$bin/kubectl" "$anchor" \
    "$bin/.kubectl-standin.json" "$ready" "$server"
}

# A lab folder given as a relative path is made absolute once, here: sshd
# re-executes itself and must find its config by an absolute path.
case "${1:-}" in
  kdc | kadmin | down | reboot | rekey | pod | user | stop-sshd | start-sshd | exec | hidden | sshd-port | readdress | kpod | kpod-del | kubectl | win-ssh)
    if [ $# -ge 2 ] && [ -d "$2" ]; then set -- "$1" "$(cd "$2" && pwd)" "${@:3}"; fi ;;
esac
case "${1:-}" in
  hidden) [ $# -eq 5 ] || die "usage: lab.sh hidden DIR NAME VIA linux|windows"; cmd_hidden "$2" "$3" "$4" "$5" ;;
  readdress) [ $# -eq 4 ] || die "usage: lab.sh readdress DIR hJ ADDR"; cmd_readdress "$2" "$3" "$4" ;;
  win-ssh) [ $# -ge 3 ] && [ $# -le 4 ] || die "usage: lab.sh win-ssh DIR winJ [cmd|powershell|pwsh]"; cmd_win_ssh "${@:2}" ;;
  sshd-port) [ $# -ge 4 ] && [ $# -le 5 ] || die "usage: lab.sh sshd-port DIR HOST PORT [CA_KEY]"; cmd_sshd_port "$2" "$3" "$4" "${5:-}" ;;
  up)
    up_usage="usage: lab.sh up DIR --linux N [--windows M] [--systemd S] [--profile transparent|l2bridge]"
    [ $# -ge 4 ] && [ $((($# - 2) % 2)) -eq 0 ] || die "$up_usage"
    up_dir=$2 up_n="" up_m=0 up_s=0 up_p=""
    shift 2
    while [ $# -gt 0 ]; do
      case "$1" in
        --profile) up_p=$2 ;;
        --linux | --windows | --systemd)
          [[ "$2" =~ ^[0-9]+$ ]] || die "$1 takes a number of hosts"
          case "$1" in --linux) up_n=$2 ;; --windows) up_m=$2 ;; --systemd) up_s=$2 ;; esac ;;
        *) die "$up_usage" ;;
      esac
      shift 2
    done
    [ -n "$up_n" ] || die "$up_usage"
    cmd_up "$up_dir" "$up_n" "$up_m" "$up_s" "$up_p" ;;
  build-root) sd_build_root; sd_root ;;
  kdc) [ $# -ge 2 ] && [ $# -le 4 ] || die "usage: lab.sh kdc DIR [--clock OFFSET | --stop]"; cmd_kdc "${@:2}" ;;
  kadmin) [ $# -eq 3 ] || die "usage: lab.sh kadmin DIR QUERY"; load "$2"; kdc_admin "$2" "$3" ;;
  _sd-supervise) sd_supervise "$2" "$3" "$4" ;;
  down) [ $# -eq 2 ] || die "usage: lab.sh down DIR"; cmd_down "$2" ;;
  reboot)
    [ $# -ge 3 ] && [ $# -le 5 ] || die "usage: lab.sh reboot DIR HOST [--drop-hns | --late-address SECS | --late-subnet SECS]"
    cmd_reboot "${@:2}" ;;
  rekey) [ $# -eq 3 ] || die "usage: lab.sh rekey DIR HOST"; cmd_rekey "$2" "$3" ;;
  pod) [ $# -eq 5 ] || die "usage: lab.sh pod DIR winJ ADDR/PREFIX GATEWAY"; cmd_pod "$2" "$3" "$4" "$5" ;;
  kpod) [ $# -ge 5 ] || die "usage: lab.sh kpod DIR HOST NS NAME [--dns-policy P] [--image I]"; cmd_kpod "${@:2}" ;;
  kpod-del) [ $# -eq 5 ] || die "usage: lab.sh kpod-del DIR HOST NS NAME"; cmd_kpod_del "$2" "$3" "$4" "$5" ;;
  kubectl) [ $# -ge 3 ] || die "usage: lab.sh kubectl DIR HOST --dns-ip IP --domain D [--server-version V]"; cmd_kubectl "${@:2}" ;;
  user) [ $# -eq 5 ] || die "usage: lab.sh user DIR HOST USER nopasswd|password"; cmd_user "$2" "$3" "$4" "$5" ;;
  stop-sshd) [ $# -eq 3 ] || die "usage: lab.sh stop-sshd DIR HOST"; load "$2"; stop_sshd "$2" "$(num_of "$3")" ;;
  start-sshd)
    [ $# -eq 3 ] || die "usage: lab.sh start-sshd DIR HOST"
    load "$2"; j=$(num_of "$3"); start_sshd "$2" "$j"
    wait_port "$(awk '$1 == "ListenAddress" { print $2 }' "$2/hosts/h$j/sshd_config")" 20 || die "sshd did not start" ;;
  exec)
    case "${3:-}" in win[0-9]*)
      load "$2"; j=${3#win}; shift 3
      exec ip netns exec "$(wns_of "$j")" "$@" ;;
    esac
    # Inside the host: its network namespace and, while its sshd runs, its
    # mount and UTS namespaces (its own /etc/kwinctl and hostname).
    [ $# -ge 4 ] || die "usage: lab.sh exec DIR HOST CMD..."
    load "$2"
    if j=$(sd_num "$3"); then d=$2; shift 3; sd_exec "$d" "$j" "$@"; fi
    j=$(num_of "$3"); pidf="$2/hosts/h$j/sshd.pid"; shift 3
    if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
      exec nsenter --target "$(cat "$pidf")" --net --mount --uts -- "$@"
    fi
    exec ip netns exec "$(ns_of "$j")" "$@" ;;
  gc) cmd_gc ;;
  # whether `gc` would keep DIR's lab for its owner (exit 0) or not (1)
  _owner-lives) load "$2"; owner_lives "$REG/$LAB_ID" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
