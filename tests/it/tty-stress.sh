#!/usr/bin/env bash
# Runs the terminal suite (tests/it/cli_tty.rs) N times (default 20) while
# three busy loops load the machine's cores: job control (Ctrl-Z, fg, bg,
# the terminal handover) must never lose a stop or a continue when the
# scheduler is slow. Exits 1 on any failure and prints its transcript.
#
#   tests/it/tty-stress.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-20}
cargo test -q --test it --no-run
busy=()
for _ in 1 2 3; do
  (while :; do :; done) &
  busy+=("$!")
done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
log=$(mktemp)
failed=0
for i in $(seq 1 "$runs"); do
  if cargo test -q --test it cli_tty:: >"$log" 2>&1; then
    echo "run $i: ok"
  else
    failed=$((failed + 1))
    echo "run $i: FAILED"
    cat "$log"
  fi
done
rm -f "$log"
echo "tty-stress: $failed failure(s) in $runs runs of the terminal suite under 3 busy loops"
[ "$failed" -eq 0 ]
