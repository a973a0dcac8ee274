/*
 * slots.pml: `onlyone run --slots N --queue` (PROTOCOL.md, invariants 13,
 * 14 and 15): at most N runs at once, one a slot; a dead holder's slot is
 * taken; a waiter is served when any slot frees.
 *
 * The lock LOCK has N slots, each a lock file of its own (slot 0 is LOCK
 * itself). Runs R0..R(NRUN-1) hold slots 0..NRUN-1 when fires F1..FN
 * arrive (each at a step of its own, in any order); each run ends at any
 * time. The slots and the queue seat are queue.pml's one-step lock files:
 * a link that succeeds when the path is empty or its record's owner is
 * dead (a stale record, reclaimed under the guard: invariants 1 to 3), a
 * release that removes the record only if it is still ours. A record is
 * alive while its owner is. With STEPS, a stale slot is taken over in
 * three steps: the look that judges it dead, the reclaim under the
 * removal guard (removed only if it is still the record judged), and a
 * link again, which fails if another got there first.
 *
 * A fire, the design:
 *   1. try slot 0, 1, ..., N-1, one at a time, and stop at the first one
 *      it takes (empty, or stale and taken over); its command runs, then
 *      it releases its slot;
 *   2. every slot held by a live run: try the queue seat, as queue.pml's
 *      fires do. Taken: it waits until any slot is empty or stale, then
 *      tries the slots again in order (another fire may have taken the
 *      slot first: it waits again); once it holds a slot it releases the
 *      seat, then its command runs;
 *   3. the seat is held by a live waiter W: it looks at the slots again.
 *      A slot carries W's token (W has just taken it and is about to free
 *      the seat): it waits for the seat (or a short bound) and starts
 *      again at 1. Otherwise it skips (75, "one already queued").
 * A killer may crash any run or fire at any step (SIGKILL): its records
 * stay behind, stale.
 *
 * With MIXED, takes of different N on one lock (invariant 16): fires F1,
 * F2, F3 take 1, 2 and 3 slots (F4, with NFIRE=4, takes N4), from an
 * empty lock (with THREE_IN_SLOT2: beside a run of 3 slots that holds
 * slot 2, slots 0 and 1 free). They are plain takes (no --wait, no
 * --queue: a take that finds every slot of its N held by a live run is
 * "held", 75), so there is no seat and invariant 15 is not checked there.
 * A take of N, the design:
 *   1. one listing of the slot files: the first slot k < N whose file is
 *      absent;
 *   2. link slot k; when no slot below N is absent, or the link fails
 *      (another got there first), try slot 0, 1, ..., N-1 as above (a
 *      stale one taken over) and stop at the first one taken; none:
 *      "held" (75);
 *   3. once it holds slot k, list the slot files again, then read every
 *      listed file but its own (any slot, also those past N-1): one whose
 *      holder lives and whose record says another N makes it let slot k
 *      go, refused (125, "held with 3 slots, and this take asks for 1").
 *      Otherwise its command runs, then it releases slot k. The listing
 *      is one entry at a time, as getdents(2) promises no more: an entry
 *      that comes or goes during the listing may be in it or not, one
 *      that is there throughout is in it. Files of other accounts never
 *      count (one account here).
 * Two takes of different N that both link may both back out.
 *
 * Ghosts: as in queue.pml, a run's command that starts picks up the work
 * of every fire that has arrived (covered), and a skipped fire notes the
 * waiter it counted on.
 *
 * Checks:
 *   invariant_13_at_most_n_runs_hold_slots_one_a_slot: at every take,
 *     at most N live processes hold a slot, and no two the same slot;
 *   invariant_14_a_dead_holders_slot_is_taken: a fire goes past a slot
 *     (to the next one, the seat, a skip) only on a probe that found its
 *     holder alive; no fire waits for ever while a slot is stale (spin's
 *     invalid end states);
 *   invariant_15_a_waiter_is_served_when_any_slot_frees: once every
 *     process is done, every fire that took the seat has run its command
 *     (unless it was killed), and every skipped fire is covered by a run
 *     whose command started after it arrived (unless the waiter it
 *     counted on was killed); no waiter is blocked for ever while a slot
 *     is free, even beside a run that outlasts every fire (LONG).
 *   invariant_16_the_live_runs_never_outnumber_the_smallest_n (MIXED):
 *     at every moment (Watch, which may look at any step), the live runs
 *     (alive, past step 3: their command runs) number at most the
 *     smallest N among them; also asserted when a command starts, where
 *     a counterexample ends. A take that has linked its slot and not yet
 *     read the others holds a slot file but is no run yet: two such takes
 *     of 1 and 2 slots hold two slot files for a moment.
 *
 * Switches:
 *   NO_RECHECK        a stale slot's record, once reclaimed, is replaced by
 *                     the taker's (a write or a rename over it) and the
 *                     slot counted as its own, without the link that fails
 *                     when the slot is there again: invariant 13's mutant
 *                     (two holders in one slot)
 *   COUNT_THEN_TAKE   a take counts the live records first and, with fewer
 *                     than N, writes a record of its own (one file a run,
 *                     no slot files): invariant 13's mutant (over-admission
 *                     between the count and the write)
 *   NEVER_RECLAIMED   a slot counts as free only when no record is there
 *                     (no probe, no stale takeover): invariant 14's mutant
 *   LEAVE_EARLY       a waiter woken by a slot that frees lets the seat go
 *                     and tries the slots once; it gives up ("held") when
 *                     another took the slot first: invariant 15's mutant
 *   ONE_SLOT_WATCHED  a waiter wakes only when slot 0 (the lock file
 *                     itself) frees: invariant 15's mutant, with LONG
 *   LONG              run R0 (slot 0) ends only once every fire is done
 *   STEPS             the stale takeover in three steps, as above (the
 *                     design still holds: check.sh's @takeover_in_steps;
 *                     NO_RECHECK implies it)
 *   NO_RELOOK         a fire skips on a live seat without looking at the
 *                     slots again
 *   MIXED             takes of N = 1, 2 and 3 (and N4) as above, with
 *                     slots 0..2; no seat
 *   ONE_SLOT_FILE     with MIXED: step 3 reads one slot file only, slot N,
 *                     one past the take's last (a take of 1 reads
 *                     LOCK.slot.1, a take of 3 none here), as the take did
 *                     before: invariant 16's mutant
 *   THREE_IN_SLOT2    with MIXED: a run of 3 slots holds slot 2 at the
 *                     start, slots 0 and 1 free
 *   N4 (1)            with MIXED and NFIRE=4: the N of fire 4
 *   NSLOT (2, at most 3) NRUN (NSLOT) NFIRE (3, 2 to 4) MAXCRASH (1)
 */

