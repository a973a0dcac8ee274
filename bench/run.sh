#!/usr/bin/env bash
# Reproduces every table of BENCHMARKS.md in one command:
#
#   bench/run.sh            # the full run (about 15-25 minutes on 2 cores)
#   bench/run.sh --quick    # a few iterations of each part (CI: .ci/run)
#
# It writes the tables (Markdown) to target/onlyone-bench/results.md (or
# results-quick.md) and prints them. The full run installs what it needs
# with apt-get; --quick installs nothing and skips a tool that is missing,
# saying so. Lock directories are /dev/shm/onlyone-bench-PID (tmpfs) and
# /var/tmp/onlyone-bench-PID (ext4 here; the table says what `df -T` found);
# both are removed at the end. Only processes this script started are ever
# signalled, by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

QUICK=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  "") ;;
  *) echo "usage: bench/run.sh [--quick]" >&2; exit 2 ;;
esac

if [ "$QUICK" = 1 ]; then
  CMD_ROUNDS=10 CMD_WARMUP=2
  CRIT_ARGS=(--warm-up-time 0.1 --measurement-time 0.3 --sample-size 10)
  CONTEND_PROCS=8 CONTEND_CYCLES=50
  HANDOFF_N=5 LOCKFILE_N=1
  STATUS_SIZES="100 300"
  STALE_SIZES="10 30"
  PROC_SIZES="0 100 300"
  SCALE_ROUNDS=3 SCALE_WARMUP=1
  SYSCALL_N=100
  BUSY=200
  JOURNAL_EVENTS=1000
  STORE_ROUNDS=5 STORE_HANDOFFS=2
  OUT=target/onlyone-bench/results-quick.md
else
  CMD_ROUNDS=300 CMD_WARMUP=20
  CRIT_ARGS=(--warm-up-time 2 --measurement-time 5)
  CONTEND_PROCS=8 CONTEND_CYCLES=1000
  HANDOFF_N=100 LOCKFILE_N=5
  STATUS_SIZES="1000 3000 10000"
  STALE_SIZES="100 300 1000"
  PROC_SIZES="0 1000 3000 10000"
  SCALE_ROUNDS=15 SCALE_WARMUP=2
  SYSCALL_N=1000
  BUSY=2000
  JOURNAL_EVENTS=100000
  STORE_ROUNDS=100 STORE_HANDOFFS=20
  OUT=target/onlyone-bench/results.md
fi
mkdir -p target/onlyone-bench
WORK=$ROOT/target/onlyone-bench

say() { echo "bench: $*" >&2; }

# ---------------------------------------------------------------- tools
declare -A PKG=(
  [hyperfine]=hyperfine [lckdo]=moreutils [setlock]=daemontools
  [lockfile-create]=lockfile-progs [flock]=util-linux [strace]=strace
  [perf]=linux-perf [/usr/bin/time]=time
)
have() { command -v "$1" >/dev/null 2>&1; }
missing=()
for t in "${!PKG[@]}"; do have "$t" || missing+=("$t"); done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$QUICK" = 1 ]; then
    say "quick mode installs nothing; missing (their rows are skipped): ${missing[*]}"
  else
    pkgs=()
    for t in "${missing[@]}"; do pkgs+=("${PKG[$t]}"); done
    say "installing: ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    for p in "${pkgs[@]}"; do
      apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
        say "could not install $p; its rows are skipped"
    done
  fi
fi
# perf may be installed but refused (no PMU, paranoid setting).
PERF_OK=0
if have perf && perf stat -e task-clock true >/dev/null 2>&1; then PERF_OK=1; fi

# ---------------------------------------------------------------- build
say "building (release): the binary, the bench_* examples, the criterion bench"
cargo build --release --quiet --bin onlyone
cargo build --release --quiet --example bench_cmd --example bench_cycle \
  --example bench_contend --example bench_handoff --example bench_scale --example bench_store
