/*
 * run.pml: `onlyone run NAME -- COMMAND` (PROTOCOL.md, invariant 4).
 *
 * A run is a wrapper W (onlyone: it takes the lock, spawns the command,
 * waits for it, ends what the command left behind, releases), its command
 * C, and a child K that the command may fork (a worker that may outlive
 * the command: a double fork, a `setsid`, a `nohup ... &`). The record is
 * the run's (its token); the lock protocol is protocol.pml's. A killer may
 * crash any wrapper, command or child at any step; nothing else of the
 * run dies with a crashed wrapper (no PDEATHSIG: cron's `sh -c` and tmux
 * keep their children).
 *
 * Mutual exclusion: processes of two runs are never in the critical
 * section at once (the command and its child both do the protected work).
 *
 * Switches: those of protocol.pml, and
 *   WRAPPER_ONLY        a run is alive while its wrapper is (a pid file of
 *                       the wrapper): invariant 4's first mutant
 *   WRAPPER_OR_COMMAND  while its wrapper or its command is: the second
 *   NRUN (2) MAXTRY (2) MAXLOOK (2) MAXCRASH (1)
 */

#ifndef NRUN
#define NRUN 2
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

/* Model ids: wrapper i is i, its command i + 3, the command's child i + 6. */
#define W(i) (i)
#define C(i) (i + 3)
#define K(i) (i + 6)

bool started[10];
bool gone[10];        /* exited, crashed or ended by its wrapper */
byte run_cs[4];       /* processes of run i inside the critical section */
bool incs[10];

#define LIVE(p) (started[p] && !gone[p])

/* invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive */
#if defined(WRAPPER_ONLY)
#define RUN_ALIVE(i) (LIVE(W(i)))
#elif defined(WRAPPER_OR_COMMAND)
#define RUN_ALIVE(i) (LIVE(W(i)) || LIVE(C(i)))
#else
#define RUN_ALIVE(i) (LIVE(W(i)) || LIVE(C(i)) || LIVE(K(i)))
#endif
#define ALIVE_REC(tok, pid, start) \
    ((tok == 1 && RUN_ALIVE(1)) || (tok == 2 && RUN_ALIVE(2)) || (tok == 3 && RUN_ALIVE(3)))

#include "protocol.pml"

#define OTHERS_OUT(i) ((i == 1 || run_cs[1] == 0) && (i == 2 || run_cs[2] == 0) \
                       && (i == 3 || run_cs[3] == 0))

/* The protected work of process p of run i. */
inline work(p, i) {
    atomic { run_cs[i]++; incs[p] = true;
             printf("MSC: %d (run %d) enters the critical section\n", p, i);
             assert(OTHERS_OUT(i)) };
    atomic { run_cs[i]--; incs[p] = false }
}

/* Process p is gone; it leaves the critical section if it was in it. */
inline end_of(p, i) {
    gone[p] = true;
    if
    :: incs[p] -> incs[p] = false; run_cs[i]--
    :: else -> skip
    fi
}

proctype Child(byte i) {
    {
        work(K(i), i);
        atomic { end_of(K(i), i) }
    } unless { gone[K(i)] }
}

proctype Command(byte i) {
    {
        if
        :: atomic { started[K(i)] = true; run Child(i);
                    printf("MSC: %d (run %d) forks a child\n", C(i), i) }
        :: skip
        fi;
        work(C(i), i);
        atomic { end_of(C(i), i) }
    } unless { gone[C(i)] }
}

proctype Wrapper(byte i) {
    byte tries, looks, result;
    byte s_tok, s_pid, s_start, r_tok, r_pid, r_start;
    bool seen_alive;
    {
        acquire(W(i), i, i, i);
        if
        :: result == GOT ->
           atomic { started[C(i)] = true; run Command(i) };
           !LIVE(C(i));                              /* waitpid */
           /* what the command left behind is ended, then the wrapper
            * waits until no child is left (ECHILD) */
           atomic {
               if
               :: LIVE(K(i)) -> printf("MSC: %d ends %d\n", W(i), K(i)); end_of(K(i), i)
               :: else -> skip
               fi
           };
           /* release: under the guard, if the record still carries the token */
           TAKE_GUARD(W(i));
           atomic { r_tok = path_tok };
           if
           :: r_tok == i -> REMOVE(W(i))
           :: else -> skip
           fi;
           DROP_GUARD(W(i))
        :: else -> skip
        fi;
        gone[W(i)] = true
    } unless { gone[W(i)] }
}

inline crash(p, i) {
    atomic {
        ncrash < MAXCRASH && i <= NRUN && LIVE(p) ->
        ncrash++;
        printf("MSC: %d (run %d) is killed\n", p, i);
        end_of(p, i);
        FREE_GUARD_OF(p)
    }
}

active proctype Killer() {
    do
    :: crash(W(1), 1)
    :: crash(W(2), 2)
    :: crash(W(3), 3)
    :: crash(C(1), 1)
    :: crash(C(2), 2)
    :: crash(C(3), 3)
    :: crash(K(1), 1)
    :: crash(K(2), 2)
    :: crash(K(3), 3)
    :: break
    od
}

init {
    byte i = 1;
    atomic {
        do
        :: i <= NRUN -> started[W(i)] = true; run Wrapper(i); i++
        :: else -> break
        od
    }
}
