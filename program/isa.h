/* The instruction set of compiled programs, declared once: the compiler's code
 * generators (codegen/) write these instructions and the runtime (runtime/) runs them
 * as they are, from the program's constant data (program/program.h). Each instruction
 * is one IsaInstr: a few fields every kind has, then the fields of its kind, a member of
 * the union named by its payload (in->gemm.m, in->comm.kind, in->p2p.peer). The tables
 * below are the only declaration of those fields; the structs, the program format's
 * layout check and the printer (program/print.c: colossalc --emit-program, train
 * --dump-program) all come from them.
 *
 * Adding an instruction (docs/architecture.md works an example through):
 *   1. a row in ISA_OPS, naming its payload; a new payload is a row in ISA_PAYLOADS
 *      and a field table ISA_<NAME>_FIELDS below;
 *   2. its executor, a function in runtime/executor.c's exec_fns (indexed by IsaOp);
 *   3. where the compiler writes it (codegen/), and what the program verifier checks of
 *      it (codegen/verify.c, check_instr).
 * Everything else (the format, its version check, the printer) follows from the tables.
 */
#ifndef COLOSSALC_PROGRAM_ISA_H
#define COLOSSALC_PROGRAM_ISA_H
#include <stdint.h>

/* A GEMM operand's element type ("dtypes" of a gemm; f32 unless given), and the 16-bit
 * types' conversions, which the compiler's kernels (codegen/kernel.h), the CPU device
 * and the tests compute alike: exact widening; rounding to nearest even, overflow to
 * infinity, f16's subnormals kept, a NaN kept a NaN. */
typedef enum IsaDtype { ISA_F32, ISA_BF16, ISA_F16, ISA_E4M3, ISA_E5M2 } IsaDtype;

/* An element's bytes. */
static inline int isa_dtype_bytes(IsaDtype t) { return t == ISA_F32 ? 4 : t >= ISA_E4M3 ? 1 : 2; }

static inline float isa_to_f32(IsaDtype t, unsigned short h) {
  union {
    unsigned u;
    float f;
  } v;
  if (t == ISA_BF16) {
    v.u = (unsigned)h << 16;
    return v.f;
  }
  unsigned sign = (unsigned)(h >> 15) << 31, e = h >> 10 & 31u, m = h & 1023u;
  if (e == 31) v.u = sign | 0x7f800000u | m << 13;    /* inf, NaN */
  else if (e) v.u = sign | (e + 112) << 23 | m << 13; /* normal */
  else v.f = (float)m * 0x1p-24f, v.u |= sign;        /* subnormal, zero */
  return v.f;
}

static inline unsigned short isa_from_f32(IsaDtype t, float f) {
  union {
    float f;
    unsigned u;
  } v = {f};
  unsigned sign = v.u >> 16 & 0x8000u, a = v.u & 0x7fffffffu;
  if (t == ISA_BF16) {
    if (a > 0x7f800000u) return (unsigned short)(v.u >> 16 | 0x40); /* NaN stays quiet */
    return (unsigned short)((v.u + 0x7fffu + (v.u >> 16 & 1u)) >> 16);
  }
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | (a >> 13 & 0x3ffu));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* rounds past 65504: inf */
  if (a < 0x38800000u) {                                         /* below 2^-14: subnormal */
    union {
      unsigned u;
      float f;
    } w = {a};
    float q = w.f * 0x1p24f, r; /* exact: units of 2^-24 */
    unsigned m = (unsigned)q;
    r = q - (float)m;
    m += r > 0.5f || (r == 0.5f && (m & 1u));
    return (unsigned short)(sign | m);
  }
  return (unsigned short)(sign | (a + 0x0fffu + (a >> 13 & 1u) - 0x38000000u) >> 13); /* rebias, round */
}

/* The 8-bit float types of fp8 GEMM operands (written by the compiler's quantizing
 * kernels): e4m3 (the "fn" variant: no infinity, NaN 0x7f, largest 448) and e5m2 (f16's
 * top byte: largest 57344). Widening is exact. Narrowing rounds to nearest even and
 * saturates to the largest finite value (infinities too), as Transformer Engine's casts
 * do; a NaN stays a NaN. isa_fp8_round gives the rounded value, isa_fp8_encode the code
 * of a value already rounded. */
