/* executor: runs the lists of a program (program/program.h) on a Device, and owns the
 * program's four memory tiers.
 *
 * Device is the backend seam (STYLE.md habit 6): a struct of function pointers the
 * executor calls without knowing which backend it drives: the CPU device
 * (device/cpu.c: kernels on a thread pool, GEMMs on OpenBLAS) and the CUDA device
 * (device/cuda.c: NVRTC kernels, cuBLASLt, NCCL, on streams).
 *
 * Running a list (exec_run): its instructions in order, each by the function of its
 * opcode in exec_fns; a "loop" runs its body count times (iteration i: the slot and input
 * instructions' micro-batch mb + step * i; the body's "last" instructions in the last
 * iteration of a final loop only), a "call" runs the list it names, whose end (like every
 * list's) waits for the collectives it overlapped; an instruction with a rank condition
 * runs only where ExecCtx's coordinates match it. "norm" is the step's one host
 * reduction over every rank: the loss, the gradient norm and whether a rank failed,
 * then the update's scalars (ExecStep). Kernels get ExecStep.sc.
 *
 * Memory: exec_init allocates each tier once, 64-byte aligned and zeroed (WORK as
 * `slots` slots; a "slot" instruction moves the WORK base the following instructions
 * see), and the program's staging buffer for the reorders of "comm" instructions whose
 * outer dimension is above 1; nothing is allocated afterwards. Tier base pointers are
 * device addresses: the host reads and writes them only through exec_read/exec_write, or
 * directly through exec_host_tier when the device's memory is host memory.
 *
 * Reserved tiers (ZeRO, train_zero.h; offload): exec_init_reserved makes chosen tiers
 * address space only, at the same offsets, when the device can reserve; exec_commit puts
 * memory behind parts of them and exec_decommit takes it back. Commitment is counted per
 * granule (the device's unit: the page on the CPU), so ranges that share a granule at
 * their ends may be committed and decommitted independently; a range's memory is zero the
 * first time it is committed; "zero" of a reserved tier zeroes what has memory behind
 * it. peak[] records the most each tier held since exec_init or exec_peak_reset. The
 * commit counts are guarded by ex->lock: an offload program's copy thread (offload.h)
 * commits and decommits while the main thread runs kernels.
 *
 * Offload: offload_init (offload.h) hangs the host and NVMe locations and the copy thread
 * on ex->off; exec_run queues "move" and "drop" there, blocks on "wait", and runs the
 * kernels marked on_host with the host location's bases.
 */
#ifndef COLOSSALC_RUNTIME_EXECUTOR_H
#define COLOSSALC_RUNTIME_EXECUTOR_H

