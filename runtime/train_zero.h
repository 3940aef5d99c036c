/* train_zero: data parallelism and ZeRO for the trainer, over a Comm (comm.h).
 *
 * Every rank runs the same compiled program on its own rows of the global batch
 * (world x the program's batch); after `step` the gradients of the ranks are summed,
 * and the trainer divides by world through the update's gradient scale (RT_SC_GSCALE
 * multiplies every gradient the update kernels read), so the update sees the mean.
 *
 * Ownership (--zero 1..3): parameters are dealt out whole, largest first (ties: lower
 * index), each to the rank with the fewest elements so far (ties: lower rank); the
 * same on every rank. What each stage does per step:
 *   0  all-reduce the GRADS tier; every rank runs the whole gradnorm and update
 *   1  as 0, but AdamW m and v exist only for owned parameters (OPT is a reserved
 *      tier, executor.h) and a rank runs only its owned parameters' update kernels;
 *      then each parameter is broadcast from its owner
 *   2  as 1, but each gradient is reduced to its owner only; the norm's sum of
 *      squares is each rank's sum over its owned (reduced) gradients, added over ranks
 *   3  as 2, and PARAMS is reserved too: a rank keeps memory only for its owned
 *      parameters between steps; zero_gather_params commits the others and
 *      broadcasts them from their owners before the step (or before validation,
 *      saving, sampling), zero_release_params drops them after the update
 * Running one parameter's update or gradnorm alone relies on the program's shape
 * (checked by zero_init, as codegen/lower.c emits it): `update` and `gradnorm` are
 * one kernel per parameter, in parameter order, each over the parameter's rows
 * (numel / last dimension), and gradnorm writes parameter i's rows' partial sums
 * after those of parameters 0..i-1.
 *
 * What it saves on the CPU device: stage 1-3 keep 1/world of the optimizer state
 * (to granule rounding) for the whole run, except rank 0 while it writes a
 * checkpoint (the file writer takes whole tensors). Stage 2 saves no memory here:
 * the step program writes every gradient into the GRADS tier before any
 * communication, so the tier is whole; it halves the gradient traffic (reduce
 * instead of all-reduce). Stage 3 saves parameter memory between steps only: the
 * step needs every parameter in PARAMS, so the peak is unchanged until the compiler
 * schedules per-layer gathers and releases inside the step.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_ZERO_H
#define COLOSSALC_RUNTIME_TRAIN_ZERO_H

#include "runtime/comm.h"
#include "runtime/executor.h"
#include "runtime/train_program.h"

#include <stddef.h>
#include <stdint.h>

typedef struct Zero {
    const RtProgram *prog;
    Comm *comm;
    int stage;              /* 0..3 */
    int *owner;             /* [nparams] owning rank (all 0 at stage 0) */
    unsigned char *owned;   /* [nparams] this rank holds its optimizer state (all at stage 0) */
    int64_t *part0;         /* [nparams + 1] first gradnorm part of each parameter */
    const unsigned char *in_norm; /* [nparams] counted in the norm here (train_mesh.h), or NULL: all */
    int gathered;           /* stage 3: the non-owned parameters are in PARAMS */
    int opt_gathered;       /* rank 0 holds every parameter's optimizer state */
} Zero;

/* Ownership and the checks above, over the data-parallel group c. in_norm (kept,
 * may be NULL) restricts the norm to some parameters, which needs a per-parameter
 * gradnorm list at any stage. 0, or -1 with a message. */
int zero_init(Zero *z, const RtProgram *p, Comm *c, int stage, const unsigned char *in_norm,
              char *err, size_t errlen);
void zero_free(Zero *z);
/* The tiers to reserve (bit 1 << tier): OPT from stage 1, PARAMS at stage 3. */
unsigned zero_reserve_mask(const Zero *z);
/* Commits the owned shards of the reserved tiers, and at stage 3 the other parameters
 * too (gathered: initialisation fills them all). 0, or -1 with a message. */
int zero_commit_owned(Zero *z, Executor *ex, char *err, size_t errlen);

/* Stage 3 (no-ops otherwise): every parameter in PARAMS / only the owned ones. */
void zero_gather_params(Zero *z, Executor *ex);
void zero_release_params(Zero *z, Executor *ex);

/* The ranks' gradients summed: into every rank (stage 0, 1) or into each owner. */
void zero_sync_grads(Zero *z, Executor *ex);
/* Runs gradnorm and returns this rank's sum of squares: of every gradient (stage
 * 0, 1: the same on every rank) or of the owned ones (stage 2, 3: add over ranks),
 * in both cases only of the parameters in_norm names.
 * parts: host buffer of gradnorm_parts floats. */
double zero_grad_sumsq(Zero *z, Executor *ex, const float *sc, float *parts);
/* Runs update (owned parameters from stage 1) and makes PARAMS whole again
 * (broadcasts at stage 1, 2; the release at stage 3). */
void zero_update(Zero *z, Executor *ex, const float *sc);

/* Rank 0 receives every parameter's optimizer state from its owner (all ranks call);
 * zero_release_opt gives back what rank 0 does not own. */
void zero_gather_opt(Zero *z, Executor *ex);
void zero_release_opt(Zero *z, Executor *ex);

/* All ranks: 0 when every rank holds the same parameters (bit for bit), else -1
 * with a message. Parameters must be gathered. */
int zero_check_replicas(Zero *z, Executor *ex, char *err, size_t errlen);

#endif