static inline float isa_fp8_to_f32(IsaDtype t, unsigned char c) {
  union {
    unsigned u;
    float f;
  } v;
  if (t == ISA_E5M2) return isa_to_f32(ISA_F16, (unsigned short)(c << 8));
  unsigned sign = (unsigned)(c >> 7) << 31, e = c >> 3 & 15u, m = c & 7u;
  if (e == 15 && m == 7) v.u = sign | 0x7fc00000u;    /* NaN */
  else if (e) v.u = sign | (e + 120) << 23 | m << 20; /* normal */
  else v.f = (float)m * 0x1p-9f, v.u |= sign;         /* subnormal, zero */
  return v.f;
}

static inline float isa_fp8_round(IsaDtype t, float f) {
  int e5 = t == ISA_E5M2, mbits = e5 ? 2 : 3, emin = e5 ? -14 : -6;
  float maxv = e5 ? 57344.0f : 448.0f;
  union {
    float f;
    unsigned u;
  } a = {f}, q;
  unsigned sign = a.u & 0x80000000u;
  a.u &= 0x7fffffffu;
  if (a.u > 0x7f800000u) return f;
  if (a.f > maxv) a.f = maxv;
  int e = (int)(a.u >> 23) - 127;
  q.u = (unsigned)((e < emin ? emin : e) - mbits + 127) << 23; /* one unit in the last place */
  a.f = __builtin_rintf(a.f / q.f) * q.f;                      /* exact quotient; ties to even */
  a.u |= sign;
  return a.f;
}

static inline unsigned char isa_fp8_encode(IsaDtype t, float r) {
  int e5 = t == ISA_E5M2, mbits = e5 ? 2 : 3, emin = e5 ? -14 : -6, bias = e5 ? 15 : 7;
  union {
    float f;
    unsigned u;
  } a = {r};
  unsigned sign = a.u >> 24 & 0x80u;
  a.u &= 0x7fffffffu;
  if (a.u > 0x7f800000u) return (unsigned char)(sign | (e5 ? 0x7eu : 0x7fu));
  union {
    unsigned u;
    float f;
  } q = {(unsigned)(emin - mbits + 127) << 23};
  if (a.u < (unsigned)(emin + 1 + 127) << 23) /* the lowest binade and below */
    return (unsigned char)(sign | (unsigned)(a.f / q.f));
  return (unsigned char)(sign | ((a.u >> 23) - 127 + bias) << mbits | (a.u >> (23 - mbits) & ((1u << mbits) - 1)));
}

static inline unsigned char isa_fp8_from_f32(IsaDtype t, float f) { return isa_fp8_encode(t, isa_fp8_round(t, f)); }

/* ---- the names instructions use --------------------------------------------------------- */

/* The tables below are laid out by hand, a row a line. */
/* clang-format off */
/* X(NAME, "text"): each enumeration once, its names (printer, messages) from the same rows. */
#define ISA_DTYPES(X) X(F32, "f32") X(BF16, "bf16") X(F16, "f16") X(E4M3, "e4m3") X(E5M2, "e5m2")

/* The four memory tiers (program/program.h says what each holds). */
#define ISA_TIERS(X) X(PARAMS, "params") X(GRADS, "grads") X(OPT, "opt") X(WORK, "work")
#define ISA_ENUM(name, text) TIER_##name,
typedef enum IsaTier { ISA_TIERS(ISA_ENUM) } IsaTier;
#define ISA_COUNT(name, text) +1
enum { TIERS = 0 ISA_TIERS(ISA_COUNT) };
#undef ISA_COUNT
/* An operand's place beyond the four tiers: WORK's region that a pipeline stage's slots
 * share, before them (ProgStage.work_shared): the working set of its chunks' passes and
 * fp8's scaling states. Its bytes are WORK's: no tier of its own. */
enum { TIER_SHARED = TIERS };
#undef ISA_ENUM

/* "comm": a collective over one of the rank's groups (IsaGroup). broadcast and reduce
 * have a root (a rank of the group); split is no communication, a rank's part;
 * all_to_all sends the t-th of its tensor's group-size equal blocks to rank t and
 * writes the block from rank q q-th (src and dst apart). */
