/* The instruction set of compiled programs, declared once: the compiler's code
 * generators (codegen/) write these instructions and the runtime (runtime/) runs them;
 * runtime/program.h gives their JSON fields and meaning. Plain data (and the 16-bit
 * conversions every side computes alike), shared by both sides, so that an instruction,
 * a collective's kind or an offload part is one name and one number everywhere.
 *
 * Adding an instruction: one X row here, its writer in codegen/lower.c (instr_json),
 * its parser in runtime/train_program.c and its executor in runtime/executor.c, whose
 * tables are indexed by these numbers. */
#ifndef COLOSSALC_PROGRAM_ISA_H
#define COLOSSALC_PROGRAM_ISA_H

/* X(NAME, "json op") in the order of the numbers; the four ZeRO instructions are
 * consecutive (ISA_ZERO_GATHER .. ISA_ZERO_REDUCE). */
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

#define ISA_OPS(X)                \
  X(KERNEL, "kernel")             \
  X(ZERO, "zero")                 \
  X(GEMM, "gemm")                 \
  X(SLOT, "slot")                 \
  X(INPUT, "input")               \
  X(LOSS, "loss")                 \
  X(SEND, "send")                 \
  X(RECV, "recv")                 \
  X(COMM, "comm")                 \
  X(MOVE, "move")                 \
  X(DROP, "drop")                 \
  X(WAIT, "wait")                 \
  X(ZERO_GATHER, "zero_gather")   \
  X(ZERO_RELEASE, "zero_release") \
  X(ZERO_GRAD, "zero_grad")       \
  X(ZERO_REDUCE, "zero_reduce")   \
  X(JOIN, "join")

#define ISA_ENUM(name, json) ISA_##name,
#define ISA_COUNT(name, json) +1
typedef enum IsaOp { ISA_OPS(ISA_ENUM) } IsaOp;
enum { ISA_NOPS = 0 ISA_OPS(ISA_COUNT) };

/* "comm": a collective over one of the rank's groups (IsaGroup). broadcast and reduce
 * have a root (a rank of the group); split is no communication, a rank's part. */
#define ISA_COMM_KINDS(X)             \
  X(ALL_REDUCE, "all_reduce")         \
  X(ALL_GATHER, "all_gather")         \
  X(REDUCE_SCATTER, "reduce_scatter") \
  X(SPLIT, "split")                   \
  X(BROADCAST, "broadcast")           \
  X(REDUCE, "reduce")

#undef ISA_ENUM
#define ISA_ENUM(name, json) ISA_COMM_##name,
typedef enum IsaCommKind { ISA_COMM_KINDS(ISA_ENUM) } IsaCommKind;
enum { ISA_COMM_NKINDS = 0 ISA_COMM_KINDS(ISA_COUNT) };
#undef ISA_ENUM

/* The kinds that part the tensor over the tensor-parallel group (the others read and
 * write the whole, and may work in place). */
static inline int isa_comm_splits(IsaCommKind k) {
  return k == ISA_COMM_ALL_GATHER || k == ISA_COMM_REDUCE_SCATTER || k == ISA_COMM_SPLIT;
}

/* "comm" "group": the tensor-parallel group (the default), the data-parallel group, or
 * a group of pipeline stages the program lists ("stage_groups": the holders of a tied
 * parameter). */
#define ISA_GROUPS(X) \
  X(TP, "tp")         \
  X(DP, "dp")         \
  X(STAGES, "stages")

#define ISA_ENUM(name, json) ISA_GROUP_##name,
typedef enum IsaGroup { ISA_GROUPS(ISA_ENUM) } IsaGroup;
enum { ISA_NGROUPS = 0 ISA_GROUPS(ISA_COUNT) };
#undef ISA_ENUM

/* "comm" "reduction" of an all_reduce: the sum (the default; every other kind sums) or
 * the largest value (fp8's amaxes, the same on every rank of the mesh). */
#define ISA_REDUCTIONS(X) \
  X(SUM, "sum")           \
  X(MAX, "max")

#define ISA_ENUM(name, json) ISA_RED_##name,
typedef enum IsaRed { ISA_REDUCTIONS(ISA_ENUM) } IsaRed;
enum { ISA_NREDS = 0 ISA_REDUCTIONS(ISA_COUNT) };
#undef ISA_ENUM
#undef ISA_COUNT

/* "send" and "recv": tags are below this. */
#define ISA_TAG_LIMIT 16384

#define ISA_NAME(name, json) json,
/* The JSON names, indexed by IsaOp and IsaCommKind, NULL-terminated. */
static const char *const isa_op_names[ISA_NOPS + 1] = {ISA_OPS(ISA_NAME) 0};
static const char *const isa_comm_names[ISA_COMM_NKINDS + 1] = {ISA_COMM_KINDS(ISA_NAME) 0};
static const char *const isa_group_names[ISA_NGROUPS + 1] = {ISA_GROUPS(ISA_NAME) 0};
static const char *const isa_red_names[ISA_NREDS + 1] = {ISA_REDUCTIONS(ISA_NAME) 0};
#undef ISA_NAME

#endif
