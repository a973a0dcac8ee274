/*
 * queue.pml: `onlyone run --queue` (PROTOCOL.md, invariants 10, 11 and
 * 12): at most one fire waits; a fire that finds one waiting skips.
 *
 * A run R holds the lock DIR/NAME when fires F1..FN arrive (each at a
 * step of its own, in any order). The queue seat DIR/.NAME.queue is an
 * onlyone lock file of its own whose record carries the waiter's token.
 * Both files are lock.pml's, one step each: a link that succeeds when the
 * path is empty or its record's owner is dead (a stale record, reclaimed
 * under the guard: invariants 1 to 3), a release that removes the record
 * only if it is still ours. A record is alive while its owner is.
 *
 * A fire, the design:
 *   1. try the lock: taken -> its command runs, it releases;
 *   2. held: try the seat: taken -> it waits for the lock; once it holds
 *      the lock it releases the seat, then its command runs, then it
 *      releases the lock;
 *   3. the seat is held by a live waiter W: it looks at the lock again.
 *      The lock's record carries W's token (W has just become the runner
 *      and is about to free the seat): it waits for the seat to be freed
 *      (or W to die), or for a short bound to run out, and starts again
 *      at 1. Otherwise it skips (75, "one already queued").
 * A killer may crash R or any fire at any step (SIGKILL): its records
 * stay behind, stale.
 *
 * Ghosts: a fire has arrived once it took its first step; a run's command
 * that starts picks up the work of every fire that has arrived (covered).
 * A skipped fire notes the waiter its last probe found alive (counted); if
 * that waiter is killed afterwards, the fire is lost with it, as work is
 * lost with a killed run (the next fire takes the stale seat).
 *
 * Checks:
 *   invariant_10_at_most_one_fire_waits: never two live fires that both
 *     hold (or think they hold) the seat while they wait for the lock;
 *   invariant_11_a_dead_waiter_never_blocks_the_queue: every skip is
 *     justified by a probe that found the seat's holder alive; no fire is
 *     blocked for ever (spin's invalid end states);
 *   invariant_12_a_skipped_fire_is_picked_up_by_a_run_started_after_it:
 *     once every process is done, every skipped fire is covered by a run
 *     whose command started after it arrived, unless the waiter it
 *     counted on was killed.
 *
 * Switches:
 *   LOOK_THEN_CREATE  the seat is taken by looking at it and then writing
 *                     the record (O_CREAT|O_TRUNC, a rename over it)
 *                     instead of a link that fails on EEXIST: invariant
 *                     10's mutant
 *   NO_PROBE          a seat's record counts as a live waiter while it is
 *                     there (no liveness probe, no stale takeover):
 *                     invariant 11's mutant
 *   SEAT_AFTER_START  a waiter releases the seat once its command has
 *                     started, not before: invariant 12's mutant
 *   BOUNDED_WAIT      a waiter may give up (`--queue --wait DUR`),
 *                     freeing the seat: what invariant 12 does not cover
 *   NO_RELOOK         a fire skips on a live seat without looking at the
 *                     lock again (the design still holds without it:
 *                     check.sh's @no_relook)
 *   NFIRE (3, at most 4) MAXCRASH (1)
 */

#ifndef NFIRE
#define NFIRE 3
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif

/* Model ids: fires are 1..NFIRE, the run that holds the lock is R. */
#define R 5

byte lock_tok = R;    /* the lock's record: its owner's id; 0: no file    */
byte seat_tok = 0;    /* the seat's record: its waiter's id; 0: no file   */

bool started[6];
bool dead[6];
bool fin[6];
bool waiting[6];      /* holds the seat (it thinks) and waits for the lock */
byte ncrash = 0;

/* ghosts */
bool covered[6];      /* a command started after fire i arrived           */
bool skipped[6];      /* fire i skipped: "one already queued"             */
byte counted[6];      /* the waiter whose seat fire i skipped on          */

#define LIVE(i) (started[i] && !dead[i] && !fin[i])
#define DONE(i) (dead[i] || fin[i])
/* A path a link may take: empty, or its record's owner dead (stale). */
#define FREE(tok) (tok == 0 || !LIVE(tok))
#ifdef NO_PROBE
#define SEAT_FREE (seat_tok == 0)
#else
#define SEAT_FREE FREE(seat_tok)
#endif
#define W(i) (LIVE(i) && waiting[i])
#define NWAITING (W(1) + W(2) + W(3) + W(4))

/* What a fire decided. */
#define RUN  1
#define WAIT 2
#define SKIP 3

/* The fire has the seat: invariant_10_at_most_one_fire_waits */
#define HAS_SEAT(me) waiting[me] = true; \
    printf("MSC: %d takes the seat\n", me); \
    assert(NWAITING <= 1)

/* The seat is held by w: the probe found w alive (a dead waiter's seat
 * is stale and taken over).
 * invariant_11_a_dead_waiter_never_blocks_the_queue */
#define PROBED(me, w) printf("MSC: %d finds the seat held by %d\n", me, w); \
    assert(LIVE(w))