#define ISA_COMM_KINDS(X)             \
  X(ALL_REDUCE, "all_reduce")         \
  X(ALL_GATHER, "all_gather")         \
  X(REDUCE_SCATTER, "reduce_scatter") \
  X(SPLIT, "split")                   \
  X(BROADCAST, "broadcast")           \
  X(REDUCE, "reduce")                 \
  X(ALL_TO_ALL, "all_to_all")
#define ISA_ENUM(name, text) ISA_COMM_##name,
typedef enum IsaCommKind { ISA_COMM_KINDS(ISA_ENUM) } IsaCommKind;
#define ISA_COUNT(name, text) +1
enum { ISA_COMM_NKINDS = 0 ISA_COMM_KINDS(ISA_COUNT) };
#undef ISA_COUNT
#undef ISA_ENUM

/* "comm" group: the tensor-parallel group, the data-parallel group, a group of pipeline
 * stages the program lists (the holders of a tied parameter), or every rank. */
#define ISA_GROUPS(X) X(TP, "tp") X(DP, "dp") X(STAGES, "stages")
#define ISA_ENUM(name, text) ISA_GROUP_##name,
typedef enum IsaGroup { ISA_GROUPS(ISA_ENUM) } IsaGroup;
#define ISA_COUNT(name, text) +1
enum { ISA_NGROUPS = 0 ISA_GROUPS(ISA_COUNT) };
#undef ISA_COUNT
#undef ISA_ENUM

/* "comm" reduction of an all_reduce: the sum (every other kind sums) or the largest
 * value (fp8's amaxes). */
#define ISA_REDUCTIONS(X) X(SUM, "sum") X(MAX, "max")
#define ISA_ENUM(name, text) ISA_RED_##name,
typedef enum IsaRed { ISA_REDUCTIONS(ISA_ENUM) } IsaRed;
#define ISA_COUNT(name, text) +1
enum { ISA_NREDS = 0 ISA_REDUCTIONS(ISA_COUNT) };
#undef ISA_COUNT
#undef ISA_ENUM

/* Offload's locations of a chunk's parts (program/program.h, "Offload"): none (the
 * gradients' home: they exist only in a step), the device, the host, NVMe files, and
 * zero (only a move's source: the part is created zeroed). */
#define ISA_LOCS(X) X(NONE, "none") X(DEVICE, "device") X(HOST, "host") X(NVME, "nvme") X(ZERO, "zero")
#define ISA_ENUM(name, text) LOC_##name,
typedef enum IsaLoc { ISA_LOCS(ISA_ENUM) } IsaLoc;
#define ISA_COUNT(name, text) +1
enum { LOC_COUNT = 0 ISA_LOCS(ISA_COUNT) };
#undef ISA_COUNT
#undef ISA_ENUM

/* A chunk's parts, named by their tier (PART_x == TIER_x). */
typedef enum IsaPart { PART_PARAMS, PART_GRADS, PART_OPT, PART_COUNT } IsaPart;

/* "send" and "recv": tags are below this. */
#define ISA_TAG_LIMIT 16384

/* ---- the fields ------------------------------------------------------------------------- */

/* The field types of every program struct: X(TYPE, C type, printed as, names).
 * A STR field is an offset into the program's strings (-1: none). */
