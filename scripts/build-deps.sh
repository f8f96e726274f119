#!/usr/bin/env bash
# What building kwinctl needs besides Rust, on Debian (root; idempotent).
# Each check asks what the build itself loads, by the build's own rules
# (docs/research/build-deps.md), not whether a file name is somewhere:
# - the default `kerberos` feature builds libgssapi-sys, whose build script
#   asks pkg-config for mit-krb5-gssapi and runs bindgen on gssapi.h
#   (pkg-config, libkrb5-dev: docs/research/build-deps.md#bd-gssapi-sys);
#   bindgen loads libclang at run time through clang-sys, and libclang
#   needs its builtin headers (libclang-dev: #bd-libclang);
# - rustc links through `cc`; winsim's python-gssapi and krb5 compile C
#   with krb5-config's flags (gcc, libc6-dev, libkrb5-dev: #bd-cc).
# scripts/tests/build-deps.sh hides each of them and checks what this asks.
set -euo pipefail

# A 64-bit ELF file: what clang-sys accepts as a libclang to load.
elf64() {
  [ "$(head -c 5 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 7f454c4602 ]
}

# The libclang clang-sys 1.9 finds in the folders given, by its run-time
# file names on Linux, skipping any name with "-cpp." (libclang-cpp, the
# C++ library other packages bring): prints the first one.
libclang_in() { # DIR...
  local d f
  for d in "$@"; do
    if [ -z "$d" ] || [ ! -d "$d" ]; then continue; fi
    for f in "$d"/libclang.so "$d"/libclang-*.so "$d"/libclang.so.* "$d"/libclang-*.so.*; do
      case ${f##*/} in *-cpp.*) continue ;; esac
      [ -e "$f" ] && elf64 "$f" && { echo "$f"; return 0; }
    done
  done
  return 1
}

# LIBCLANG_PATH naming the library itself: a file whose name clang-sys
# looks for (otherwise clang-sys takes the path for a folder).
libclang_file() { # PATH
  case ${1##*/} in
    *-cpp.*) return 1 ;;
    libclang.so | libclang-*.so | libclang.so.* | libclang-*.so.*) [ -f "$1" ] && elf64 "$1" ;;
    *) return 1 ;;
  esac
}

# clang-sys's search (docs/research/build-deps.md#bd-libclang): LIBCLANG_PATH
# alone when it is set (the library, or its folder); otherwise llvm-config's
# prefix, LD_LIBRARY_PATH, LIBRARY_PATH and the system folders.
find_libclang() {
  local prefix ld lib dirs=()
  if [ -n "${LIBCLANG_PATH+set}" ]; then
    if libclang_file "$LIBCLANG_PATH"; then
      echo "$LIBCLANG_PATH"
      return 0
    fi
    libclang_in "$LIBCLANG_PATH"
    return
  fi
  prefix=$("${LLVM_CONFIG_PATH:-llvm-config}" --prefix 2>/dev/null | head -1) || prefix=
  [ -z "$prefix" ] || dirs+=("$prefix/bin" "$prefix/lib" "$prefix/lib64")
  # split on ':' as Rust's env::split_paths does
  IFS=: read -r -a ld <<<"${LD_LIBRARY_PATH:-}"
  IFS=: read -r -a lib <<<"${LIBRARY_PATH:-}"
  dirs+=("${ld[@]}" "${lib[@]}")
  # clang-sys's Linux folder patterns, in its order (matched ignoring case)
  shopt -s nocaseglob nullglob
  dirs+=(/usr/local/llvm*/lib* /usr/local/lib*/*/* /usr/local/lib*/* /usr/local/lib*
    /usr/lib*/*/* /usr/lib*/* /usr/lib*)
  shopt -u nocaseglob nullglob
  libclang_in "${dirs[@]}"
}

# clang's builtin headers (stddef.h, which gssapi.h includes), where
# libclang looks for them: its resource folder ../lib/clang/VERSION/include
# from the library's folder, and on Debian /usr/include/clang/VERSION/include
# (libclang-common-N-dev) (docs/research/build-deps.md#bd-libclang).
has_clang_builtins() { # LIBCLANG
  local f
  for f in "$(dirname "$1")"/../lib/clang/*/include/stddef.h /usr/include/clang/*/include/stddef.h; do
    [ -e "$f" ] && return 0
  done
  return 1
}