#include "runtime/comm/comm.h"
#include "program/program.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Device Device;
typedef struct Offload Offload;
struct Device {
  const char *name; /* "cpu" */
  void *impl;
  /* A zeroed buffer of bytes (> 0), aligned to 64; NULL when out of memory. */
  char *(*alloc)(Device *dev, int64_t bytes);
  void (*free)(Device *dev, char *buf);
  /* kernel code `id` (ProgCode) over [0, extent) with the address of each of its
   * buffers (ProgArg) and the scalars. */
  void (*kernel)(Device *dev, int id, int64_t extent, char *const *bufs, const float *scalars);
  void (*zero)(Device *dev, char *base, int64_t offset, int64_t bytes);
  /* g (program/isa.h); 1 when it applied g's GELU, DGELU and BGRAD epilogues itself
   * (the "epilogue" kernels after it are then skipped), 0 when it left them to them. */
  int (*gemm)(Device *dev, const IsaGemm *g, char *const *tiers);
  void (*upload)(Device *dev, char *base, int64_t offset, const void *src, int64_t bytes);
  /* bytes from device address src to dst (the ranges do not overlap). */
  void (*copy)(Device *dev, char *dst, const char *src, int64_t bytes);
  void (*download)(Device *dev, const char *base, int64_t offset, void *dst, int64_t bytes);
  /* Waits for all queued work. */
  void (*sync)(Device *dev);
  /* The tier as host memory, or NULL when it lives elsewhere. */
  char *(*host_view)(Device *dev, char *base);
  void (*destroy)(Device *dev);
  /* Optional (NULL, granule 0: not supported). Address space of bytes (a multiple
   * of granule) with no memory behind it; commit puts zeroed memory behind
   * [offset, offset+bytes) (granule-aligned; 0, or -1 when out of memory),
   * decommit frees it again (no queued work may still use it: the caller sees to
   * that), unreserve returns the whole range (after a sync). */
  int64_t granule;
  char *(*reserve)(Device *dev, int64_t bytes);
  int (*commit)(Device *dev, char *base, int64_t offset, int64_t bytes);
  void (*decommit)(Device *dev, char *base, int64_t offset, int64_t bytes);
  void (*unreserve)(Device *dev, char *base, int64_t bytes);
  /* The copy stream, which offload's copy thread moves memory through on every
   * device (on the CPU a memcpy, its kernels being done when their call returns).
   * mark, from the thread that queues the work, is a point after everything queued
   * so far; await, from any thread,
   * blocks until the work before a mark is done (marks are reused after
   * DEVICE_MARKS more, so at most that many may be outstanding). xfer, from any
   * thread, copies bytes host -> device (XFER_IN: dst a device address), device ->
   * host (XFER_OUT: src one) or zeroes device memory (XFER_ZERO, src NULL) on the
   * copy stream, and returns once it is done. */
  /* Optional, a communication stream (NULL: collectives run in order with the rest).
   * fork makes it wait for the work queued so far, before an "overlap" collective is
   * queued there (on a Comm the device made for it, ExecCtx.dp_overlap); join makes
   * the work queued after it wait for everything queued on the communication stream.
   * overlap_ms, after a sync, gives the communication stream's time from the first
   * fork to the last join and the part of it the compute stream waited at the joins,
   * since the last call (milliseconds). */
  /* Optional (NULL: malloc and free), host memory the device copies to and from at its
   * full rate, asynchronously (pinned, on a GPU): staging buffers. NULL when out of
   * memory. */
  void *(*host_alloc)(Device *dev, int64_t bytes);
  void (*host_free)(Device *dev, void *p);
  /* Optional (a GPU): pins the host pages [p, p + bytes) (page-aligned, pinned by no
   * other call) so that its copies from and to them are DMA, 0 or -1; host_unpin takes
   * the p of one such call. The CPU device pins what it commits through them when
   * device_cpu_pin_through names the GPU (offload's host location). */
  int (*host_pin)(Device *dev, void *p, int64_t bytes);
  void (*host_unpin)(Device *dev, void *p);
  void (*fork)(Device *dev);
  void (*join)(Device *dev);
  void (*overlap_ms)(Device *dev, double *comm, double *waited);
  /* What the run's log reports (0 where unknown): bytes the device holds for itself
   * beside the program's tiers (library workspaces), and its peak FLOP/s for the
   * program's arithmetic (the MFU's denominator). */
  int64_t own_bytes;
  double peak_flops;
  uint64_t (*mark)(Device *dev);
  void (*await)(Device *dev, uint64_t mark);
  void (*xfer)(Device *dev, int kind, char *dst, const char *src, int64_t bytes);
};
enum { XFER_IN, XFER_OUT, XFER_ZERO };
enum { DEVICE_MARKS = 2048 };

/* The CPU device: `threads` threads for kernels and for OpenBLAS. */
Device *device_cpu_new(const ProgKernelFn *kernels, int nkernels, int threads, char *err, size_t errlen);

/* OpenBLAS picks its kernels when it loads, from the CPU's model: on a CPU it does not
 * know (a hypervisor's) it falls back to SSE kernels, several times slower than the
 * CPU's features allow. Called first thing in main: where the library's core type is
 * below what this CPU's features allow (AVX, AVX2 and FMA, AVX-512) and the user set
 * no OPENBLAS_CORETYPE, sets it and executes argv again (no return); else 0 (-1 when
 * the exec failed: the run goes on with the library's choice). */
int cpu_blas_pick(char **argv);
/* The core type OpenBLAS runs ("SkylakeX"). */
const char *cpu_blas_core(void);

/* Before its first reserve: the CPU device's reserved memory is pinned through gpu
 * (Device.host_pin) while resident, one registration per run of resident pages within
 * a CPU_PIN_BLOCK-aligned block of the reserved range, so that a copy within one block
 * is DMA. Decommitted pages stay resident and pinned, and come back zeroed at their
 * next commit, while all resident pages are within budget bytes; beyond it the kept
 * pages are freed, a block at a time (those just decommitted first). */
enum { CPU_PIN_BLOCK = 16 << 20 };
void device_cpu_pin_through(Device *cpu, Device *gpu, int64_t budget);

/* train --profile: the time of the instructions run while it is set (Executor.prof), by
 * opcode: each leaf instruction from its start until the device is synced after it (so
 * a GPU's queue does not hide it), in milliseconds of exec_now_ms. A list's end waiting
 * for its overlapped collectives counts as ISA_JOIN, a list's wait for its sends to
 * complete as ISA_SEND; loops and calls count only through their instructions. */
typedef struct ExecProfile {
  double ms[ISA_NOPS];
} ExecProfile;

/* The host's monotonic clock in milliseconds: the step's, the profile's and the
 * offload's waits. */
double exec_now_ms(void);

