#!/usr/bin/env bash
# vendor/winrm-rs is winrm-rs 2.0.1 from crates.io with vendor/winrm-rs.patch
# applied, and nothing else (docs/vendor.md). This script checks it:
#   scripts/check-vendor.sh          compare the tree with crates.io + patch
#   scripts/check-vendor.sh --write  rewrite the patch from the tree
# It fetches the published crate with cargo (the registry cargo is set up
# for) and checks its SHA-256 against the one crates.io's index records.
set -euo pipefail
cd "$(dirname "$0")/.."
name=winrm-rs
version=2.0.1
# crates.io's checksum of winrm-rs-2.0.1.crate (the index's "cksum", which
# Cargo.lock held before the patch)
sha256=fa4e9b6b41cfbb3bcf41b6a6ab4ee157ed4bdd94fdbf9404eda86fb409b70c88
tree=vendor/$name
patch=vendor/$name.patch

# What a content comparison cannot see, checked first (and offline):
# - Cargo.toml must still patch crates.io's winrm-rs with the vendored tree,
#   and Cargo.lock must take it from there (a path package has no source):
#   without the [patch] the build would silently use crates.io's unfixed one;
# - the vendored tree holds only regular files and folders: a symlink would
#   be compared (and built) through whatever it points at;
# - no file in it is executable: crates.io's winrm-rs has none, and the mode
#   is not part of the patch.
if ! grep -qx "$name = { path = \"$tree\" }" Cargo.toml ||
  ! awk '/^\[patch\.crates-io\]$/ { p = 1; next } /^\[/ { p = 0 } p' Cargo.toml | grep -q "^$name = "; then
  echo "check-vendor: Cargo.toml does not patch crates.io's $name with $tree ([patch.crates-io] $name = { path = \"$tree\" }): the build would use the unfixed crate" >&2
  exit 1
fi
if awk -v n="$name" '/^\[\[package\]\]/ { inpkg = 0 } $0 == "name = \"" n "\"" { inpkg = 1 } inpkg && /^source = / { bad = 1 } END { exit !bad }' Cargo.lock; then
  echo "check-vendor: Cargo.lock takes $name from a registry, not from $tree: run cargo update -p $name after restoring the [patch]" >&2
  exit 1
fi
odd=$(find "$tree" \( ! -type f ! -type d \) -o \( -type f -perm /111 \) | sort)
if [ -n "$odd" ]; then
  echo "check-vendor: $tree holds what is not a plain file (a symlink, a device) or an executable file:" >&2
  printf '%s\n' "$odd" | head -n 20 >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/probe/src"
: >"$work/probe/src/lib.rs"
cat >"$work/probe/Cargo.toml" <<EOF
[package]
name = "vendor-probe"
version = "0.0.0"
edition = "2021"

[dependencies]
$name = "=$version"
EOF
cargo fetch --quiet --manifest-path "$work/probe/Cargo.toml"
crate=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" -name "$name-$version.crate" | head -n 1)
if [ -z "$crate" ]; then
  echo "check-vendor: cargo fetched no $name-$version.crate" >&2
  exit 1
fi
got=$(sha256sum "$crate" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "check-vendor: $crate has SHA-256 $got, crates.io published $sha256" >&2
  exit 1
fi
mkdir "$work/upstream"
tar -xzf "$crate" -C "$work/upstream"
upstream=$work/upstream/$name-$version

mkdir -p "$work/a/vendor" "$work/b/vendor"
cp -a "$upstream" "$work/a/$tree"
cp -a "$tree" "$work/b/$tree"
rm -f "$work/b/$tree/.cargo-ok"

if [ "${1:-}" = "--write" ]; then
  # a/ and b/ paths from the repository root, as `git apply` reads them
  (cd "$work" && diff -ruN "a/$tree" "b/$tree" | grep -v '^diff -ruN' | sed -E 's/^(--- |\+\+\+ )([^\t]*)\t.*/\1\2/') >"$patch" || true
  echo "check-vendor: wrote $patch ($(grep -c '^@@' "$patch") hunks)"
  exit 0
fi

# crates.io's tree plus the patch must be the vendored tree, file for file
(cd "$work/a" && git apply -p1 "$OLDPWD/$patch")
if ! diff -r "$work/a/$tree" "$work/b/$tree" >"$work/diff"; then
  echo "check-vendor: $tree is not crates.io's $name $version with $patch applied:" >&2
  head -n 40 "$work/diff" >&2
  echo "(after an intended change to $tree: scripts/check-vendor.sh --write, and say why in docs/vendor.md)" >&2
  exit 1
fi
echo "check-vendor: $tree = crates.io $name $version (SHA-256 checked) + $patch ($(grep -c '^@@' "$patch") hunks)"
