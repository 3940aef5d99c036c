/* ZeRO inside the step: with stage 3 a rank holds only the parameters it owns between
 * uses, with stage 2 and 3 only the gradients it owns once they are complete, so the
 * peak falls with the number of data-parallel ranks (the runtime's ZeRO before this
 * gathered every parameter for the whole step and reduced gradients after it).
 *
 * zero_schedule walks the lowered step (one micro-batch; the runtime runs it once per
 * micro-batch) and, for each parameter, from the bytes each instruction touches:
 *   stage 3: zero_gather before the first instruction of the forward pass that reads
 *            the parameter and zero_release after the last; the same again around its
 *            uses in the backward pass (a tied parameter read at both ends of the
 *            forward pass is held in between);
 *   stage 2, 3: zero_grad before the first instruction that writes the parameter's
 *            gradient and zero_reduce after the last.
 * runtime/program.h says what the runtime does with them. */
#ifndef COLOSSALC_ZERO_H
#define COLOSSALC_ZERO_H
#include "codegen/lower.h"

/* Rewrites p->step (p->zero_stage 2 or 3; one program: no pipeline) and sets
 * p->zero_scheduled. */
void zero_schedule(Program *p);

#endif
