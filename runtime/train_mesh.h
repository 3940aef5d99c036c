/* train_mesh: the trainer's side of tensor and pipeline parallelism (program.h,
 * "Parallel programs"): the mesh of ranks, its groups, and the parameters as one
 * global model whatever the mesh.
 *
 * Mesh. D x T x P ranks, rank = pp*(D*T) + dp*T + tp. mesh_init checks that the
 * world fits the program's mesh (D 0: world / (T*P)), splits the world into the
 * tp, dp and pp groups (each ranked by its coordinate, so a pp group's rank is the
 * stage), and picks this rank's stage program. A mesh of one tp rank and one stage
 * splits nothing: dp is the world, tp and pp are self Comms.
 *
 * The global view. `global` is an RtProgram holding every parameter once (stage
 * order, first holder's position), with its global shape (program_global_shape) at
 * packed offsets, and tiers sized for them: the checkpoint code (train_ckpt.h) reads
 * and writes it as it does a one-rank program, so files hold global tensors named as
 * in the model. mesh_slice copies one parameter between the global layout and this
 * rank's local part (program.h's block layout along the tp dimension).
 *
 * Device groups. The groups of mesh_init are host Comms (MPI); mesh_device_groups
 * hands those that carry device buffers (dp, tp, pp, whatever their size) to wrap when the
 * device has its own collectives (the CUDA device: NCCL on its stream), makes the
 * groups of tied parameters, and connects the pp group to the stages its lists send to
 * and receive from (comm.h, connect). The world stays the host Comm: the checkpoint
 * gathers below move host memory.
 * Tied parameters (one name held by several stages): mesh_sum_tied reduces the
 * holders' gradients onto the lowest holder (a group of the holding stages, split
 * from the pp group) and broadcasts the sum back, so every copy is bitwise the same;
 * it runs after the step and before the dp reduction, on the device's buffers.
 *
 * The norm. in_norm[i] says whether local parameter i's elements count in the
 * global norm on this rank: split ones on every tp rank, replicated ones on tp rank
 * 0, tied ones on the lowest stage holding them (NULL when every rank counts every
 * parameter: no tp and no tied parameter).
 *
 * Checkpoints. mesh_gather sends every parameter's local parts (and, with opt, its
 * optimizer state) from the dp rank 0 holders (lowest stage, each tp rank) to world
 * rank 0's global buffers; every rank of dp rank 0 calls it (the others return at
 * once). mesh_scatter fills this rank's local tiers from global buffers every rank
 * holds (start-up: initialisation, --init-from, --resume).
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_MESH_H
#define COLOSSALC_RUNTIME_TRAIN_MESH_H

#include "runtime/comm.h"
#include "runtime/executor.h"
#include "runtime/train_program.h"

#include <stddef.h>
#include <stdint.h>

typedef struct Mesh {
  int dp, tp, pp;                /* D, T, P */
  int dp_rank, tp_rank, pp_rank; /* this rank's coordinates */
  int trivial;                   /* T = P = 1: the world is the dp group */
  Comm *world, *dp_comm, *tp_comm, *pp_comm;
  const RtProgram *stages; /* [pp] */
  const RtProgram *prog;   /* stages[pp_rank] */
  RtProgram global;        /* every parameter once, global shapes (see above) */
  int *local_of;           /* [pp][global.nparams] index in that stage, or -1 */
  int *gindex;             /* [prog->nparams] index in global.params */
  int *source;             /* [global.nparams] lowest stage holding it */
  Comm **stage_comms;      /* [prog->nstage_groups] the program's groups of stages
                              this stage is in, else NULL */
  float *scratch;          /* [most local numel] checkpoint gathers */
} Mesh;

/* A device's Comm over the ranks of host (own: it frees host). */
typedef Comm *(*MeshWrapFn)(void *arg, Comm *host, int own);

/* The mesh of stages[0..nstages) over world. 0, or -1 with a message (the same on
 * every rank for a world that does not fit). */
int mesh_init(Mesh *m, const RtProgram *stages, int nstages, Comm *world, char *err, size_t errlen);
void mesh_free(Mesh *m);

/* One parameter: global g (global layout) <-> local l (this rank's part). */
void mesh_slice(const Mesh *m, const RtParam *l, float *local, const RtParam *g, float *global, int to_global);
/* Every local parameter from gparams (and, where opt_held[i] (NULL: all), the
 * optimizer state from gopt when it is not NULL) into the local host tiers. */
void mesh_scatter(const Mesh *m, const char *gparams, const char *gopt, char *params, char *opt,
                  const unsigned char *opt_held);
/* World rank 0's gparams (and gopt when opt) from the holders' host tiers. */
/* fp8's scaling states (program.h "fp8"), the same on every rank of a stage (their
 * amaxes are reduced over its tp and dp groups): mesh_fp8_gather sends each stage's
 * (rows x width, local) from its rank of dp 0 and tp 0 to world rank 0, run by run into
 * their places in the model's order (total x width, model); every rank calls it.
 * mesh_fp8_scatter takes this rank's from the model's. */
void mesh_fp8_gather(Mesh *m, const float *local, float *model);
void mesh_fp8_scatter(const Mesh *m, const float *model, float *local);
void mesh_gather(Mesh *m, char *gparams, char *gopt, const char *params, const char *opt, int opt_too);
/* After the device is open (every rank calls it): the groups carrying device buffers
 * through wrap (NULL: they stay the host Comms, the CPU device), the program's groups
 * of stages, the pp group's connections. 0, or -1 with a message. */
int mesh_device_groups(Mesh *m, MeshWrapFn wrap, void *arg, char *err, size_t errlen);

#endif
