/*
 * lock.pml: onlyone's lock file with stale takeover (PROTOCOL.md,
 * invariants 1, 2, 3 and 5), the way a script uses it:
 *
 *     onlyone acquire NAME        # the record names the calling shell
 *     ... work ...                # the critical section
 *     onlyone release NAME        # a helper process releases for the shell
 *
 * Shells S1..S3 each take the lock ROUNDS times. The release is done by a
 * helper process of its own (`onlyone release`, LockFile::release_as): it
 * removes the record under the guard if the record names its shell (pid
 * and start time) and that shell is alive. A killer may crash any shell or
 * helper at any step (SIGKILL): a crashed shell leaves its record behind,
 * a crashed process frees the guard it held (flock).
 *
 * With PIDREUSE, S3 gets S1's pid once S1 is gone, with a later start
 * time: a record that names pid 1 may be S1's (dead) or S3's (alive).
 *
 * Mutual exclusion: never two live shells in the critical section.
 *
 * Switches: those of protocol.pml, and
 *   UNGUARDED_RELEASE  the helper reads the record and removes it without
 *                      the guard (invariant 3's mutant)
 *   PIDREUSE           as above
 *   NPROC (3) ROUNDS (1) MAXTRY (2) MAXLOOK (2) MAXCRASH (1)
 */

#ifndef NPROC
#define NPROC 3
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef MAXTRY
#define MAXTRY 2
#endif
#ifndef MAXLOOK
#define MAXLOOK 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif

/* Shells are 1..3; the helper of shell i is i + 3. */
#define HELPER(i) (i + 3)

bool started[7];
bool incs[7];         /* shell i is inside the critical section           */
bool dead[7];
bool fin[7];
byte pid_of[4];
byte start_of[4];

#define LIVE(i) (started[i] && !dead[i] && !fin[i])

/* Is the shell a record names alive? Its pid and start time (judge.rs);
 * the pid alone with PID_ONLY. */
#ifdef PID_ONLY
#define IS(i, pid, start) (LIVE(i) && pid_of[i] == pid)
#else
#define IS(i, pid, start) (LIVE(i) && pid_of[i] == pid && start_of[i] == start)
#endif
#define ALIVE_REC(tok, pid, start) \
    (IS(1, pid, start) || IS(2, pid, start) || (NPROC > 2 && IS(3, pid, start)))

#include "protocol.pml"

/* `onlyone release` for shell `owner`: the record must name the shell, by
 * pid and start time, and the shell must be alive (Releaser::owner); under
 * the guard: invariant_3_release_is_guarded_always. */
#ifdef PID_ONLY
#define OWNED_BY(owner) (r_tok != 0 && r_pid == pid_of[owner] && LIVE(owner))
#else
#define OWNED_BY(owner) (r_tok != 0 && r_pid == pid_of[owner] && r_start == start_of[owner] && LIVE(owner))
#endif

proctype Helper(byte owner) {
    byte me = HELPER(owner);
    byte r_tok, r_pid, r_start;
    {
#ifndef UNGUARDED_RELEASE
        TAKE_GUARD(me);
#endif
        atomic { r_tok = path_tok; r_pid = path_pid; r_start = path_start;
                 printf("MSC: %d (release for %d) reads record %d\n", me, owner, r_tok) };
        if
        :: OWNED_BY(owner) -> REMOVE(me)
        :: else -> skip
        fi;
#ifndef UNGUARDED_RELEASE
        DROP_GUARD(me);
#endif
        fin[me] = true
    } unless { dead[me] }
}

proctype Shell(byte me) {
    byte round = 0, tries, looks, result;
    byte s_tok, s_pid, s_start, r_tok, r_pid, r_start;
    bool seen_alive;
#ifdef PIDREUSE
    if
    :: me == 3 -> (dead[1] || fin[1])
    :: else -> skip
    fi;
#endif
    started[me] = true;
    {
        do
        :: round < ROUNDS ->
           acquire(me, me * ROUNDS + round, pid_of[me], start_of[me]);
           if
           :: result == GOT ->
              atomic { in_cs++; incs[me] = true;
                       printf("MSC: %d enters the critical section\n", me);
                       /* the consequence of invariants 1 to 3 */
                       assert(in_cs == 1) };
              atomic { in_cs--; incs[me] = false };
              atomic { started[HELPER(me)] = true; run Helper(me) };
              (fin[HELPER(me)] || dead[HELPER(me)])
           :: else -> skip
           fi;
           atomic { round++; result = 0 }
        :: else -> break
        od;
        fin[me] = true
    } unless { dead[me] }
}

inline crash(k) {
    atomic {
        ncrash < MAXCRASH && started[k] && !dead[k] && !fin[k] ->
        dead[k] = true;
        ncrash++;
        printf("MSC: %d is killed\n", k);
        FREE_GUARD_OF(k);
        /* a shell that dies in the critical section does no more harm */
        if
        :: k <= 3 && incs[k] -> incs[k] = false; in_cs--
        :: else -> skip
        fi
    }
}

active proctype Killer() {
    do
    :: crash(1)
    :: crash(2)
    :: crash(3)
    :: crash(4)
    :: crash(5)
    :: crash(6)
    :: break
    od
}

init {
    atomic {
        pid_of[1] = 1; start_of[1] = 1;
        pid_of[2] = 2; start_of[2] = 2;
        pid_of[3] = 3; start_of[3] = 3;
#ifdef PIDREUSE
        pid_of[3] = 1;
#endif
        run Shell(1);
        run Shell(2);
        if
        :: NPROC > 2 -> run Shell(3)
        :: else -> skip
        fi
    }
}
