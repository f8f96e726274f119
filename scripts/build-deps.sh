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
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1 \
  || need+=(libclang-dev)
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
