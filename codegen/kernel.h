/* The backend-neutral kernel form: what fusion produces and both emitters (LLVM IR
 * for the CPU in codegen/llvm.c, CUDA C in codegen/cuda.c) consume.
 *
 * A kernel is a two-level loop over an iteration space of `rows` x `cols`:
 *
 *   for r in [0, rows):                       -- parallel when par == KP_ROWS
 *     for each phase, in order:
 *       KPH_REDUCE: acc[a] = init; for j in [0, cols): acc[a] = acc[a] (+ or max) expr(r, j)
 *       KPH_MAP:    for j in [0, cols): store(buf, view(r, j)) (= or +=) expr(r, j)
 *       KPH_ROW:    store(buf, view(r, 0)) (= or +=) expr(r)        -- once per row
 *
 * With par == KP_COLS the roles swap for parallelism only: the columns are split
 * across threads (CPU) or threads of a block grid (GPU), and each worker runs ALL
 * rows in order for its columns. Only KPH_MAP phases are allowed then. This is how
 * deterministic reductions over rows are written (bias gradients, scatter-add of an
 * embedding gradient): every output element is owned by one worker and accumulated
 * in row order, so results are bit-for-bit repeatable and race-free.
 *
 * Coordinates. The iteration space is also an N-d shape `dims[0..ndims)` whose
 * product is rows*cols; the first `row_dims` axes span the rows and the rest span
 * the columns (row-major). The flat index is i = r*cols + j and coordinate d is
 * (i / stride_d) % dims[d] with stride_d the product of dims after d.
 *
 * Views. A load or store address (in elements of its buffer's dtype, from the start
 * of the buffer) is
 *     offset + sum_d coord_d * strides[d]  (+ gather * gather_stride)
 * where strides has one entry per iteration axis (0 broadcasts), and `gather`, when
 * not NULL, is an expression whose value (an integer stored as float) selects a
 * row: embedding lookups (table[idx[r]] ) and cross-entropy's logits[r, target[r]].
 * In KPH_ROW phases j is 0.
 *
 * Values are f32. Loads from i32 buffers convert to f32 (exact below 2^24, which
 * covers vocabularies and positions). Stores into i32 buffers are not allowed. Buffers
 * of bf16 or f16 hold 16-bit values: a load widens exactly, a store rounds to nearest
 * even (overflowing to infinity, f16's below its normals to its subnormals, NaN kept
 * a NaN), and a KS_ADD adds in f32 before it rounds (kx_to_f32, kx_from_f32). Buffers of
 * e4m3 or e5m2 hold 8-bit floats (fp8 GEMM operands): a load widens exactly, a store
 * rounds to nearest even and saturates at the largest finite value (kx_fp8, isa_fp8_*).
 *
 * Buffers are named by index into Kernel.bufs; each names a tier and a byte offset
 * within it, resolved by the memory plan: its binding. The emitted code does not
 * contain the bindings: it receives the address of each buffer, so kernels that
 * differ only in their bindings share one code (program_share_kernels,
 * codegen/share.c). An emitted CPU kernel has the signature
 *     void NAME(char *const *bufs, int64_t lo, int64_t hi, const float *scalars)
 * with bufs[i] the address of buffer i, and runs the parallel range [lo, hi) (rows
 * or columns, per `par`); a CUDA kernel
 *     __global__ void NAME(cc_bufs bufs, long long n, const float *scalars)
 * (cc_bufs: a struct of K_MAX_BUFS pointers, passed by value) covers [0, n) of the
 * parallel range with one thread per index (grid-stride loop). `scalars` carries
 * per-step runtime values (learning rate, bias corrections, the clipping scale, the
 * step number), read by KX_SCALAR.
 */
#ifndef COLOSSALC_KERNEL_H
#define COLOSSALC_KERNEL_H
#include <stdbool.h>
#include <stdint.h>
#include "ir/arena.h"
#include "ir/ir.h"
#include "program/isa.h"

enum { K_MAX_DIMS = 8, K_MAX_BUFS = 16, K_MAX_PHASES = 8, K_MAX_ACCS = 8 };

typedef enum { KP_ROWS, KP_COLS } KPar;

/* Expression node kinds. Unary/binary math ops are listed in KX_UNARY_OPS and
 * KX_BINARY_OPS so both emitters and the reference evaluator cover the same set. */