#ifdef MIXED
#define NSLOT 3       /* the slot files: 0..2, for the largest N        */
#define NRUN 0
#ifndef N4
#define N4 1
#endif
#endif
#ifndef NSLOT
#define NSLOT 2
#endif
#ifndef NFIRE
#define NFIRE 3
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef NRUN
#define NRUN NSLOT
#endif

/* Model ids: fires are 1..NFIRE, the run that holds slot s at the start
 * is R0 + s. */
#define R0 5
#define NOSLOT 9      /* what a holder with a file of its own holds        */

byte tok[3];          /* slot s's record: its owner's id; 0: no file       */
byte seat_tok = 0;    /* the seat's record: its waiter's id; 0: no file    */
#ifdef COUNT_THEN_TAKE
bool own[8];          /* run i's record in a file of its own               */
#endif

bool started[8];
bool dead[8];
bool fin[8];
byte holds[8];        /* the slot i holds (it thinks), plus one; 0: none   */
byte ncrash = 0;

/* ghosts */
bool queued[8];       /* fire i took the seat                              */
bool ran[8];          /* fire i's command started                          */
bool covered[8];      /* a command started after fire i arrived            */
bool skipped[8];      /* fire i skipped: "one already queued"              */
byte counted[8];      /* the waiter whose seat fire i skipped on           */
#ifdef MIXED
byte nn[8];           /* the N of i's take (its records say slots=N)       */
bool cmd[8];          /* i's command runs: it passed step 3                */
#endif