typedef struct Executor Executor;
/* Runs one ZeRO instruction (zero_gather, zero_release, zero_grad, zero_reduce) with
 * the state it was given as arg (train_zero.h's zero_exec_instr). */
typedef void (*ExecZeroFn)(void *arg, Executor *ex, const IsaInstr *in);

/* The optimizer's settings: the program's (ProgStage), after train's flags. */
typedef struct ExecHp {
  ProgOptimizer optimizer;
  ProgSchedule schedule;
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr;
  int64_t warmup;
  int loss_scaling; /* fp16: dynamic loss scaling (program/program.h) */
  double scale_init, scale_growth, scale_backoff;
  int64_t scale_interval;
} ExecHp;

/* The run's state the scalars come from, and what a step's "norm" found. */
typedef struct ExecStep {
  ExecHp hp;
  int64_t steps;      /* of the run (the learning rate's schedule ends there) */
  int64_t step;       /* the step running, from 1 */
  double loss_scale;  /* fp16: the scale of this step's gradients (1 otherwise) */
  int64_t good_steps; /* fp16: finite steps since the scale last changed */
  int64_t skipped;    /* updates skipped for an inf or NaN loss or gradient norm (Adam's
                         bias corrections count the updates made) */
  int failed;         /* this rank's batch could not be read: "norm" stops every rank */
  double loss;        /* the sum of the "loss" instructions' values (zeroed by the caller) */
  float sc[SC_COUNT]; /* what every kernel gets (program/program.h, "Scalars") */
  /* found by "norm": */
  float mean_loss; /* over the micro-batches and the dp ranks */
  double lr, norm; /* the step's learning rate; the norm of the mean gradient */
  double scale;    /* the loss scale the step ran with */
  int skip;        /* an inf or NaN loss or gradient norm: no update (fp16: the update
                      kernels keep every value; otherwise they do not run) */
  int bad;         /* a numerical fault: a non-finite loss, or a non-finite norm without
                      fp16's loss scaling (whose overflows are its normal back-off) */
  int64_t mem;     /* device memory held at the norm (the step's gathers done) */
} ExecStep;

/* What the instructions use beyond the tiers, set by the caller before exec_run: the
 * groups they talk to, this step's rows for "input", and the hook of the ZeRO
 * instructions. */
typedef struct ExecCtx {
  Comm *world;          /* "norm": every rank */
  int dp_size;          /* the mesh's dp: "norm" averages over dp x microbatches */
  Comm *tp;             /* "comm": the tensor-parallel group (size mesh.tp) */
  Comm *dp;             /* "comm" group dp: the data-parallel group */
  Comm **stage_groups;  /* [ngroups] group stages: this stage's groups of stages (NULL
                           where it is not in one) */
  Comm *dp_overlap;     /* "overlap" collectives: the dp group on the device's
                           communication stream (Device.fork), or NULL: ctx.dp */
  int dp_rank, tp_rank; /* this rank's coordinates: the rank conditions */
  Comm *pp;             /* "send", "recv": the pipeline group, rank = stage */
  char *const *inputs;  /* [ninputs] this rank's rows of the step, each
                           [microbatches * batch * row_elems] 4-byte values */
  ExecZeroFn zero;      /* "zero_gather", ...: the ZeRO state's hook, or NULL */
  void *zero_arg;
  void (*before_update)(void *arg); /* "norm", first: what must finish before the state
                                       changes (a checkpoint written from it), or NULL */
  void *update_arg;
} ExecCtx;

struct Executor {
  const Prog *prog;
  Device *dev;
  char *tiers[TIERS];           /* device base of each tier (WORK: slots slots) */
  char *run[TIERS + 1];         /* the bases instructions see: WORK at the current slot, and
                                   TIER_SHARED at the region WORK's slots share */
  uint32_t *commits[TIERS + 1]; /* reserved tiers: commit count per granule, else NULL (TIER_SHARED's:
                                   WORK is not reserved) */
  int64_t committed[TIERS];     /* bytes of memory behind each tier */
  int64_t peak[TIERS];          /* the most committed[] since exec_init or exec_peak_reset */
  int64_t total_peak;           /* the most device memory held at once (all tiers, staging
                                   and the device's own bytes) since the same */
  char *staging;                /* [staging] device scratch of "comm" reorders */
  float *norm_parts;            /* [norm_parts] host: "norm"'s partial sums */
  float *trust_parts;           /* LAMB: [2 x its slots] host: "trust"'s partial sums */
  double *trust_sq;             /* [2 x the model's parameters] their squares by parameter */
  ExecCtx ctx;
  ExecStep step;
  Offload *off;         /* an offload program's locations and copy thread
                           (offload.h, set by offload_init), else NULL */
  const ProgList *list; /* the list running (messages) */
  int forked;           /* an "overlap" collective is on the communication stream */
  int skip_update;      /* "norm" skipped the update: the list's kernels after it do not run */
  int epilogued;        /* the last GEMM applied its epilogues: the "epilogue" kernels after
                           it do not run */
  int64_t fault_nan[2]; /* test only: on the steps [first, last] (0: never) a NaN is written
                           into the first gradient element that the first "gradnorm" kernel
                           of this rank reads */
  int64_t fault_done;   /* the last step it was written at */
  int64_t fault_move;   /* test only: at this step (0: never) the first move of this rank fails
                           as a failed copy would (offload_fail) */
  ExecProfile *prof;    /* the instructions' times are added here (train --profile), or NULL */
  int stop;             /* exec_run: 1 an instruction failed (the list runs its "norm"
                           alone), 2 "norm" found a rank that failed (the list stops) */
  pthread_mutex_t lock; /* commits[], committed[] and peak[]: the copy thread
                           commits too */
  int lock_init;
};

