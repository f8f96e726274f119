#!/usr/bin/env bash
# README's set-up proven on a clean Debian 12: runs scripts/setup.sh (which
# runs scripts/build-deps.sh) in a throwaway copy of a minimal Debian
# bookworm root (debootstrap --variant=minbase: no compiler, no Python, no
# libclang, no Kerberos), then checks that everything the build and the lab
# need is there, asking the build itself where it can: libgssapi-sys's
# real build script must generate its bindings (libclang as clang-sys loads
# it, Clang's builtin headers, gssapi.h through pkg-config), a C program
# must link against MIT's GSS-API, a Python C extension must build with
# krb5-config's flags, a venv must install pip, and every command the lab
# runs must be there. CI runs it (.ci/run); docs/testing.md says what it
# covers and what not.
#
#   scripts/clean-root-check.sh [--full]   (root)
#
# Default: `setup.sh --packages-only` (the system packages: about 1.5
# minutes in all on CI's 2 cores). --full: all of setup.sh, also building
# winsim's venv, the lab's Debian root and the Ansible venv (about 10 minutes).
#
# Needs debootstrap, systemd-nspawn, overlayfs, Debian's mirror
# (KWINCTL_LAB_MIRROR, as lab/lab.sh), and libgssapi-sys's build script
# compiled in target/ (any cargo build). The minimal root is built once and
# cached read-only in KWINCTL_CLEAN_ROOT_CACHE (/var/cache/kwinctl-clean-root),
# with the .deb files apt downloads; each run writes only to an overlay
# removed at the end, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

phase_start=$(date +%s)
phase() { # NAME: prints how long the last phase took
  local now
  now=$(date +%s)
  echo "clean-root: $1 ($((now - phase_start)) s)" >&2
  phase_start=$now
}
fail() {
  echo "clean-root: FAIL: $*" >&2
  exit 1
}

# ---------------------------------------------------------------- inside
# Runs in the clean root (systemd-nspawn), the repository's files in /src,
# the staged build script in /probe.
inside() { # MODE
  local mode=$1 c missing=() w inc ext
  if [ "$mode" = full ]; then
    scripts/setup.sh || fail "scripts/setup.sh failed (above)"
    phase "scripts/setup.sh"
  else
    scripts/setup.sh --packages-only || fail "scripts/setup.sh --packages-only failed (above)"
    phase "scripts/setup.sh --packages-only"
  fi
  # build-deps finds nothing left to install
  w=$(scripts/build-deps.sh 2>&1) || fail "scripts/build-deps.sh fails after set-up: $w"
  [ -z "$w" ] || fail "scripts/build-deps.sh still installs after set-up: $w"
  # the build's own verdict: libgssapi-sys's build script generates its
  # bindings
  /probe/gssapi-probe.sh run /probe || fail "libgssapi-sys's build script fails (above)"
  echo "clean-root: ok: libgssapi-sys's build script (libclang, builtin headers, gssapi.h, pkg-config)" >&2
  w=$(mktemp -d)
  # what rustc's link of kwinctl needs: cc, the C library, libgssapi_krb5
  # where pkg-config says
  cat >"$w/gss.c" <<'EOF'
#include <stdio.h>
#include <gssapi/gssapi.h>
int main(void) {
  OM_uint32 minor;
  gss_buffer_desc b = GSS_C_EMPTY_BUFFER;
  return gss_release_buffer(&minor, &b) != GSS_S_COMPLETE;
}
EOF
  # shellcheck disable=SC2046 # pkg-config's flags are words
  if ! { cc "$w/gss.c" -o "$w/gss" $(pkg-config --cflags --libs mit-krb5-gssapi) && "$w/gss"; }; then
    fail "a C program does not link against GSS-API with pkg-config's flags"
  fi
  echo "clean-root: ok: cc links against libgssapi_krb5 (pkg-config mit-krb5-gssapi)" >&2
  # what winsim's gssapi and krb5 packages need: Python's headers, cc and
  # krb5-config's flags, for an extension module Python then imports
  cat >"$w/kwlprobe.c" <<'EOF'
#include <Python.h>
#include <gssapi/gssapi.h>
static struct PyModuleDef m = { PyModuleDef_HEAD_INIT, "kwlprobe", NULL, -1, NULL };
PyMODINIT_FUNC PyInit_kwlprobe(void) {
  OM_uint32 minor;
  gss_buffer_desc b = GSS_C_EMPTY_BUFFER;
  gss_release_buffer(&minor, &b);
  return PyModule_Create(&m);
}
EOF
  inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  ext=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  # shellcheck disable=SC2046 # krb5-config's flags are words
  if ! { cc -shared -fPIC "-I$inc" $(krb5-config --cflags gssapi) "$w/kwlprobe.c" \
    -o "$w/kwlprobe$ext" $(krb5-config --libs gssapi) && (cd "$w" && python3 -c 'import kwlprobe'); }; then
    fail "a Python extension does not build against GSS-API with krb5-config's flags (python3-dev, libkrb5-dev)"
  fi
  echo "clean-root: ok: a Python C extension builds and loads with krb5-config gssapi" >&2
  # winsim's and the Ansible oracle's venvs: venv and its pip
  if ! { timeout 120 python3 -m venv "$w/venv" && "$w/venv/bin/python" -m pip --version >/dev/null; }; then
    fail "python3 -m venv does not make a venv with pip (python3-venv)"
  fi
  echo "clean-root: ok: python3 -m venv makes a venv with pip" >&2
  rm -rf "$w"
  # every command the lab and the tests run (lab/*.sh, tests/, winsim/)
  for c in sshd ssh ssh-keygen ssh-agent ssh-add ssh-keyscan ip bridge ping unshare nsenter \
    setsid flock timeout script pgrep jq sudo systemd-nspawn systemd-run debootstrap krb5kdc \
    kdb5_util kadmin.local kinit klist faketime python3 krb5-config pkg-config cc; do
    command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || missing+=("$c")
  done
  [ "${#missing[@]}" -eq 0 ] || fail "missing after set-up: ${missing[*]}"
  echo "clean-root: ok: every command the lab runs" >&2
  if [ "$mode" = full ]; then
    winsim/.venv/bin/python -c 'import spnego, cryptography, gssapi, krb5' \
      || fail "winsim's venv does not import its packages"
    [ -f /var/cache/kwinctl-lab/bookworm-v1.ready ] || fail "no lab root in /var/cache/kwinctl-lab"
    /var/cache/kwinctl-ansible/venv/bin/ansible-inventory --version >/dev/null \
      || fail "the Ansible venv's ansible-inventory does not run"
    echo "clean-root: ok: winsim's venv, the lab's root, the Ansible venv" >&2
  fi
  phase "checks"
}

