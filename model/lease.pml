/*
 * lease.pml: the lease of the PostgreSQL store (PROTOCOL.md, invariants 6
 * to 8; lib/src/store/lease.rs, hold.rs, watchdog.rs).
 *
 * Time is discrete: one clock, `now`, read by the server and by both
 * holders (the margin M stands for the rate drift between them). The
 * server keeps the lease row (epoch, until); a take succeeds when
 * until <= now, a renewal when the epoch is the holder's and until > now,
 * and each sets until = now + L. A release sets until = now.
 *
 * Two holders (H0 and H1: "another holder") each try to take the lease and
 * run a command under it. A holder's wrapper:
 *   - sends each request at t_send; the server carries it out at any later
 *     tick, or never (lost); the reply comes back at any later tick, or
 *     never; the wrapper gives the call up after T;
 *   - counts its deadline from the send time of the last request that
 *     succeeded: TERM at t_send + L - G - M, KILL at t_send + L - M;
 *   - renews every R after a success, and again one tick after a failure
 *     (the code retries after R/4);
 *   - ends cleanly when the command exits: the command is gone first, then
 *     it tells its watchdog `done`, then it releases.
 * The watchdog (`onlyone lease-watchdog`) hears of every good renewal and
 * ends the command by the same deadline if the wrapper cannot: it died
 * (SIGKILL) or it is stopped (SIGSTOP, a debugger).
 * The environment may pause a wrapper for any number of ticks (its command
 * runs on), and kill one process (a wrapper or a watchdog) at any step.
 * A kill sent at the deadline lands up to LATE ticks late.
 *
 * Safety: never two commands running at once.
 *
 * HEALTHY (a separate check): every request is carried out and answered
 * within T, nothing pauses or dies. Then a holder's command is never sent
 * TERM: what R + T + G + M < L buys.
 *
 * Mutants (each must give a counterexample, see check.sh):
 *   DEADLINE_FROM_REPLY  the deadline counts from when the reply came
 *                        (invariant 6)
 *   RELEASE_FIRST        a clean end releases before the command is gone
 *                        (invariant 7)
 *   LATE=1 with M=0      a kill that lands a tick late, and no margin
 *                        (invariant 8)
 *   WATCHDOG_ON_EOF      the watchdog acts only once the wrapper has died:
 *                        a stopped wrapper lets its command run on
 *   NO_WATCHDOG          no watchdog: a killed wrapper's command runs on
 *   HEALTHY with R + T + G + M >= L: a healthy holder is sent TERM
 *
 * Not modelled: a pause of the whole host (the command is paused too and
 * may run a moment after it wakes, before its wrapper kills it: the fence's
 * job), clock-rate drift beyond M, a server that loses committed rows.
 */

#ifndef L
#define L 5
#endif
#ifndef R
#define R 1
#endif
#ifndef T
#define T 2
#endif
#ifndef G
#define G 0
#endif
#ifndef M
#define M 1
#endif
#ifndef LATE
#define LATE 0
#endif
#ifndef TMAX
#define TMAX 9
#endif
#ifndef MAXFAULT
#define MAXFAULT 1
#endif

byte now = 0;
/* the server's row */
byte epoch = 0;
byte until = 0;

/* per holder */
bool running[2];      /* its command is running                          */
bool termed[2];       /* its command was sent TERM                       */
byte kill_at[2];      /* t_send + L - M of the last good request         */
bool w_alive[2];      /* its wrapper is alive                            */
bool paused[2];       /* its wrapper is stopped                          */
bool wd_alive[2];     /* its watchdog is alive                           */
bool done_said[2];    /* the wrapper told its watchdog `done`            */
byte req[2];          /* its request in flight                           */
byte t_send[2];
byte next_renew[2];
byte nfault = 0;      /* kills and stops so far (at most MAXFAULT)       */

#define IDLE 0
#define SENT 1
#define OK   2        /* carried out: the lease is the holder's          */
#define NO   3        /* carried out: refused                            */

/* Who can end holder h's command at its deadline. */
#if defined(NO_WATCHDOG)
#define WATCHDOG_ACTS(h) (false)
#elif defined(WATCHDOG_ON_EOF)
#define WATCHDOG_ACTS(h) (wd_alive[h] && !done_said[h] && !w_alive[h])
#else
#define WATCHDOG_ACTS(h) (wd_alive[h] && !done_said[h])
#endif
#define WRAPPER_ACTS(h) (w_alive[h] && !paused[h])
#define ENFORCED(h) (WRAPPER_ACTS(h) || WATCHDOG_ACTS(h))

