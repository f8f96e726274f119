# Sourced by bench/run.sh and bench/push.sh (from the repository's root):
# what both need around their Python driver.
# shellcheck shell=bash

# cargo on PATH: rustup's place for it when the shell did not put it there
bench_cargo() {
  if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
  fi
}

# bench_work NAME: a fresh work folder in WORK; every lab listed in
# WORK/labs is torn down at the end, whatever happens, then the folder goes
bench_work() {
  WORK=$(mktemp -d -t "$1.XXXXXX")
  trap bench_cleanup EXIT
}
bench_cleanup() {
  local d
  if [ -f "$WORK/labs" ]; then
    while read -r d; do
      [ -e "$d/lab.env" ] && lab/lab.sh down "$d" >/dev/null 2>&1 || true
    done < "$WORK/labs"
  fi
  rm -rf "$WORK"
}

# bench_run COMMAND...: the driver in the background, so that a signal to
# this script reaches it (it then tears its labs down itself); the EXIT
# trap is the safety net. Exits with the driver's status.
bench_run() {
  "$@" &
  local py=$!
  # shellcheck disable=SC2064  # the pid is fixed now
  trap "kill -TERM $py 2>/dev/null || true; wait $py || true; exit 130" INT TERM HUP
  wait "$py"
}