/* Allocates the tiers of prog (a stage's view, kept by the caller) on dev. 0, or -1
 * with a message. */
int exec_init(Executor *ex, const Prog *prog, Device *dev, char *err, size_t errlen);
/* The same, with the tiers whose bit (1 << tier) is in reserve_mask reserved rather
 * than allocated when the device can (see above). */
int exec_init_reserved(Executor *ex, const Prog *prog, Device *dev, unsigned reserve_mask, char *err, size_t errlen);
void exec_free(Executor *ex);

/* Memory behind [offset, offset+bytes) of a tier (nothing to do unless reserved);
 * each commit is undone by one exec_decommit of the same range. 0, or -1 with a
 * message when the device is out of memory. */
int exec_commit(Executor *ex, int tier, int64_t offset, int64_t bytes, char *err, size_t errlen);
void exec_decommit(Executor *ex, int tier, int64_t offset, int64_t bytes);
/* The same without waiting for the device first: the caller knows that no queued work
 * touches the range (offload's copy thread, after the job's mark). */
void exec_decommit_idle(Executor *ex, int tier, int64_t offset, int64_t bytes);
/* Bytes of the granules of [offset, offset+bytes) with no memory behind them yet
 * (what exec_commit of the range would add; 0 for a tier not reserved). */
int64_t exec_uncommitted(Executor *ex, int tier, int64_t offset, int64_t bytes);
/* 1 when the tier is reserved (its memory is what was committed). */
int exec_reserved(const Executor *ex, int tier);
/* Starts a new measurement of peak[] and total_peak: each becomes what is held now. */
void exec_peak_reset(Executor *ex);
/* Device memory held now: committed[] of every tier, the staging buffer and the
 * device's own bytes. */
int64_t exec_in_use(Executor *ex);

/* Runs list from slot 0 (above); a list that sends returns after every send completed
 * (ex->ctx.pp's wait_sends). 0, or -1 when "norm" found that a rank failed
 * (ex->step.failed somewhere) or the offload's copy thread failed: the list stops there
 * (offload_drain gives the copy thread's message). */
int exec_run(Executor *ex, const ProgList *list);
/* The learning rate of step t (from 1) of hp's schedule over `steps`. */
double exec_lr(const ExecHp *hp, int64_t t, int64_t steps);
/* ex->step.sc for learning rate lr, update count t and gradient scale gscale (the loss
 * scale 1, the update applied). */
void exec_scalars(Executor *ex, double lr, int64_t t, double gscale);
/* A training step k's scalars before its "norm": its learning rate and loss scale. */
void exec_begin_step(Executor *ex, int64_t k);
/* Bytes of the whole tier (WORK: all its slots). */
int64_t exec_tier_bytes(const Executor *ex, int tier);

/* Host bytes to / from a tier through the device. Of a reserved tier, only what has
 * memory behind it is written, and the rest reads as zeros. */
void exec_write(Executor *ex, int tier, int64_t offset, const void *src, int64_t bytes);
void exec_read(Executor *ex, int tier, int64_t offset, void *dst, int64_t bytes);
/* Host pointer to the whole tier, or NULL (then use exec_read/exec_write). */
char *exec_host_tier(Executor *ex, int tier);
/* An "overlap" instruction on a device with a communication stream: that stream made
 * to wait for the work queued so far, and the Comm whose collectives run on it
 * (ExecCtx.dp_overlap); a "join" or the list's end waits for them. NULL otherwise: run
 * it in order. */
Comm *exec_fork(Executor *ex, const IsaInstr *in);
/* bytes of the device's staging host memory (Device.host_alloc, else malloc), and back. */
void *exec_host_alloc(Device *dev, int64_t bytes);
void exec_host_free(Device *dev, void *p);

#endif
