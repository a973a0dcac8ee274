#!/usr/bin/env bash
# Compares an earlier build with this tree's, in one run: `run j -- true`
# against `flock -n L true` on a quiet host and with 2000 extra idle
# processes, start-up alone, the library's lock cycle, and `run --slots 8`
# with 7 slots held (bench/slots.sh).
#
#   bench/compare.sh BEFORE_RELEASE_DIR [LABEL]
#
# BEFORE_RELEASE_DIR holds an earlier `onlyone` and `examples/bench_cycle`
# (e.g. a worktree's target/release after `cargo build --release --bin
# onlyone --example bench_cycle`). This tree's are built here: the shipped
# dynamic binary and, where the C library is glibc, the static-pie one.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/compare.sh BEFORE_RELEASE_DIR [LABEL]}
LABEL=${2:-before}
# The binary on its own, as shipped: built with the examples, the library
# would carry the test hooks that the examples' dev-dependencies turn on.
cargo build --release --quiet --bin onlyone
cargo build --release --quiet --example bench_cmd --example bench_cycle --example bench_scale
HOST=$(rustc -vV | sed -n 's/^host: //p')
A=$PWD/target/release
AS=$A
case "$HOST" in
  *-linux-gnu)
    env "CARGO_TARGET_$(echo "$HOST" | tr a-z- A-Z_)_RUSTFLAGS=-C target-feature=+crt-static" \
      cargo build --release --quiet --target "$HOST" --bin onlyone
    AS=$PWD/target/$HOST/release
    ;;
esac
EX=$A/examples
D=$(mktemp -d /dev/shm/b22.XXXX)
mkdir -p $D/b $D/a $D/s
# The runs' journals go with the rest, not to the state directory of whoever runs this.
export ONLYONE_STATE_DIR=$D/state
cmds() {
  printf '%s\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$LABEL" "$B/onlyone" "$D/b"
  printf 'this tree (dynamic, as shipped)\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$A/onlyone" "$D/a"
  printf 'this tree, static-pie\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$AS/onlyone" "$D/s"
  printf 'flock -n\tflock\t-n\t%s\ttrue\n' "$D/f.lock"
  printf '%s --version\t%s\t--version\n' "$LABEL" "$B/onlyone"
  printf 'this tree --version\t%s\t--version\n' "$A/onlyone"
  printf 'this tree static-pie --version\t%s\t--version\n' "$AS/onlyone"
  printf 'true\ttrue\n'
}
cmds > $D/cmds.tsv
echo "## Quiet host ($(ls /proc | grep -c '^[0-9]') processes), /dev/shm, 400 rounds after 20"
"$EX/bench_cmd" $D/cmds.tsv 400 20 'flock -n'
mkfifo $D/fifo
"$EX/bench_scale" spawn 2000 <$D/fifo >$D/spawn.out &
SP=$!
exec 4>$D/fifo
for _ in $(seq 600); do grep -q ready $D/spawn.out 2>/dev/null && break; sleep 0.1; done
echo
echo "## With 2000 extra idle processes ($(ls /proc | grep -c '^[0-9]') processes)"
"$EX/bench_cmd" $D/cmds.tsv 400 20 'flock -n'
exec 4>&-
wait $SP 2>/dev/null || true
echo
echo "## Library cycle (try_acquire + release on one LockFile), bench_cycle onlyone DIR 20000, alternated, 3 tries each"
for t in 1 2 3; do
  for who in "$LABEL" "this tree"; do
    bin=$B/examples/bench_cycle; [ "$who" = "this tree" ] && bin=$EX/bench_cycle
    mkdir -p "$D/cyc-$t-${who// /_}"
    echo "$who, try $t: $("$bin" onlyone "$D/cyc-$t-${who// /_}" 20000 2>&1 >/dev/null | tail -1)"
  done
done
rm -rf $D
echo
bench/slots.sh "$A"
