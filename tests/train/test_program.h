/* test_program: programs written by hand for the runtime's tests, in the program format
 * (program/program.h), as the compiler writes it. A test program's file defines its
 * kernels (colossalc_kernels) and tp_program(ProgBuild *), which describes its stages
 * with the helpers below; tests/train/gen_program.c runs it at build time and writes the
 * blob as C (prog_write_c), which the test's `train` links beside the kernels.
 *
 * Instructions are initialisers of IsaInstr (program/isa.h), every rank, no node:
 *   KERNEL(id, extent)             a kernel of the program's table (tp_program's kernels:
 *                                  kernel i runs code i with the four tier bases as buffers)
 *   ZERO(tier, offset, bytes)      GEMM(.ta = ..., ...)      GEMM_BATCHED(.batch = ...)
 *   SLOT(mb, step)
 *   INPUT(input, mb, step, offset) LOSS(offset)              SEND/RECV(peer, tag, off, count)
 *   COMM(.kind = ..., ...)         LOOP(count, body, final)  CALL(list)
 *   NORM(offset, count, microbatches)    MOVE, DROP, WAIT (offload)
 *   ON(instr-macro, dp_rank, tp_rank)  the same with rank conditions */
#ifndef COLOSSALC_TESTS_TEST_PROGRAM_H
#define COLOSSALC_TESTS_TEST_PROGRAM_H

#include "program/program.h"

#include <stdarg.h>
#include <string.h>

#define TP_I(op_, member, ...)                                                       \
  {                                                                                  \
    .op = (op_), .dp_rank = -1, .tp_rank = -1, .node = -1, .member = { __VA_ARGS__ } \
  }
#define TP_ON(op_, member, dp, tp, ...)                                                  \
  {                                                                                      \
    .op = (op_), .dp_rank = (dp), .tp_rank = (tp), .node = -1, .member = { __VA_ARGS__ } \
  }
#define KERNEL(id_, ext_) TP_I(ISA_KERNEL, kernel, .id = (id_), .extent = (ext_))
#define KERNEL_ON(id_, ext_, dp, tp) TP_ON(ISA_KERNEL, kernel, dp, tp, .id = (id_), .extent = (ext_))
#define KERNEL_HOST(id_, ext_) TP_I(ISA_KERNEL, kernel, .id = (id_), .on_host = 1, .extent = (ext_))
#define ZERO(t, off, n) TP_I(ISA_ZERO, zero, (t), (off), (n))
#define GEMM(...) TP_I(ISA_GEMM, gemm, .alpha = 1, .batch = {1, 1}, __VA_ARGS__)
#define GEMM_BATCHED(...) TP_I(ISA_GEMM, gemm, .alpha = 1, __VA_ARGS__)
/* The optimizer every hand-written program trains with (train's flags may override it),
 * as ProgStage fields: AdamW (betas 0.9 and 0.95, eps 1e-8, weight decay 0.1), the
 * gradient clipped at norm 1, the rate from 0.05 down to 0.005 on a cosine after
 * `warmup` steps. */
#define TP_ADAMW(warmup_)                                                                                           \
  .optimizer = PROG_OPT_ADAMW, .schedule = PROG_SCHED_COSINE, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, \
  .weight_decay = 0.1, .clip = 1.0, .min_lr = 0.005, .warmup = (warmup_)

#define SLOT(mb, step) TP_I(ISA_SLOT, slot, (mb), (step))
#define INPUT(i, mb, step, off) TP_I(ISA_INPUT, input, (i), (mb), (step), (off))
#define LOSS(off) TP_I(ISA_LOSS, loss, (off))
#define LOSS_ON(off, dp, tp) TP_ON(ISA_LOSS, loss, dp, tp, (off))
#define SEND(peer, tag, off, count) TP_I(ISA_SEND, p2p, (peer), (tag), TIER_WORK, (off), (count))
#define RECV(peer, tag, off, count) TP_I(ISA_RECV, p2p, (peer), (tag), TIER_WORK, (off), (count))
#define COMM(...) TP_I(ISA_COMM, comm, __VA_ARGS__)
#define LOOP(count, body, final) TP_I(ISA_LOOP, loop, (count), (body), (final))
#define CALL(list) TP_I(ISA_CALL, call, (list))
#define NORM(off, count, mbs) TP_I(ISA_NORM, norm, (off), (count), (mbs))
#define MOVE(c_, part_, from_, to_, keep_) \
  TP_I(ISA_MOVE, move, .chunk = (c_), .part = (part_), .keep = (keep_), .from = (from_), .to = (to_))
#define DROP(c_, part_, at_) TP_I(ISA_DROP, move, .chunk = (c_), .part = (part_), .from = (at_))
#define WAIT(c_, part_) TP_I(ISA_WAIT, move, .chunk = (c_), .part = (part_))

typedef struct TpList {
  const char *name; /* "train", "eval", "forward" (prog_list_names), or a list to call */
  const IsaInstr *v;
  int n;
} TpList;
#define TP_LIST(name, array) \
  { (name), (array), (int)(sizeof(array) / sizeof *(array)) }

typedef struct TpParam {
  const char *name;
  int ndim;
  int64_t shape[4]; /* this stage's part */
  int64_t offset;
  int decay;
  ProgInit init;
  double a, b;
  int tp_dim; /* -1: replicated */
} TpParam;

typedef struct TpInput {
  const char *name;
  ProgRole role;
  int64_t shape[2]; /* [batch, seq] */
  int64_t offset;
} TpInput;

/* One stage: its record (the stage's values: tiers, slots, logits, norm parts, ...; the
 * model's are the first stage's), parameters, inputs, lists (the first to call is
 * list 0 of the stage's calls: CALL(k) names the stage's k-th list not named train, eval
 * or forward), stage groups (INTS: count, stages...), offload chunks and predictions. */
typedef struct TpStage {
  ProgStage s;
  const TpParam *params;
  int nparams;
  const TpInput *inputs;
  int ninputs;
  const TpList *lists;
  int nlists;
  const int64_t *groups;
  int ngroups, ngroup_ints;
  const ProgChunk *chunks;
  int nchunks;
  const int64_t *predicted; /* device peak, host peak, nvme peak, bytes moved */
} TpStage;

/* The parts (nparts pairs of an instruction array and its count: TP_PART) one after
 * another into out, which has room for cap; returns the count. */
int tp_cat(IsaInstr *out, int cap, int nparts, ...);
#define TP_PART(a) (a), (int)(sizeof(a) / sizeof *(a))

/* Writes the program `model` of nstages stages and ncodes kernels (named) into b, with the
 * model's record (every parameter once, its tp dimension tp times longer, packed) and
 * kernel i = code i over the four tier bases. */
void tp_write(ProgBuild *b, const char *model, const TpStage *stages, int nstages, const char *const *codes,
              int ncodes);

/* What each test program defines (tests/train/gen_program.c calls it). */
void tp_program(ProgBuild *b);

#endif