typedef enum IsaPrint { ISA_PRINT_INT, ISA_PRINT_REAL, ISA_PRINT_STR, ISA_PRINT_NAME } IsaPrint;
#define ISA_TYPES(X)                                     \
  X(I8, int8_t, ISA_PRINT_INT, 0)                        \
  X(I16, int16_t, ISA_PRINT_INT, 0)                      \
  X(I32, int32_t, ISA_PRINT_INT, 0)                      \
  X(I64, int64_t, ISA_PRINT_INT, 0)                      \
  X(F32, float, ISA_PRINT_REAL, 0)                       \
  X(F64, double, ISA_PRINT_REAL, 0)                      \
  X(STR, int64_t, ISA_PRINT_STR, 0)                      \
  X(DTYPE, IsaDtype, ISA_PRINT_NAME, isa_dtype_names)    \
  X(TIER, int32_t, ISA_PRINT_NAME, isa_tier_names)       \
  X(COMM, IsaCommKind, ISA_PRINT_NAME, isa_comm_names)   \
  X(GROUP, IsaGroup, ISA_PRINT_NAME, isa_group_names)    \
  X(RED, IsaRed, ISA_PRINT_NAME, isa_red_names)          \
  X(LOC, IsaLoc, ISA_PRINT_NAME, isa_loc_names)          \
  X(PART, int8_t, ISA_PRINT_NAME, isa_part_names)        \
  X(OPCODE, uint8_t, ISA_PRINT_NAME, isa_op_names)       \
  X(ROLE, int32_t, ISA_PRINT_NAME, prog_role_names)      \
  X(INIT, int32_t, ISA_PRINT_NAME, prog_init_names)      \
  X(OPTIMIZER, int32_t, ISA_PRINT_NAME, prog_opt_names)  \
  X(SCHEDULE, int32_t, ISA_PRINT_NAME, prog_sched_names) \
  X(ARCHKIND, int32_t, ISA_PRINT_NAME, prog_archkind_names)
#define ISA_CTYPE(type, ctype, print, names) typedef ctype isa_##type;
ISA_TYPES(ISA_CTYPE)
#undef ISA_CTYPE
#define ISA_TYPE_ENUM(type, ctype, print, names) ISA_T_##type,
typedef enum IsaType { ISA_TYPES(ISA_TYPE_ENUM) ISA_NTYPES } IsaType;
#undef ISA_TYPE_ENUM

/* A field table row is F(S, TYPE, name, dims, count): struct S has the field `name` of
 * TYPE (an ISA_TYPES row), with the array declarator dims ([3], [3][2], or nothing) of
 * count elements in all. Each payload's table: */

/* kernel: a kernel of the program's table (ProgKernel: its code and buffers) over the
 * parallel range [0, extent). epilogue: the GELU of the "gelu" GEMM right before it,
 * skipped by a device whose GEMMs apply it; on_host: in an offload program's update,
 * run with the host location's PARAMS, GRADS and OPT (as CPUAdam runs). */
#define ISA_KERNEL_FIELDS(F, S) F(S, I32, id, , 1) F(S, I8, epilogue, , 1) F(S, I8, on_host, , 1) F(S, I64, extent, , 1)
/* zero: bytes [offset, offset + bytes) of a tier set to 0 (of a tier ZeRO or offload
 * reserves: what has memory behind it) */
#define ISA_ZERO_FIELDS(F, S) F(S, TIER, tier, , 1) F(S, I64, offset, , 1) F(S, I64, bytes, , 1)
/* gemm: C = alpha op(A) op(B) + beta C (row-major; ta, tb: transposed), batched over
 * batch[0] x batch[1] with per-operand strides (elements: a's, b's, c's [s0, s1]); at
 * tier[i] + off[i] (bytes) for a, b, c; dt: their element types (a and b alike, f32
 * sums). bias: the epilogue C[i][j] += bias[j] (beta 0); gelu: then C = gelu(C), tanh
 * form (a bias, one batch), on a device without the epilogue left as GELU's input in aux
 * (or C) for the "epilogue" kernel after it; aux: GELU's input also written there.
 * dgelu: C = gelu'(X) * op(A) op(B), X (GELU's input) at aux_tier + aux_off laid out as C
 * (C's type, ld ldc a multiple of 8; beta 0, no bias, one batch); bgrad (with dgelu):
 * the sum of that C's rows written, as f32, to bias_tier + bias_off. On a device without
 * these epilogues C is left as the product and the "epilogue" kernels after the GEMM
 * apply them: gelu_grad in place, then the rows' sum. bgrad ISA_BGRAD_B (no other
 * epilogue, one batch): the sum over k of op(B) (per column of C) written the same way,
 * on such a device by the "epilogue" kernel after the GEMM. */
/* A GEMM's bias-gradient epilogue (IsaGemm.bgrad): none, the sum of C's rows (with dgelu),
 * the sum of op(B)'s rows. */
