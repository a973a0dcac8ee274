#!/bin/sh
# A plain pidfile lock as people write it, the baseline "home-made pidfile"
# of bench/run.sh: create the file only if it is absent (noclobber), run the
# command, remove the file. No staleness check, no kernel lock.
#   pidfile.sh LOCKFILE COMMAND...
lock=$1
shift
if (set -C && echo $$ >"$lock") 2>/dev/null; then
  trap 'rm -f "$lock"' EXIT
  "$@"
else
  echo "pidfile.sh: $lock is held by $(cat "$lock" 2>/dev/null)" >&2
  exit 75
fi