typedef enum {
  KX_CONST,  /* f */
  KX_LOAD,   /* buf, view */
  KX_ACC,    /* acc: the value of a KPH_REDUCE accumulator of this row */
  KX_COORD,  /* axis: coordinate along iteration axis `axis`, as float */
  KX_SCALAR, /* index: scalars[index] */
  KX_UNARY,  /* uop, a */
  KX_BINARY, /* bop, a, b */
  KX_SELECT, /* a != 0 ? b : c */
  KX_RAND,   /* seed, view, index: dropout_uniform(seed, (int64)scalars[index], address of
                view) (ir/rand.h): a uniform in [0, 1) per element, the view (no gather)
                giving the element's index */
} KExprKind;

/* RBF16, RF16: the value rounded to bf16 (f16), as an f32 (kx_from_f32 then kx_to_f32): a
 * 16-bit tensor's rounding point inside a fused expression */
#define KX_UNARY_OPS(X) \
  X(NEG) X(EXP) X(LOG) X(TANH) X(SQRT) X(RSQRT) X(RECIP) X(ABS) X(FLOOR) X(SIN) X(COS) X(RBF16) X(RF16)
#define KX_BINARY_OPS(X) X(ADD) X(SUB) X(MUL) X(DIV) X(MAX) X(MIN) X(POW) X(LT) X(LE) X(EQ)

typedef enum {
#define X(n) KU_##n,
  KX_UNARY_OPS(X) /* KU_NEG, ... */
#undef X
  KU_COUNT
} KUnary;
typedef enum {
#define X(n) KB_##n,
  KX_BINARY_OPS(X) /* KB_ADD, ... */
#undef X
  KB_COUNT
} KBinary; /* LT, LE, EQ give 1.0 or 0.0 */

typedef struct KView {
  int64_t offset;              /* elements */
  int64_t strides[K_MAX_DIMS]; /* per iteration axis, elements */
  struct KExpr *gather;        /* NULL, or the row selector */
  int64_t gather_stride;       /* elements per gathered index */
} KView;

typedef struct KExpr KExpr;
struct KExpr {
  KExprKind kind;
  float f;      /* KX_CONST */
  int buf;      /* KX_LOAD: index into Kernel.bufs */
  KView view;   /* KX_LOAD */
  int acc;      /* KX_ACC */
  int axis;     /* KX_COORD */
  int index;    /* KX_SCALAR, KX_RAND (the step's scalar) */
  int64_t seed; /* KX_RAND */
  KUnary uop;
  KBinary bop;
  KExpr *a, *b, *c;
  int id; /* unique within the kernel: emitters cache values by it (a DAG) */
};

typedef enum { KPH_REDUCE, KPH_MAP, KPH_ROW } KPhaseKind;
typedef enum { KR_SUM, KR_MAX } KReduce;
typedef enum { KS_SET, KS_ADD } KStore;

typedef struct KPhase {
  KPhaseKind kind;
  KReduce reduce; /* KPH_REDUCE */
  int acc;        /* KPH_REDUCE: accumulator written */
  int buf;        /* KPH_MAP, KPH_ROW: buffer stored into */
  KView view;     /* KPH_MAP, KPH_ROW: where (gather allowed) */
  KStore store;
  KExpr *expr;
} KPhase;

/* A buffer as a kernel sees it. */
typedef struct KBuf {
  const char *name; /* for messages and emitted comments */
  int tier;         /* which base pointer: tiers[tier] */
  int64_t offset;   /* bytes from that base */
  int64_t numel;    /* elements, for bounds in debug builds */
  DType dtype;      /* DT_F32, DT_BF16, DT_F16, DT_E4M3, DT_E5M2 or DT_I32 */
  bool shared;      /* WORK: slot 0's bytes whatever slot runs it (program/program.h) */
} KBuf;

/* A buffer element's bytes: 1 for e4m3 and e5m2, 2 for bf16 and f16, else 4. */
static inline int64_t kbuf_elem_bytes(const KBuf *b) { return dtype_size_bits(b->dtype) / 8; }

/* The 16-bit storage types' conversions (the meaning both emitters reproduce): the
 * instruction set's (program/isa.h), which the runtime's GEMMs use too. */
