/* train_zero: ZeRO's memory for the trainer: which parameters' shards a rank keeps,
 * and the collectives that a zero_scheduled step's instructions ask for.
 *
 * Every rank runs the same compiled program on its own rows of the global batch; the
 * program's `sync`, `gradnorm` and `update` lists (codegen/compose.h) sum the ranks'
 * gradients, count each in the norm once and run each parameter's update on its
 * owner. The stage and the ownership are the program's (the plan's "zero_stage" and
 * each parameter's "owner", dealt by the compiler, codegen/zero.h); to change them,
 * compile again. What this file keeps per stage:
 *   1  AdamW m and v exist only for owned parameters (OPT is a reserved tier,
 *      executor.h)
 *   2  as 1, and GRADS is reserved: a rank commits its owned gradients for the whole
 *      run and a non-owned one only between the step's zero_grad and zero_reduce
 *   3  as 2, and PARAMS is reserved too: a rank keeps memory only for its owned
 *      parameters between steps and what the step gathers while it uses it;
 *      zero_gather_params commits the others and broadcasts them from their owners
 *      for validation, saving and sampling, zero_release_params drops them after
 * ZeRO inside the step (a program with "zero_scheduled": true, program.h): the
 * compiled `step` gathers each parameter just before its forward and backward uses
 * and releases it after them (stage 3), and creates each non-owned gradient just
 * before its first write and reduces it to the owner right after its last (stages 2
 * and 3, always compiled this way). Accumulation over micro-batches stays exact: the
 * owner's gradient is zeroed once at the step's start (exec_zero_tier on the reserved
 * tier zeroes what is committed: the owned gradients) and collects its own
 * micro-batches' writes in place; each zero_reduce adds the other ranks' gradients of
 * that micro-batch into it (a reduce in place at the owner), and each zero_grad gives
 * the others a fresh zeroed gradient. zero_exec_instr is the executor's hook for the
 * four instructions (ExecCtx.zero).
 *
 * What it saves on the CPU device: stage 1-3 keep 1/world of the optimizer state
 * (to granule rounding) for the whole run, except rank 0 while it writes a
 * checkpoint (the file writer takes whole tensors). Stages 2 and 3 hold at any time
 * 1/world of the gradients plus those being written (for a layered model: about one
 * layer's, and the tied token embedding's through the backward pass), and stage 3
 * likewise 1/world of the parameters plus those in use (one layer's, and the tied
 * embedding through the forward pass): the peak falls with the number of ranks.
 * Sampling, checkpoints and --save still gather the whole PARAMS tier for their time.
 *
 * ZeRO-3 with offload (codegen/offload.h): the owners' chunks live at their homes and
 * the compiled `step` moves, broadcasts and reduces them itself; the offload state
 * (runtime/offload.h) keeps the memory, so here nothing is committed, gathered or
 * released, and the trainer assembles checkpoints from the homes (offload_pull).
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
  int stage;            /* 0..3 */
  unsigned char *owned; /* [nparams] this rank holds its optimizer state (all at stage 0) */
  int gathered;         /* stage 3: the non-owned parameters are in PARAMS (whole-tier
                           gather; the step's own gathers are counted commits) */
  int scheduled;        /* the program is zero_scheduled: `step` gathers and reduces */
  int opt_gathered;     /* rank 0 holds every parameter's optimizer state */
  int offload;          /* an offload program: its state is offload's (no-ops here) */
} Zero;

/* The program's stage and ownership (its parameters' "owner", dealt by the compiler)
 * over the data-parallel group c. 0, or -1 with a message. */
int zero_init(Zero *z, const RtProgram *p, Comm *c, char *err, size_t errlen);
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

/* Rank 0 receives every parameter's optimizer state from its owner (all ranks call);
 * zero_release_opt gives back what rank 0 does not own. */
void zero_gather_opt(Zero *z, Executor *ex);
void zero_release_opt(Zero *z, Executor *ex);

/* All ranks: 0 when every rank holds the same parameters (bit for bit), else -1
 * with a message. Parameters must be gathered; params, when not NULL, is a host copy
 * of the PARAMS tier to check instead (an offload program's, read from its homes).
 * Under ZeRO-3 with offload each parameter has one copy (its owner's): nothing to
 * compare. */
int zero_check_replicas(Zero *z, Executor *ex, const char *params, char *err, size_t errlen);

#endif
