#!/usr/bin/env bash
# The order of onlyone's code at start-up: build/start-order.txt names the
# functions of the release binary that a fire runs (`onlyone run j --
# sleep 0.2` and `-- true` first, then what `onlyone status` and `onlyone
# --version` add, under callgrind). build.rs
# hands the list to the linker (--symbol-ordering-file), which puts those
# functions side by side at the start of .text. A run then faults in a few
# 64 KiB blocks of code instead of one for each function it touches
# (BENCHMARKS.md, "The start's code side by side").
#
#   bench/order.sh           # writes build/start-order.txt (needs valgrind)
#   bench/order.sh --check   # fails when the release binary lacks most of
#                            # the listed functions, or they are not side
#                            # by side (CI)
#
# The names carry the hashes of rustc's symbol mangling, which change with
# the toolchain, Cargo.lock and the release profile: after such a change,
# run it again and commit the list. A stale list costs speed, never
# correctness (the linker leaves out names it does not find).
set -euo pipefail
cd "$(dirname "$0")/.."
LIST=build/start-order.txt
BIN=target/release/onlyone

case "${1:-}" in
  --check)
    [ -x "$BIN" ] || { echo "order: $BIN is not built (cargo build --release)" >&2; exit 2; }
    # Of the listed functions, those in the binary's code, and where they
    # lie: the linker put them side by side when they span a small part of
    # .text.
    python3 - "$BIN" "$LIST" <<'EOF'
import subprocess, sys
binary, listing = sys.argv[1], sys.argv[2]
listed = [l.strip() for l in open(listing) if l.strip()]
want = set(listed)
at = {}
for line in subprocess.run(['nm', '--defined-only', binary], capture_output=True,
                           text=True, check=True).stdout.splitlines():
    f = line.split()
    if len(f) == 3 and f[1] in 'tT' and f[2] in want:
        at[f[2]] = int(f[0], 16)
text = None
for line in subprocess.run(['readelf', '-SW', binary], capture_output=True, text=True,
                           check=True).stdout.splitlines():
    f = line.replace('[ ', '[').split()
    if len(f) > 5 and f[1] == '.text':
        text = int(f[5], 16)
found = len(at)
span = max(at.values()) - min(at.values()) if at else 0
print(f'order: {found} of the {len(listed)} functions in {listing} are in {binary}, '
      f'within {span // 1024} KiB of its {text // 1024} KiB of code')
if found * 10 < len(listed) * 9:
    sys.exit(f'order: the list is stale (a new toolchain, Cargo.lock or profile): '
             f'run bench/order.sh and commit {listing}')
if text is None or span * 4 > text:
    sys.exit('order: the listed functions are spread over the code: the linker did not '
             'take the list (build.rs warns why)')
EOF
    exit 0
    ;;
  "") ;;
  *) echo "usage: bench/order.sh [--check]" >&2; exit 2 ;;
esac

command -v valgrind >/dev/null 2>&1 || {
  echo "order: valgrind is needed (apt-get install valgrind)" >&2
  exit 2
}
cargo build --release --quiet --bin onlyone
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir "$D/locks"
export ONLYONE_STATE_DIR=$D/state
grind() {
  valgrind --tool=callgrind --demangle=no --callgrind-out-file="$D/cg.$1" \
    "$PWD/$BIN" "${@:2}" >/dev/null 2>"$D/valgrind.$1" || {
    cat "$D/valgrind.$1" >&2
    exit 1
  }
}
# A run whose command outlives the start, as `true` does outside valgrind
# (which slows onlyone down, not the command): the supervision loop's
# code. Then the rest.
grind 1 --dir "$D/locks" run j -- sleep 0.2
grind 2 --dir "$D/locks" run j -- true
grind 3 --dir "$D/locks" status
grind 4 --version
python3 - "$BIN" "$D"/cg.1 "$D"/cg.2 "$D"/cg.3 "$D"/cg.4 > "$D/list" <<'EOF'
import re, sys
binary, outs = sys.argv[1], sys.argv[2:]
# The entry point first: callgrind does not name it.
seen, groups = {'_start'}, [['_start']]
for out in outs:
    order = []
    groups.append(order)
    # callgrind names an object or a function once, "(id) name", and by
    # "(id)" alone after that; "ob=" opens the functions of an object.
    objs, fns, ob = {}, {}, None
    for line in open(out):
        m = re.match(r'^(c?ob|c?fn)=\((\d+)\)(?: (.*))?', line)
        if not m:
            continue
        kind, ident, name = m.groups()
        table = objs if kind.endswith('ob') else fns
        if name:
            table[ident] = name.strip()
        if kind == 'ob':
            ob = objs[ident]
        elif kind == 'fn' and ob and ob.endswith('/' + binary.split('/')[-1]):
            f = fns[ident]
            # Not an address, nor callgrind's own "(below main)".
            if f not in seen and not f.startswith(('0x', '(')):
                seen.add(f)
                order.append(f)
# Each command's new functions after the ones before: `run`'s first, so
# that a fire faults in only the 64 KiB blocks its own code fills. Sorted
# within each, so that a new list differs from the old one by what
# changed.
print('\n'.join(f for order in groups for f in sorted(order)))
EOF
# Replaced whole, never left half written.
mv "$D/list" "$LIST"
echo "order: $(grep -c . "$LIST") functions in $LIST" >&2