cargo bench --quiet --bench lock_cycle --no-run
O=$ROOT/target/release/onlyone
EX=$ROOT/target/release/examples
# The binary without the PostgreSQL store, to show that linking it costs the
# directory store's path nothing.
say "building the binary without the postgres feature (target/onlyone-bench/nopg)"
CARGO_TARGET_DIR=$ROOT/target/onlyone-bench/nopg cargo build --release --quiet --bin onlyone --no-default-features
O_NOPG=$ROOT/target/onlyone-bench/nopg/release/onlyone
# Where the C library is glibc, the static-pie build (not the one shipped:
# HACKING.md, "Building"), to show what the dynamic loader costs. The host
# is named as the target so that +crt-static applies to onlyone's own
# artifacts, not to build scripts and proc-macros.
HOST=$(rustc -vV | sed -n 's/^host: //p')
O_STATIC=""
case "$HOST" in
  *-linux-gnu)
    say "building the static-pie binary (target/$HOST/release)"
    env "CARGO_TARGET_$(echo "$HOST" | tr a-z- A-Z_)_RUSTFLAGS=-C target-feature=+crt-static" \
      cargo build --release --quiet --target "$HOST" --bin onlyone
    O_STATIC=$ROOT/target/$HOST/release/onlyone
    ;;
esac
P=""
if [ "$PERF_OK" = 1 ] && [ "$QUICK" = 0 ]; then
  say "building a release binary with debug info for the profiles (target/onlyone-bench/prof)"
  CARGO_PROFILE_RELEASE_DEBUG=true CARGO_TARGET_DIR=$ROOT/target/onlyone-bench/prof \
    cargo build --release --quiet --bin onlyone
  P=$ROOT/target/onlyone-bench/prof/release/onlyone
fi
# profile BINARY ARGS...: the onlyone process's own samples, with children,
# for onlyone's functions and the kernel's entry points.
profile() {
  perf record -q -F 5000 --call-graph dwarf,16384 -o "$WORK/p.perf" -- "$@" >/dev/null 2>&1 || true
  perf report -i "$WORK/p.perf" --comm onlyone --children --percentage relative --sort sym --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | grep -E 'onlyone::|Command>::spawn|lang_start_internal|clap_builder::parser::parser::Parser::get_matches_with|__x64_sys_' |
    awk '!seen[$NF]++' | head -24 || true
}

# ---------------------------------------------------------------- dirs
T=/dev/shm/onlyone-bench-$$
E=/var/tmp/onlyone-bench-$$
BG_PIDS=()
cleanup() {
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$T" "$E"
}
trap cleanup EXIT
mkdir -p "$T" "$E"
chmod 755 "$T" "$E"
fstype() { df --output=fstype "$1" 2>/dev/null | tail -1 | tr -d ' '; }
T_FS=$(fstype "$T")
E_FS=$(fstype "$E")

# Extra idle processes (a busy host): `bench_scale spawn N` forks them and
# keeps them until its stdin (a FIFO held open here) closes.
EXTRA_PID=""
spawn_extra() { # N
  mkfifo "$T/spawn.fifo"
  "$EX/bench_scale" spawn "$1" <"$T/spawn.fifo" >"$T/spawn.out" &
  EXTRA_PID=$!
  BG_PIDS+=("$EXTRA_PID")
  exec 4>"$T/spawn.fifo"
  for _ in $(seq 600); do grep -q ready "$T/spawn.out" 2>/dev/null && break; sleep 0.1; done
}
end_extra() {
  exec 4>&-
  wait "$EXTRA_PID" 2>/dev/null || true
  rm -f "$T/spawn.fifo" "$T/spawn.out"
  EXTRA_PID=""
}

exec 3>"$OUT"
emit() { printf '%s\n' "$*" >&3; printf '%s\n' "$*"; }
emit_file() { cat "$1" >&3; cat "$1"; }