enum { ISA_BGRAD_NONE, ISA_BGRAD_C, ISA_BGRAD_B };
#define ISA_GEMM_FIELDS(F, S)                                                                            \
  F(S, I32, ta, , 1) F(S, I32, tb, , 1) F(S, I64, m, , 1) F(S, I64, n, , 1) F(S, I64, k, , 1)            \
  F(S, I64, lda, , 1) F(S, I64, ldb, , 1) F(S, I64, ldc, , 1) F(S, F32, alpha, , 1) F(S, F32, beta, , 1) \
  F(S, TIER, tier, [3], 3) F(S, I64, off, [3], 3) F(S, I64, batch, [2], 2) F(S, I64, stride, [3][2], 6)  \
  F(S, I8, bias, , 1) F(S, I8, gelu, , 1) F(S, I8, aux, , 1) F(S, I8, dgelu, , 1) F(S, I8, bgrad, , 1)     \
  F(S, TIER, bias_tier, , 1) F(S, I64, bias_off, , 1) F(S, TIER, aux_tier, , 1) F(S, I64, aux_off, , 1)  \
  F(S, DTYPE, dt, [3], 3)
/* slot: the WORK tier's slot that the following instructions address: micro-batch
 * mb + step * i's, (mb + step * i) mod the stage's slots (i: the enclosing loop's
 * iteration, 0 outside loops) */
#define ISA_SLOT_FIELDS(F, S) F(S, I64, mb, , 1) F(S, I64, step, , 1)
/* input: rows [m * batch, (m + 1) * batch) of this rank's rows of the step of input
 * `input` (ProgInput), m = mb + step * i, written at WORK offset */
#define ISA_INPUT_FIELDS(F, S) F(S, I32, input, , 1) F(S, I64, mb, , 1) F(S, I64, step, , 1) F(S, I64, offset, , 1)
/* loss: the f32 at WORK offset is a micro-batch's loss, added to the step's */
#define ISA_LOSS_FIELDS(F, S) F(S, I64, offset, , 1)
/* send, recv: count f32 at tier + offset to / from pipeline stage `peer` (the rank of
 * that stage with this rank's dp and tp coordinates), with tag; a send does not wait for
 * its receiver (the list's end does), a recv blocks; messages between two ranks with one
 * tag arrive in the order sent */
#define ISA_P2P_FIELDS(F, S) \
  F(S, I32, peer, , 1) F(S, I32, tag, , 1) F(S, TIER, tier, , 1) F(S, I64, offset, , 1) F(S, I64, count, , 1)
/* comm: a collective over `group` (a stage group: stage_groups's index) on the global
 * f32 tensor outer x n x inner at tier[0] + off[0] (src) into tier[1] + off[1] (dst);
 * the split kinds (all_gather, reduce_scatter, split; over tp only) part n over the
 * group (isa_comm_bytes); root: of broadcast and reduce, a rank of the group. overlap
 * (IsaInstr) marks one that may run beside what follows until a join. */
#define ISA_COMM_FIELDS(F, S)                                                                    \
  F(S, COMM, kind, , 1) F(S, GROUP, group, , 1) F(S, I32, stage_group, , 1) F(S, I32, root, , 1) \
  F(S, RED, red, , 1) F(S, TIER, tier, [2], 2) F(S, I64, off, [2], 2)                            \
  F(S, I64, outer, , 1) F(S, I64, n, , 1) F(S, I64, inner, , 1)
/* move, drop, wait (offload): chunk's part; move: memory at `to` and a copy from
 * `from` (zero: zeroes), the source given back unless keep; drop: the part's memory at
 * `from` given back; wait: until every move and drop of the part issued so far is done */
#define ISA_MOVE_FIELDS(F, S) \
  F(S, I32, chunk, , 1) F(S, PART, part, , 1) F(S, I8, keep, , 1) F(S, LOC, from, , 1) F(S, LOC, to, , 1)
/* zero_gather, zero_release, zero_grad, zero_reduce: ZeRO's memory of parameter
 * `index` (program/program.h, "ZeRO") */
#define ISA_PARAM_FIELDS(F, S) F(S, I32, index, , 1)
/* loop: the next `body` instructions, `count` times, iteration i = 0, 1, ...; the
 * instructions with `last` set run in the last iteration only, and only where final */
