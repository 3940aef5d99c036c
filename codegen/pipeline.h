/* Pipeline schedules and the programs of the stages.
 *
 * A schedule is the order in which one stage runs the forward (F) and backward (B)
 * passes of its chunks over the step's micro-batches. 1F1B (one chunk a stage):
 * stage s runs min(pp-s-1, m) forward passes, then alternates one forward and one
 * backward, then drains the backward passes. Interleaved (v chunks a stage, chunk k
 * on stage k % pp; Megatron-LM's schedule, which needs m to be a multiple of pp):
 * the forward passes go through the stage's chunks in groups of pp micro-batches,
 * (pp-s-1)*2 + (v-1)*pp of them before the first backward (all of them when m = pp),
 * the backward passes through the chunks in reverse. ZB-H1 (Qi et al. 2024; one chunk
 * a stage): 1F1B's order with each backward split into B, the input gradients sent on,
 * and W, the weight gradients (lower_stage's split_w), stage s running a micro-batch's
 * W after the B of s micro-batches later (plan/schedule.c).
 *
 * Each stage's `step` is its schedule: per action, the micro-batch's work-tier slot, the
 * inputs it reads, receives, a call of the chunk's forward, backward or W (lists of
 * their own, Program.lists), sends, and the loss (program/program.h); each phase that
 * repeats a pattern of actions over the micro-batches (1F1B's warm-up, steady state and
 * cool-down; the interleaved schedule's groups) is one loop, so a step's size does not
 * grow with the micro-batches. Sends do not wait and receives do; pipe_check runs every
 * stage's schedule against the others and proves that no receive waits forever and that
 * every tag's messages arrive in the order they were sent. A micro-batch keeps one slot
 * on a stage from its first forward there to its last backward (W): slot mb mod slots. */
#ifndef COLOSSALC_PIPELINE_H
#define COLOSSALC_PIPELINE_H
#include "codegen/lower.h"
#include "passes/partition.h"
#include "plan/schedule.h"

/* 0 when the stages' schedules run to the end over the partition's boundaries, else
 * -1 with why in err. */
int pipe_check(const Partition *part, int m, PipeSchedule kind, char *err, size_t errlen);

/* 0 when, between every two stages and in each direction, the k-th send of one
 * stage's `step` and the k-th receive of the other's have the same tag and count (so
 * messages are received in the order sent whatever their tags, as NCCL matches them:
 * runtime/comm/nccl.h), else -1 with the first message out of order in err. */
int pipe_check_order(Program *const *ps, int pp, char *err, size_t errlen);

/* The stages' programs (pp of them), their kernels in one table: every program's
 * kernels array is the whole table; pipe_check and pipe_check_order hold for them. */
Program **lower_pipeline(const Partition *part, int m, PipeSchedule kind);

/* One stage's micro-batches written out: the step of an unscheduled program with
 * p->microbatches > 1 becomes, for each micro-batch in turn, its rows' "input"s, the
 * step and its "loss", and the program is scheduled (one slot), so that a planner that
 * walks the step (offload's) sees the whole training step. */
void pipe_unroll_microbatches(Program *p);
/* A pipeline stage's step with its loops and calls written out (for offload's plan,
 * which walks the whole step instruction by instruction). */
void pipe_flatten(Program *p);

/* An "input" of input `input` (p->inputs) for micro-batch mb + step * i at WORK offset
 * off (nothing when off < 0: the list does not read it); a "loss" at WORK offset off,
 * counted on tp rank 0 only. */
void pipe_put_input(Program *p, PSeq *s, int input, int64_t mb, int64_t step, int64_t off);
void pipe_put_loss(Program *p, PSeq *s, int64_t off);

#endif