static inline float kx_to_f32(DType t, uint16_t h) { return isa_to_f32(t == DT_BF16 ? ISA_BF16 : ISA_F16, h); }
static inline uint16_t kx_from_f32(DType t, float f) { return isa_from_f32(t == DT_BF16 ? ISA_BF16 : ISA_F16, f); }
/* And the 8-bit ones' (isa_fp8_*): exact widening, rounding to nearest even with saturation. */
static inline IsaDtype kx_fp8(DType t) { return t == DT_E4M3 ? ISA_E4M3 : ISA_E5M2; }

/* A fused attention kernel (FlashAttention-2's algorithm), the one kernel that is not a
 * loop of phases: Kernel.attn set, no phases, par KP_ROWS, one row per work item and one
 * column. Operands are [batch, seq, features] with unit-stride features: element
 * (b, s, c) of operand x is at x.offset + b*x.sb + s*x.ss + c in buffer x.buf. With
 * F = heads*hd, q is [B, S, F], k and v [B, T, G*hd] (G = kv_heads key/value heads;
 * query head h reads key/value head h / (H/G), grouped-query attention; G = H is
 * multi-head attention); `out` (flash_attention's output) [B, S, F + heads]:
 * attention's output and then each head's log-sum-exp of its scores; g is out's
 * gradient and delta [B, S, heads] the row sums of dO∘O per head.
 *
 * Query i sees the keys j in [lo, hi) of kattn_keys: all of them, or when causal
 * j <= i' = i + T - S, and with a window W also j > i' - W (the W most recent keys).
 *
 *   KA_FWD  row (b, h, i), i < S: the keys it sees in blocks of KA_BLOCK aligned at
 *           multiples of KA_BLOCK (the blocks wholly outside [lo, hi) never visited,
 *           the keys of a block outside it skipped): the block's scores
 *           s_j = scale q_i·k_j, then m' = max(m, max_j s_j), the running sum and the
 *           output rescaled by exp(m - m') and the block's exp(s_j - m') and
 *           exp(s_j - m') v_j added (the online softmax); at the end out = acc / l and
 *           lse = m + log l. The scores are never stored.
 *   KA_DQ   row (b, h, i): dq_i = scale sum_j p_ij (g_i·v_j - delta_i) k_j, with
 *           p_ij = exp(s_ij - lse_i) recomputed.
 *   KA_DK   row (b, u, j), j < T, key/value head u < G: dk_j = scale sum_h sum_i p_ij (g_i·v_j -
 *           delta_i) q_i, over the group's query heads h in order and, for each, the
 *           queries i that see j (kattn_queries) in order.
 *   KA_DV   row (b, u, j): dv_j = sum_h sum_i p_ij g_i, in the same order.
 *
 * Sums over d run in order, the sums over keys (queries) in order of j (h, then i), all
 * in f32; every row is written by its work item alone (no atomics), so results are
 * repeatable. `res` is the operand written: out for KA_FWD, else the gradient, stored
 * with `store`. */
typedef enum { KA_FWD, KA_DQ, KA_DK, KA_DV } KAttnPass;
enum { KA_BLOCK = 32 };
typedef struct KOperand {
  int buf;
  int64_t offset, sb, ss;
} KOperand;
typedef struct KAttn {
  KAttnPass pass;
  int64_t batch, heads, sq, sk, hd; /* B, H, S, T, head size */
  int64_t kv_heads;                 /* G, a divisor of H */
  int64_t window;                   /* W > 0 (causal only): the keys a query sees; 0: no window */
  bool causal;
  float scale;
  KOperand q, k, v, out, g, delta, res; /* buf -1: not read by this pass */
  KStore store;
} KAttn;

/* The query heads that share a key/value head. */
static inline int64_t kattn_group(const KAttn *A) { return A->heads / A->kv_heads; }
/* The keys j in [*lo, *hi) that query i sees. */
static inline void kattn_keys(const KAttn *A, int64_t i, int64_t *lo, int64_t *hi) {
  int64_t at = i + A->sk - A->sq;
  *hi = A->causal && at + 1 < A->sk ? at + 1 : A->sk;
  *lo = A->window > 0 && at - A->window + 1 > 0 ? at - A->window + 1 : 0;
}
/* The queries i in [*lo, *hi) that see key j. */
static inline void kattn_queries(const KAttn *A, int64_t j, int64_t *lo, int64_t *hi) {
  int64_t at = j - (A->sk - A->sq);
  *lo = A->causal && at > 0 ? at : 0;
  *hi = A->window > 0 && at + A->window < A->sq ? at + A->window : A->sq;
}
/* The work items of a pass: a row per query and query head, or per key and key/value head. */
static inline int64_t kattn_rows(const KAttn *A) {
  return A->pass == KA_FWD || A->pass == KA_DQ ? A->batch * A->heads * A->sq : A->batch * A->kv_heads * A->sk;
}