# The pkg-config the pkg-config crate runs: PKG_CONFIG (or its
# target-specific forms) when set, else pkg-config, else pkgconf
# (docs/research/build-deps.md#bd-gssapi-sys).
pkg_config_cmd() {
  local triple v
  triple="$(uname -m)-unknown-linux-gnu"
  for v in "PKG_CONFIG_$triple" "PKG_CONFIG_${triple//-/_}" HOST_PKG_CONFIG PKG_CONFIG; do
    if printenv "$v" >/dev/null; then
      printenv "$v"
      return 0
    fi
  done
  if command -v pkg-config >/dev/null 2>&1; then
    echo pkg-config
  elif command -v pkgconf >/dev/null 2>&1; then
    echo pkgconf
  else
    return 1
  fi
}

# libgssapi-sys's route on Debian: pkg-config's mit-krb5-gssapi gives the
# linker its library folder and bindgen its include folders (-I, -isystem),
# searched before clang's defaults for gssapi.h and gssapi/gssapi_ext.h.
have_gssapi() {
  local pc prev='' t dirs=()
  pc=$(pkg_config_cmd) || return 1
  "$pc" --exists mit-krb5-gssapi 2>/dev/null || return 1
  for t in $("$pc" --cflags mit-krb5-gssapi 2>/dev/null); do
    case $prev:$t in
      *:-I?*) dirs+=("${t#-I}") ;;
      -isystem:*) dirs+=("$t") ;;
    esac
    prev=$t
  done
  for t in "${dirs[@]}" /usr/local/include /usr/include; do
    [ -e "$t/gssapi.h" ] && [ -e "$t/gssapi/gssapi_ext.h" ] && return 0
  done
  return 1
}

# mit-krb5-gssapi.pc in Debian's default pkg-config path, for when
# pkg-config itself is not there yet.
have_gssapi_pc_file() {
  local d
  for d in /usr/local/lib/*/pkgconfig /usr/local/lib/pkgconfig /usr/local/share/pkgconfig \
    /usr/lib/*/pkgconfig /usr/lib/pkgconfig /usr/share/pkgconfig; do
    [ -e "$d/mit-krb5-gssapi.pc" ] && return 0
  done
  return 1
}

# A C compiler that compiles and links a program with the C library's
# headers, as rustc's link step and the Python extensions need.
c_toolchain_works() {
  local out rc=0
  command -v cc >/dev/null 2>&1 || return 1
  out=$(mktemp)
  printf '#include <stdio.h>\nint main(void) { return puts("") < 0; }\n' \
    | cc -x c - -o "$out" >/dev/null 2>&1 || rc=$?
  rm -f "$out"
  return "$rc"
}

missing() { # prints the packages the build still needs
  local need=() lib
  if ! lib=$(find_libclang) || ! has_clang_builtins "$lib"; then
    need+=(libclang-dev)
  fi
  if pkg_config_cmd >/dev/null; then
    have_gssapi || need+=(libkrb5-dev)
  else
    need+=(pkg-config)
    have_gssapi_pc_file || need+=(libkrb5-dev)
  fi
  case " ${need[*]} " in
    *" libkrb5-dev "*) ;;
    *) command -v krb5-config >/dev/null 2>&1 || need+=(libkrb5-dev) ;;
  esac
  c_toolchain_works || need+=(gcc libc6-dev)
  echo "${need[*]}"
}

# LIBCLANG_PATH is the only place clang-sys looks when it is set: a system
# libclang would not help.
if [ -n "${LIBCLANG_PATH+set}" ] && ! find_libclang >/dev/null; then
  echo "build-deps: LIBCLANG_PATH=$LIBCLANG_PATH holds no libclang bindgen can load (libclang.so, libclang-N.so, libclang.so.N, 64-bit), and clang-sys looks nowhere else when it is set: point it at such a file or its folder, or unset it to use the system's" >&2
  exit 1
fi

read -r -a need <<<"$(missing)"
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-deps: kwinctl's build needs ${need[*]} (apt-get install ${need[*]}, as root)" >&2
    exit 1
  fi
  echo "build-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  read -r -a still <<<"$(missing)"
  if [ "${#still[@]}" -gt 0 ]; then
    echo "build-deps: after installing ${need[*]} the build still lacks what ${still[*]} should provide (see docs/research/build-deps.md for where the build looks)" >&2
    exit 1
  fi
fi
