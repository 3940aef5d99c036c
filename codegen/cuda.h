/* The CUDA emitter: kernels in the backend-neutral form (codegen/kernel.h) to CUDA C
 * source text, one self-contained translation unit for NVRTC (no #include: NVRTC has
 * no libc headers). This file only writes text; it needs no CUDA header or library.
 *
 * Each kernel becomes
 *     extern "C" __global__ void NAME(const cc_bufs bufs, long long n, const float *scalars)
 * with cc_bufs (defined in the prelude) a struct of K_MAX_BUFS pointers, passed by
 * value: bufs.p[i] is the address of the kernel's buffer i (its binding resolved by
 * the launcher), so kernels that share code (codegen/share.c) are one function
 * covering [0, n) of its parallel range (rows for KP_ROWS, columns for KP_COLS) with a
 * grid-stride loop, so any grid size is correct; cuda_kernel_grid_size() says which
 * one fills the machine. The launcher must use cuda_kernel_block_size() threads per
 * block (the kernel is compiled with __launch_bounds__ of that size; a smaller power
 * of two >= 32 also works).
 *
 * How the iteration space maps onto threads (cuda_kernel_mapping):
 *   CM_FLAT        KP_ROWS, no REDUCE phase, no cross-element dependency between
 *                  phases: one thread per (r, j) element, flat grid-stride loop over
 *                  n*cols; ROW phases run in the thread with j == 0. Where the rows
 *                  are whole vectors of 4 and some read-only load or some store
 *                  reads or writes 4 neighbours of a row in one run (f32 or 16-bit,
 *                  every row starting at a multiple of 4), and the buffers' addresses
 *                  are aligned at run time (16 bytes for f32, 8 for 16-bit), a thread
 *                  takes 4 elements instead: those loads and stores are one 128-bit (or
 *                  64-bit) access each, the 4 elements' phases run one after another. A
 *                  buffer read and written through one view (AdamW's moments and
 *                  weights) is read as a vector first and written as one last, a phase
 *                  after its store reading the value the store left.
 *   CM_BLOCK_ROW   KP_ROWS with REDUCE phases (or phases that read what another
 *                  element of the row wrote), cols >= 32: one thread block per row;
 *                  threads stride over j; reductions through warp shuffles and
 *                  shared memory, the result in every thread; ROW phases in thread 0;
 *                  __syncthreads() between phases that touch the same memory. With
 *                  vectors as CM_FLAT's (read-only loads, stores nothing reads), a
 *                  thread takes four neighbouring columns at a time (a layernorm's
 *                  input read 128 or 64 bits at once).
 *   CM_LANE_ROW    KP_ROWS that reduce down columns (REDUCE and ROW phases, the rows
 *                  next to each other in memory, the columns apart: a bias's gradient):
 *                  32 rows per block, one per lane, the columns over the block's 8
 *                  warps; the warps' partial sums added in warp order through shared
 *                  memory; ROW phases in warp 0.
 *   CM_THREAD_ROW  the same kernels with cols < 32: one thread per row, phases in
 *                  order, exactly as the reference evaluator does.
 *   CM_COLS        KP_COLS: one thread per column, all rows in order (deterministic).
 *   CM_COLS_OWNED  KP_COLS whose one phase scatters rows through a gather of the row
 *                  alone (an embedding's gradient: out[tokens[r], j] += g[r, j]), the
 *                  rows' columns apart: the rows are split into cuda_kernel_owners()
 *                  classes by the gathered index (its low bits), a thread per (class,
 *                  column) walks every row in order and takes those of its class; an
 *                  output element is one thread's, its rows added in order as CM_COLS
 *                  does, with the classes' threads side by side.
 *   CM_WARP_ROW    a fused attention kernel (KAttn): one warp per row of the pass (a
 *                  query row forward and for dQ, a key row for dK and dV), one score
 *                  of a 32-row block per lane, the head's columns spread over the
 *                  lanes; every sum in the evaluator's order. A float32 program's.
 *   CM_MMA_TILE    a fused attention kernel of a bf16 or f16 program (queries of that
 *                  type, a head of 16 to 128 columns in steps of 16): on tensor cores,
 *                  FlashAttention-2's tiling, 16 rows of the pass per warp (128 threads a
 *                  block), the other side in blocks of 32 rows through shared memory,
 *                  mma.sync m16n8k16 with f32 accumulation, the probabilities (dS in the
 *                  backward passes) rounded to the 16-bit type before they multiply. Its
 *                  launch bounds ask for two resident blocks per SM.
 *
 * Within a phase the elements of a row are assumed independent (as the CPU backend
 * assumes), and rows are independent for KP_ROWS, columns for KP_COLS.
 *
 * A SELECT is an if/else: a branch not taken loads nothing (a gather index of -1
 * under an ignore mask is never dereferenced).
 *
 * Define COLOSSALC_CUDA_BOUNDS when compiling the source to check every address
 * against its buffer's numel (__trap() on failure). A test harness may define
 * CC_SHARED(type, name, n), the one shared-memory declaration, before the source.
 */
#ifndef COLOSSALC_CUDA_H
#define COLOSSALC_CUDA_H
#include <stdint.h>
#include <stdio.h>
#include "codegen/kernel.h"

typedef enum {
  CM_FLAT,
  CM_BLOCK_ROW,
  CM_THREAD_ROW,
  CM_COLS,
  CM_WARP_ROW,
  CM_COLS_OWNED,
  CM_MMA_TILE,
  CM_LANE_ROW
} CudaMapping;

CudaMapping cuda_kernel_mapping(const Kernel *k);
const char *cuda_mapping_name(CudaMapping m);
int cuda_kernel_block_size(const Kernel *k);                    /* threads per block */
int64_t cuda_kernel_owners(const Kernel *k);                    /* CM_COLS_OWNED's classes; else 1 */
int64_t cuda_kernel_grid_size(const Kernel *k, int64_t extent); /* blocks, >= 1 */

/* The whole translation unit: a header comment (kernel count, colossalc version),
 * the shared device helpers, then each kernel. malloc'd; the caller frees it. */
char *cuda_emit_source(const Kernel *const *kernels, int n);
void cuda_emit_prelude(FILE *f, int nkernels);
void cuda_emit_kernel(FILE *f, const Kernel *k); /* needs the prelude before it */

/* The same text as units for `train` to compile in parts (runtime/device/cuda_kernels.h): the
 * prelude, then each kernel, each unit after the first preceded by a form feed ('\f',
 * which the generated C never holds); unit i + 1 defines kernels[i]. malloc'd. */
char *cuda_emit_units(const Kernel *const *kernels, int n);

/* The source with line numbers, for NVRTC failure reports ("  12 | text"). */
void cuda_source_print_numbered(FILE *f, const char *src);

#endif
