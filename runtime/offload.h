/* offload: the runtime side of an offload plan (codegen/offload.h): the three
 * locations of an offload program's chunk parts, the copy thread that moves them,
 * and what the run measured.
 *
 * Locations, each at the offsets the kernels use (a part is the same byte range in
 * every location):
 *   device  the executor's PARAMS, GRADS and OPT tiers, reserved (executor.h); a
 *           part on the device is a committed range. WORK is whole, for the whole run.
 *   host    a second reserved address space per tier on the host device (a second
 *           Executor, `host`, whose WORK is reserved and never committed); kernels
 *           on_host run with its PARAMS, GRADS and OPT bases.
 *   nvme    one file per tier under --nvme-dir (DIR/colossalc-PID-params.nvme,
 *           -grads, -opt), written with pwrite and read with pread at the same
 *           offsets, removed when the run ends; a page no part holds any more is
 *           given back to the file system (a punched hole, where it can).
 * Memory is counted per granule (the device's, a page on the CPU) as the executor
 * counts commits: two parts that share a page at their ends count it once, which is
 * how the compiler predicts the peaks. The device holds the WORK tier (all slots,
 * rounded up to the granule) plus the committed pages of PARAMS, GRADS and OPT;
 * a commit that would take that above device_capacity is an internal error naming
 * the instruction. NVMe pages count while a part holds them.
 *
 * The copy thread. "move" and "drop" are queued (a ring of OFFLOAD_QUEUE jobs made
 * once; a full ring blocks the issuing thread) and done in issue order by one
 * thread: commit at the destination (counted), copy (or zero), release the source
 * unless kept. "wait" blocks until every job issued for that part is done. The
 * copy thread also checks the plan as it goes: a move whose source does not hold the
 * part, a move to a location that already holds it, a drop where the part is not, are
 * internal errors naming the instruction (that every step ends with each part at its
 * home is the compiler's to verify, codegen/verify.c). After a failure the copy thread skips
 * every later job; waits return -1 and exec_run stops (executor.h).
 *
 * Between steps (after offload_drain) the queue is empty and every part is at its
 * home; offload_pull and offload_push then read and write the state at the homes
 * (checkpoints, --save, initialisation), and offload_home puts parts back there after
 * a list that was not followed by the rest of the step (validation runs `eval`, which
 * has no update).
 * The main thread reads where parts are only when the queue is empty.
 *
 * The copy thread reaches the device's memory through the device's copy stream
 * (executor.h: mark, await, xfer), on every device: each job carries a mark of the
 * compute work queued before it, which the copy thread awaits before it copies,
 * commits or releases anything (the compiler never lets later work touch a part in
 * flight); copies to and from the
 * device run on the copy stream while the compute stream goes on, NVMe's through a
 * host block. On the CPU device a mark is reached when it is taken (kernels are done
 * when their call returns) and a copy is a memcpy. A device whose memory the host does
 * not see (the CUDA device) runs its on_host kernels on the host location's
 * device (the CPU), their WORK buffers copied into a host buffer before and back after.
 */
#ifndef COLOSSALC_RUNTIME_OFFLOAD_H
#define COLOSSALC_RUNTIME_OFFLOAD_H

#include "runtime/executor.h"

#include <stddef.h>
#include <stdint.h>

enum { OFFLOAD_QUEUE = 1024 };

/* What a run measured, for the report beside the program's "predicted". */
typedef struct OffloadStats {
  int64_t peak[3];       /* device, host, nvme: most bytes in use at once (granules) */
  int64_t capacity;      /* the plan's device_capacity */
  int64_t moved;         /* bytes copied between locations by the program's moves (not
                            from "zero"): the training steps' (and validation's `step`) */
  int64_t moved_runtime; /* ... by the runtime's own (validation, sampling) */
  int64_t moves, drops;
  double wait_ms; /* time the main thread blocked on moves (waits, step ends) */
} OffloadStats;

/* Sets up ex->off for ex's offload program (PARAMS, GRADS and OPT reserved by
 * exec_init_reserved) on data-parallel rank dp_rank: the host location on host_dev, the
 * NVMe files under nvme_dir (required when offload_uses_nvme), every part this rank
 * holds committed at its home (its data is written by offload_push), and the copy
 * thread. A rank holds every chunk, or under ZeRO-3 the chunks it owns; the others
 * have no home there and come to its device only inside a step. 0, or -1 with a
 * message. */
int offload_init(Executor *ex, Device *host_dev, const char *nvme_dir, int dp_rank, char *err, size_t errlen);
/* Stops the copy thread, frees the host location, removes the files (exec_free). */
void offload_free(Offload *o);

/* The instructions, from exec_run: queue a move or drop (list and index name it in
 * messages), wait for a part's jobs (0, or -1 after a failure). */
void offload_issue(Offload *o, const IsaInstr *in, const char *list, int index);
int offload_wait(Offload *o, int chunk, int part);
int offload_failed(Offload *o);
/* The copy thread's failure, as if a job had failed with msg (test faults: executor.h). */
void offload_fail(Offload *o, const char *msg);
/* The host location's base of tier t (PARAMS, GRADS or OPT). */
char *offload_host_tier(Offload *o, int t);
/* The device on_host kernels run on (the host location's), and, when that is not
 * the executor's device (whose memory the host then does not see), a host buffer of
 * *bytes that holds such a kernel's WORK buffers for the time it runs (NULL
 * otherwise). */
Device *offload_host_device(Offload *o);
char *offload_host_work(Offload *o, int64_t *bytes);

/* Waits for every queued job; 0, or -1 with the copy thread's message. */
int offload_drain(Offload *o, char *err, size_t errlen);
/* Drains, then moves every part home (grads dropped, other copies dropped), as jobs
 * named `why`; for a step list run alone. 0, or -1 with a message. */
int offload_home(Offload *o, const char *why, char *err, size_t errlen);
/* Brings every chunk's parameters to the device too (kept at home), for `forward`;
 * offload_home takes them back (every chunk this rank holds: a ZeRO-3 program does
 * not sample). 0, or -1 with a message. */
int offload_params_to_device(Offload *o, char *err, size_t errlen);
/* Device bytes (granules) the WORK tier and every parameter together need. */
int64_t offload_sample_bytes(const Offload *o);

/* The PARAMS and OPT state (host buffers laid out as the tiers) from / to each
 * part's home, of the chunks this rank holds (the other ranges of the buffers are not
 * touched); between steps only. 0, or -1 with a message (an NVMe error). */
int offload_pull(Offload *o, char *params, char *opt, char *err, size_t errlen);
int offload_push(Offload *o, const char *params, const char *opt, char *err, size_t errlen);

void offload_stats(Offload *o, OffloadStats *s);
/* The --nvme-dir given, or NULL. */
const char *offload_nvme_dir(const Offload *o);

#endif
