/* The program verifier: what the compiler checks of the programs it writes, after each
 * pass that writes or rewrites them (driver/main.c, as ir_verify after the IR's), so
 * that a wrong program is an internal error naming the pass, not a fault in `train`.
 *
 * Of every list of every stage (before the pass `lists`, the parts step, sync,
 * gradnorm, update and forward; then the lists the program carries), each instruction:
 *   - the bytes it touches (kernels' buffers, GEMM operands, zeroing, collectives,
 *     sends and receives) lie in their tiers (WORK: one slot);
 *   - it is where it may be: input, loss and slots in `step` (input and loss of a
 *     scheduled program), sends and receives in `step` to another stage with a tag
 *     below ISA_TAG_LIMIT, ZeRO's instructions in the `step` of a program whose step
 *     ZeRO schedules (gathers and releases at stage 3) naming a parameter, "norm" in
 *     train only, loops within their list, calls of an earlier list to call, offload's in an
 *     offload program naming a chunk and part; a collective splits evenly over tp;
 * and of the whole:
 *   - ZeRO: a stage above 0 has a fixed dp and every parameter an owner in it;
 *   - pipelines: messages between two stages are received in the order sent
 *     (pipe_check_order);
 *   - offload: walking step, gradnorm and update in order, a move's source holds the
 *     part and its destination does not, a drop's location holds it, every kernel,
 *     GEMM and zeroing finds the parts of PARAMS, GRADS and OPT it touches on the
 *     device (the host for a kernel on_host) with no move or drop of them in flight (not
 *     yet waited for), and the step ends with every part at its home only (gradients
 *     nowhere). */
#ifndef COLOSSALC_VERIFY_PROGRAM_H
#define COLOSSALC_VERIFY_PROGRAM_H
#include <stddef.h>
#include "codegen/lower.h"

/* 0 when the nps programs (the stages of one plan) pass, else -1 with the first
 * failure in err ("stage 1 step[12]: ..."). */
int program_verify(Program *const *ps, int nps, char *err, size_t errlen);

#endif