#define LIVE(i) (started[i] && !dead[i] && !fin[i])
#define DONE(i) (dead[i] || fin[i])
/* A path a link may take: empty, or its record's owner dead (stale). */
#define FREE(t) (t == 0 || !LIVE(t))
#ifdef NEVER_RECLAIMED
#define SLOT_FREE(t) (t == 0)
#else
#define SLOT_FREE(t) FREE(t)
#endif
#define IN(s) (s < NSLOT)

/* What the checks count. */
#define H(i, s) (LIVE(i) && holds[i] == s + 1)
#define HOLDERS(s) (H(1, s) + H(2, s) + H(3, s) + H(4, s) + H(5, s) + H(6, s) + H(7, s))
#define HOLDS(i) (LIVE(i) && holds[i] != 0)
#define NHOLD (HOLDS(1) + HOLDS(2) + HOLDS(3) + HOLDS(4) + HOLDS(5) + HOLDS(6) + HOLDS(7))

#ifdef MIXED
/* The live runs, and whether they number at most the smallest N among
 * them: invariant_16_the_live_runs_never_outnumber_the_smallest_n */
#define RUNS(i) (LIVE(i) && cmd[i])
#define NRUNS (RUNS(1) + RUNS(2) + RUNS(3) + RUNS(4) + RUNS(5) + RUNS(6) + RUNS(7))
#define WITHIN(i) (!RUNS(i) || NRUNS <= nn[i])
#define AT_MOST_THE_SMALLEST_N (WITHIN(1) && WITHIN(2) && WITHIN(3) && WITHIN(4) && \
    WITHIN(5) && WITHIN(6) && WITHIN(7))
/* The slots a take tries: its own N. */
#define LAST n
#else
#define LAST NSLOT
#endif

/* What a fire decided. */
#define RUN  1
#define WAIT 2
#define SKIP 3

#ifdef COUNT_THEN_TAKE
#define LIVE_REC(t) (t != 0 && LIVE(t))
#define NLIVE (LIVE_REC(tok[0]) + (IN(1) && LIVE_REC(tok[1])) + (IN(2) && LIVE_REC(tok[2])) + \
    (own[1] && LIVE(1)) + (own[2] && LIVE(2)) + (own[3] && LIVE(3)) + (own[4] && LIVE(4)))
#define ANY_FREE (NLIVE < NSLOT)
#define CARRIES(w) own[w]
#elif defined(ONE_SLOT_WATCHED)
#define ANY_FREE SLOT_FREE(tok[0])
#define CARRIES(w) (tok[0] == w || (IN(1) && tok[1] == w) || (IN(2) && tok[2] == w))
#else
#define ANY_FREE (SLOT_FREE(tok[0]) || (IN(1) && SLOT_FREE(tok[1])) || (IN(2) && SLOT_FREE(tok[2])))
#define CARRIES(w) (tok[0] == w || (IN(1) && tok[1] == w) || (IN(2) && tok[2] == w))
#endif

/* `me` holds slot s (NOSLOT: a file of its own) from now on:
 * invariant_13_at_most_n_runs_hold_slots_one_a_slot */
#define TAKES(me, s) holds[me] = s + 1; \
    if \
    :: s != NOSLOT -> printf("MSC: %d takes slot %d\n", me, s) \
    :: else -> skip \
    fi; \
    assert(NHOLD <= NSLOT && (s == NOSLOT || HOLDERS(s) <= 1))

/* The fire goes past slot s: the probe found its holder h alive (a dead
 * holder's slot is stale and taken over).
 * invariant_14_a_dead_holders_slot_is_taken */
#define PROBED(me, s, h) printf("MSC: %d finds slot %d held by %d\n", me, s, h); \
    assert(LIVE(h))

/* A run's command starts: it picks up the work of every fire that has
 * arrived (ghost). */
#define COMMAND_STARTS(me) atomic { \
    ran[me] = true; \
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

