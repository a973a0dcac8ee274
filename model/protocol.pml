/*
 * protocol.pml: the lock path, the removal guard and the acquire loop of
 * onlyone's lock file (lib/src/lock/), shared by lock.pml and run.pml.
 *
 * The includer defines, before including this file:
 *   ALIVE_REC(tok, pid, start)   the liveness probe of a record (judge.rs)
 *   MAXTRY                       reclaims an acquire may make
 *                                (MAX_TAKEOVER_TRIES; 16 in the code)
 *   MAXLOOK                      looks that find the path empty, allowed
 *                                before "contended" (MAX_EMPTY_LOOKS)
 *
 * Switches (mutants; each must give a counterexample, see check.sh):
 *   NO_REREAD          the reclaim takes the guard but removes what is at
 *                      the path without reading it again
 *   PID_ONLY           a record is compared by its owner's pid alone, not
 *                      by its bytes (token) or the owner's start time
 *   GUARD_LEAK         the guard is not freed when its holder dies (a
 *                      mkdir or pid-file guard instead of flock)
 *   EXHAUST_SAYS_HELD  running out of reclaims reports "held"
 *
 * What is modelled, step by step (each step is atomic; a crash can come
 * between any two):
 *   place     link(temp, path): succeeds only when the path is empty
 *   read-back the record at the path must carry our token, or we retry
 *   look      read the record at the path (it may have gone)
 *   probe     is its owner alive?  alive: "held"; dead: reclaim
 *   reclaim   take the guard, read the path again, remove the record only
 *             if it is the one judged (the same bytes), drop the guard
 */

/* ---- the lock path: one record, or none -------------------------------- */
byte path_tok = 0;    /* the record's token; 0: no file at the path          */
byte path_pid = 0;    /* the owner's pid as the record names it              */
byte path_start = 0;  /* the owner's start time as the record names it       */

/* ---- the removal guard: flock(LOCK_EX) on the file owner's guard file - */
byte guard = 0;       /* the holder's model id; 0: free                      */

/* ---- what the checks count -------------------------------------------- */
byte in_cs = 0;       /* live processes inside the critical section          */
byte ncrash = 0;      /* crashes so far (at most MAXCRASH)                   */

/* The results of an acquire. */
#define GOT       1
#define HELD      2
#define CONTENDED 3

#define TAKE_GUARD(who) atomic { guard == 0 -> guard = who; printf("MSC: %d takes the guard\n", who) }
#define DROP_GUARD(who) atomic { guard == who -> guard = 0 }
/* A crash frees the guard the dead process held: flock is the kernel's.
 * invariant_2_the_guard_is_a_kernel_lock_freed_on_death */
#ifdef GUARD_LEAK
#define FREE_GUARD_OF(who) skip
#else
#define FREE_GUARD_OF(who) if :: guard == who -> guard = 0 :: else -> skip fi
#endif

#define REMOVE(who) atomic { printf("MSC: %d removes record %d (pid %d, start %d)\n", who, path_tok, path_pid, path_start); \
                       path_tok = 0; path_pid = 0; path_start = 0 }

/* The re-read under the guard finds the record that was judged. */
#if defined(NO_REREAD)
#define SAME_AS_JUDGED (true)
#elif defined(PID_ONLY)
#define SAME_AS_JUDGED (r_tok != 0 && r_pid == s_pid)
#else
#define SAME_AS_JUDGED (r_tok != 0 && r_tok == s_tok)
#endif

/* Removes the record judged stale, if it is still that record: the one
 * critical section of every removal (LockFile::under_guard).
 * invariant_1_every_removal_is_justified_under_the_guard */
inline reclaim(who) {
    TAKE_GUARD(who);
#ifdef NO_REREAD
    if
    :: path_tok != 0 -> REMOVE(who)
    :: else -> skip
    fi;
#else
    atomic { r_tok = path_tok; r_pid = path_pid; r_start = path_start;
             printf("MSC: %d re-reads record %d under the guard\n", who, r_tok) };
    if
    :: SAME_AS_JUDGED -> REMOVE(who)
    :: else -> skip
    fi;
#endif
    atomic { DROP_GUARD(who); r_tok = 0; r_pid = 0; r_start = 0 }
}

/* The acquire loop (Attempt in lib/src/lock/acquire.rs), without waiting:
 * leaves GOT, HELD or CONTENDED in `result`. `seen_alive` is what the
 * last probe said. */
inline acquire(who, mytok, mypid, mystart) {
    tries = 0;
    looks = 0;
    result = 0;
    do
    :: atomic { path_tok == 0 ->                      /* link(temp, path) */
           path_tok = mytok; path_pid = mypid; path_start = mystart;
           printf("MSC: %d links record %d\n", who, mytok) };
       if                                             /* read back */
       :: atomic { path_tok == mytok -> result = GOT }; break
       :: else -> skip                               /* never say acquired */
       fi
    :: path_tok != 0 ->                               /* EEXIST */
       atomic { s_tok = path_tok; s_pid = path_pid; s_start = path_start;
                printf("MSC: %d reads record %d (pid %d, start %d)\n", who, s_tok, s_pid, s_start) };
       if
       :: s_tok == 0 ->                               /* gone meanwhile */
          looks++;
          if
          :: looks >= MAXLOOK -> result = CONTENDED; break
          :: else -> skip
          fi
       :: else ->
          atomic { seen_alive = ALIVE_REC(s_tok, s_pid, s_start);
                   printf("MSC: %d probes record %d: alive %d\n", who, s_tok, seen_alive) };
          if
          :: seen_alive ->
             result = HELD;
             /* invariant_5_running_out_of_retries_never_says_held */
             assert(seen_alive);
             break
          :: else ->
             if
             :: tries >= MAXTRY ->
#ifdef EXHAUST_SAYS_HELD
                result = HELD;
                /* invariant_5_running_out_of_retries_never_says_held */
                assert(seen_alive);
#else
                result = CONTENDED;
#endif
                break
             :: else -> tries++; reclaim(who)
             fi
          fi
       fi;
       atomic { s_tok = 0; s_pid = 0; s_start = 0; seen_alive = false }
    od;
    atomic { s_tok = 0; s_pid = 0; s_start = 0; seen_alive = false; tries = 0; looks = 0 }
}