/* A tick may pass unless a command that someone can end would still run
 * at LATE ticks past its kill time. */
#define IN_TIME(h) (!running[h] || !ENFORCED(h) || now + 1 < kill_at[h] + LATE)
#ifdef HEALTHY
/* every renewal is sent on time, carried out and answered within T */
#define ANSWERED(h) ((req[h] == IDLE || now + 1 <= t_send[h] + T) && \
                     (!running[h] || req[h] != IDLE || now + 1 <= next_renew[h]))
#else
#define ANSWERED(h) (true)
#endif

active proctype Clock() {
    do
    :: atomic { now < TMAX && IN_TIME(0) && IN_TIME(1) && ANSWERED(0) && ANSWERED(1) -> now++ }
    :: now >= TMAX -> break
    od
}

/* Safety: never two commands running at once. Invariants 6 to 9 are what
 * keeps it (PROTOCOL.md):
 *   invariant_6_the_deadline_counts_from_the_send           DEADLINE_OF
 *   invariant_7_a_clean_end_stops_the_command_before_it_releases
 *   invariant_8_the_margin_covers_a_late_kill               kill_at, LATE
 *   invariant_9_the_watchdog_keeps_the_deadline_when_the_wrapper_cannot */
active proctype Overlap() {
end_watch:
    atomic { running[0] && running[1] ->
             printf("MSC: both commands run at %d\n", now);
             assert(false) }
}

/* The deadline from a request sent at `sent` that succeeded, the reply
 * having come at `now`. */
#ifdef DEADLINE_FROM_REPLY
#define DEADLINE_OF(sent) (now + L)
#else
#define DEADLINE_OF(sent) (sent + L)
#endif

/* Kill: the command is gone; a kill lands up to LATE ticks late. */
#define KILL_DUE(h) (running[h] && now + 1 >= kill_at[h] + LATE)

proctype Watchdog(byte h) {
    do
    :: atomic { WATCHDOG_ACTS(h) && KILL_DUE(h) -> running[h] = false;
                printf("MSC: the watchdog of %d kills its command at %d\n", h, now) }
    :: done_said[h] || !running[h] || now >= TMAX -> break
    od;
    wd_alive[h] = false
}