/* One look at slot s, as one step: a link that takes it (empty, or a
 * stale record taken over), or a probe that finds its holder alive. With
 * STALE_STEPS, a stale record is only judged here (`judged`), and
 * try_rest reclaims it, then links again. With COUNT_THEN_TAKE: the count
 * of live records, which leaves `judged` set when there is room. */
#if defined(NO_RECHECK) || defined(STEPS)
#define STALE_STEPS
#endif
#if defined(COUNT_THEN_TAKE)
#define TRY_SLOT(me) \
    printf("MSC: %d counts %d live records of %d\n", me, NLIVE, NSLOT); \
    if \
    :: NLIVE < NSLOT -> judged = 1 \
    :: else -> s = NSLOT \
    fi
#elif defined(STALE_STEPS)
#define TRY_SLOT(me) \
    if \
    :: tok[s] == 0 -> tok[s] = me; got = s + 1; TAKES(me, s) \
    :: tok[s] != 0 && !SLOT_FREE(tok[s]) -> PROBED(me, s, tok[s]); s++ \
    :: tok[s] != 0 && SLOT_FREE(tok[s]) -> judged = tok[s]; \
       printf("MSC: %d judges slot %d's record %d stale\n", me, s, judged) \
    fi
#else
#define TRY_SLOT(me) \
    if \
    :: SLOT_FREE(tok[s]) -> tok[s] = me; got = s + 1; TAKES(me, s) \
    :: else -> PROBED(me, s, tok[s]); s++ \
    fi
#endif

/* The first look, at slot 0. */
#define FIRST_TRY(me) s = 0; got = 0; TRY_SLOT(me)

/* The looks at slots 1..N-1, after the first, until one is taken; `got`
 * is the slot taken plus one, or 0 when every slot is held by a live
 * run. */
inline try_rest(me) {
    do
    :: got != 0 || s == LAST -> break
    :: else ->
#if defined(COUNT_THEN_TAKE)
       atomic { judged = 0; own[me] = true; got = NOSLOT + 1;
                printf("MSC: %d writes a record of its own\n", me);
                TAKES(me, NOSLOT) }
#elif defined(STALE_STEPS)
       if
       :: judged != 0 ->
          atomic {                                    /* reclaim, under the guard */
              if
              :: tok[s] == judged -> tok[s] = 0;
                 printf("MSC: %d removes slot %d's record %d\n", me, s, judged)
              :: else -> skip
              fi;
              judged = 0 }
#ifdef NO_RECHECK
          ;
          atomic { tok[s] = me; got = s + 1;          /* written over */
                   printf("MSC: %d writes its record in slot %d\n", me, s);
                   TAKES(me, s) }
#endif
          /* and links again */
       :: else -> atomic { TRY_SLOT(me) }
       fi
#else
       atomic { TRY_SLOT(me) }
#endif
    od
}

inline release_slot(me) {
#ifdef COUNT_THEN_TAKE
    own[me] = false;
#else
    if
    :: got != 0 && tok[got - 1] == me -> tok[got - 1] = 0
    :: else -> skip
    fi;
#endif
    printf("MSC: %d ends its run and releases its slot\n", me)
}

/* A fire that is done forgets what it saw (fewer states). */
#define FORGET s = 0; got = 0; judged = 0; w = 0; next = 0