#define ISA_LOOP_FIELDS(F, S) F(S, I64, count, , 1) F(S, I64, body, , 1) F(S, I8, final, , 1)
/* call: the list `list` (ProgList) runs here, then the rest of this one */
#define ISA_CALL_FIELDS(F, S) F(S, I32, list, , 1)
/* norm: the gradient norm's square is the sum over every rank of each rank's count f32
 * partial sums at WORK offset; with the step's loss (the "loss" instructions' sum over
 * the world, over dp x microbatches) and whether a rank's batch failed, one reduction
 * over every rank; then the update's scalars (program/program.h, "Scalars") */
#define ISA_NORM_FIELDS(F, S) F(S, I64, offset, , 1) F(S, I64, count, , 1) F(S, I64, microbatches, , 1)
/* trust: LAMB's trust ratios. At WORK offset, count f32 partial sums of |w|^2 and then
 * count of |u|^2, a parameter's in its slots (INTS[ProgStage.trust_ends]: each parameter's
 * end; its slots start at the one before's); each model parameter's squares are the sums
 * over every rank of its pieces' slots (ProgParam.global), one reduction over every rank;
 * then each parameter's ratio |w| / |u| (1 where either is 0) into its first slot */
#define ISA_TRUST_FIELDS(F, S) F(S, I64, offset, , 1) F(S, I64, count, , 1)

/* P(member, struct, fields): the payloads, each a union member of IsaInstr. */
#define ISA_PAYLOADS(P)                          \
  P(kernel, IsaKernel, ISA_KERNEL_FIELDS)        \
  P(zero, IsaZero, ISA_ZERO_FIELDS)              \
  P(gemm, IsaGemm, ISA_GEMM_FIELDS)              \
  P(slot, IsaSlot, ISA_SLOT_FIELDS)              \
  P(input, IsaInput, ISA_INPUT_FIELDS)           \
  P(loss, IsaLoss, ISA_LOSS_FIELDS)              \
  P(p2p, IsaP2P, ISA_P2P_FIELDS)                 \
  P(comm, IsaComm, ISA_COMM_FIELDS)              \
  P(move, IsaMove, ISA_MOVE_FIELDS)              \
  P(param, IsaParam, ISA_PARAM_FIELDS)           \
  P(loop, IsaLoop, ISA_LOOP_FIELDS)              \
  P(call, IsaCall, ISA_CALL_FIELDS)              \
  P(norm, IsaNorm, ISA_NORM_FIELDS)              \
  P(trust, IsaTrust, ISA_TRUST_FIELDS)

/* X(NAME, "name", payload): the instructions, in the order of their numbers (the four
 * ZeRO ones consecutive, ISA_ZERO_GATHER .. ISA_ZERO_REDUCE); join has no fields. */
#define ISA_OPS(X)                        \
  X(KERNEL, "kernel", kernel)             \
  X(ZERO, "zero", zero)                   \
  X(GEMM, "gemm", gemm)                   \
  X(SLOT, "slot", slot)                   \
  X(INPUT, "input", input)                \
  X(LOSS, "loss", loss)                   \
  X(SEND, "send", p2p)                    \
  X(RECV, "recv", p2p)                    \
  X(COMM, "comm", comm)                   \
  X(MOVE, "move", move)                   \
  X(DROP, "drop", move)                   \
  X(WAIT, "wait", move)                   \
  X(ZERO_GATHER, "zero_gather", param)    \
  X(ZERO_RELEASE, "zero_release", param)  \
  X(ZERO_GRAD, "zero_grad", param)        \
  X(ZERO_REDUCE, "zero_reduce", param)    \
  X(JOIN, "join", none)                   \
  X(LOOP, "loop", loop)                   \
  X(CALL, "call", call)                   \
  X(NORM, "norm", norm)                   \
  X(TRUST, "trust", trust)

#define ISA_ENUM(name, text, payload) ISA_##name,
#define ISA_COUNT(name, text, payload) +1
typedef enum IsaOp { ISA_OPS(ISA_ENUM) } IsaOp;
enum { ISA_NOPS = 0 ISA_OPS(ISA_COUNT) };
#undef ISA_ENUM
#undef ISA_COUNT