proctype Holder(byte h) {
    byte myepoch, deadline;
    bool got = false;
    {
        /* take: INSERT ... ON CONFLICT DO UPDATE ... WHERE lock_until <= now */
        do
        :: atomic { !paused[h] && req[h] == IDLE && now < TMAX - L ->
                    t_send[h] = now; req[h] = SENT }
        :: atomic { req[h] == SENT ->               /* the server carries it out */
                    if
                    :: until <= now -> epoch++; until = now + L; myepoch = epoch; req[h] = OK;
                       printf("MSC: the server gives %d epoch %d at %d, until %d\n", h, epoch, now, until)
                    :: else -> req[h] = NO
                    fi }
        :: atomic { !paused[h] && req[h] == OK && now <= t_send[h] + T ->   /* the reply */
                    deadline = DEADLINE_OF(t_send[h]);
                    req[h] = IDLE;
                    if
                    :: now + M < deadline ->
                       kill_at[h] = deadline - M; running[h] = true; got = true;
                       wd_alive[h] = true; run Watchdog(h);
                       next_renew[h] = t_send[h] + R;
                       printf("MSC: %d takes epoch %d (sent at %d, answered at %d), kill at %d\n",
                              h, myepoch, t_send[h], now, kill_at[h])
                    :: else -> skip
                    fi };
           break
        :: atomic { !paused[h] && req[h] == NO -> req[h] = IDLE }         /* held: try again */
        :: atomic { !paused[h] && req[h] != IDLE && now > t_send[h] + T -> req[h] = IDLE }
        :: atomic { req[h] == IDLE && now >= TMAX - L -> break }
        od;

        /* hold: renew, end the command by the deadline, or end cleanly */
        do
        :: !got -> break
        :: atomic { !paused[h] && KILL_DUE(h) -> running[h] = false;
                    printf("MSC: %d kills its command at %d\n", h, now) }
        :: atomic { !paused[h] && running[h] && !termed[h] && now + G >= kill_at[h] ->
                    termed[h] = true;
                    printf("MSC: %d sends TERM at %d\n", h, now);
#ifdef HEALTHY
                    /* the_inequality_keeps_a_healthy_holder_running:
                     * R + T + G + M < L */
                    assert(false);
#endif
                  }
        :: atomic { !paused[h] && !running[h] && req[h] == IDLE -> break }
        :: atomic { !paused[h] && running[h] && req[h] == IDLE && now >= next_renew[h] ->
                    t_send[h] = now; req[h] = SENT }
        :: atomic { req[h] == SENT ->               /* the server carries it out */
                    if
                    :: epoch == myepoch && until > now -> until = now + L; req[h] = OK;
                       printf("MSC: the server renews %d's lease at %d, until %d\n", h, now, until)
                    :: else -> req[h] = NO
                    fi }
        :: atomic { !paused[h] && req[h] == OK && now <= t_send[h] + T ->     /* a good reply */
                    req[h] = IDLE;
                    next_renew[h] = t_send[h] + R;
                    if
                    :: running[h] && DEADLINE_OF(t_send[h]) - M > kill_at[h] ->
                       /* the wrapper tells its watchdog the send time */
                       kill_at[h] = DEADLINE_OF(t_send[h]) - M;
                       printf("MSC: %d renewed (sent at %d, answered at %d), kill at %d\n",
                              h, t_send[h], now, kill_at[h])
                    :: else -> skip
                    fi }
        :: atomic { !paused[h] && req[h] == NO ->   /* the lease is gone */
                    req[h] = IDLE; running[h] = false }
        :: atomic { !paused[h] && (req[h] == SENT || req[h] == OK) && now > t_send[h] + T ->
                    req[h] = IDLE; next_renew[h] = now + 1 }                 /* timed out */
        :: atomic { running[h] && termed[h] -> running[h] = false }           /* TERM obeyed */
        :: atomic { !paused[h] && running[h] ->     /* the command exits: a clean end */
#ifdef RELEASE_FIRST
                    if :: epoch == myepoch -> until = now :: else -> skip fi;
                    printf("MSC: %d releases before its command is gone, at %d\n", h, now)
#else
                    running[h] = false
#endif
                  };
#ifdef RELEASE_FIRST
           running[h] = false;
#endif
           done_said[h] = true;
           atomic { if :: epoch == myepoch -> until = now :: else -> skip fi }
        :: now >= TMAX -> running[h] = false; break
        od;
        done_said[h] = true
    } unless { !w_alive[h] }
}

/* Another holder, at its most eager: it takes the lease the moment the
 * server lets it (a take's round trip in one step), and keeps the rules
 * itself without renewing: its command is gone by the take's L - M. */
proctype Other() {
    do
    :: atomic { until <= now -> epoch++; until = now + L;
                kill_at[1] = now + L - M; running[1] = true;
                printf("MSC: the other holder takes epoch %d at %d, until %d\n", epoch, now, until) };
       break
    :: now >= TMAX -> break
    od;
    atomic { KILL_DUE(1) || now >= TMAX -> running[1] = false }
}

/* One fault at a time: a wrapper stopped (and perhaps resumed), a wrapper
 * killed, or a watchdog killed. (A stopped wrapper whose watchdog was
 * killed too is not covered: PROTOCOL.md.) */
inline stop_wrapper(h) {
    atomic { nfault < MAXFAULT && w_alive[h] && !paused[h] -> paused[h] = true; nfault++;
             printf("MSC: wrapper %d stopped at %d\n", h, now) }
}
inline resume_wrapper(h) {
    atomic { paused[h] -> paused[h] = false; printf("MSC: wrapper %d resumed at %d\n", h, now) }
}
inline kill_wrapper(h) {
    atomic { nfault < MAXFAULT && w_alive[h] -> w_alive[h] = false; nfault++;
             printf("MSC: wrapper %d killed at %d\n", h, now) }
}
inline kill_watchdog(h) {
    atomic { nfault < MAXFAULT && wd_alive[h] -> wd_alive[h] = false; nfault++;
             printf("MSC: watchdog %d killed at %d\n", h, now) }
}

active proctype Environment() {
    do
#ifndef HEALTHY
    :: stop_wrapper(0)
    :: resume_wrapper(0)
    :: kill_wrapper(0)
    :: kill_watchdog(0)
#endif
    :: !paused[0] && !paused[1] -> break
    od
}

init {
    atomic {
        w_alive[0] = true;
        run Holder(0);
#ifndef HEALTHY
        /* (a healthy holder's check needs no other holder: its takes are
         * refused while the lease is live) */
        w_alive[1] = true;
        run Other()
#endif
    }
}
