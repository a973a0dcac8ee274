#!/usr/bin/env bash
# `run --slots 8 j -- true` with 7 of the lock's 8 slots held by live runs
# (the free slot is the last one tried), against `flock -n L true` and
# `run j -- true` on a free lock, in one run of bench_cmd.
#
#   bench/slots.sh RELEASE_DIR [ROUNDS]
#
# RELEASE_DIR holds this tree's `onlyone` and `examples/bench_cmd` (built
# by bench/compare.sh, which calls this).
set -euo pipefail
A=${1:?usage: bench/slots.sh RELEASE_DIR [ROUNDS]}
ROUNDS=${2:-400}
D=$(mktemp -d /dev/shm/slots.XXXX)
mkdir -p "$D/locks" "$D/plain"
export ONLYONE_STATE_DIR=$D/state
holders=()
cleanup() {
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
for i in $(seq 7); do
  "$A/onlyone" --dir "$D/locks" run --slots 8 j -- sleep 100000 &
  holders+=($!)
  # One at a time, so that they hold slots 0..6 and the fire finds slot 7.
  for _ in $(seq 200); do [ "$(ls "$D/locks" | grep -c '^j\.lock')" -ge "$i" ] && break; sleep 0.05; done
done
printf 'run --slots 8 (7 held)\t%s\t--dir\t%s\trun\t--slots\t8\tj\t--\ttrue\n' "$A/onlyone" "$D/locks" >"$D/cmds.tsv"
printf 'run (free lock)\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$A/onlyone" "$D/plain" >>"$D/cmds.tsv"
printf 'flock -n\tflock\t-n\t%s\ttrue\n' "$D/f.lock" >>"$D/cmds.tsv"
echo "## Slots: 7 of 8 held ($(ls "$D/locks" | grep -c '^j\.lock') slot files), /dev/shm, $ROUNDS rounds after 20"
"$A/examples/bench_cmd" "$D/cmds.tsv" "$ROUNDS" 20 'flock -n'
