/* watchdog: a dead or stalled rank ends the job, with its name and step.
 *
 * A collective waits for every rank of its group; when one rank dies or stops, the
 * others would wait in it until the job's wall-clock limit. The watchdog is a thread on
 * each rank of a run of several ranks that talks over TCP, beside MPI (which stays
 * funneled: the thread never calls MPI, so it works while the main thread is stuck in
 * a collective):
 *
 *   - at start-up (watchdog_start, one host collective) world rank 0 listens on a TCP
 *     port of its host name's address (COLOSSALC_WATCHDOG_HOST overrides it), every
 *     other rank connects to it;
 *   - every rank sends a heartbeat (its step, its progress counter, whether the main
 *     thread waits in a collective, whether it is in a timed region) at each step and
 *     at least every WATCHDOG_BEAT_MS; rank 0 beats to every rank too;
 *   - rank 0 judges: a peer's connection closed without a goodbye is a rank that died
 *     (the kernel closes a killed process's sockets, kill -9 included); a peer silent
 *     for the timeout is a frozen process (SIGSTOP, a machine gone); a rank in a timed
 *     region (the steps and validations, not start-up, kernel compilation or checkpoint
 *     writing) whose progress counter stood still for the timeout is stalled. Rank 0
 *     tells every rank; each prints one line, "train: rank R died at step N; stopping"
 *     or "train: rank R stalled at step N: no progress for S s (--collective-timeout)",
 *     and ends at once with status 1 (_exit: the main thread may be inside MPI);
 *   - the other ranks judge rank 0 alike: its closed connection, or its silence.
 *
 * Progress is counted by the main thread: watchdog_step at each step (which sends the
 * beat itself, so that a death is reported at the step it happened in), watchdog_enter /
 * watchdog_leave around each instruction the executor runs (one relaxed atomic store
 * each), watchdog_timed around the timed regions. One rank (the self backend) needs no
 * watchdog: nobody waits for it.
 */
#ifndef COLOSSALC_RUNTIME_COMM_WATCHDOG_H
#define COLOSSALC_RUNTIME_COMM_WATCHDOG_H

#include "runtime/comm/comm.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum { WATCHDOG_BEAT_MS = 1000 };

/* What the main thread publishes (relaxed atomics: the thread reads snapshots). */
typedef struct WatchdogProgress {
  _Atomic int64_t step;   /* the step running, from 1 (0: none yet) */
  _Atomic uint64_t count; /* bumped at every instruction's start and end */
  _Atomic int in_comm;    /* the main thread waits in a collective or a transfer */
  _Atomic int timed;      /* a region the timeout applies to */
} WatchdogProgress;
extern WatchdogProgress watchdog_progress;

/* The step now running: its beat goes out at once, from the calling thread. */
void watchdog_step(int64_t step);
static inline void watchdog_enter(int comm) {
  atomic_store_explicit(&watchdog_progress.in_comm, comm, memory_order_relaxed);
  atomic_fetch_add_explicit(&watchdog_progress.count, 1, memory_order_relaxed);
}
static inline void watchdog_leave(void) { watchdog_enter(0); }
static inline void watchdog_timed(int on) {
  atomic_fetch_add_explicit(&watchdog_progress.count, 1, memory_order_relaxed);
  atomic_store_explicit(&watchdog_progress.timed, on, memory_order_relaxed);
}

/* Starts the watchdog of world (every rank calls it; nothing for one rank), with the
 * stall timeout in seconds. 0, or -1 with a message (agreed on: every rank fails). */
int watchdog_start(Comm *world, double timeout_s, char *err, size_t errlen);

/* The run ends normally (or by an error every rank agreed on): a goodbye to rank 0 (or
 * from rank 0 to every rank), the thread stopped. Safe when none was started. */
void watchdog_stop(void);

/* This process fails by itself and says why (comm_fatal), from any thread: a goodbye to
 * rank 0 (rank 0's to every rank), so that no rank reports it as dead, and the thread
 * judges no more. */
void watchdog_quit(void);

/* A fatal error of this process (an MPI call failed, often because a peer died): waits
 * up to seconds for rank 0's verdict on a failed rank, which then ends this process
 * with its message; returns when none came. */
void watchdog_grace(double seconds);

#endif