load() { cut -d' ' -f1-3 /proc/loadavg; }
emit "# onlyone benchmarks: results$([ "$QUICK" = 1 ] && echo ' (quick mode: a few iterations, figures not meaningful)')"
emit ""
emit "- Date: $(date -u +%Y-%m-%dT%H:%M:%SZ); command: \`bench/run.sh$([ "$QUICK" = 1 ] && echo ' --quick')\`"
emit "- onlyone: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (src modified)'), built with \`cargo build --release\`"
emit "- Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(ls /proc | grep -c '^[0-9]') processes at start"
emit "- Lock directories: \`$T\` is **$T_FS**, \`$E\` is **$E_FS** (\`df -T\`)"
emit "- Load average at start: $(load)"
emit "- Tools: $(flock --version 2>/dev/null | head -1 || echo 'flock ?'); hyperfine $(hyperfine --version 2>/dev/null | cut -d' ' -f2 || echo 'missing'); perf $([ $PERF_OK = 1 ] && perf --version | cut -d' ' -f3 || echo 'unavailable')"
emit ""

# ---------------------------------------------------------------- 1
say "1/6 command overhead"
emit "## 1. Command overhead"
emit ""
emit "(load average before this part: $(load))"
emit ""
emit "Each command takes a free lock, runs \`true\`, and releases. \`bench_cmd\` alternates the commands round after round ($CMD_ROUNDS counted rounds after $CMD_WARMUP warm-up rounds), fork+exec with no shell unless the row is one; wall time around spawn and \`wait4\`; peak RSS is \`ru_maxrss\` from \`wait4\` (the largest of the process and its waited-for children, as \`/usr/bin/time -f %M\`). Ratio: median over the median of \`flock -n\`."
emit ""
cmd_table() { # DIR
  local d=$1 f=$WORK/cmds.tsv
  mkdir -p "$d/o"
  {
    printf 'onlyone run\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$O" "$d/o"
    printf 'onlyone run, built without the postgres feature\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$O_NOPG" "$d/o"
    [ -n "$O_STATIC" ] && printf 'onlyone run, static-pie\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$O_STATIC" "$d/o"
    have flock && printf 'flock -n\tflock\t-n\t%s\ttrue\n' "$d/f.lock"
    have lckdo && printf 'lckdo\tlckdo\t%s\ttrue\n' "$d/l.lock"
    have setlock && printf 'setlock -n\tsetlock\t-n\t%s\ttrue\n' "$d/s.lock"
    have lockfile-create && printf 'lockfile-create/-remove (sh)\tsh\t-c\tlockfile-create -q -r 0 "$1" && true && lockfile-remove "$1"\tsh\t%s\n' "$d/lp"
    printf 'pidfile script (sh)\tsh\t%s\t%s\ttrue\n' "$ROOT/bench/pidfile.sh" "$d/p.pid"
    printf 'onlyone acquire + release (sh)\tsh\t-c\t"$1" --dir "$2" acquire -q j2 && "$1" --dir "$2" release -q j2\tsh\t%s\t%s\n' "$O" "$d/o"
    have flock && printf 'flock shell equivalent (sh)\tsh\t-c\texec 9>"$1" && flock -n 9 && flock -u 9\tsh\t%s\n' "$d/f2.lock"
    printf 'onlyone --version (start-up alone)\t%s\t--version\n' "$O"
    [ -n "$O_STATIC" ] && printf 'onlyone --version, static-pie\t%s\t--version\n' "$O_STATIC"
    printf 'true (exec alone)\ttrue\n'
  } >"$f"
  "$EX/bench_cmd" "$f" "$CMD_ROUNDS" "$CMD_WARMUP" 'flock -n'
}
for pair in "$T:$T_FS" "$E:$E_FS"; do
  d=${pair%%:*} fs=${pair##*:}
  emit "### On $fs (\`$d\`)"
  emit ""
  cmd_table "$d" >"$WORK/t1.md"
  emit_file "$WORK/t1.md"
  emit ""
done
emit "### On a busy host: $BUSY extra idle processes, $T_FS"
emit ""
emit "The same alternation, with $BUSY idle processes forked by \`bench_scale spawn $BUSY\` for the table and ended after it ($(ls /proc | grep -c '^[0-9]') processes before)."
emit ""
spawn_extra "$BUSY"
mkdir -p "$T/busy/o"
{
  printf 'onlyone run\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$O" "$T/busy/o"
  have flock && printf 'flock -n\tflock\t-n\t%s\ttrue\n' "$T/busy/f.lock"
  printf 'true (exec alone)\ttrue\n'
} >"$WORK/busy.tsv"
"$EX/bench_cmd" "$WORK/busy.tsv" "$CMD_ROUNDS" "$CMD_WARMUP" 'flock -n' >"$WORK/t1.md"
end_extra
emit_file "$WORK/t1.md"
emit ""
if have hyperfine && [ "$QUICK" = 0 ]; then
  emit "Cross-check with \`hyperfine -N --warmup 20 --runs 200\` (one command after the other, not alternated), on $T_FS:"
  emit ""
  mkdir -p "$T/h"
  hyperfine -N --warmup 20 --runs 200 --style none --export-markdown "$WORK/hf.md" \
    -n 'onlyone run' "$O --dir $T/h run j -- true" \
    -n 'flock -n' "flock -n $T/h/f.lock true" \
    -n 'setlock -n' "setlock -n $T/h/s.lock true" \
    -n 'lckdo' "lckdo $T/h/l.lock true" >/dev/null 2>&1 || true
  [ -s "$WORK/hf.md" ] && emit_file "$WORK/hf.md"
  emit ""
fi
if have strace; then
  emit "Syscalls of one invocation (\`strace -f -c\`, the process and its children; \`true\` alone is shown for scale):"
  emit ""
  emit "| command | syscalls | of which open/openat of /proc | processes in /proc |"
  emit "|---|---:|---:|---:|"
  count_calls() { strace -f -c -o "$WORK/sc.txt" "$@" >/dev/null 2>&1 || true; awk '$NF=="total" {print $4}' "$WORK/sc.txt"; }
  proc_opens() { strace -f -e trace=open,openat -o "$WORK/so.txt" "$@" >/dev/null 2>&1 || true; grep -c '"/proc/' "$WORK/so.txt" || true; }
  np=$(ls /proc | grep -c '^[0-9]')
  emit "| onlyone run j -- true | $(count_calls "$O" --dir "$T/o" run j -- true) | $(proc_opens "$O" --dir "$T/o" run j -- true) | $np |"
  have flock && emit "| flock -n LOCK true | $(count_calls flock -n "$T/f.lock" true) | $(proc_opens flock -n "$T/f.lock" true) | $np |"
  emit "| true | $(count_calls true) | $(proc_opens true) | $np |"
  emit ""
fi

# ---------------------------------------------------------------- 2
say "2/6 library cycle (criterion)"
emit "## 2. Library cycle (criterion)"
emit ""
emit "(load average before this part: $(load))"
emit ""
emit "One uncontended cycle: \`LockFile::try_acquire()\` + \`LockGuard::release()\` on a \`LockFile\` opened once; beside it in the same criterion run a bare flock cycle (open, \`flock(LOCK_EX|LOCK_NB)\`, \`flock(LOCK_UN)\`, close) and the \`pidlock\` crate (new, acquire, release). \`benches/lock_cycle.rs\`, criterion \`${CRIT_ARGS[*]}\`; the figure is criterion's median of the per-sample means (µs per cycle)."
emit ""
rm -rf target/criterion/cycle-*
mkdir -p "$T/cyc" "$E/cyc"
ONLYONE_BENCH_DIRS="$T_FS=$T/cyc,$E_FS-disk=$E/cyc" \
  cargo bench --quiet --bench lock_cycle -- "${CRIT_ARGS[@]}" >"$WORK/crit.txt" 2>&1 || say "criterion failed: see $WORK/crit.txt"
median_us() { # group bench
  local f=target/criterion/$1/$2/new/estimates.json
  [ -f "$f" ] || { echo "-"; return; }
  sed -E 's/.*"median":\{"confidence_interval":\{[^}]*\},"point_estimate":([0-9.eE+-]+).*/\1/' "$f" | awk '{printf "%.1f", $1/1000}'
}
emit "| filesystem | onlyone µs | flock µs | pidlock µs | onlyone / flock | onlyone / pidlock | target ≤ 25 µs | samples |"
emit "|---|---:|---:|---:|---:|---:|---|---:|"
for g in "$T_FS" "$E_FS-disk"; do
  o=$(median_us "cycle-$g" onlyone) f=$(median_us "cycle-$g" flock) p=$(median_us "cycle-$g" pidlock)
  r1=$(awk -v a="$o" -v b="$f" 'BEGIN { if (b+0 > 0) printf "%.1f", a/b; else print "-" }')
  r2=$(awk -v a="$o" -v b="$p" 'BEGIN { if (b+0 > 0) printf "%.1f", a/b; else print "-" }')
  met=$(awk -v a="$o" 'BEGIN { print (a+0 <= 25 ? "met" : "**not met**") }')
  n=$(grep -o '"iters":\[[^]]*\]' "target/criterion/cycle-$g/onlyone/new/sample.json" 2>/dev/null | tr ',' '\n' | grep -c . || echo -)
  emit "| ${g%-disk} | $o | $f | $p | $r1 | $r2 | $met | $n |"
done
emit ""
if have strace; then
  emit "Syscalls per cycle: \`strace -f -c\` of \`examples/bench_cycle KIND DIR N\` with N = 1 and N = $((SYSCALL_N + 1)), the difference divided by $SYSCALL_N (one-time costs cancel out), on $T_FS:"
  emit ""
  per_cycle() { # kind -> "syscall count" lines, per cycle
    strace -f -c -o "$WORK/c1.txt" "$EX/bench_cycle" "$1" "$T/cyc" 1 2>/dev/null
    strace -f -c -o "$WORK/cN.txt" "$EX/bench_cycle" "$1" "$T/cyc" $((SYSCALL_N + 1)) 2>/dev/null
    awk -v n="$SYSCALL_N" '
      $0 !~ /^ *[0-9]/ || $NF == "total" { next }
      FNR == NR { a[$NF] = $4; next }
      { b[$NF] = $4 }
      END { for (s in b) { d = (b[s] - a[s]) / n; if (d >= 0.05) printf "%s %.2f\n", s, d } }
    ' "$WORK/c1.txt" "$WORK/cN.txt" | sort -k2,2nr -k1,1
  }
  emit "| kind | syscalls per cycle | which (count per cycle) |"
  emit "|---|---:|---|"
  for k in onlyone flock pidlock; do
    per_cycle "$k" >"$WORK/pc.txt"
    total=$(awk '{s += $2} END {printf "%.1f", s}' "$WORK/pc.txt")
    list=$(awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, ($2 == int($2) ? int($2) : $2)}' "$WORK/pc.txt")
    emit "| $k | $total | $list |"
  done
  emit ""
fi
if [ "$PERF_OK" = 1 ]; then
  emit "Where a cycle's time goes (\`perf record -g\` of \`bench_cycle onlyone\` × 20000 on $T_FS; share of samples, with children; kernel entry points and onlyone's functions):"
  emit ""
  perf record -q -g -o "$WORK/cyc.perf" "$EX/bench_cycle" onlyone "$T/cyc" 20000 >/dev/null 2>&1 || true
  emit '```text'
  perf report -i "$WORK/cyc.perf" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -4 | sed 's/^ */dso: /' >"$WORK/pr.txt" || true
  perf report -i "$WORK/cyc.perf" --children --sort sym --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | grep -E '__x64_sys_|onlyone::' | head -16 >>"$WORK/pr.txt" || true
  emit_file "$WORK/pr.txt"
  emit '```'
  emit ""
fi

# ---------------------------------------------------------------- 3
say "3/6 contention"
emit "## 3. Contention"
emit ""
emit "(load average before this part: $(load))"
emit ""
emit "$CONTEND_PROCS processes × $CONTEND_CYCLES acquire/release cycles on one lock, started together (\`examples/bench_contend.rs\`). Inside the critical section each process takes a second, independent kernel lock with \`flock(LOCK_EX|LOCK_NB)\` (a refusal is an overlap) and increments a shared counter by read-add-write (a lost update is an overlap). Fairness: acquisitions per process at the moment the first process finished its $CONTEND_CYCLES (min / max, coefficient of variation: 0 is perfectly even), the mean run of consecutive acquisitions by one process (1 is strict alternation, $CONTEND_CYCLES means each process takes all its cycles in one go), and the spread of finish times. \`onlyone\` waits with \`AcquireOptions::wait\` (inotify + pidfd); \`onlyone-try\` retries \`try_acquire\` with \`sched_yield\` between attempts; \`flock\` blocks in \`flock(LOCK_EX)\` on one fd per process."
emit ""
for pair in "$T:$T_FS" "$E:$E_FS"; do
  d=${pair%%:*} fs=${pair##*:}
  emit "### On $fs"
  emit ""
  emit "| kind | procs × cycles | cycles/s | wall s | overlaps (witness) | lost updates | per process at first finish (min / max) | CV | mean run | finish spread ms | failed tries per cycle |"
  emit "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"
  mkdir -p "$d/contend"
  for k in onlyone onlyone-try flock; do
    row=$(timeout 600 "$EX/bench_contend" "$k" "$d/contend" "$CONTEND_PROCS" "$CONTEND_CYCLES" || echo "| $k | **failed or timed out** |")
    emit "$row"
  done
  emit ""
done

# ---------------------------------------------------------------- 4
say "4/6 hand-off latency"
emit "## 4. Hand-off latency"
emit ""
emit "(load average before this part: $(load))"
emit ""
emit "From the holder's release to the waiting command's acquisition (\`examples/bench_handoff.rs\`): the holder (the bench process) takes the lock, starts the waiter as a separate command, lets it fall asleep (50 ms, then state \`S\`), notes T0 and releases; it then polls (with \`sched_yield\`) until the lock is seen taken: for onlyone a file is back at the lock path, for lockfile-progs likewise, for \`flock -w\` the waiter holds a lock in \`/proc/PID/fdinfo\` (not \`/proc/locks\`: reading it takes the kernel's global file-lock rwsem and stalls every flock call for milliseconds). Waiters: \`onlyone run --wait 30s J -- sleep 0.02\`, \`flock -w 30 LOCK sleep 0.02\`, \`lockfile-create --retry 20 LOCK\` (liblockfile sleeps 5 s, 10 s, … between tries). Target for onlyone: median ≤ 5 ms, p99 ≤ 20 ms."
emit ""
emit "| waiter | filesystem | median ms | p90 ms | p99 ms | max ms | runs | failed |"
emit "|---|---|---:|---:|---:|---:|---:|---:|"
handoff() { # kind dir fs n
  mkdir -p "$2/handoff"
  local row
  row=$(timeout 900 "$EX/bench_handoff" "$1" "$2/handoff" "$4" "$O" || echo "| $1 | - | - | - | - | 0 | **failed** |")
  emit "$(echo "$row" | sed "s/^| $1 |/| $1 | $3 |/")"
}
handoff onlyone "$T" "$T_FS" "$HANDOFF_N"
handoff onlyone "$E" "$E_FS" "$HANDOFF_N"
have flock && handoff flock "$T" "$T_FS" "$HANDOFF_N"
if have lockfile-create; then handoff lockfile "$T" "$T_FS" "$LOCKFILE_N"; else say "lockfile-progs missing: its hand-off row is skipped"; fi
emit ""

# ---------------------------------------------------------------- 5
say "5/6 scale"
emit "## 5. Scale"
emit ""
emit "(load average before this part: $(load))"
emit ""
emit "Timed with \`bench_cmd\` ($SCALE_ROUNDS rounds after $SCALE_WARMUP warm-up, the sizes alternated). Per-item figures are the median over the size."
emit ""
OWNER_SLEEP=""
sleep 86400 &
OWNER_SLEEP=$!
BG_PIDS+=("$OWNER_SLEEP")

emit "### \`status\` over N lock files in one directory (held by a live owner; target ≤ 200 ms at 10,000)"
emit ""
per_item() { # table on stdin; prints it with a µs-per-item column; the item count is the last word of the command name
  awk -F'|' 'NR == 1 { print $0 " µs per item |"; next } NR == 2 { print $0 "---:|"; next }
    { n = split($2, w, " "); k = w[n] + 0; printf "%s %s |\n", $0, (k > 0 ? sprintf("%.1f", $3 * 1000 / k) : "-") }'
}
for pair in "$T:$T_FS" "$E:$E_FS"; do
  d=${pair%%:*} fs=${pair##*:}
  : >"$WORK/st.tsv"
  for n in $STATUS_SIZES; do
    mkdir -p "$d/status-$n"
    "$EX/bench_scale" populate "$d/status-$n" "$n" "$OWNER_SLEEP"
    printf 'status, %s, %s\t%s\t--dir\t%s\tstatus\n' "$fs" "$n" "$O" "$d/status-$n" >>"$WORK/st.tsv"
  done
  "$EX/bench_cmd" "$WORK/st.tsv" "$SCALE_ROUNDS" "$SCALE_WARMUP" - | per_item >"$WORK/t5.md"
  emit_file "$WORK/t5.md"
  emit ""
  rm -rf "$d"/status-*
done
if have strace; then
  n=${STATUS_SIZES##* }
  mkdir -p "$T/status-s"
  "$EX/bench_scale" populate "$T/status-s" "$n" "$OWNER_SLEEP"
  strace -c -o "$WORK/ss.txt" "$O" --dir "$T/status-s" status >/dev/null 2>&1 || true
  emit "Syscalls of \`status\` over $n locks ($T_FS), per lock (\`strace -c\`):"
  emit ""
  emit '```text'
  awk -v n="$n" '$0 ~ /^ *[0-9]/ && $NF != "total" && $4 >= n / 2 { printf "%-12s %6.2f per lock\n", $NF, $4 / n }' "$WORK/ss.txt" >"$WORK/ss2.txt"
  emit_file "$WORK/ss2.txt"
  emit '```'
  emit ""
  if [ -n "$P" ]; then
    emit "Where \`status\` over $n locks spends its time (\`perf record --call-graph dwarf\`, 5 runs, same build as the profile at the end):"
    emit ""
    profile bash -c "for i in 1 2 3 4 5; do $P --dir $T/status-s status >/dev/null; done" >"$WORK/ps.txt"
    emit '```text'
    emit_file "$WORK/ps.txt"
    emit '```'
    emit ""
  fi
  rm -rf "$T/status-s"
fi

emit "### \`status\` over N *stale* records of finished runs (each needs a \`/proc\` search for the run's leftovers), $T_FS"
emit ""
: >"$WORK/sr.tsv"
for n in $STALE_SIZES; do
  mkdir -p "$T/stale-$n"
  "$EX/bench_scale" populate-stale-run "$T/stale-$n" "$n"
  printf 'status, stale runs, %s\t%s\t--dir\t%s\tstatus\n' "$n" "$O" "$T/stale-$n" >>"$WORK/sr.tsv"
done
"$EX/bench_cmd" "$WORK/sr.tsv" "$SCALE_ROUNDS" "$SCALE_WARMUP" - | per_item >"$WORK/t5.md"
emit_file "$WORK/t5.md"
emit ""

emit "### A journal of $JOURNAL_EVENTS events (target: \`history\` ≤ 100 ms), $T_FS"
emit ""
emit "\`bench_scale populate-journal\` writes the journal of one lock as runs leave it (a start, two skips, an end; every 10th run fails, every 50th is abandoned): $((JOURNAL_EVENTS / 4)) runs. Each command reads all of it."
emit ""
mkdir -p "$T/journal"
"$EX/bench_scale" populate-journal "$T/journal" "$JOURNAL_EVENTS"
{
  printf 'history (every run printed)\t%s\t--dir\t%s\thistory\thist\n' "$O" "$T/journal"
  printf 'history -n 10\t%s\t--dir\t%s\thistory\thist\t-n\t10\n' "$O" "$T/journal"
  printf 'history --json\t%s\t--dir\t%s\thistory\thist\t--json\n' "$O" "$T/journal"
  printf 'status hist\t%s\t--dir\t%s\tstatus\thist\n' "$O" "$T/journal"
  printf 'check hist --max-age 1d\t%s\t--dir\t%s\tcheck\thist\t--max-age\t1d\n' "$O" "$T/journal"
  printf 'metrics\t%s\t--dir\t%s\tmetrics\n' "$O" "$T/journal"
} >"$WORK/jr.tsv"
"$EX/bench_cmd" "$WORK/jr.tsv" "$SCALE_ROUNDS" "$SCALE_WARMUP" - >"$WORK/t5.md"
emit_file "$WORK/t5.md"
emit ""
emit "Size: $(du -h "$T/journal/hist.lock.journal" | cut -f1) (one file; a real journal rotates at 4 MiB and keeps two generations, so reads at most about a half of this)."
emit ""

emit "### With N extra processes on the host (spawned by the bench), $T_FS: \`reap --dry-run\` (target ≤ 300 ms at 3,000), \`run -- true\`, \`status\` of one stale run record"
emit ""
emit "A live \`onlyone run r -- sleep\` is in progress, so \`reap --dry-run r\` has one candidate to judge. The extra processes are idle forks of \`bench_scale spawn N\`."
emit ""
mkdir -p "$T/reap" "$T/run" "$T/stale1"
"$EX/bench_scale" populate-stale-run "$T/stale1" 1
"$O" --dir "$T/reap" run r -- sleep 86400 &
RUN_PID=$!
BG_PIDS+=("$RUN_PID")
sleep 0.3
echo "| extra processes | command | median ms | p10 ms | p90 ms | runs | failed |" >"$WORK/t6.md"
echo "|---:|---|---:|---:|---:|---:|---:|" >>"$WORK/t6.md"
for n in $PROC_SIZES; do
  if [ "$n" -gt 0 ]; then spawn_extra "$n"; fi
  {
    printf 'reap --dry-run r\t%s\t--dir\t%s\treap\t--dry-run\tr\n' "$O" "$T/reap"
    printf 'run j -- true\t%s\t--dir\t%s\trun\tj\t--\ttrue\n' "$O" "$T/run"
    printf 'status (1 stale run)\t%s\t--dir\t%s\tstatus\n' "$O" "$T/stale1"
  } >"$WORK/rp.tsv"
  "$EX/bench_cmd" "$WORK/rp.tsv" "$SCALE_ROUNDS" "$SCALE_WARMUP" - |
    awk -F'|' -v n="$n" 'NR > 2 { printf "| %s |%s|%s|%s|%s|%s|%s|\n", n, $2, $3, $4, $5, $8, $9 }' >>"$WORK/t6.md"
  if [ -n "$EXTRA_PID" ]; then end_extra; fi
done
emit_file "$WORK/t6.md"
emit ""
kill "$RUN_PID" 2>/dev/null || true
wait "$RUN_PID" 2>/dev/null || true

# ---------------------------------------------------------------- 6
say "6/6 the PostgreSQL store"
emit "## 6. The PostgreSQL store"
emit ""
emit "(load average before this part: $(load))"
emit ""
emit "\`examples/bench_store.rs\` starts a throwaway cluster (PostgreSQL $(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1), \`fsync=off\`) on a loopback port, as the store's tests do. No etcd row: \`etcdctl lock\` was not measured."
emit ""
"$EX/bench_store" "$EX/bench_cmd" "$O" "$STORE_ROUNDS" "$STORE_HANDOFFS" >"$WORK/t7.md"
emit_file "$WORK/t7.md"

# ---------------------------------------------------------------- profile
if [ -n "$P" ]; then
  say "profile: onlyone run"
  emit "## Profile: \`onlyone run j -- true\`"
  emit ""
  emit "\`perf record --call-graph dwarf\` over 200 runs (a release build with debug info, \`target/onlyone-bench/prof\`), samples of the \`onlyone\` process only, with children: a share is of all its samples, the exec'd \`true\` excluded. Stacks that DWARF unwinding could not walk to \`main\` count only in their leaf frames, so the shares of outer frames are lower bounds; what is not under \`lang_start_internal\` is exec, the dynamic loader, page faults and exit."
  emit ""
  mkdir -p "$T/prof"
  profile bash -c "for i in \$(seq 200); do $P --dir $T/prof run j -- true; done" >"$WORK/pr2.txt"
  emit '```text'
  emit_file "$WORK/pr2.txt"
  emit '```'
  emit ""
fi

emit "Load average at end: $(load)"
say "done: $OUT"