#define ISA_DECL(S, type, name, dims, count) isa_##type name dims;
#define ISA_STRUCT(member, type, fields) \
  typedef struct type {                  \
    fields(ISA_DECL, type)               \
  } type;
ISA_PAYLOADS(ISA_STRUCT)
#undef ISA_STRUCT

/* The fields every instruction has. node: the IR node it computes (the compiler's, for
 * people: -1 none); dp_rank, tp_rank: it runs only on the ranks with that coordinate
 * (-1: every rank); overlap: a collective (or zero_gather) that may run beside what
 * follows until a join (codegen/compose.h); last: in a loop's last iteration only
 * (IsaLoop.final); train_only: the compiler leaves it out of `forward` (fp8's scaling). */
#define ISA_COMMON_FIELDS(F, S)                                                              \
  F(S, OPCODE, op, , 1) F(S, I8, overlap, , 1) F(S, I8, last, , 1) F(S, I8, train_only, , 1) \
  F(S, I16, dp_rank, , 1) F(S, I16, tp_rank, , 1) F(S, I32, node, , 1)

/* clang-format on */

#define ISA_MEMBER(member, type, fields) type member;
typedef struct IsaInstr {
  ISA_COMMON_FIELDS(ISA_DECL, IsaInstr)
  union {
    ISA_PAYLOADS(ISA_MEMBER)
  };
} IsaInstr;
#undef ISA_MEMBER

#define ISA_PAYLOAD_ENUM(member, type, fields) ISA_PL_##member,
typedef enum IsaPayload { ISA_PAYLOADS(ISA_PAYLOAD_ENUM) ISA_PL_none } IsaPayload;
#undef ISA_PAYLOAD_ENUM

/* The names of the enumerations above, indexed by their values, NULL-terminated. */
extern const char *const isa_dtype_names[];
extern const char *const isa_tier_names[];
extern const char *const isa_comm_names[];
extern const char *const isa_group_names[];
extern const char *const isa_red_names[];
extern const char *const isa_loc_names[];
extern const char *const isa_part_names[];
extern const char *const isa_op_names[];
/* Each instruction's payload. */
extern const IsaPayload isa_op_payload[ISA_NOPS];

/* The kinds that part the tensor over the tensor-parallel group (the others read and
 * write the whole, and may work in place). */
static inline int isa_comm_splits(IsaCommKind k) {
  return k == ISA_COMM_ALL_GATHER || k == ISA_COMM_REDUCE_SCATTER || k == ISA_COMM_SPLIT;
}

/* The bytes a collective reads at src (out[0]) and writes at dst (out[1]) over a
 * tensor-parallel group of tp ranks: the split kinds part the tensor, the others read
 * and write the whole. */
static inline void isa_comm_bytes(const IsaComm *c, int64_t tp, int64_t out[2]) {
  int64_t whole = c->outer * c->n * c->inner * 4, part = whole / (tp > 1 ? tp : 1);
  out[0] = c->kind == ISA_COMM_ALL_GATHER ? part : whole;
  out[1] = isa_comm_splits(c->kind) && c->kind != ISA_COMM_ALL_GATHER ? part : whole;
}

/* The device scratch an instruction reorders its tensor through, 0 for none: an
 * all_gather or reduce_scatter over an outer dimension above 1, the whole tensor. A
 * stage's staging (ProgStage) is the most of its instructions'. */
static inline int64_t isa_staging_bytes(const IsaInstr *in) {
  const IsaComm *c = &in->comm;
  int reorder = c->kind == ISA_COMM_ALL_GATHER || c->kind == ISA_COMM_REDUCE_SCATTER;
  return in->op == ISA_COMM && reorder && c->outer > 1 ? c->outer * c->n * c->inner * 4 : 0;
}

/* A blank instruction of kind op: every rank, no node. */
static inline IsaInstr isa_instr(IsaOp op) {
  IsaInstr in = {0};
  in.op = (uint8_t)op, in.dp_rank = in.tp_rank = -1, in.node = -1;
  return in;
}

#endif