#ifndef MIXED
proctype Fire(byte me) {
    byte s;           /* the slot being looked at                    */
    byte got;         /* the slot taken, plus one                    */
    byte judged = 0;  /* the stale record judged, being taken over   */
    byte w;           /* the seat's holder, as the last probe saw it */
    byte next = 0;
    {
        atomic { started[me] = true; printf("MSC: %d arrives\n", me); FIRST_TRY(me) };
        do
        :: try_rest(me);                              /* 1. the slots */
           if
           :: got != 0 -> next = RUN; break
           :: else -> skip
           fi;
           atomic {                                   /* 2. the seat */
               if
               :: FREE(seat_tok) -> seat_tok = me; next = WAIT; queued[me] = true;
                  printf("MSC: %d takes the seat\n", me)
               :: else -> w = seat_tok; printf("MSC: %d finds the seat held by %d\n", me, w)
               fi };
           if
           :: next == WAIT -> break
           :: else -> skip
           fi;
           /* 3. the seat is held: the slots again */
#ifdef NO_RELOOK
           next = SKIP; break
#else
           if
           :: atomic { CARRIES(w) ->                  /* w has just taken a slot */
                       printf("MSC: %d sees %d hold a slot: waits for the seat\n", me, w) };
              /* until the seat is freed (or stale), or the short bound
               * runs out; then again, from slot 0 */
              atomic { FIRST_TRY(me) }
           :: else -> next = SKIP; break
           fi
#endif
        od;
        if
        :: next == SKIP ->
           atomic {
               printf("MSC: %d skips: one already queued (%d)\n", me, w);
               skipped[me] = true; counted[me] = w; fin[me] = true; FORGET }
        :: next == WAIT ->
#ifdef LEAVE_EARLY
           atomic { ANY_FREE -> printf("MSC: %d sees a slot free and leaves the line\n", me);
                    RELEASE_SEAT(me) };
           atomic { FIRST_TRY(me) };
           try_rest(me);
           if
           :: got == 0 -> atomic { printf("MSC: %d gives up: every slot held\n", me); fin[me] = true; FORGET }
           :: else -> skip
           fi
#else
           do
           :: atomic { ANY_FREE -> printf("MSC: %d sees a slot free\n", me); FIRST_TRY(me) };
              try_rest(me);
              if
              :: got != 0 -> break
              :: else -> skip                          /* another was first */
              fi
           od
#endif
        :: else -> skip
        fi;
        if
        :: got != 0 ->
           if
           :: next == WAIT -> RELEASE_SEAT(me)
           :: else -> skip
           fi;
           COMMAND_STARTS(me);
           atomic { release_slot(me); fin[me] = true; FORGET }
        :: else -> skip
        fi
    } unless { atomic { dead[me] -> FORGET } }
}
#else
/* Step 3: slot j's entry in the second listing (not its own). */
#define LISTS(j) \
    if \
    :: tok[j] != 0 && got != j + 1 -> seen = seen | (1 << j) \
    :: else -> skip \
    fi
/* A read of slot j's file: its holder lives and says another N. */
#define DIFFERS(j) (tok[j] != 0 && LIVE(tok[j]) && nn[tok[j]] != n)
#define READS(j) \
    if \
    :: other == 0 && (seen & (1 << j)) && DIFFERS(j) -> other = tok[j] \
    :: else -> skip \
    fi

#define FORGET_TAKE s = 0; got = 0; judged = 0; seen = 0; other = 0

/* A take of n slots (MIXED): the design above, steps 1 to 3. */
proctype Take(byte me; byte n) {
    byte s;           /* the slot being looked at                      */
    byte got = 0;     /* the slot taken, plus one                      */
    byte judged = 0;  /* the stale record judged, being taken over     */
    byte seen = 0;    /* step 3's listing: bit j for slot j's file      */
    byte other = 0;   /* a live holder of another N that step 3 read   */
    {
        atomic {                                      /* 1. one listing */
            started[me] = true;
            s = (tok[0] == 0 -> 0 : (n > 1 && tok[1] == 0 -> 1 : (n > 2 && tok[2] == 0 -> 2 : n)));
            printf("MSC: %d arrives, a take of %d slots: slot %d absent\n", me, n, s) };
        atomic {                                      /* 2. link slot k */
            if
            :: s < n && tok[s] == 0 -> tok[s] = me; got = s + 1; TAKES(me, s)
            :: else -> s = 0; TRY_SLOT(me)               /* every slot, in order */
            fi };
        try_rest(me);
        if
        :: got == 0 ->
           atomic { printf("MSC: %d: every slot of %d held (75)\n", me, n); fin[me] = true; FORGET_TAKE }
        :: else ->
#ifdef ONE_SLOT_FILE
           atomic {                                   /* slot n alone */
               if
               :: n < NSLOT && DIFFERS(n) -> other = tok[n]
               :: else -> skip
               fi };
#else
           /* 3. the slot files listed again, one entry at a time, then
            * every listed file read but its own */
           atomic { LISTS(0) };
           atomic { LISTS(1) };
           atomic { LISTS(2) };
           atomic { READS(0) };
           atomic { READS(1) };
           atomic { READS(2) };
#endif
           if
           :: other != 0 ->
              atomic {
                  printf("MSC: %d reads slot %d's holder %d, alive with %d slots: lets slot %d go (125)\n",
                         me, holds[other] - 1, other, nn[other], got - 1);
                  if
                  :: tok[got - 1] == me -> tok[got - 1] = 0
                  :: else -> skip
                  fi;
                  fin[me] = true; FORGET_TAKE }
           :: else ->
              atomic {
                  cmd[me] = true;
                  printf("MSC: %d's command starts (%d slots, %d runs)\n", me, n, NRUNS);
                  assert(AT_MOST_THE_SMALLEST_N) };
              atomic { release_slot(me); fin[me] = true; FORGET_TAKE }
           fi
        fi
    } unless { atomic { dead[me] -> FORGET_TAKE } }
}
#endif

