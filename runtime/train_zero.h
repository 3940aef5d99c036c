/* train_zero: ZeRO's memory for the trainer: which parameters' shards a rank keeps,
 * and the collectives of the ZeRO instructions of a step.
 *
 * The compiler decides everything else (codegen/zero.h, codegen/compose.h): each
 * parameter's owner, which tiers a rank holds in part (ProgStage.reserved: OPT from
 * stage 1, GRADS from stage 2, PARAMS at stage 3; reserved tiers are address space,
 * executor.h), the step's gradient sums, norm and update on the owners, and at stage 3
 * the lists `gather` and `release` for what reads every parameter outside a step
 * (validation, sampling, checkpoints). What is left here:
 *   - commit the owned shards at start-up (zero_commit_owned);
 *   - run the four ZeRO instructions of a step compiled with them (stages 2 and 3, not
 *     offload: the executor's hook zero_exec_instr): zero_gather commits a parameter
 *     and broadcasts it from its owner, zero_release decommits it, zero_grad gives a
 *     non-owner a fresh zeroed gradient, zero_reduce sums the group's gradients into
 *     the owner's and decommits the others'. The owner's gradient, zeroed at the step's
 *     start ("zero" of a reserved tier zeroes what is committed), collects its own
 *     micro-batches in place, so accumulation stays exact;
 *   - compare replicas. Checkpoints need nothing here: each owner writes its own shard
 *     (train_mesh.h, mesh_pieces).
 * An offload program's state is offload's (runtime/offload.h): nothing is committed,
 * gathered or released here, and checkpoints come from the homes (offload_pull).
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_ZERO_H
#define COLOSSALC_RUNTIME_TRAIN_ZERO_H

#include "runtime/comm/comm.h"
#include "runtime/executor.h"
#include "program/program.h"

#include <stddef.h>
#include <stdint.h>

typedef struct Zero {
  const Prog *prog;
  Comm *comm;
  int stage;            /* 0..3 */
  unsigned char *owned; /* [nparams] this rank holds its optimizer state (all at stage 0) */
  int gathered;         /* stage 3: the non-owned parameters are in PARAMS (whole-tier
                           gather; the step's own gathers are counted commits) */
  int scheduled;        /* the step runs the ZeRO instructions (GRADS reserved) */
  int offload;          /* an offload program: its state is offload's (no-ops here) */
} Zero;

/* The program's stage and ownership (its parameters' "owner", dealt by the compiler)
 * over the data-parallel group c. 0, or -1 with a message. */
int zero_init(Zero *z, const Prog *p, Comm *c, char *err, size_t errlen);
void zero_free(Zero *z);
/* Commits the owned shards of the reserved tiers (the owned gradients too when GRADS
 * is reserved); at stage 3 the owned parameters, or (all_params: a file of whole
 * parameters to read, --init-from) every parameter (gathered). 0, or -1 with a message. */
int zero_commit_owned(Zero *z, Executor *ex, int all_params, char *err, size_t errlen);

/* Stage 3 (no-ops otherwise): every parameter in PARAMS / only the owned ones, by the
 * program's compiled lists gather and release. */
void zero_gather_params(Zero *z, Executor *ex);
void zero_release_params(Zero *z, Executor *ex);

/* The executor's hook (ExecCtx.zero, arg the Zero) for one ZeRO instruction:
 *   zero_gather   a non-owner commits the parameter; broadcast from the owner
 *   zero_release  a non-owner decommits it
 *   zero_grad     a non-owner commits the gradient and zeroes it
 *   zero_reduce   the group's gradients summed into the owner's (reduce in place);
 *                 a non-owner decommits its own
 * Out of memory on one rank stops them all (the step cannot go on without it). */
void zero_exec_instr(void *arg, Executor *ex, const IsaInstr *in);

/* All ranks: 0 when every rank holds the same parameters (bit for bit), else -1
 * with a message. Parameters must be gathered; params, when not NULL, is a host copy
 * of the PARAMS tier to check instead (an offload program's, read from its homes).
 * Under ZeRO-3 with offload each parameter has one copy (its owner's): nothing to
 * compare. */
int zero_check_replicas(Zero *z, Executor *ex, const char *params, char *err, size_t errlen);

#endif
