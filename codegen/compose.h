/* Composing the training step: what happens between the backward pass and the next
 * step's forward pass, decided here for every rank so that the runtime only runs it.
 *
 * What the passes make of the step comes in parts (Program: step, sync, gradnorm, update;
 * compose_lists then writes them into the lists the program carries). After the
 * micro-batches, the part `sync` sums the gradients:
 *   - first, the gradients left as partial sums over the tensor-parallel ranks
 *     (PParam.tp_partial: replicated weights read only by ops whose work the ranks
 *     divide, passes/autodiff.c) are all-reduced over the tp group, adjacent ones
 *     together, once a step instead of once a micro-batch;
 *   - a parameter that several pipeline stages hold (the token embedding that is also
 *     the output head) is reduced onto its lowest holder and broadcast back, over the
 *     group of its holders (Program.stage_groups, the same list in every stage), so
 *     every copy is bitwise the same;
 *   - then, below ZeRO stage 2 (whose step reduces each gradient to its owner,
 *     codegen/zero.h) and with more than one data-parallel rank: at stage 0 the
 *     gradient tier is all-reduced over the dp group in buckets of whole parameters of
 *     at most COMPOSE_BUCKET bytes, last parameters first (the order backward
 *     completes them); at stage 1 each gradient is reduced onto its owner only (half
 *     an all-reduce's traffic: only the owner updates it).
 *     In a program of one tp rank and one unscheduled stage these go into `step`
 *     instead, each right after the last instruction that touches its gradients, marked
 *     to run on the step's last micro-batch only (IsaInstr.last) and to overlap the
 *     instructions after it ("overlap": a device with a communication stream runs it
 *     there while the rest of backward computes, and the list's end waits for it). That
 *     is the cost model's rule too (plan/search.c: the end-of-step reduction overlaps
 *     the last micro-batch's backward). Elsewhere (tensor or pipeline parallelism, whose
 *     own collectives would run beside it on other communicators) `sync` holds them.
 * The gradient norm counts every element of the model once over the mesh: `gradnorm`
 * keeps parameter i's kernel on the ranks that count it (a tensor-parallel split one
 * on every tp rank, a replicated one on tp rank 0, a tied one on its lowest stage only,
 * and over the dp group its owner from ZeRO stage 1, else dp rank 0), and starts by
 * zeroing the partial sums when some rank skips a kernel, so a rank's sum of its parts
 * is its share and the world's sum is the norm's square. `update` runs parameter i's
 * kernel on its owner only from ZeRO stage 1, and at stages 1 and 2 ends with each
 * parameter broadcast from its owner over the dp group (at stage 3 a rank keeps only
 * what it owns). Then in both parts each run of consecutive parameters whose kernels
 * run on the same ranks becomes one multi-tensor kernel over the run's bytes
 * (lower_norm_kernel, lower_update_kernel: codegen/lower.h), keeping their conditions,
 * and the table drops the kernels they replaced: a program of one rank, or of plain data,
 * tensor or pipeline parallelism, updates with one kernel instead of one per parameter
 * (GPT-2: 148), and sums the norm with one for each run of parameters counted alike
 * (one; a few where tensor parallelism counts replicated parameters on tp rank 0 only).
 * The norm's runs keep its partial sums (its rows tile every parameter) and the update's
 * compute every element as before, so whichever runs a plan makes, no bit changes. Not
 * made: the norm's runs of a program whose rows cannot be shared (codegen/lower.c,
 * norm_row), and the update's of an offload program, which updates chunk by chunk
 * (codegen/offload.h).
 * A program whose state will be offloaded (ZeRO stage 0 over any number of dp ranks,
 * any mesh) sums each parameter's gradient alone right after its last write
 * in `step`, not overlapped, before the offload plan (which then keeps each gradient on
 * the device until its sum, and plans `sync` too); under ZeRO-3 the offload plan places
 * the reductions itself. */
#ifndef COLOSSALC_COMPOSE_H
#define COLOSSALC_COMPOSE_H
#include "codegen/lower.h"

#define COMPOSE_BUCKET (25 << 20)

/* ps[0..n): one program or a pipeline's stages (one kernel table); offload: their state
 * will be offloaded (codegen/offload.h plans their lists next). requires: lower (gradnorm
 * and update one kernel per parameter, in order; an offload program's micro-batches
 * unrolled), the plan
 * set (dp, tp, zero_stage, owners), ZeRO's schedule; before offload_plan and
 * program_share_kernels. */
void compose_step(Program **ps, int n, bool offload);

/* The lists each program carries (ProgListKind, program/program.h), into p->lists and
 * p->named, from what the passes made of its step, sync, gradnorm, update and forward:
 *   train    the gradients zeroed (not in an offload program: its moves from "zero"
 *            create them); the micro-batches (an unscheduled program's a loop whose
 *            iterations write each micro-batch's inputs, call `step` (a list of its own)
 *            and read its loss; a scheduled one's a call of `schedule`, a list of its
 *            own that calls the chunks' lists); slot 0 after a schedule's slots; the fp8
 *            tail; sync; gradnorm; "norm"; update
 *   eval     the gradients zeroed and the micro-batches, the step's last-micro-batch
 *            instructions left out (validation)
 *   forward  the token inputs, then `forward` (programs that sample)
 *   gather, release   ZeRO-3 programs whose step gathers each parameter: every
 *            parameter brought to every rank, and given back
 * and p->staging. requires: every pass that writes the step (offload last). */
void compose_lists(Program **ps, int n);

/* The device scratch the collectives of p's lists reorder through: the largest
 * all_gather or reduce_scatter with an outer dimension above 1, in the lowered lists
 * (step, sync, gradnorm, update, forward) and the lists made of them, so that it holds
 * before compose_lists too (the offload plan keeps room for it). */
int64_t program_staging(const Program *p);

#endif