#define FIRES_DONE (DONE(1) && DONE(2) && (NFIRE < 3 || DONE(3)) && (NFIRE < 4 || DONE(4)))

/* The run that holds slot s at the start: it ends at any time (R0 with
 * LONG: once every fire is done). */
proctype Run(byte me; byte s) {
    {
        atomic {
#ifdef LONG
            (me != R0 || FIRES_DONE) ->
#endif
            if
            :: tok[s] == me -> tok[s] = 0
            :: else -> skip
            fi;
            fin[me] = true;
            printf("MSC: run %d ends and releases slot %d\n", me, s) }
    } unless { dead[me] }
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
    :: crash(R0)
    :: crash(R0 + 1)
    :: crash(R0 + 2)
    od
}

#ifdef MIXED
/* Looks once, at any moment of any run of the model:
 * invariant_16_the_live_runs_never_outnumber_the_smallest_n */
active proctype Watch() {
    assert(AT_MOST_THE_SMALLEST_N)
}
#endif

/* Once every process is done:
 * invariant_15_a_waiter_is_served_when_any_slot_frees */
#define SERVED(i) (!queued[i] || ran[i] || dead[i])
#define PICKED_UP(i) (!skipped[i] || covered[i] || dead[counted[i]])

#ifndef MIXED
active proctype Judge() {
    (FIRES_DONE && DONE(R0) && (NRUN < 2 || DONE(R0 + 1)) && (NRUN < 3 || DONE(R0 + 2)));
    assert(SERVED(1) && SERVED(2) && SERVED(3) && SERVED(4));
    assert(PICKED_UP(1) && PICKED_UP(2) && PICKED_UP(3) && PICKED_UP(4))
}

#endif

#ifdef MIXED
init {
    atomic {
        nn[1] = 1; nn[2] = 2; nn[3] = 3; nn[4] = N4;
#ifdef THREE_IN_SLOT2
        tok[2] = R0 + 2; started[R0 + 2] = true; holds[R0 + 2] = 3;
        nn[R0 + 2] = 3; cmd[R0 + 2] = true;
        run Run(R0 + 2, 2);
#endif
        run Take(1, 1);
        run Take(2, 2);
        run Take(3, 3);
        if
        :: NFIRE > 3 -> run Take(4, N4)
        :: else -> skip
        fi
    }
}
#else
init {
    atomic {
        tok[0] = R0; started[R0] = true; holds[R0] = 1;
        run Run(R0, 0);
        if
        :: NRUN > 1 -> tok[1] = R0 + 1; started[R0 + 1] = true; holds[R0 + 1] = 2; run Run(R0 + 1, 1)
        :: else -> skip
        fi;
        if
        :: NRUN > 2 -> tok[2] = R0 + 2; started[R0 + 2] = true; holds[R0 + 2] = 3; run Run(R0 + 2, 2)
        :: else -> skip
        fi;
        run Fire(1);
        run Fire(2);
        if
        :: NFIRE > 2 -> run Fire(3)
        :: else -> skip
        fi;
        if
        :: NFIRE > 3 -> run Fire(4)
        :: else -> skip
        fi
    }
}
#endif
