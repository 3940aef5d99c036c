/* train_mesh: the trainer's side of tensor and pipeline parallelism: the mesh of ranks,
 * its groups, and the parameters as one global model whatever the mesh.
 *
 * Mesh. D x T x P ranks, rank = pp*(D*T) + dp*T + tp. mesh_init checks that the world
 * fits the program's mesh (D 0: world / (T*P)), splits the world into the tp, dp and pp
 * groups (each ranked by its coordinate, so a pp group's rank is the stage), and takes
 * this rank's stage of the program. A mesh of one tp rank and one stage splits nothing:
 * dp is the world, tp and pp are self Comms.
 *
 * The global view is the program's model record (program/program.h: every parameter
 * once, its global shape, packed), which the checkpoint code (io/ckpt.h) reads and
 * writes as it does a one-rank program, so files hold global tensors named as in the
 * model. mesh_slice copies one parameter between the global layout and this rank's part
 * (the block layout along the tp dimension).
 *
 * Device groups. The groups of mesh_init are host Comms (MPI); mesh_device_groups hands
 * those that carry device buffers (dp, tp, pp, whatever their size) to wrap when the
 * device has its own collectives (the CUDA device: NCCL on its stream), makes the
 * program's groups of stages (the holders of a tied parameter, whose gradients the
 * compiled step sums over them), and connects the pp group to the stages this stage's
 * lists exchange messages with (comm.h, connect). The world stays the host Comm: the
 * checkpoint gathers below move host memory.
 *
 * Checkpoints. Every rank writes and reads its own pieces of the model's global
 * tensors (io/shards.h), so no rank ever holds more of the state than its own:
 * mesh_pieces lists them, each block of a tp-split parameter a box of the global tensor.
 * Writing, each element is written once (the lowest stage of a tied parameter, one tp
 * rank of a replicated one, one dp rank: the ZeRO owner, else dp rank = index mod dp).
 * mesh_scatter fills this rank's local parameters from global buffers every rank holds
 * (--init-from).
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_MESH_H
#define COLOSSALC_RUNTIME_TRAIN_MESH_H

#include "program/program.h"
#include "runtime/comm/comm.h"
#include "runtime/io/shards.h"

#include <stddef.h>
#include <stdint.h>

typedef struct Mesh {
  int dp, tp, pp;                /* D, T, P */
  int dp_rank, tp_rank, pp_rank; /* this rank's coordinates */
  int trivial;                   /* T = P = 1: the world is the dp group */
  Comm *world, *dp_comm, *tp_comm, *pp_comm;
  Prog all;           /* the whole program (the model's view) */
  Prog prog;          /* this rank's stage */
  Prog global;        /* the model's view: every parameter once, global shapes */
  int *local_of;      /* [pp][global.nparams] index in that stage, or -1 */
  int *source;        /* [global.nparams] the lowest stage holding it */
  Comm **stage_comms; /* [prog.s->ngroups] the program's groups of stages this stage is in,
                         else NULL */
} Mesh;

/* A device's Comm over the ranks of host (own: it frees host). */
typedef Comm *(*MeshWrapFn)(void *arg, Comm *host, int own);

/* The mesh of program all (its model's view, prog_open) over world. 0, or -1 with a
 * message (the same on every rank for a world that does not fit). */
int mesh_init(Mesh *m, const Prog *all, Comm *world, char *err, size_t errlen);
void mesh_free(Mesh *m);

/* One parameter: global g (global layout) <-> local l (this rank's part). */
void mesh_slice(const Mesh *m, const ProgParam *l, float *local, const ProgParam *g, float *global, int to_global);
/* Every local parameter from gparams (the model's layout). */
void mesh_scatter(const Mesh *m, const char *gparams, char *params);

/* Which pieces mesh_pieces lists: writing (each element once over the ranks) or reading
 * (what this rank holds); the parameters under params_prefix ("param/" for checkpoints,
 * "" for parameter files) when params, the optimizer state ("opt_m/", "opt_v/") when
 * opt; owned[i]: this rank owns local parameter i's state (ZeRO; all at stage 0). */
typedef struct MeshPieceRule {
  int writing, params, opt, zero_stage;
  int params_owned_only; /* reading: only the owned parameters (ZeRO-3 with offload) */
  const char *params_prefix;
  const unsigned char *owned;
} MeshPieceRule;
typedef struct MeshPieces {
  ShardPiece *p; /* keys owned */
  int *global;   /* [n] each piece's parameter among the model's */
  int n;
} MeshPieces;
/* This rank's pieces in the host tiers params and opt (the program's layout). 0, or -1
 * when out of memory. */
int mesh_pieces(const Mesh *m, const MeshPieceRule *r, char *params, char *opt, MeshPieces *mp);
void mesh_pieces_free(MeshPieces *mp);

/* fp8's scaling states, the same on every rank of a stage (their amaxes are reduced over
 * its tp and dp groups): mesh_fp8_gather sends each stage's (fp8_rows x fp8_width, local)
 * from its rank of dp 0 and tp 0 to world rank 0, run by run into their places in the
 * model's order (fp8_total x fp8_width, model); every rank calls it. mesh_fp8_scatter
 * takes this rank's from the model's. */
void mesh_fp8_gather(Mesh *m, const float *local, float *model);
void mesh_fp8_scatter(const Mesh *m, const float *model, float *local);
/* After the device is open (every rank calls it): the groups carrying device buffers
 * through wrap (NULL: they stay the host Comms, the CPU device), the program's groups
 * of stages, the pp group's connections. 0, or -1 with a message. */
int mesh_device_groups(Mesh *m, MeshWrapFn wrap, void *arg, char *err, size_t errlen);

#endif