/* A run's command starts: it picks up the work of every fire that has
 * arrived (ghost). */
#define COMMAND_STARTS(me) atomic { \
    covered[1] = covered[1] || started[1]; \
    covered[2] = covered[2] || started[2]; \
    covered[3] = covered[3] || started[3]; \
    covered[4] = covered[4] || started[4]; \
    printf("MSC: %d's command starts\n", me) }

#define RELEASE_SEAT(me) atomic { \
    if \
    :: seat_tok == me -> seat_tok = 0; printf("MSC: %d releases the seat\n", me) \
    :: else -> skip \
    fi }

proctype Fire(byte me) {
    byte w;           /* the seat's holder, as the last probe saw it */
    byte next = 0;
    atomic { started[me] = true; printf("MSC: %d arrives\n", me) }
    {
        do
        :: atomic {                                   /* 1. the lock */
               w = 0;
               if
               :: FREE(lock_tok) -> lock_tok = me; next = RUN;
                  printf("MSC: %d takes the lock\n", me)
               :: else -> skip
               fi };
           if
           :: next == RUN -> break
           :: else -> skip
           fi;
           /* 2. the seat */
#ifdef LOOK_THEN_CREATE
           atomic {
               if
               :: SEAT_FREE -> next = WAIT; printf("MSC: %d finds the seat free\n", me)
               :: else -> w = seat_tok; PROBED(me, w)
               fi };
           if
           :: next == WAIT -> atomic { seat_tok = me; HAS_SEAT(me) }; break
           :: else -> skip
           fi;
#else
           atomic {
               if
               :: SEAT_FREE -> seat_tok = me; next = WAIT; HAS_SEAT(me)
               :: else -> w = seat_tok; PROBED(me, w)
               fi };
           if
           :: next == WAIT -> break
           :: else -> skip
           fi;
#endif
           /* 3. the seat is held: the lock again */
#ifndef NO_RELOOK
           if
           :: atomic { lock_tok == w ->               /* w has just become the runner */
                       printf("MSC: %d sees %d hold the lock: waits for the seat\n", me, w) };
              if
              :: seat_tok != w || !LIVE(w) -> skip    /* freed, or stale */
              :: skip                                  /* the short bound runs out */
              fi
              /* and again, from the lock */
           :: else -> next = SKIP; break
           fi
#else
           next = SKIP; break
#endif
        od;
        if
        :: next == SKIP ->
           atomic {
               printf("MSC: %d skips: one already queued (%d)\n", me, w);
               skipped[me] = true; counted[me] = w; fin[me] = true }
        :: next == WAIT ->
           if
           :: atomic { FREE(lock_tok) -> lock_tok = me; waiting[me] = false;
                       printf("MSC: %d waited and takes the lock\n", me) }
#ifdef BOUNDED_WAIT
           :: atomic { waiting[me] = false;
                       if
                       :: seat_tok == me -> seat_tok = 0
                       :: else -> skip
                       fi;
                       printf("MSC: %d runs out of time and leaves the seat\n", me);
                       fin[me] = true }
#endif
           fi
        :: else -> skip
        fi;
        if
        :: !fin[me] ->
#ifndef SEAT_AFTER_START
           RELEASE_SEAT(me);
#endif
           COMMAND_STARTS(me);
#ifdef SEAT_AFTER_START
           RELEASE_SEAT(me);
#endif
           atomic {
               if
               :: lock_tok == me -> lock_tok = 0
               :: else -> skip
               fi;
               printf("MSC: %d ends its run and releases the lock\n", me);
               fin[me] = true }
        :: else -> skip
        fi
    } unless { dead[me] }
}

proctype Run() {
    {
        atomic { lock_tok == R -> lock_tok = 0; fin[R] = true;
                 printf("MSC: the run ends and releases the lock\n") }
    } unless { dead[R] }
}

inline crash(k) {
    atomic {
        ncrash < MAXCRASH && LIVE(k) ->
        dead[k] = true;
        ncrash++;
        printf("MSC: %d is killed\n", k)
    }
}

/* It may crash no one: it ends blocked, at its end label. */
active proctype Killer() {
end:
    do
    :: crash(1)
    :: crash(2)
    :: crash(3)
    :: crash(4)
    :: crash(R)
    od
}

/* Once every process is done:
 * invariant_12_a_skipped_fire_is_picked_up_by_a_run_started_after_it */
#define PICKED_UP(i) (!skipped[i] || covered[i] || dead[counted[i]])

active proctype Judge() {
    (DONE(1) && DONE(2) && DONE(3) && (NFIRE < 4 || DONE(4)) && DONE(R));
    assert(PICKED_UP(1) && PICKED_UP(2) && PICKED_UP(3) && PICKED_UP(4))
}

init {
    atomic {
        started[R] = true;
        run Run();
        run Fire(1);
        run Fire(2);
        run Fire(3);
        if
        :: NFIRE > 3 -> run Fire(4)
        :: else -> skip
        fi
    }
}
