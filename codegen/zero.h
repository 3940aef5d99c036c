/* ZeRO inside the step: with stage 3 a rank holds only the parameters it owns between
 * uses, with stage 2 and 3 only the gradients it owns once they are complete, so the
 * peak falls with the number of data-parallel ranks (the runtime's ZeRO before this
 * gathered every parameter for the whole step and reduced gradients after it).
 *
 * zero_schedule walks the lowered step (one micro-batch; the runtime runs it once per
 * micro-batch) and, for each parameter, from the bytes each instruction touches
 * (instr_touch of codegen/offload.h, and a collective's source and destination; a
 * range that meets several parameters counts for each of them):
 *   stage 3: zero_gather before the first instruction of the forward pass that reads
 *            the parameter and zero_release after the last; the same again around its
 *            uses in the backward pass (a tied parameter read at both ends of the
 *            forward pass is held in between). The gathers of the uses that start at
 *            one instruction (a group) are prefetched: issued at the previous group's
 *            start, marked "overlap", with a "join" at their own start, so the
 *            broadcast runs while the previous group computes (a gather whose
 *            parameter is still held for its forward use there stays at its start);
 *   stage 2, 3: zero_grad before the first instruction that touches the parameter's
 *            gradient and zero_reduce after the last; a parameter without one gets
 *            both at the end of the step.
 * The forward pass is the instructions before the first one of a backward node (by
 * position: an instruction with no node, -1, belongs to the pass it sits in), the
 * backward pass the rest, so every read of a parameter lies in one of its two spans
 * and the spans do not overlap. The zero_* instructions come before (gathers, grads)
 * or after (reduces, releases) the instruction in parameter order.
 * program/program.h says what the runtime does with them. */
#ifndef COLOSSALC_ZERO_H
#define COLOSSALC_ZERO_H
#include "codegen/lower.h"

/* ZeRO's ownership (p->zero_stage >= 1): every parameter (a piece, after
 * zero_split_params, is one) dealt to one of the p->dp
 * ranks of its data-parallel group, largest first (ties: lower index), each to the rank
 * with the fewest elements so far (ties: lower rank), into p->params[].owner, which the
 * program carries ("owner"); the runtime shards by it. requires: the plan set (dp > 0). */
void zero_assign_owners(Program *p);

/* Before the owners are dealt: every parameter larger than half a rank's share of the
 * elements (all of them over p->dp) made p->dp pieces (lower_split_params), so that no rank
 * owns much more than its share (GPT-2's token embedding alone is 31 % of the model: a
 * quarter of it on each of 4 ranks, not all of it on one). requires: lower_program, the
 * plan set (p->zero_stage >= 1, p->dp > 0), one unscheduled program without offload (no
 * pipeline). */
void zero_split_params(Program *p);

/* The device memory one training step holds at its peak on data-parallel rank r, as
 * the runtime counts it (runtime/executor.h): every tier it does not reserve whole
 * (WORK for all its slots), the collectives' staging buffer, and of the tiers ZeRO
 * shards (OPT from stage 1, GRADS at 2 and 3, PARAMS at 3) the pages committed: the
 * owned shards for the whole run, and what the compiled step's gathers and gradients
 * add until they are released or reduced. Pages shared by two ranges count once. Not
 * for offload programs (their plan predicts their own). */
void zero_predict_memory(const Program *p, int64_t *out, int n); /* out[r], ranks 0..n-1 */

/* Rewrites p->step and sets p->zero_scheduled. requires: lower_program, the plan set
 * (p->zero_stage 2 or 3, p->tp), one unscheduled program without offload (no
 * pipeline). */
void zero_schedule(Program *p);

#endif
