# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_onlyone_global_optspecs
    string join \n dir= state-dir= allow-shared-fs store= h/help V/version
end

function __fish_onlyone_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_onlyone_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_onlyone_using_subcommand
    set -l cmd (__fish_onlyone_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c onlyone -n "__fish_onlyone_needs_command" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_needs_command" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_needs_command" -l store -d 'Keep the locks in a store that several hosts share, named by its URL (its engines: onlyone --help)' -r
complete -c onlyone -n "__fish_onlyone_needs_command" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_needs_command" -s h -l help -d 'Print help'
complete -c onlyone -n "__fish_onlyone_needs_command" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "run" -d 'Run a command holding the lock for exactly its life'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "acquire" -d 'Take a lock for the calling shell (for scripts; pair with release)'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "release" -d 'Release a lock taken with acquire'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "precheck" -d 'Should this fire run? 75 on proof of a live run, else 0 (fail open)'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "status" -d 'Show every lock (or the named ones): free, held, stale or unknown'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "stop" -d 'End the live run: signal, grace, KILL, then wait until the lock is free'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "reap" -d 'End the lingering processes of finished or idle runs of the named jobs'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "history" -d 'The runs of a lock, the last to end first, from its journal'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "check" -d 'A monitoring check (Nagios, Icinga, Sensu): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "metrics" -d 'Prometheus metrics (text format) for every lock (or the named ones)'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "completions" -d 'Print a shell\'s completion script (bash, zsh, fish, elvish, powershell)'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "manpages" -d 'Write the manual pages (onlyone.1, onlyone-COMMAND.1) into DIR'
complete -c onlyone -n "__fish_onlyone_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l slots -d 'Let up to N runs hold the lock at once, each in a slot of its own (default 1: one at a time)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l wait -d 'Wait up to DUR for a running one to finish' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l max-time -d 'End the command after DUR (exit 124). More than 0: for no limit, leave it out' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l idle-timeout -d 'End the run once all its processes have used no CPU and done no I/O for DUR (exit 124). More than 0. Not with --linger (`onlyone reap --idle DUR` ends a lingering run once idle)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l kill-after -d 'Grace between TERM and KILL (0: KILL right after TERM)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l lease -d 'With --store: the lease L the server grants at each renewal (every L/6). The command is ended before a lease not renewed in time can run out, so --kill-after must fit: L/6 + L/10 + grace + max(L/15, 100ms) < L (30s allows up to 19s)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l held-exit -d 'Exit code for a skip' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l schedule -d 'The times the job is meant to fire at: a cron expression (`0 2 * * *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l late -d 'How late a fire may come and still be its scheduled time\'s (default: 5 minutes, at most half the schedule\'s period)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l catch-up-within -d 'How old the last missed fire may be for --catch-up to make up for it (default: one period of the schedule)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l jitter -d 'Wait a random time up to DUR before taking the lock, so that a fleet does not fire at the same second' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l spread -d 'Wait a stable offset up to DUR before taking the lock: hashed from the host\'s machine id and the lock, the same at every fire (systemd\'s RandomizedOffsetSec=)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l deadline -d 'One budget for acquiring (waiting and stopping included)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l ping -d 'Ping URL with the healthchecks.io protocol (repeatable)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l ping-file -d 'Read ping URLs from FILE, one a line (`#` starts a comment), in place of $ONLYONE_PING (with --ping, both are pinged)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l replace -d 'Stop the running one (TERM, grace, KILL), then run'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l queue -d 'At most one fire waits: wait for the running one (for ever, or up to --wait DUR) unless another fire already waits; then skip (75)'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l keep-strays -d 'Leave the run\'s leftover processes running when the command exits (and release the lock)'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l linger -d 'When the command exits, the run\'s processes that outlive it keep the lock held (work handed to tmux, screen, a terminal server); `onlyone reap` ends them once idle. Not with --max-time or --idle-timeout, which would apply to the command alone'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l catch-up -d 'Make up for missed fires: a fire that serves no scheduled time runs once for all the fires missed within --catch-up-within (never a backlog), else not at all'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -s q -l quiet -d 'No message on a skip or a takeover (cron mails whatever a job prints)'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand run" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l owner -d 'The owner\'s pid (default: the calling shell)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l slots -d 'Let up to N runs hold the lock at once, each in a slot of its own (default 1: one at a time)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l wait -d 'Wait up to DUR for a running one to finish (waiters get the lock in the order they began to wait)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l held-exit -d 'Exit code when the lock is held' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l deadline -d 'One budget for the whole call' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l ping -d 'Ping URL with the healthchecks.io protocol: URL/start?rid=RID now, the end at `release --exit CODE` (repeatable)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l ping-file -d 'Read ping URLs from FILE, one a line (`#` starts a comment), in place of $ONLYONE_PING (with --ping, both are pinged)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l queue -d 'At most one waits: wait (for ever, or up to --wait DUR) unless another caller already waits with --queue; then the lock counts as held'
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l export -d 'Print shell assignments of ONLYONE_LOCK and ONLYONE_TOKEN for eval (`exit N` on failure); processes that carry the token keep the lock held'
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -s q -l quiet -d 'No message when the lock is held or a stale lock is taken over'
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand acquire" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l owner -d 'The owner\'s pid (default: the calling shell)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l exit -d 'How the script ended, for the journal: its exit code, 0 to 255 (`trap \'onlyone release L --exit $?\' EXIT`). Without it the run is recorded as "released, exit unknown": neither a success nor a failure' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l ping -d 'Ping URL with the run\'s end once the lock is released: URL/CODE?rid=RID with --exit CODE, URL/log?rid=RID without (the exit is unknown)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l ping-file -d 'Read ping URLs from FILE, one a line (`#` starts a comment), as `run --ping-file` does; with --ping, both are pinged. Not with --force' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l deadline -d 'One budget for the whole call' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l force -d 'Remove the lock whoever holds it'
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -s q -l quiet -d 'No message when there was nothing to release'
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand release" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l slots -d 'Let up to N runs hold the lock at once, each in a slot of its own (default 1: one at a time)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l schedule -d 'The times the job is meant to fire at: a cron expression (`0 2 * * *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l late -d 'How late a fire may come and still be its scheduled time\'s (default: 5 minutes, at most half the schedule\'s period)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l deadline -d 'One budget for the whole call; when it runs out, exit 0' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l ping -d 'Ping URL with the healthchecks.io protocol when the lock is held: URL/log?rid=RID, its body saying who holds it (a skip is not a failure); a free lock pings nothing (the fire\'s `run --ping` does). Repeatable; bounded and failing open as `run --ping`' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l ping-file -d 'Read ping URLs from FILE, one a line (`#` starts a comment), in place of $ONLYONE_PING (with --ping, both are pinged); checked as `run --ping-file` checks it' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -s q -l quiet -d 'No message when the lock is held'
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand precheck" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l deadline -d 'One budget for the whole call' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l schedule -d 'The times the job is meant to fire at: a cron expression (`0 2 * * *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l json -d 'Print JSON (schema in doc/json.md)'
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand status" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l signal -d 'The first signal' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l kill-after -d 'Grace before KILL (0: KILL right after the first signal)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l deadline -d 'One budget for the whole call' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l pid -d 'Stop only the run whose pid is PID (the PID `status` shows), of a lock of several slots or of one' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand stop" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l idle -d 'How long a process must have been idle' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l grace -d 'Grace between TERM and KILL (0: KILL right after TERM)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l deadline -d 'One budget for every call reap makes' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l dry-run -d 'Show what would be ended, and why; change nothing'
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l json -d 'Print every candidate as JSON'
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -s q -l quiet -d 'Print nothing unless a process was ended (or would be, with --dry-run) or something failed (for cron, which mails any output)'
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -s h -l help -d 'Print help'
complete -c onlyone -n "__fish_onlyone_using_subcommand reap" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -s n -l limit -d 'Show at most N runs' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -l since -d 'Only runs that started within DUR' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -l json -d 'One JSON object per run and line (schema in doc/json.md)'
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -s h -l help -d 'Print help'
complete -c onlyone -n "__fish_onlyone_using_subcommand history" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l max-age -d 'CRITICAL when no run succeeded within DUR' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l max-runtime -d 'CRITICAL when the current run has lasted longer than DUR' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l max-skips -d 'CRITICAL when more than N fires in a row were skipped' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l deadline -d 'One budget for the whole call; a lock not judged by then is UNKNOWN' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l schedule -d 'The times the job is meant to fire at: a cron expression (`0 2 * * *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l late -d 'How late a fire may come and still be its scheduled time\'s (default: 5 minutes, at most half the schedule\'s period)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand check" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l textfile -d 'Write to this file atomically instead of printing' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l schedule -d 'The times the job is meant to fire at: a cron expression (`0 2 * * *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l late -d 'How late a fire may come and still be its scheduled time\'s (default: 5 minutes, at most half the schedule\'s period)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c onlyone -n "__fish_onlyone_using_subcommand metrics" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand completions" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand completions" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand completions" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand completions" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand completions" -s h -l help -d 'Print help'
complete -c onlyone -n "__fish_onlyone_using_subcommand completions" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand manpages" -l dir -d 'The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root, or /tmp/onlyone-$UID)' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand manpages" -l state-dir -d 'Where the journals (the history of runs) are kept, apart from the locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR, else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written only when it is this user\'s and writable by no one else' -r -F
complete -c onlyone -n "__fish_onlyone_using_subcommand manpages" -l store -d 'Keep the locks in a store that several hosts share, named by its URL: postgres://USER@HOST[:PORT]/DATABASE (a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass), or etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, ?cacert=PATH&cert=PATH&key=PATH; a user\'s password from ETCDCTL_PASSWORD or ?password_file=PATH)' -r
complete -c onlyone -n "__fish_onlyone_using_subcommand manpages" -l allow-shared-fs -d 'Write locks even on a network or FUSE filesystem (NFS, SMB, 9p, FUSE...), which onlyone otherwise refuses: only for one that this host alone uses'
complete -c onlyone -n "__fish_onlyone_using_subcommand manpages" -s h -l help -d 'Print help'
complete -c onlyone -n "__fish_onlyone_using_subcommand manpages" -s V -l version -d 'Print version'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "run" -d 'Run a command holding the lock for exactly its life'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "acquire" -d 'Take a lock for the calling shell (for scripts; pair with release)'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "release" -d 'Release a lock taken with acquire'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "precheck" -d 'Should this fire run? 75 on proof of a live run, else 0 (fail open)'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "status" -d 'Show every lock (or the named ones): free, held, stale or unknown'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "stop" -d 'End the live run: signal, grace, KILL, then wait until the lock is free'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "reap" -d 'End the lingering processes of finished or idle runs of the named jobs'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "history" -d 'The runs of a lock, the last to end first, from its journal'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "check" -d 'A monitoring check (Nagios, Icinga, Sensu): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "metrics" -d 'Prometheus metrics (text format) for every lock (or the named ones)'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "completions" -d 'Print a shell\'s completion script (bash, zsh, fish, elvish, powershell)'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "manpages" -d 'Write the manual pages (onlyone.1, onlyone-COMMAND.1) into DIR'
complete -c onlyone -n "__fish_onlyone_using_subcommand help; and not __fish_seen_subcommand_from run acquire release precheck status stop reap history check metrics completions manpages help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
