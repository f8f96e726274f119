#!/usr/bin/env bash
# The build's own verdict on this machine's Kerberos and libclang: runs
# libgssapi-sys's compiled build script (bindgen on gssapi.h, through
# pkg-config and a run-time loaded libclang) the way cargo runs it for a
# native build, without cargo or a Rust toolchain. The tests of
# scripts/build-deps.sh use it as their oracle.
#
#   gssapi-probe.sh run [DIR]     run it; exit 0 when the build script succeeds
#   gssapi-probe.sh stage DIR     copy it, its crate's source and this script
#                                 into DIR, to run it elsewhere (a chroot)
#
# Without DIR it is found in the repository's target/ (any cargo build,
# check or clippy of the kerberos feature compiles it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# The newest compiled build script of libgssapi-sys in target/, and its
# crate's folder (the build.rs its dep-info file names).
locate() {
  local bin dep src
  bin=$(find "$here/../../target/debug/build" -path '*/libgssapi-sys-*/build-script-build' \
    -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -1 | cut -d' ' -f2-) || true
  if [ -z "$bin" ]; then
    echo "gssapi-probe: libgssapi-sys's build script is not built: run cargo build --ignore-rust-version --locked first" >&2
    return 1
  fi
  dep=$(find "$(dirname "$bin")" -name 'build_script_build-*.d' | head -1)
  src=$(grep -o '[^ ]*/libgssapi-sys-[^/ ]*/build\.rs' "$dep" | head -1)
  [ -n "$src" ] || { echo "gssapi-probe: no build.rs named in $dep" >&2; return 1; }
  echo "$bin"
  dirname "$src"
}

case ${1:-} in
  stage)
    [ -n "${2:-}" ] || { echo "usage: gssapi-probe.sh stage DIR" >&2; exit 2; }
    mapfile -t found < <(locate)
    [ "${#found[@]}" -eq 2 ] || exit 1
    mkdir -p "$2/src"
    cp "${found[0]}" "$2/build-script-build"
    cp -r "${found[1]}"/. "$2/src/"
    cp "$0" "$2/gssapi-probe.sh"
    ;;
  run)
    if [ -n "${2:-}" ]; then
      found=("$2/build-script-build" "$2/src")
    else
      mapfile -t found < <(locate)
      [ "${#found[@]}" -eq 2 ] || exit 1
    fi
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    rc=0
    # the variables cargo gives a build script that libgssapi-sys, bindgen
    # and the pkg-config crate read, for a native x86_64 Linux build
    triple="$(uname -m)-unknown-linux-gnu"
    (cd "${found[1]}" && env HOST="$triple" TARGET="$triple" OUT_DIR="$out" \
      CARGO_MANIFEST_DIR="${found[1]}" CARGO_PKG_NAME=libgssapi-sys \
      CARGO_CFG_TARGET_OS=linux CARGO_CFG_TARGET_FAMILY=unix CARGO_CFG_TARGET_ENV=gnu \
      CARGO_CFG_TARGET_ARCH="$(uname -m)" CARGO_CFG_TARGET_POINTER_WIDTH=64 \
      CARGO_CFG_TARGET_VENDOR=unknown CARGO_CFG_TARGET_ENDIAN=little \
      OPT_LEVEL=0 DEBUG=true PROFILE=debug NUM_JOBS=1 \
      "${found[0]}" >"$out/stdout" 2>"$out/stderr") || rc=$?
    if [ "$rc" -ne 0 ] || [ ! -s "$out/bindings.rs" ]; then
      grep -v '^cargo:rerun-if' "$out/stdout" >&2 || true
      grep -E 'panicked|error|Unable|failed' "$out/stderr" >&2 || tail -5 "$out/stderr" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: gssapi-probe.sh run [DIR] | stage DIR" >&2
    exit 2
    ;;
esac