/* A's operands in that order (q, k, v, out, g, delta, res). */
enum { KA_OPERANDS = 7 };
static inline void kattn_operands(const KAttn *A, const KOperand *ops[KA_OPERANDS]) {
  ops[0] = &A->q, ops[1] = &A->k, ops[2] = &A->v, ops[3] = &A->out, ops[4] = &A->g, ops[5] = &A->delta,
  ops[6] = &A->res;
}

typedef struct Kernel {
  const char *name;  /* a C identifier, unique in the program */
  const KAttn *attn; /* a fused attention kernel, or NULL */
  KPar par;
  int64_t rows, cols;
  int ndims, row_dims;
  int64_t dims[K_MAX_DIMS];
  KBuf bufs[K_MAX_BUFS];
  int nbufs;
  KPhase phases[K_MAX_PHASES];
  int nphases;
  int naccs;
  int nexprs; /* ids handed out so far */
} Kernel;

/* Builders (codegen/kernel.c): expressions live in the arena. */
Kernel *kernel_new(Arena *a, const char *name, KPar par, const int64_t *dims, int ndims, int row_dims);
int kernel_buf(Kernel *k, const char *name, int tier, int64_t offset, int64_t numel, DType dt);
KExpr *kx_const(Arena *a, Kernel *k, float f);
KExpr *kx_load(Arena *a, Kernel *k, int buf, KView view);
KExpr *kx_acc(Arena *a, Kernel *k, int acc);
KExpr *kx_coord(Arena *a, Kernel *k, int axis);
KExpr *kx_scalar(Arena *a, Kernel *k, int index);
KExpr *kx_unary(Arena *a, Kernel *k, KUnary op, KExpr *x);
KExpr *kx_binary(Arena *a, Kernel *k, KBinary op, KExpr *x, KExpr *y);
KExpr *kx_select(Arena *a, Kernel *k, KExpr *c, KExpr *x, KExpr *y);
KExpr *kx_rand(Arena *a, Kernel *k, int64_t seed, KView view, int step_scalar);
int kernel_reduce(Kernel *k, KReduce r, KExpr *e); /* returns the accumulator */
void kernel_map(Kernel *k, int buf, KView view, KStore s, KExpr *e);
void kernel_row(Kernel *k, int buf, KView view, KStore s, KExpr *e);

/* A contiguous view of a buffer over the whole iteration space (row-major). */
KView kview_contig(const Kernel *k, int64_t offset);
void kernel_check(const Kernel *k); /* internal consistency; ir_assert on failure */

/* Classes of buffers: cls[i] is the class of buffer i, a buffer joining the class of
 * the first earlier one whose bytes it overlaps (same tier, overlapping ranges); the
 * emitters may assume buffers of different classes never alias. Returns the count. */
int kernel_alias_classes(const Kernel *k, int cls[K_MAX_BUFS]);

/* Narrows each buffer's binding to the elements the kernel can touch: the binding moves
 * to the first of them and the views move back by as much, the element count ends at
 * the last (or stays, when a gather picks the rows). The kernel means the same; what it
 * does not touch no longer tells it apart from its siblings (the gradient norm's
 * partial sums: one slot of one buffer per parameter), so they share code. */
void kernel_narrow(Kernel *k);

/* The address of each buffer under its binding: bufs[i] = tiers[tier] + offset, what
 * the emitted code takes (and a kernel instruction's "args" give the runtime). */
void kernel_bind(const Kernel *k, char *const *tiers, char *bufs[K_MAX_BUFS]);

/* Reference evaluator: runs a kernel on the CPU, plainly, over [0, rows) (or all
 * columns): the meaning the emitters must reproduce. tiers[t] are base pointers
 * (the kernel's own bindings place its buffers in them). */
void kernel_eval(const Kernel *k, char *const *tiers, const float *scalars);

/* Text form, for --emit-kernels and for bug reports: with each buffer's binding, or
 * (kernel_print_code) as the shared code sees it, buffers by index, no bindings. */
void kernel_print(FILE *f, const Kernel *k);
void kernel_print_code(FILE *f, const Kernel *k);

#endif