if [ "${1:-}" = --inside ]; then
  inside "${2:-packages}"
  exit 0
fi

# ---------------------------------------------------------------- outside
mode=packages
budget=600
case ${1:-} in
  '') ;;
  --full) mode=full budget=1800 ;;
  *) echo "usage: scripts/clean-root-check.sh [--full]" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/clean-root-check.sh needs root (debootstrap, overlay mounts, systemd-nspawn): run it as root" >&2
  exit 2
fi
command -v debootstrap >/dev/null 2>&1 || fail "needs debootstrap and systemd-nspawn: apt-get install debootstrap systemd-container (scripts/setup.sh does)"
command -v systemd-nspawn >/dev/null 2>&1 || fail "needs debootstrap and systemd-nspawn: apt-get install debootstrap systemd-container (scripts/setup.sh does)"

cache=${KWINCTL_CLEAN_ROOT_CACHE:-/var/cache/kwinctl-clean-root}
mirror=${KWINCTL_LAB_MIRROR:-http://deb.debian.org/debian}
base=$cache/bookworm-minbase
mkdir -p "$cache/archives/partial"

# The minimal root: built once, under a lock, renamed into place when
# complete (`.ready` marks it), and never written to afterwards.
if [ ! -f "$base.ready" ]; then
  exec 9>>"$cache/.lock"
  flock -w 900 9 || fail "the lock $cache/.lock stayed busy for 15 min"
  if [ ! -f "$base.ready" ]; then
    rm -rf "$cache/.build" "$base"
    echo "clean-root: building a minimal Debian bookworm root in $base (once per machine; about a minute)" >&2
    timeout 900 debootstrap --variant=minbase bookworm "$cache/.build" "$mirror" >"$cache/build.log" 2>&1 \
      || { rm -rf "$cache/.build"; fail "debootstrap from $mirror failed (KWINCTL_LAB_MIRROR picks another mirror); last lines of $cache/build.log: $(tail -3 "$cache/build.log")"; }
    mv "$cache/.build" "$base"
    touch "$base.ready"
  fi
  exec 9>&-
  phase "minimal root built"
fi

# The overlay's upper layer on a tmpfs (about 1 GB written; 2 GB with
# --full): removing it is an unmount.
tmp=$(mktemp -d)
merged=$tmp/root
cleanup() {
  local m
  for m in "$merged" "$tmp"; do
    if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
  done
  rmdir "$merged" "$tmp" 2>/dev/null || true
}
trap cleanup EXIT
mount -t tmpfs -o size=4g,mode=0755 kwinctl-clean-root "$tmp"
mkdir -p "$tmp/upper" "$tmp/work" "$merged"
mount -t overlay kwinctl-clean-root -o "lowerdir=$base,upperdir=$tmp/upper,workdir=$tmp/work" "$merged"
mkdir "$merged/src"
git ls-files -z | tar --null -T - -c | tar -x -C "$merged/src"
scripts/tests/gssapi-probe.sh stage "$merged/probe"
# dpkg without fsync: the root is thrown away anyway, and dpkg's syncs are
# most of the set-up's time on a shared disk
echo force-unsafe-io >"$merged/etc/dpkg/dpkg.cfg.d/kwinctl-throwaway"

# pip behind a proxy or a private CA (--full): the same settings inside
args=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY PIP_INDEX_URL PIP_TRUSTED_HOST; do
  if [ -n "${!v:-}" ]; then args+=("--setenv=$v=${!v}"); fi
done
if [ -f "${PIP_CERT:-}" ]; then
  args+=("--bind-ro=$PIP_CERT:/etc/kwinctl-pip-ca.pem" "--setenv=PIP_CERT=/etc/kwinctl-pip-ca.pem")
fi
phase "throwaway overlay of the root, the repository copied in"

rc=0
timeout --kill-after=15 "$budget" systemd-nspawn -q -D "$merged" --register=no --keep-unit --as-pid2 \
  --bind="$cache/archives:/var/cache/apt/archives" --chdir=/src "${args[@]}" \
  /src/scripts/clean-root-check.sh --inside "$mode" </dev/null || rc=$?
[ "$rc" -ne 124 ] || fail "the clean root's set-up took more than $budget s"
[ "$rc" -eq 0 ] || fail "in the clean root (exit $rc, above)"
phase "clean root: README's set-up leaves everything the build and the lab need"
cleanup
phase "throwaway root removed"
