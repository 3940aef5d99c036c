/* train_zero: data parallelism and ZeRO for the trainer, over a Comm (comm.h).
 *
 * Every rank runs the same compiled program on its own rows of the global batch
 * (world x the program's batch); after `step` the gradients of the ranks are summed,
 * and the trainer divides by world through the update's gradient scale (RT_SC_GSCALE
 * multiplies every gradient the update kernels read), so the update sees the mean.
 *
 * The stage and the ownership are the program's (the plan's "zero_stage" and each
 * parameter's "owner": the compiler deals parameters out whole, codegen/zero.h); to
 * change them, compile again. What each stage does per step:
 *   0  all-reduce the GRADS tier; every rank runs the whole gradnorm and update
 *   1  as 0, but AdamW m and v exist only for owned parameters (OPT is a reserved
 *      tier, executor.h) and a rank runs only its owned parameters' update kernels;
 *      then each parameter is broadcast from its owner
 *   2  as 1, but each gradient is reduced to its owner only, inside the compiled step
 *      (below); the norm's sum of squares is each rank's sum over its owned (reduced)
 *      gradients, added over ranks
 *   3  as 2, and PARAMS is reserved too: a rank keeps memory only for its owned
 *      parameters between steps and what the step gathers while it uses it;
 *      zero_gather_params commits the others and broadcasts them from their owners
 *      for validation, saving and sampling, zero_release_params drops them after
 * Running one parameter's update or gradnorm alone relies on the program's shape
 * (checked by zero_init, as codegen/lower.c emits it): `update` and `gradnorm` are
 * one kernel per parameter, in parameter order, each over the parameter's rows
 * (numel / last dimension), and gradnorm writes parameter i's rows' partial sums
 * after those of parameters 0..i-1.
 *
 * ZeRO inside the step (a program with "zero_scheduled": true, program.h): the
 * compiled `step` gathers each parameter just before its forward and backward uses
 * and releases it after them (stage 3), and creates each non-owned gradient just
 * before its first write and reduces it to the owner right after its last
 * (stage 2, 3). The trainer then neither gathers every parameter before the step
 * nor calls zero_sync_grads after it, and GRADS is reserved too: a rank commits its
 * owned gradients for the whole run and a non-owned one only between zero_grad and
 * zero_reduce. Accumulation over micro-batches stays exact: the owner's gradient is
 * zeroed once at the step's start (exec_zero_tier on the reserved tier zeroes what
 * is committed: the owned gradients) and collects its own micro-batches' writes in
 * place; each zero_reduce adds the other ranks' gradients of that micro-batch into
 * it (a reduce in place at the owner), and each zero_grad gives the others a fresh
 * zeroed gradient. zero_exec_instr is the executor's hook for the four instructions
 * (ExecCtx.zero). Stages 2 and 3 are always compiled this way (program_load checks).
 *
 * What it saves on the CPU device: stage 1-3 keep 1/world of the optimizer state
 * (to granule rounding) for the whole run, except rank 0 while it writes a
 * checkpoint (the file writer takes whole tensors). Stages 2 and 3 hold at any time
 * 1/world of the gradients plus those being written (for a layered model: about one
 * layer's, and the tied token embedding's through the backward pass), and stage 3
 * likewise 1/world of the parameters plus those in use (one layer's, and the tied
 * embedding through the forward pass): the peak falls with the number of ranks.
 * Sampling, checkpoints and --save still gather the whole PARAMS tier for their time.
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
    unsigned char *owned;   /* [nparams] this rank holds its optimizer state (all at stage 0) */
    int64_t *part0;         /* [nparams + 1] first gradnorm part of each parameter */
    const unsigned char *in_norm; /* [nparams] counted in the norm here (train_mesh.h), or NULL: all */
    int gathered;           /* stage 3: the non-owned parameters are in PARAMS (whole-tier
                               gather; the step's own gathers are counted commits) */
    int scheduled;          /* the program is zero_scheduled: `step` gathers and reduces */
    int opt_gathered;       /* rank 0 holds every parameter's optimizer state */
} Zero;

/* The program's stage and ownership (its parameters' "owner", dealt by the compiler)
 * over the data-parallel group c, and the checks above. in_norm (kept, may be NULL)
 * restricts the norm to some parameters, which needs a per-parameter gradnorm list at
 * any stage. 0, or -1 with a message. */
int zero_init(Zero *z, const RtProgram *p, Comm *c, const unsigned char *in_norm, char *err,
              size_t errlen);
void zero_free(Zero *z);
/* The tiers to reserve (bit 1 << tier): OPT from stage 1, PARAMS at stage 3, GRADS
 * at stage 2 and 3 of a zero_scheduled program. */
unsigned zero_reserve_mask(const Zero *z);
/* Commits the owned shards of the reserved tiers (the owned gradients too when GRADS
 * is reserved), and at stage 3 the other parameters too (gathered: initialisation
 * fills them all). 0, or -1 with a message. */
int zero_commit_owned(Zero *z, Executor *ex, char *err, size_t errlen);

/* Stage 3 (no-ops otherwise): every parameter in PARAMS / only the owned ones. */
void zero_gather_params(Zero *z, Executor *ex);
void zero_release_params(Zero *z, Executor *ex);

/* The executor's hook (ExecCtx.zero, arg the Zero) for one instruction of a
 * zero_scheduled `step` (program.h):
 *   zero_gather   a non-owner commits the parameter; broadcast from the owner
 *   zero_release  a non-owner decommits it
 *   zero_grad     a non-owner commits the gradient and zeroes it
 *   zero_reduce   the group's gradients summed into the owner's (reduce in place);
 *                 a non-owner decommits its own
 * Out of memory on one rank stops them all (the step cannot go on without it). */
void zero_exec_instr(void *arg, Executor *ex, const RtInstr *in);

/* The ranks' gradients summed: into every rank (stage 0, 1) or into each owner;
 * nothing for a zero_scheduled program (its step reduced them). */
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
