#!/usr/bin/env bash
# What building kwinctl needs besides Rust, on Debian (root; idempotent):
# its default `kerberos` feature links the system's MIT Kerberos GSS-API
# library through libgssapi-sys, whose build script runs bindgen on
# gssapi.h (libkrb5-dev: the headers and krb5-config; libclang-dev: the
# libclang bindgen loads). winsim's python-gssapi and krb5 packages build
# against the same headers (scripts/setup.sh, winsim/setup-venv.sh).
set -euo pipefail
need=()
[ -e /usr/include/gssapi/gssapi.h ] || need+=(libkrb5-dev)
# libclang as bindgen (clang-sys) finds it: libclang.so, libclang-N.so or
# libclang.so.N, never libclang-cpp (the C++ library another package brings)
have_libclang() {
  local d f
  for d in ${LIBCLANG_PATH:-} $(llvm-config --libdir 2>/dev/null) /usr/local/lib* /usr/lib* /usr/lib*/* /usr/lib/llvm*/lib*; do
    for f in "$d"/libclang.so "$d"/libclang-[0-9]*.so "$d"/libclang.so.* "$d"/libclang-[0-9]*.so.*; do
      [ -e "$f" ] && return 0
    done
  done
  return 1
}
have_libclang || need+=(libclang-dev)
command -v cc >/dev/null 2>&1 || need+=(gcc)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-deps: kwinctl's build needs ${need[*]} (apt-get install ${need[*]}, as root)" >&2
    exit 1
  fi
  echo "build-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
