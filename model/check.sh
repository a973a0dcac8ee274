#!/usr/bin/env bash
# Checks the protocol's models with spin: every design check must hold (no
# assertion violated, no invalid end state, the search complete) and every
# mutant must give a counterexample. One line per check; exits 1 when any
# check ends otherwise than expected. See model/README.md.
#
# usage: model/check.sh [--events] [NAME...]
#   --events  print each counterexample's events (the model's MSC lines)
#   NAME      run only the checks whose name contains NAME
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
events=
filters=()
for a in "$@"; do
  case $a in
    --events) events=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "check.sh: unknown option $a (try --help)" >&2; exit 2 ;;
    *) filters+=("$a") ;;
  esac
done

for tool in spin gcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check.sh: $tool is not installed (Debian: apt-get install spin gcc)" >&2
    exit 2
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Memory for one search, in MB; the largest check needs about 2 GB.
memlim=${MODEL_MEMLIM:-6000}

# name | model | spin flags | expect (holds or fails)
# The names are PROTOCOL.md's: an invariant's name (and @bounds) for the
# design, that name, a dot and a tag for a mutant that breaks it.
checks=$(cat <<'LIST'
invariant_1_2_3_5_lock_design                                 | lock.pml  |                                      | holds
invariant_1_2_3_5_lock_design@pid_reuse                       | lock.pml  | -DPIDREUSE                           | holds
invariant_1_2_3_5_lock_design@two_crashes                     | lock.pml  | -DMAXCRASH=2                         | holds
invariant_1_every_removal_is_justified_under_the_guard.no_reread | lock.pml | -DNO_REREAD                         | fails
invariant_1_every_removal_is_justified_under_the_guard.pid_only  | lock.pml | -DPID_ONLY -DPIDREUSE               | fails
invariant_2_the_guard_is_a_kernel_lock_freed_on_death.guard_leak | lock.pml | -DGUARD_LEAK                        | fails
invariant_3_release_is_guarded_always.unguarded_release       | lock.pml  | -DUNGUARDED_RELEASE                  | fails
invariant_5_running_out_of_retries_never_says_held            | lock.pml  | -DMAXTRY=1                           | holds
invariant_5_running_out_of_retries_never_says_held.exhausted_says_held | lock.pml | -DEXHAUST_SAYS_HELD -DMAXTRY=1 | fails
invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive | run.pml  |                                      | holds
invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive@two_crashes | run.pml | -DMAXCRASH=2            | holds
invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive@three_runs | run.pml | -DNRUN=3                  | holds
invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive.wrapper_only | run.pml | -DWRAPPER_ONLY          | fails
invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive.wrapper_or_command | run.pml | -DWRAPPER_OR_COMMAND | fails
invariant_6_7_8_9_lease_design                                | lease.pml |                                      | holds
invariant_6_7_8_9_lease_design@grace_too_long                 | lease.pml | -DG=1                                | holds
invariant_6_the_deadline_counts_from_the_send.deadline_from_reply | lease.pml | -DDEADLINE_FROM_REPLY           | fails
invariant_7_a_clean_end_stops_the_command_before_it_releases.release_first | lease.pml | -DRELEASE_FIRST        | fails
invariant_8_the_margin_covers_a_late_kill                     | lease.pml | -DLATE=1                             | holds
invariant_8_the_margin_covers_a_late_kill.no_margin           | lease.pml | -DLATE=1 -DM=0                       | fails
invariant_9_the_watchdog_keeps_the_deadline_when_the_wrapper_cannot.on_eof_only | lease.pml | -DWATCHDOG_ON_EOF | fails
invariant_9_the_watchdog_keeps_the_deadline_when_the_wrapper_cannot.no_watchdog | lease.pml | -DNO_WATCHDOG     | fails
the_inequality_keeps_a_healthy_holder_running                 | lease.pml | -DHEALTHY                            | holds
the_inequality_keeps_a_healthy_holder_running.broken          | lease.pml | -DHEALTHY -DG=1                      | fails
invariant_10_11_12_queue_design                               | queue.pml |                                      | holds
invariant_10_11_12_queue_design@four_fires                    | queue.pml | -DNFIRE=4                            | holds
invariant_10_11_12_queue_design@two_crashes                   | queue.pml | -DMAXCRASH=2                         | holds
invariant_10_11_12_queue_design@no_relook                     | queue.pml | -DNO_RELOOK                          | holds
invariant_10_at_most_one_fire_waits.look_then_create          | queue.pml | -DLOOK_THEN_CREATE                   | fails
invariant_11_a_dead_waiter_never_blocks_the_queue.no_probe    | queue.pml | -DNO_PROBE                           | fails
invariant_12_a_skipped_fire_is_picked_up_by_a_run_started_after_it.seat_after_start | queue.pml | -DSEAT_AFTER_START | fails
invariant_12_a_skipped_fire_is_picked_up_by_a_run_started_after_it.bounded_wait | queue.pml | -DBOUNDED_WAIT     | fails
invariant_13_14_15_slots_design                               | slots.pml |                                      | holds
invariant_13_14_15_slots_design@three_slots                   | slots.pml | -DNSLOT=3 -DNRUN=2                   | holds
invariant_13_14_15_slots_design@three_slots_three_runs        | slots.pml | -DNSLOT=3 -DNFIRE=2                  | holds
invariant_13_14_15_slots_design@long_run                      | slots.pml | -DLONG                               | holds
invariant_13_14_15_slots_design@takeover_in_steps             | slots.pml | -DSTEPS                              | holds
invariant_13_at_most_n_runs_hold_slots_one_a_slot.no_recheck  | slots.pml | -DNO_RECHECK                         | fails
invariant_13_at_most_n_runs_hold_slots_one_a_slot.count_then_take | slots.pml | -DCOUNT_THEN_TAKE                | fails
invariant_14_a_dead_holders_slot_is_taken.never_reclaimed     | slots.pml | -DNEVER_RECLAIMED                    | fails
invariant_15_a_waiter_is_served_when_any_slot_frees.leaves_the_line | slots.pml | -DLEAVE_EARLY                  | fails
invariant_15_a_waiter_is_served_when_any_slot_frees.one_slot_watched | slots.pml | -DONE_SLOT_WATCHED -DLONG     | fails
invariant_13_14_16_mixed_n_design                             | slots.pml | -DMIXED                              | holds
invariant_13_14_16_mixed_n_design@run_in_slot_2               | slots.pml | -DMIXED -DTHREE_IN_SLOT2             | holds
invariant_13_14_16_mixed_n_design@four_fires                  | slots.pml | -DMIXED -DNFIRE=4                    | holds
invariant_13_14_16_mixed_n_design@two_crashes                 | slots.pml | -DMIXED -DMAXCRASH=2                 | holds
invariant_13_14_16_mixed_n_design@takeover_in_steps           | slots.pml | -DMIXED -DSTEPS -DTHREE_IN_SLOT2     | holds
invariant_16_the_live_runs_never_outnumber_the_smallest_n.one_slot_file | slots.pml | -DMIXED -DONE_SLOT_FILE  | fails
LIST
)

trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

printf '%-86s %-6s %-6s %12s %6s %8s  %s\n' check expect got states depth seconds verdict
bad=0
ran=0
while IFS='|' read -r name model flags expect; do
  name=$(trim "$name"); model=$(trim "$model"); flags=$(trim "$flags"); expect=$(trim "$expect")
  if [ "${#filters[@]}" -gt 0 ]; then
    keep=
    for f in "${filters[@]}"; do [[ $name == *"$f"* ]] && keep=1; done
    [ -n "$keep" ] || continue
  fi
  ran=$((ran + 1))
  d=$work/$name
  mkdir -p "$d"
  cp "$here"/*.pml "$d"/
  # shellcheck disable=SC2086 # the flags are words
  (cd "$d" && spin $flags -a "$model" >spin.out 2>&1) || {
    echo "check.sh: spin could not read $model with '$flags':" >&2
    cat "$d/spin.out" >&2
    exit 1
  }
  (cd "$d" && gcc -O2 -w -DSAFETY -DNOCLAIM -DMEMLIM="$memlim" -o pan pan.c)
  start=$EPOCHREALTIME
  (cd "$d" && ./pan -m1000000 >pan.out 2>&1) || true
  secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
  out=$d/pan.out
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -1)
  states=$(awk '/states, stored/ {print $1; exit}' "$out")
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | head -1)
  got=fails
  [ "${errors:-1}" = 0 ] && got=holds
  verdict=ok
  [ "$got" = "$expect" ] || verdict=UNEXPECTED
  # A design check must have searched everything: no depth or memory limit.
  if [ "$got" = holds ] && grep -qE 'max search depth too small|out of memory|reached -DMEMLIM bound|Search not completed' "$out"; then
    verdict="UNEXPECTED (search incomplete)"
  fi
  kind=
  if [ "$got" = fails ]; then
    kind=$(grep -oE 'assertion violated|invalid end state|acceptance cycle' "$out" | head -1)
  fi
  printf '%-86s %-6s %-6s %12s %6s %8.1f  %s%s\n' "$name" "$expect" "$got" "${states:-?}" "${depth:-?}" "$secs" "$verdict" "${kind:+ ($kind)}"
  if [ "$verdict" != ok ]; then
    bad=$((bad + 1))
    sed 's/^/    /' "$out" | head -40
  fi
  if [ -n "$events" ] && [ -f "$d/$model.trail" ]; then
    # The shortest counterexample (pan -i), as the model's events.
    (cd "$d" && rm -f "$model.trail" &&
      gcc -O2 -w -DSAFETY -DNOCLAIM -DREACH -DMEMLIM="$memlim" -o pan pan.c &&
      ./pan -i -m1000000 >/dev/null 2>&1) || true
    # shellcheck disable=SC2086
    (cd "$d" && spin $flags -t "$model" 2>&1) | sed -n 's/^ *MSC: /    /p'
  fi
  rm -rf "$d"
done <<<"$checks"

if [ "$ran" = 0 ]; then
  echo "check.sh: no check matches ${filters[*]}" >&2
  exit 2
fi
if [ "$bad" -gt 0 ]; then
  echo "check.sh: $bad of $ran checks ended otherwise than expected" >&2
  exit 1
fi
echo "check.sh: all $ran checks as expected"
