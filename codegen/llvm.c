/* The CPU emitter: each kernel of the kernel form (codegen/kernel.h) becomes one LLVM
 * function with the runtime ABI (program/program.h), built through the LLVM 14 C API,
 * optimised at O3 for the host CPU and written as an object file. The reference
 * evaluator kernel_eval (codegen/kernel.c) defines what the code must compute.
 *
 * Shape of the code. For KP_ROWS: `for r in [lo, hi)` around the phases; each REDUCE
 * and MAP phase is a loop `for j in [0, cols)`, a ROW phase is straight-line code with
 * j = 0. For KP_COLS: `for r in [0, rows)` around MAP loops `for j in [lo, hi)`.
 * Values that depend on the row only (row coordinates, the row part of every view's
 * address) are computed once per row in the row header; buffer base pointers and
 * runtime scalars once per call in the entry block; the rest is emitted inside the
 * j loop, one value per expression id per iteration (the DAG is computed once), and
 * LICM hoists whatever turns out loop-invariant (accumulator-only arithmetic,
 * gathered row indices).
 *
 * Addresses. A view's address is offset + sum_d coord_d * strides[d] (+ gather). The
 * row part is split off per row. The column part is `j * c` when the view's column
 * strides are the row-major strides of the column dims times one constant c (c = 0:
 * broadcast, 1: contiguous, other: strided or reversed), so the j loop is a plain
 * unit-stride or strided loop; only other views (transposes within the columns,
 * broadcasts along an inner column axis) decompose j by div/mod of constants.
 *
 * Aliasing. Different tiers never alias and distinct buffers of one tier do not
 * overlap, so each buffer gets its own alias scope (!alias.scope / !noalias); buffers
 * whose byte ranges do overlap share one (kernel_alias_classes: the classes are part
 * of what makes kernels share code, so they hold for every instance). A kernel may
 * load and store the same buffer (KS_ADD, in-place updates): those accesses stay in
 * one scope and LLVM's dependence analysis sees the equal addresses. No `noalias`
 * attributes: every pointer is loaded from the one `bufs` argument.
 *
 * Numerics (the choices, and how they differ from kernel_eval):
 *  - MAP and ROW phases are strict IEEE f32: no fast-math, no FMA contraction. They
 *    vectorize without it.
 *  - REDUCE loops carry llvm.loop.vectorize.enable, which lets the vectorizer reorder
 *    the accumulation (LLVM 14's C API has no per-instruction fast-math flags): sums are
 *    kept as per-lane partial sums added at the end, not in j order, so they differ from
 *    kernel_eval by rounding, bounded relative to the sum of magnitudes of the terms.
 *    KR_MAX is llvm.maxnum (fmaxf); LLVM vectorizes an FP max reduction only under the
 *    function attributes no-nans-fp-math and no-signed-zeros-fp-math, so kernels with a
 *    KR_MAX phase carry them: such a kernel may differ from kernel_eval when a NaN is
 *    among its values or in the sign of a zero. Other kernels do not carry them.
 *  - exp, log, tanh, pow, sin, cos are libm calls (expf ...) marked readnone (errno is
 *    ignored). When this machine's libmvec (glibc) has vector versions, each call
 *    carries a vector-function-abi-variant mapping to them (_ZGVbN4v_expf for SSE,
 *    _ZGVdN8v_ for AVX2, _ZGVeN16v_ for AVX-512, the ones the host supports), so the
 *    loop vectorizer calls those (glibc documents at most 4 ulp). Without libmvec the
 *    calls stay scalar and a loop holding one is not vectorized. exp's argument is
 *    shifted out of libmvec's slow range for underflowing results (emit_exp).
 *  - A select whose arms hold a gather load is emitted with branches, so the load is
 *    not speculated (an ignored target index such as -100 must not be dereferenced);
 *    other selects are branch-free.
 *  - sqrt, fabs, floor are LLVM intrinsics (exact); rsqrt is 1/sqrt and recip 1/x with
 *    IEEE division, as kernel_eval computes them; MAX/MIN of the expression language are
 *    `x > y ? x : y` / `x < y ? x : y` selects, as in kernel_eval.
 *
 * LLVM 14 work-arounds: the row loop is marked "do not vectorize" when phases of a row
 * communicate through memory (row_loop_vec: a loop-vectorizer miscompile); the
 * libmvec declarations are kept alive through O3 by a temporary @llvm.compiler.used.
 */
#include "codegen/llvm.h"
#include "program/cpu.h"
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

/* libm functions the kernels call, and the libmvec ISAs (x86-64 vector ABI letters). */
typedef enum { MF_EXP, MF_LOG, MF_TANH, MF_SIN, MF_COS, MF_POW, MF_COUNT } MathFn;
static const struct {
  const char *name;
  int arity;
} math_fns[MF_COUNT] = {
    {"expf", 1}, {"logf", 1}, {"tanhf", 1}, {"sinf", 1}, {"cosf", 1}, {"powf", 2},
};
enum { VEC_ISAS = 3 };
static const struct {
  char letter;
  int lanes;
  const char *feature;
} vec_isas[VEC_ISAS] = {
    {'b', 4, "sse2"},
    {'d', 8, "avx2"},
    {'e', 16, "avx512f"},
};

struct LlvmModule {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMTargetMachineRef tm;
  char *cpu, *features, *tune;                 /* target-cpu, target-features, tune-cpu */
  char suffix[32];                             /* appended to every kernel's symbol */
  LLVMTypeRef f32, i1, i8, i16, i32, i64, kfn; /* kfn: the kernel function type */
  unsigned md_scope, md_noalias, md_loop;
  int vec_mask[MF_COUNT];                      /* bit i: vec_isas[i] variant usable for that function */
  LLVMValueRef vec_decls[MF_COUNT * VEC_ISAS]; /* vector variants declared so far */
  int nvec_decls;
};

/* ---- module ------------------------------------------------------------------- */

static _Noreturn void llvm_fail(const char *what, char *msg) {
  char buf[512];
  snprintf(buf, sizeof buf, "LLVM: %s: %s", what, msg ? msg : "(no message)");
  if (msg) LLVMDisposeMessage(msg);
  diag_internal(__FILE__, __LINE__, buf);
}

static void diag_handler(LLVMDiagnosticInfoRef di, void *ctx) {
  LLVMDiagnosticSeverity sev = LLVMGetDiagInfoSeverity(di);
  if (sev != LLVMDSError && !getenv("COLOSSALC_LLVM_REMARKS")) return; /* "loop not vectorized" etc. */
  char *desc = LLVMGetDiagInfoDescription(di);
  fprintf(stderr, "colossalc: LLVM %s: %s\n", sev == LLVMDSError ? "error" : "note", desc);
  LLVMDisposeMessage(desc);
}

static bool has_feature(const char *features, const char *name) {
  size_t n = strlen(name);
  for (const char *p = features; (p = strstr(p, name)); p += n)
    if (p > features && p[-1] == '+' && (p - 1 == features || p[-2] == ',') && (p[n] == ',' || !p[n])) return true;
  return false;
}

/* The libmvec name of f's variant for vec_isas[isa] ("_ZGVdN8v_expf"). */
static void vector_fn_name(char *buf, size_t n, MathFn f, int isa) {
  snprintf(buf, n, "_ZGV%cN%d%s_%s", vec_isas[isa].letter, vec_isas[isa].lanes, math_fns[f].arity == 2 ? "vv" : "v",
           math_fns[f].name);
}

/* Which libmvec variants this machine has (the object runs on the same kind). */
static void detect_libmvec(LlvmModule *m, const char *triple) {
  if (strncmp(triple, "x86_64", 6) != 0) return;
  void *lib = dlopen("libmvec.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return;
  for (int f = 0; f < MF_COUNT; f++)
    for (int i = 0; i < VEC_ISAS; i++) {
      char name[64];
      vector_fn_name(name, sizeof name, (MathFn)f, i);
      if (has_feature(m->features, vec_isas[i].feature) && dlsym(lib, name)) m->vec_mask[f] |= 1 << i;
    }
  dlclose(lib);
}

/* The target: the host's CPU and features, or (cpu given, on an architecture whose
 * features program/cpu.h checks) the generic CPU with exactly cpu's features, tuned for
 * the host unless it is the portable build. */
static void init_target(LlvmModule *m, const LlvmCpu *cpu) {
  static bool initialised;
  if (!initialised) {
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter())
      llvm_fail("initialising the native target", NULL);
    initialised = true;
  }
  char *triple = LLVMGetDefaultTargetTriple(), *msg = NULL;
  LLVMTargetRef t;
  if (LLVMGetTargetFromTriple(triple, &t, &msg)) llvm_fail(triple, msg);
  char *host = LLVMGetHostCPUName(), *host_features = LLVMGetHostCPUFeatures();
  if (cpu && cpu->features && cpu_table_known()) {
    char f[CPU_FEATURES_MAX * 2];
    cpu_to_llvm(cpu->features, f, sizeof f);
    m->cpu = strdup("x86-64"), m->features = strdup(f), m->tune = strdup(cpu->tune ? cpu->tune : host);
  } else {
    m->cpu = strdup(host), m->features = strdup(host_features), m->tune = strdup(host);
  }
  ir_assert(m->cpu && m->features && m->tune);
  LLVMDisposeMessage(host);
  LLVMDisposeMessage(host_features);
  if (cpu && cpu->suffix) snprintf(m->suffix, sizeof m->suffix, "%s", cpu->suffix);
  m->tm = LLVMCreateTargetMachine(t, triple, m->cpu, m->features, LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                  LLVMCodeModelDefault);
  if (!m->tm) llvm_fail("no target machine for", triple);
  LLVMSetTarget(m->mod, triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(m->tm);
  LLVMSetModuleDataLayout(m->mod, td);
  LLVMDisposeTargetData(td);
  detect_libmvec(m, triple);
  LLVMDisposeMessage(triple);
}

LlvmModule *llvm_module_new(const char *name) { return llvm_module_new_for(name, NULL); }

LlvmModule *llvm_module_new_for(const char *name, const LlvmCpu *cpu) {
  LlvmModule *m = calloc(1, sizeof *m);
  ir_assert(m);
  m->ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(m->ctx, diag_handler, NULL);
  m->mod = LLVMModuleCreateWithNameInContext(name, m->ctx);
  m->f32 = LLVMFloatTypeInContext(m->ctx);
  m->i1 = LLVMInt1TypeInContext(m->ctx);
  m->i8 = LLVMInt8TypeInContext(m->ctx);
  m->i16 = LLVMInt16TypeInContext(m->ctx);
  m->i32 = LLVMInt32TypeInContext(m->ctx);
  m->i64 = LLVMInt64TypeInContext(m->ctx);
  LLVMTypeRef params[4] = {LLVMPointerType(LLVMPointerType(m->i8, 0), 0), m->i64, m->i64, LLVMPointerType(m->f32, 0)};
  m->kfn = LLVMFunctionType(LLVMVoidTypeInContext(m->ctx), params, 4, 0);
  m->md_scope = LLVMGetMDKindIDInContext(m->ctx, "alias.scope", 11);
  m->md_noalias = LLVMGetMDKindIDInContext(m->ctx, "noalias", 7);
  m->md_loop = LLVMGetMDKindIDInContext(m->ctx, "llvm.loop", 9);
  init_target(m, cpu);
  return m;
}

void llvm_module_free(LlvmModule *m) {
  if (!m) return;
  LLVMDisposeModule(m->mod);
  LLVMDisposeTargetMachine(m->tm);
  LLVMContextDispose(m->ctx);
  free(m->cpu);
  free(m->features);
  free(m->tune);
  free(m);
}

void llvm_host(char *cpu, size_t cpulen, char *features, size_t featlen) {
  char *name = LLVMGetHostCPUName(), *f = LLVMGetHostCPUFeatures();
  snprintf(cpu, cpulen, "%s", name);
  cpu_from_llvm(f, features, featlen);
  LLVMDisposeMessage(name);
  LLVMDisposeMessage(f);
}

const char *llvm_link_libs(const LlvmModule *m) {
  for (int f = 0; f < MF_COUNT; f++)
    if (m->vec_mask[f]) return "-lmvec -lm";
  return "-lm";
}

/* ---- one kernel: state -------------------------------------------------------- */

typedef struct Emit {
  LlvmModule *m;
  const Kernel *k;
  LLVMValueRef fn, bufs, lo, hi, scalars;              /* the function and its arguments */
  LLVMBuilderRef b;                                    /* where code goes now */
  LLVMBuilderRef entry_b;                              /* end of the entry block: per-call values */
  LLVMBuilderRef row_b;                                /* end of the row header: per-row values */
  LLVMValueRef r, j;                                   /* i64: the current row and column */
  LLVMValueRef bufp[K_MAX_BUFS];                       /* float* or i32*, in the entry block */
  int cls[K_MAX_BUFS], ncls;                           /* alias class of each buffer: overlapping buffers share one */
  LLVMValueRef scope[K_MAX_BUFS], noalias[K_MAX_BUFS]; /* alias metadata; NULL: none */
  LLVMValueRef acc[K_MAX_ACCS];
  LLVMValueRef rowcoord[K_MAX_DIMS];
  const KView **rowview; /* views whose row part is computed this row ... */
  LLVMValueRef *rowoff;  /* ... and that part (NULL: 0) */
  int nrowview;
  LLVMValueRef *scal; /* scalars[i], loaded in the entry block */
  int nscal;
  LLVMValueRef *val;  /* this iteration: value of expression id, then column coordinates */
  int *stack, nstack; /* ids set in val, in order, so a branch can drop its own */
  signed char *spec;  /* per id: -1 unknown, else whether it may be evaluated speculatively */
} Emit;

static LLVMValueRef cf(Emit *e, float f) { return LLVMConstReal(e->m->f32, f); }
static LLVMValueRef ci(Emit *e, int64_t v) { return LLVMConstInt(e->m->i64, (unsigned long long)v, 1); }

static LLVMBasicBlockRef new_block(Emit *e, const char *name) {
  return LLVMAppendBasicBlockInContext(e->m->ctx, e->fn, name);
}

/* Integer sums of terms where NULL means 0, so constant zeros never reach the IR. */
static LLVMValueRef iadd(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y) {
  return !x ? y : !y ? x : LLVMBuildNSWAdd(b, x, y, "");
}
static LLVMValueRef imul(Emit *e, LLVMBuilderRef b, LLVMValueRef x, int64_t c) {
  return c == 0 ? NULL : c == 1 ? x : LLVMBuildNSWMul(b, x, ci(e, c), "");
}

static void memo_set(Emit *e, int id, LLVMValueRef v) {
  e->val[id] = v;
  e->stack[e->nstack++] = id;
}
static void memo_pop(Emit *e, int mark) {
  while (e->nstack > mark) e->val[e->stack[--e->nstack]] = NULL;
}

/* ---- per-call and per-row values ------------------------------------------------ */

/* A buffer element's type: i16 holds bf16 and f16, i8 e4m3 and e5m2 (converted with
 * integer code). */
static bool fp8(DType t) { return t == DT_E4M3 || t == DT_E5M2; }
static LLVMTypeRef elt_type(LlvmModule *m, DType t) {
  return t == DT_I32 ? m->i32 : t == DT_BF16 || t == DT_F16 ? m->i16 : fp8(t) ? m->i8 : m->f32;
}

static LLVMValueRef buf_ptr(Emit *e, int buf) {
  if (e->bufp[buf]) return e->bufp[buf];
  const KBuf *kb = &e->k->bufs[buf];
  LlvmModule *m = e->m;
  LLVMTypeRef i8p = LLVMPointerType(m->i8, 0);
  LLVMValueRef index = ci(e, buf);
  LLVMValueRef slot = LLVMBuildInBoundsGEP2(e->entry_b, i8p, e->bufs, &index, 1, "");
  LLVMValueRef p = LLVMBuildLoad2(e->entry_b, i8p, slot, "");
  return e->bufp[buf] = LLVMBuildBitCast(e->entry_b, p, LLVMPointerType(elt_type(m, kb->dtype), 0), kb->name);
}

static LLVMValueRef scalar(Emit *e, int index) {
  ir_assert(index >= 0);
  if (index >= e->nscal) {
    e->scal = realloc(e->scal, (size_t)(index + 1) * sizeof *e->scal);
    ir_assert(e->scal);
    memset(e->scal + e->nscal, 0, (size_t)(index + 1 - e->nscal) * sizeof *e->scal);
    e->nscal = index + 1;
  }
  if (!e->scal[index]) {
    LLVMValueRef i = ci(e, index);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(e->entry_b, e->m->f32, e->scalars, &i, 1, "");
    e->scal[index] = LLVMBuildLoad2(e->entry_b, e->m->f32, p, "scalar");
  }
  return e->scal[index];
}

static int64_t dims_product(const Kernel *k, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++) p *= k->dims[d];
  return p;
}

/* Coordinate d < row_dims of row r: (r / stride) % dims[d]; r < rows needs no % for d = 0. */
static LLVMValueRef row_coord(Emit *e, int d) {
  if (e->rowcoord[d]) return e->rowcoord[d];
  int64_t stride = dims_product(e->k, d + 1, e->k->row_dims);
  LLVMValueRef x = e->r;
  if (stride != 1) x = LLVMBuildUDiv(e->row_b, x, ci(e, stride), "");
  if (d > 0) x = LLVMBuildURem(e->row_b, x, ci(e, e->k->dims[d]), "");
  return e->rowcoord[d] = x;
}

/* Coordinate d >= row_dims of column j, cached for this iteration. */
static LLVMValueRef col_coord(Emit *e, int d) {
  int slot = e->k->nexprs + d;
  if (e->val[slot]) return e->val[slot];
  int64_t stride = dims_product(e->k, d + 1, e->k->ndims);
  LLVMValueRef x = e->j;
  if (stride != 1) x = LLVMBuildUDiv(e->b, x, ci(e, stride), "");
  if (stride * e->k->dims[d] != e->k->cols) x = LLVMBuildURem(e->b, x, ci(e, e->k->dims[d]), "");
  memo_set(e, slot, x);
  return x;
}

/* The row part of a view's address (offset included), once per row. */
static LLVMValueRef view_row_offset(Emit *e, const KView *v) {
  for (int i = 0; i < e->nrowview; i++)
    if (e->rowview[i] == v) return e->rowoff[i];
  LLVMValueRef off = v->offset ? ci(e, v->offset) : NULL;
  for (int d = 0; d < e->k->row_dims; d++)
    if (v->strides[d] && e->k->dims[d] != 1)
      off = iadd(e->row_b, off, imul(e, e->row_b, row_coord(e, d), v->strides[d]));
  e->rowview[e->nrowview] = v;
  return e->rowoff[e->nrowview++] = off;
}

/* Whether the column part is c * j: every column axis of extent > 1 has stride c times
 * its row-major stride. */
static bool col_affine(const Kernel *k, const KView *v, int64_t *c) {
  bool have = false;
  for (int d = k->row_dims; d < k->ndims; d++) {
    if (k->dims[d] == 1) continue;
    int64_t rm = dims_product(k, d + 1, k->ndims);
    if (!have) {
      if (v->strides[d] % rm) return false;
      *c = v->strides[d] / rm;
      have = true;
    } else if (v->strides[d] != *c * rm) return false;
  }
  if (!have) *c = 0;
  return true;
}

static LLVMValueRef view_col_offset(Emit *e, const KView *v) {
  int64_t c = 0;
  if (col_affine(e->k, v, &c)) return imul(e, e->b, e->j, c);
  LLVMValueRef off = NULL;
  for (int d = e->k->row_dims; d < e->k->ndims; d++)
    if (v->strides[d] && e->k->dims[d] != 1) off = iadd(e->b, off, imul(e, e->b, col_coord(e, d), v->strides[d]));
  return off;
}

static LLVMValueRef emit_expr(Emit *e, const KExpr *x);

static LLVMValueRef view_ptr(Emit *e, int buf, const KView *v) {
  LLVMValueRef off = iadd(e->b, view_row_offset(e, v), view_col_offset(e, v));
  if (v->gather) {
    LLVMValueRef g = LLVMBuildFPToSI(e->b, emit_expr(e, v->gather), e->m->i64, "");
    off = iadd(e->b, off, imul(e, e->b, g, v->gather_stride));
  }
  LLVMValueRef p = buf_ptr(e, buf);
  if (!off) return p;
  return LLVMBuildInBoundsGEP2(e->b, elt_type(e->m, e->k->bufs[buf].dtype), p, &off, 1, "");
}

static void set_alias(Emit *e, LLVMValueRef inst, int buf) {
  LLVMSetAlignment(inst, (unsigned)kbuf_elem_bytes(&e->k->bufs[buf]));
  if (!e->scope[buf]) return;
  LLVMSetMetadata(inst, e->m->md_scope, e->scope[buf]);
  LLVMSetMetadata(inst, e->m->md_noalias, e->noalias[buf]);
}

/* ---- 16-bit storage: kx_to_f32 and kx_from_f32 of kernel.h, in branch-free integer code */

static LLVMValueRef u32(Emit *e, uint32_t v) { return LLVMConstInt(e->m->i32, v, 0); }
static LLVMValueRef f32c(Emit *e, float v) { return LLVMConstReal(e->m->f32, v); }
static LLVMValueRef and_(Emit *e, LLVMValueRef x, uint32_t m) { return LLVMBuildAnd(e->b, x, u32(e, m), ""); }
static LLVMValueRef lshr(Emit *e, LLVMValueRef x, unsigned n) { return LLVMBuildLShr(e->b, x, u32(e, n), ""); }
static LLVMValueRef shl(Emit *e, LLVMValueRef x, unsigned n) { return LLVMBuildShl(e->b, x, u32(e, n), ""); }
static LLVMValueRef or_(Emit *e, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildOr(e->b, x, y, ""); }
static LLVMValueRef ucmp(Emit *e, LLVMIntPredicate p, LLVMValueRef x, uint32_t v) {
  return LLVMBuildICmp(e->b, p, x, u32(e, v), "");
}

static LLVMValueRef half_to_f32(Emit *e, DType t, LLVMValueRef h16) {
  LLVMBuilderRef b = e->b;
  LLVMValueRef h = LLVMBuildZExt(b, h16, e->m->i32, "");
  if (t == DT_BF16) return LLVMBuildBitCast(b, shl(e, h, 16), e->m->f32, "");
  LLVMValueRef sign = shl(e, lshr(e, h, 15), 31), ex = and_(e, lshr(e, h, 10), 31), m = and_(e, h, 1023);
  LLVMValueRef special = or_(e, or_(e, sign, u32(e, 0x7f800000u)), shl(e, m, 13));
  LLVMValueRef normal = or_(e, or_(e, sign, shl(e, LLVMBuildAdd(b, ex, u32(e, 112), ""), 23)), shl(e, m, 13));
  LLVMValueRef sub = LLVMBuildFMul(b, LLVMBuildUIToFP(b, m, e->m->f32, ""), f32c(e, 0x1p-24f), "");
  sub = or_(e, LLVMBuildBitCast(b, sub, e->m->i32, ""), sign);
  LLVMValueRef bits = LLVMBuildSelect(b, ucmp(e, LLVMIntEQ, ex, 31), special,
                                      LLVMBuildSelect(b, ucmp(e, LLVMIntEQ, ex, 0), sub, normal, ""), "");
  return LLVMBuildBitCast(b, bits, e->m->f32, "");
}

static LLVMValueRef f32_to_half(Emit *e, DType t, LLVMValueRef f) {
  LLVMBuilderRef b = e->b;
  LLVMValueRef u = LLVMBuildBitCast(b, f, e->m->i32, ""), a = and_(e, u, 0x7fffffffu), r;
  if (t == DT_BF16) {
    LLVMValueRef nan = or_(e, lshr(e, u, 16), u32(e, 0x40));
    LLVMValueRef rne =
        lshr(e, LLVMBuildAdd(b, LLVMBuildAdd(b, u, u32(e, 0x7fff), ""), and_(e, lshr(e, u, 16), 1), ""), 16);
    r = LLVMBuildSelect(b, ucmp(e, LLVMIntUGT, a, 0x7f800000u), nan, rne, "");
  } else {
    LLVMValueRef sign = and_(e, lshr(e, u, 16), 0x8000);
    LLVMValueRef nan = or_(e, or_(e, sign, u32(e, 0x7e00)), and_(e, lshr(e, a, 13), 0x3ff));
    LLVMValueRef inf = or_(e, sign, u32(e, 0x7c00));
    LLVMValueRef q = LLVMBuildFMul(b, LLVMBuildBitCast(b, a, e->m->f32, ""), f32c(e, 0x1p24f), "");
    LLVMValueRef m = LLVMBuildFPToUI(b, q, e->m->i32, "");
    LLVMValueRef rem = LLVMBuildFSub(b, q, LLVMBuildUIToFP(b, m, e->m->f32, ""), "");
    LLVMValueRef half = f32c(e, 0.5f), odd = ucmp(e, LLVMIntNE, and_(e, m, 1), 0);
    LLVMValueRef up = LLVMBuildOr(b, LLVMBuildFCmp(b, LLVMRealOGT, rem, half, ""),
                                  LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOEQ, rem, half, ""), odd, ""), "");
    LLVMValueRef sub = or_(e, sign, LLVMBuildAdd(b, m, LLVMBuildZExt(b, up, e->m->i32, ""), ""));
    LLVMValueRef rebias = LLVMBuildAdd(b, a, u32(e, 0x0fffu - 0x38000000u), "");
    LLVMValueRef normal = or_(e, sign, lshr(e, LLVMBuildAdd(b, rebias, and_(e, lshr(e, a, 13), 1), ""), 13));
    r = LLVMBuildSelect(b, ucmp(e, LLVMIntUGT, a, 0x7f800000u), nan,
                        LLVMBuildSelect(b, ucmp(e, LLVMIntUGE, a, 0x477ff000u), inf,
                                        LLVMBuildSelect(b, ucmp(e, LLVMIntULT, a, 0x38800000u), sub, normal, ""), ""),
                        "");
  }
  return LLVMBuildTrunc(b, r, e->m->i16, "");
}

static LLVMValueRef call_intrinsic(Emit *e, const char *name, LLVMValueRef *args, int n);

/* ---- 8-bit storage: isa_fp8_to_f32 and isa_fp8_from_f32 of program/isa.h ------------ */

static LLVMValueRef fp8_to_f32(Emit *e, DType t, LLVMValueRef c8) {
  LLVMBuilderRef b = e->b;
  LLVMValueRef c = LLVMBuildZExt(b, c8, e->m->i32, "");
  if (t == DT_E5M2) return half_to_f32(e, DT_F16, LLVMBuildTrunc(b, shl(e, c, 8), e->m->i16, ""));
  LLVMValueRef sign = shl(e, lshr(e, c, 7), 31), ex = and_(e, lshr(e, c, 3), 15), m = and_(e, c, 7);
  LLVMValueRef nan = or_(e, sign, u32(e, 0x7fc00000u));
  LLVMValueRef normal = or_(e, or_(e, sign, shl(e, LLVMBuildAdd(b, ex, u32(e, 120), ""), 23)), shl(e, m, 20));
  LLVMValueRef sub = LLVMBuildFMul(b, LLVMBuildUIToFP(b, m, e->m->f32, ""), f32c(e, 0x1p-9f), "");
  sub = or_(e, LLVMBuildBitCast(b, sub, e->m->i32, ""), sign);
  LLVMValueRef bits = LLVMBuildSelect(b, ucmp(e, LLVMIntEQ, and_(e, c, 0x7f), 0x7f), nan,
                                      LLVMBuildSelect(b, ucmp(e, LLVMIntEQ, ex, 0), sub, normal, ""), "");
  return LLVMBuildBitCast(b, bits, e->m->f32, "");
}

static LLVMValueRef f32_to_fp8(Emit *e, DType t, LLVMValueRef f) {
  LLVMBuilderRef b = e->b;
  int e5 = t == DT_E5M2, mbits = e5 ? 2 : 3, emin = e5 ? -14 : -6, bias = e5 ? 15 : 7;
  float maxv = e5 ? 57344.0f : 448.0f;
  LLVMValueRef u = LLVMBuildBitCast(b, f, e->m->i32, ""), a = and_(e, u, 0x7fffffffu);
  LLVMValueRef sign = lshr(e, and_(e, u, 0x80000000u), 24);
  LLVMValueRef af = LLVMBuildBitCast(b, a, e->m->f32, "");
  af = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, af, f32c(e, maxv), ""), f32c(e, maxv), af, "");
  LLVMValueRef ex = LLVMBuildSub(b, lshr(e, LLVMBuildBitCast(b, af, e->m->i32, ""), 23), u32(e, 127), "");
  ex = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, ex, u32(e, (uint32_t)emin), ""), u32(e, (uint32_t)emin), ex, "");
  LLVMValueRef q =
      LLVMBuildBitCast(b, shl(e, LLVMBuildAdd(b, ex, u32(e, (uint32_t)(127 - mbits)), ""), 23), e->m->f32, "");
  LLVMValueRef quot = LLVMBuildFDiv(b, af, q, "");
  LLVMValueRef r = LLVMBuildFMul(b, call_intrinsic(e, "llvm.rint", &quot, 1), q, "");
  LLVMValueRef rb = LLVMBuildBitCast(b, r, e->m->i32, "");
  float q0 = ldexpf(1.0f, emin - mbits);
  LLVMValueRef low = LLVMBuildFPToUI(b, LLVMBuildFDiv(b, r, f32c(e, q0), ""), e->m->i32, "");
  LLVMValueRef high =
      or_(e, shl(e, LLVMBuildAdd(b, lshr(e, rb, 23), u32(e, (uint32_t)(bias - 127)), ""), (unsigned)mbits),
          and_(e, lshr(e, rb, 23 - (unsigned)mbits), (1u << mbits) - 1));
  LLVMValueRef code = LLVMBuildSelect(b, ucmp(e, LLVMIntULT, rb, (uint32_t)(emin + 1 + 127) << 23), low, high, "");
  code = LLVMBuildSelect(b, ucmp(e, LLVMIntUGT, a, 0x7f800000u), u32(e, e5 ? 0x7e : 0x7f), code, "");
  return LLVMBuildTrunc(b, or_(e, code, sign), e->m->i8, "");
}

/* The element of buffer buf at ptr, widened to f32 (i32 converted). */
static LLVMValueRef load_elem(Emit *e, int buf, LLVMValueRef ptr) {
  DType t = e->k->bufs[buf].dtype;
  LLVMValueRef ld = LLVMBuildLoad2(e->b, elt_type(e->m, t), ptr, "");
  set_alias(e, ld, buf);
  if (t == DT_BF16 || t == DT_F16) return half_to_f32(e, t, ld);
  if (fp8(t)) return fp8_to_f32(e, t, ld);
  return t == DT_I32 ? LLVMBuildSIToFP(e->b, ld, e->m->f32, "") : ld;
}

/* v into the element of buffer buf at ptr (added in f32 with KS_ADD), rounded to a 16- or 8-bit buffer's type. */
static void store_elem(Emit *e, int buf, LLVMValueRef ptr, KStore s, LLVMValueRef v) {
  DType t = e->k->bufs[buf].dtype;
  bool half = t == DT_BF16 || t == DT_F16;
  if (s == KS_ADD) v = LLVMBuildFAdd(e->b, load_elem(e, buf, ptr), v, "");
  set_alias(e, LLVMBuildStore(e->b, half ? f32_to_half(e, t, v) : fp8(t) ? f32_to_fp8(e, t, v) : v, ptr), buf);
}

static LLVMValueRef emit_load(Emit *e, int buf, const KView *v) { return load_elem(e, buf, view_ptr(e, buf, v)); }

static void emit_store(Emit *e, const KPhase *p, LLVMValueRef v) {
  store_elem(e, p->buf, view_ptr(e, p->buf, &p->view), p->store, v);
}

/* ---- expressions ----------------------------------------------------------------- */

/* An intrinsic overloaded on its operands' type: f32, or a vector of f32. */
static LLVMValueRef call_intrinsic(Emit *e, const char *name, LLVMValueRef *args, int n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  ir_assert(id);
  LLVMTypeRef over = LLVMTypeOf(args[0]);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->m->mod, id, &over, 1);
  LLVMTypeRef ty = LLVMIntrinsicGetType(e->m->ctx, id, &over, 1);
  return LLVMBuildCall2(e->b, ty, fn, args, (unsigned)n, "");
}

/* f as a constant of type ty: f32, or every lane of a vector of f32. */
static LLVMValueRef fconst(Emit *e, LLVMTypeRef ty, float f) {
  if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind) return cf(e, f);
  LLVMValueRef c[16];
  unsigned n = LLVMGetVectorSize(ty);
  ir_assert(n <= 16);
  for (unsigned i = 0; i < n; i++) c[i] = cf(e, f);
  return LLVMConstVector(c, n);
}

static void add_fn_attr(LLVMContextRef ctx, LLVMValueRef fn, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  ir_assert(kind);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, kind, 0));
}

/* Declares a libmvec variant and records it (llvm_optimize keeps it alive for the vectorizer). */
static void declare_vector_fn(LlvmModule *m, const char *name, int lanes, int arity) {
  if (LLVMGetNamedFunction(m->mod, name)) return;
  LLVMTypeRef v = LLVMVectorType(m->f32, (unsigned)lanes), params[2] = {v, v};
  LLVMValueRef fn = LLVMAddFunction(m->mod, name, LLVMFunctionType(v, params, (unsigned)arity, 0));
  add_fn_attr(m->ctx, fn, "nounwind");
  add_fn_attr(m->ctx, fn, "readnone");
  ir_assert(m->nvec_decls < MF_COUNT * VEC_ISAS);
  m->vec_decls[m->nvec_decls++] = fn;
}

/* "_ZGV_LLVM_N8v_expf(_ZGVdN8v_expf),..." for the variants this machine has. */
static void add_vector_variants(LlvmModule *m, LLVMValueRef call, MathFn f) {
  char attr[512] = "", vname[64];
  const char *params = math_fns[f].arity == 2 ? "vv" : "v";
  for (int i = 0; i < VEC_ISAS; i++) {
    if (!(m->vec_mask[f] & 1 << i)) continue;
    vector_fn_name(vname, sizeof vname, f, i);
    declare_vector_fn(m, vname, vec_isas[i].lanes, math_fns[f].arity);
    size_t n = strlen(attr);
    snprintf(attr + n, sizeof attr - n, "%s_ZGV_LLVM_N%d%s_%s(%s)", n ? "," : "", vec_isas[i].lanes, params,
             math_fns[f].name, vname);
  }
  if (!attr[0]) return;
  const char *key = "vector-function-abi-variant";
  LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                           LLVMCreateStringAttribute(m->ctx, key, (unsigned)strlen(key), attr, (unsigned)strlen(attr)));
}

static LLVMValueRef call_libm(Emit *e, MathFn f, LLVMValueRef *args) {
  LlvmModule *m = e->m;
  LLVMTypeRef params[2] = {m->f32, m->f32};
  LLVMTypeRef ty = LLVMFunctionType(m->f32, params, (unsigned)math_fns[f].arity, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(m->mod, math_fns[f].name);
  if (!fn) {
    fn = LLVMAddFunction(m->mod, math_fns[f].name, ty);
    add_fn_attr(m->ctx, fn, "nounwind");
    add_fn_attr(m->ctx, fn, "readnone"); /* errno is not read: -fno-math-errno */
    add_fn_attr(m->ctx, fn, "willreturn");
  }
  LLVMValueRef call = LLVMBuildCall2(e->b, ty, fn, args, (unsigned)math_fns[f].arity, "");
  add_vector_variants(m, call, f);
  return call;
}

/* The libmvec variant of f with `lanes` lanes, declared; NULL where this machine has none. */
static LLVMValueRef vector_fn(LlvmModule *m, MathFn f, unsigned lanes) {
  char name[64];
  for (int i = 0; i < VEC_ISAS; i++)
    if (m->vec_mask[f] & 1 << i && vec_isas[i].lanes == (int)lanes) {
      vector_fn_name(name, sizeof name, f, i);
      declare_vector_fn(m, name, vec_isas[i].lanes, math_fns[f].arity);
      return LLVMGetNamedFunction(m->mod, name);
    }
  return NULL;
}

/* exp(x), x an f32 or a vector of them (the fused attention kernel's lanes). libmvec's
 * vector expf leaves its fast path for x < -87.3 (results that underflow): 10x slower
 * for -inf lanes, 25x for -100, measured. Causal softmax feeds it exactly those (masked
 * scores), so with libmvec such x are shifted into range, exp(x) = exp(x + 50) *
 * exp(-50) with x + 50 exact in f32, and below -104, where exp(x) rounds to 0, the
 * result is 0 without a multiply that would underflow (an underflowing multiply is
 * itself slow). A vector whose width libmvec lacks goes lane by lane. */
static LLVMValueRef emit_exp(Emit *e, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef vfn = NULL;
  if (LLVMGetTypeKind(ty) == LLVMVectorTypeKind && !(vfn = vector_fn(e->m, MF_EXP, LLVMGetVectorSize(ty)))) {
    LLVMValueRef r = LLVMGetUndef(ty);
    for (unsigned i = 0; i < LLVMGetVectorSize(ty); i++) {
      LLVMValueRef lane = LLVMConstInt(e->m->i32, i, 0);
      r = LLVMBuildInsertElement(b, r, emit_exp(e, LLVMBuildExtractElement(b, x, lane, "")), lane, "");
    }
    return r;
  }
  if (!vfn && !e->m->vec_mask[MF_EXP]) return call_libm(e, MF_EXP, &x);
  LLVMValueRef low = LLVMBuildFCmp(b, LLVMRealOLT, x, fconst(e, ty, -87.0f), "");
  LLVMValueRef zero = LLVMBuildFCmp(b, LLVMRealOLT, x, fconst(e, ty, -104.0f), "");
  LLVMValueRef t = LLVMBuildSelect(b, low, LLVMBuildFAdd(b, x, fconst(e, ty, 50.0f), ""), x, "");
  t = LLVMBuildSelect(b, zero, fconst(e, ty, 0.0f), t, "");
  LLVMValueRef r = vfn ? LLVMBuildCall2(b, LLVMGlobalGetValueType(vfn), vfn, &t, 1, "") : call_libm(e, MF_EXP, &t);
  LLVMValueRef scale = LLVMBuildSelect(b, zero, fconst(e, ty, 0.0f), fconst(e, ty, (float)exp(-50.0)), "");
  return LLVMBuildSelect(b, low, LLVMBuildFMul(b, r, scale, ""), r, "");
}

static LLVMValueRef emit_unary(Emit *e, KUnary op, LLVMValueRef x) {
  switch (op) {
  case KU_NEG: return LLVMBuildFNeg(e->b, x, "");
  case KU_EXP: return emit_exp(e, x);
  case KU_LOG: return call_libm(e, MF_LOG, &x);
  case KU_TANH: return call_libm(e, MF_TANH, &x);
  case KU_SIN: return call_libm(e, MF_SIN, &x);
  case KU_COS: return call_libm(e, MF_COS, &x);
  case KU_SQRT: return call_intrinsic(e, "llvm.sqrt", &x, 1);
  case KU_RSQRT: return LLVMBuildFDiv(e->b, cf(e, 1.0f), call_intrinsic(e, "llvm.sqrt", &x, 1), "");
  case KU_RECIP: return LLVMBuildFDiv(e->b, cf(e, 1.0f), x, "");
  case KU_ABS: return call_intrinsic(e, "llvm.fabs", &x, 1);
  case KU_FLOOR: return call_intrinsic(e, "llvm.floor", &x, 1);
  case KU_RBF16: return half_to_f32(e, DT_BF16, f32_to_half(e, DT_BF16, x));
  case KU_RF16: return half_to_f32(e, DT_F16, f32_to_half(e, DT_F16, x));
  case KU_COUNT: break;
  }
  unreachable();
}

static LLVMValueRef fcmp_select(Emit *e, LLVMRealPredicate pred, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(e->b, LLVMBuildFCmp(e->b, pred, x, y, ""), x, y, "");
}
static LLVMValueRef fcmp_01(Emit *e, LLVMRealPredicate pred, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildUIToFP(e->b, LLVMBuildFCmp(e->b, pred, x, y, ""), e->m->f32, "");
}

static LLVMValueRef emit_binary(Emit *e, KBinary op, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef xy[2] = {x, y};
  switch (op) {
  case KB_ADD: return LLVMBuildFAdd(e->b, x, y, "");
  case KB_SUB: return LLVMBuildFSub(e->b, x, y, "");
  case KB_MUL: return LLVMBuildFMul(e->b, x, y, "");
  case KB_DIV: return LLVMBuildFDiv(e->b, x, y, "");
  case KB_MAX: return fcmp_select(e, LLVMRealOGT, x, y);
  case KB_MIN: return fcmp_select(e, LLVMRealOLT, x, y);
  case KB_POW: return call_libm(e, MF_POW, xy);
  case KB_LT: return fcmp_01(e, LLVMRealOLT, x, y);
  case KB_LE: return fcmp_01(e, LLVMRealOLE, x, y);
  case KB_EQ: return fcmp_01(e, LLVMRealOEQ, x, y);
  case KB_COUNT: break;
  }
  unreachable();
}

/* Whether x may be evaluated when kernel_eval would not: no gather load inside. */
static bool speculatable(Emit *e, const KExpr *x) {
  if (!x) return true;
  if (e->spec[x->id] < 0) {
    bool ok = !(x->kind == KX_LOAD && x->view.gather) && speculatable(e, x->a) && speculatable(e, x->b) &&
              speculatable(e, x->c);
    e->spec[x->id] = ok;
  }
  return e->spec[x->id];
}

/* One arm of a branching select: its values are dropped from the cache afterwards,
 * since they do not dominate the join. */
static LLVMValueRef emit_arm(Emit *e, LLVMBasicBlockRef bb, const KExpr *x, LLVMBasicBlockRef join,
                             LLVMBasicBlockRef *end) {
  LLVMPositionBuilderAtEnd(e->b, bb);
  int mark = e->nstack;
  LLVMValueRef v = emit_expr(e, x);
  memo_pop(e, mark);
  *end = LLVMGetInsertBlock(e->b);
  LLVMBuildBr(e->b, join);
  return v;
}

static LLVMValueRef emit_select(Emit *e, const KExpr *x) {
  LLVMValueRef cond = LLVMBuildFCmp(e->b, LLVMRealUNE, emit_expr(e, x->a), cf(e, 0.0f), ""); /* a != 0 */
  if (speculatable(e, x->b) && speculatable(e, x->c))
    return LLVMBuildSelect(e->b, cond, emit_expr(e, x->b), emit_expr(e, x->c), "");
  LLVMBasicBlockRef tb = new_block(e, "sel.then"), fb = new_block(e, "sel.else"), join = new_block(e, "sel.join");
  LLVMBuildCondBr(e->b, cond, tb, fb);
  LLVMBasicBlockRef ends[2];
  LLVMValueRef vals[2] = {emit_arm(e, tb, x->b, join, &ends[0]), emit_arm(e, fb, x->c, join, &ends[1])};
  LLVMPositionBuilderAtEnd(e->b, join);
  LLVMValueRef phi = LLVMBuildPhi(e->b, e->m->f32, "");
  LLVMAddIncoming(phi, vals, ends, 2);
  return phi;
}

static LLVMValueRef emit_coord(Emit *e, int axis) {
  ir_assert(axis >= 0 && axis < e->k->ndims);
  LLVMValueRef c = axis < e->k->row_dims ? row_coord(e, axis) : col_coord(e, axis);
  return LLVMBuildSIToFP(e->b, c, e->m->f32, "");
}

/* dropout_uniform (ir/rand.h) of the view's element index, in 64-bit integers. */
static LLVMValueRef emit_rand(Emit *e, const KExpr *x) {
  LLVMValueRef idx = iadd(e->b, view_row_offset(e, &x->view), view_col_offset(e, &x->view));
  if (!idx) idx = ci(e, 0);
  LLVMValueRef step = LLVMBuildFPToSI(e->b, scalar(e, x->index), e->m->i64, "");
  LLVMTypeRef i64 = e->m->i64;
  LLVMValueRef z =
      LLVMBuildAdd(e->b, idx, LLVMConstInt(i64, (unsigned long long)x->seed * 0x9E3779B97F4A7C15ull, 0), "");
  z = LLVMBuildAdd(e->b, z, LLVMBuildMul(e->b, step, LLVMConstInt(i64, 0xD1B54A32D192ED03ull, 0), ""), "");
  const unsigned long long mul[2] = {0xBF58476D1CE4E5B9ull, 0x94D049BB133111EBull};
  const int shift[3] = {30, 27, 31};
  for (int i = 0; i < 3; i++) {
    z = LLVMBuildXor(e->b, z, LLVMBuildLShr(e->b, z, LLVMConstInt(i64, shift[i], 0), ""), "");
    if (i < 2) z = LLVMBuildMul(e->b, z, LLVMConstInt(i64, mul[i], 0), "");
  }
  LLVMValueRef top = LLVMBuildUIToFP(e->b, LLVMBuildLShr(e->b, z, LLVMConstInt(i64, 40, 0), ""), e->m->f32, "");
  return LLVMBuildFMul(e->b, top, cf(e, 0x1.0p-24f), "");
}

static LLVMValueRef emit_expr(Emit *e, const KExpr *x) {
  if (e->val[x->id]) return e->val[x->id];
  LLVMValueRef v = NULL;
  switch (x->kind) {
  case KX_CONST: v = cf(e, x->f); break;
  case KX_LOAD: v = emit_load(e, x->buf, &x->view); break;
  case KX_ACC:
    ir_assert(x->acc >= 0 && x->acc < K_MAX_ACCS && e->acc[x->acc]); /* read before its REDUCE phase */
    v = e->acc[x->acc];
    break;
  case KX_COORD: v = emit_coord(e, x->axis); break;
  case KX_SCALAR: v = scalar(e, x->index); break;
  case KX_UNARY: v = emit_unary(e, x->uop, emit_expr(e, x->a)); break;
  case KX_BINARY: {
    LLVMValueRef a = emit_expr(e, x->a);
    v = emit_binary(e, x->bop, a, emit_expr(e, x->b));
    break;
  }
  case KX_SELECT: v = emit_select(e, x); break;
  case KX_RAND: v = emit_rand(e, x); break;
  }
  ir_assert(v);
  memo_set(e, x->id, v);
  return v;
}

/* ---- loops and phases --------------------------------------------------------------- */

typedef struct Loop {
  LLVMBasicBlockRef pre, head;
  LLVMValueRef iv;
} Loop;

/* Opens `for (iv = from; ...)` at the current block; the caller ensures one trip at least. */
static Loop loop_begin(Emit *e, LLVMValueRef from, const char *name) {
  Loop l = {.pre = LLVMGetInsertBlock(e->b)};
  l.head = new_block(e, name);
  LLVMBuildBr(e->b, l.head);
  LLVMPositionBuilderAtEnd(e->b, l.head);
  l.iv = LLVMBuildPhi(e->b, e->m->i64, name);
  LLVMAddIncoming(l.iv, &from, &l.pre, 1);
  return l;
}

/* What a loop tells the loop vectorizer: nothing, "vectorize (reordering allowed)", or
 * "do not vectorize". */
typedef enum { LV_DEFAULT, LV_FORCE, LV_NEVER, LV_FORCE_ROLLED } LoopVec;

/* !{!self, !{"llvm.loop.vectorize.enable", i1 on}} and, rolled, !{"llvm.loop.unroll.disable"}:
 * a short loop of known trip count that full unrolling would turn into a chain of
 * scalar adds (in order: no vectorizer may reorder them) before the loop vectorizer
 * sees it, and vectorize instead (a dot product over a head). */
static LLVMValueRef loop_vectorize_md(Emit *e, bool on, bool rolled) {
  LLVMContextRef ctx = e->m->ctx;
  const char *key = "llvm.loop.vectorize.enable", *unroll = "llvm.loop.unroll.disable";
  LLVMMetadataRef hint[2] = {LLVMMDStringInContext2(ctx, key, strlen(key)),
                             LLVMValueAsMetadata(LLVMConstInt(e->m->i1, on, 0))};
  LLVMMetadataRef no_unroll = LLVMMDStringInContext2(ctx, unroll, strlen(unroll));
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(ctx, NULL, 0);
  LLVMMetadataRef ops[3] = {tmp, LLVMMDNodeInContext2(ctx, hint, 2), LLVMMDNodeInContext2(ctx, &no_unroll, 1)};
  LLVMMetadataRef node = LLVMMDNodeInContext2(ctx, ops, rolled ? 3 : 2);
  LLVMMetadataReplaceAllUsesWith(tmp, node); /* the self reference; frees tmp */
  return LLVMMetadataAsValue(ctx, node);
}

/* Closes the loop: iv + 1 < to continues. Returns the latch block. */
static LLVMBasicBlockRef loop_end(Emit *e, Loop *l, LLVMValueRef to, LoopVec vec) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(e->b), out = new_block(e, "");
  LLVMValueRef next = LLVMBuildNSWAdd(e->b, l->iv, ci(e, 1), "");
  LLVMValueRef br = LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, next, to, ""), l->head, out);
  if (vec != LV_DEFAULT)
    LLVMSetMetadata(br, e->m->md_loop, loop_vectorize_md(e, vec != LV_NEVER, vec == LV_FORCE_ROLLED));
  LLVMAddIncoming(l->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(e->b, out);
  return latch;
}

static void emit_reduce(Emit *e, const KPhase *p) {
  bool sum = p->reduce == KR_SUM;
  LLVMValueRef init = cf(e, sum ? 0.0f : -INFINITY);
  ir_assert(p->acc >= 0 && p->acc < K_MAX_ACCS);
  if (e->k->cols <= 0) {
    e->acc[p->acc] = init;
    return;
  }
  Loop l = loop_begin(e, ci(e, 0), "reduce");
  LLVMValueRef acc = LLVMBuildPhi(e->b, e->m->f32, "acc");
  memo_pop(e, 0);
  e->j = l.iv;
  LLVMValueRef v = emit_expr(e, p->expr), args[2] = {acc, v};
  LLVMValueRef next = sum ? LLVMBuildFAdd(e->b, acc, v, "") : call_intrinsic(e, "llvm.maxnum", args, 2);
  LLVMBasicBlockRef latch = loop_end(e, &l, ci(e, e->k->cols), LV_FORCE);
  LLVMValueRef in[2] = {init, next};
  LLVMBasicBlockRef from[2] = {l.pre, latch};
  LLVMAddIncoming(acc, in, from, 2);
  e->acc[p->acc] = next;
}

static void emit_map(Emit *e, const KPhase *p, LLVMValueRef from, LLVMValueRef to) {
  Loop l = loop_begin(e, from, "map");
  memo_pop(e, 0);
  e->j = l.iv;
  emit_store(e, p, emit_expr(e, p->expr));
  loop_end(e, &l, to, LV_DEFAULT);
}

static void emit_row_phase(Emit *e, const KPhase *p) {
  memo_pop(e, 0);
  e->j = ci(e, 0);
  emit_store(e, p, emit_expr(e, p->expr));
}

/* The classes of buffers an expression reads; stamp marks ids already visited. */
static unsigned expr_reads(const Emit *e, const KExpr *x, int *stamp, int mark) {
  if (!x || stamp[x->id] == mark) return 0;
  stamp[x->id] = mark;
  unsigned r = x->kind == KX_LOAD ? 1u << e->cls[x->buf] | expr_reads(e, x->view.gather, stamp, mark) : 0;
  return r | expr_reads(e, x->a, stamp, mark) | expr_reads(e, x->b, stamp, mark) | expr_reads(e, x->c, stamp, mark);
}

/* The row loop must not be vectorized when one phase writes memory that another phase
 * of the row reads or writes. With short rows LLVM unrolls the j loops and vectorizes
 * across rows; LLVM 14's interleaved-access groups can then move a load of a later
 * phase above the store of an earlier one to the same address (the bug of LLVM issue
 * 63602: AdamW on [768, 8] read m before it was updated). The SLP vectorizer still
 * vectorizes within the row. */
static LoopVec row_loop_vec(const Emit *e) {
  const Kernel *k = e->k;
  unsigned reads[K_MAX_PHASES], writes[K_MAX_PHASES];
  int *stamp = calloc((size_t)k->nexprs + 1, sizeof *stamp);
  ir_assert(stamp);
  for (int i = 0; i < k->nphases; i++) {
    const KPhase *p = &k->phases[i];
    writes[i] = p->kind == KPH_REDUCE ? 0 : 1u << e->cls[p->buf];
    reads[i] = expr_reads(e, p->expr, stamp, i + 1);
    if (p->kind != KPH_REDUCE)
      reads[i] |= expr_reads(e, p->view.gather, stamp, i + 1) | (p->store == KS_ADD ? writes[i] : 0);
  }
  free(stamp);
  for (int i = 0; i < k->nphases; i++)
    for (int x = i + 1; x < k->nphases; x++)
      if (writes[i] & (reads[x] | writes[x]) || writes[x] & reads[i]) return LV_NEVER;
  return LV_DEFAULT;
}

/* Opens the row loop at the current block, with a header for per-row values. */
static Loop row_loop_begin(Emit *e, LLVMValueRef from) {
  Loop l = loop_begin(e, from, "row");
  e->r = l.iv;
  memset(e->rowcoord, 0, sizeof e->rowcoord);
  e->nrowview = 0;
  LLVMBasicBlockRef body = new_block(e, "row.body");
  LLVMPositionBuilderBefore(e->row_b, LLVMBuildBr(e->b, body));
  LLVMPositionBuilderAtEnd(e->b, body);
  return l;
}

static void emit_rows_kernel(Emit *e, LLVMBasicBlockRef done) {
  const Kernel *k = e->k;
  LLVMBasicBlockRef go = new_block(e, "rows");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, e->lo, e->hi, ""), go, done);
  LLVMPositionBuilderAtEnd(e->b, go);
  Loop rl = row_loop_begin(e, e->lo);
  for (int i = 0; i < k->nphases; i++) {
    const KPhase *p = &k->phases[i];
    switch (p->kind) {
    case KPH_REDUCE: emit_reduce(e, p); break;
    case KPH_MAP:
      if (k->cols > 0) emit_map(e, p, ci(e, 0), ci(e, k->cols));
      break;
    case KPH_ROW: emit_row_phase(e, p); break;
    }
  }
  loop_end(e, &rl, e->hi, row_loop_vec(e));
  LLVMBuildBr(e->b, done);
}

static void emit_cols_kernel(Emit *e, LLVMBasicBlockRef done) {
  const Kernel *k = e->k;
  if (k->rows <= 0 || k->nphases == 0) {
    LLVMBuildBr(e->b, done);
    return;
  }
  LLVMBasicBlockRef go = new_block(e, "cols");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, e->lo, e->hi, ""), go, done);
  LLVMPositionBuilderAtEnd(e->b, go);
  Loop rl = row_loop_begin(e, ci(e, 0));
  for (int i = 0; i < k->nphases; i++) emit_map(e, &k->phases[i], e->lo, e->hi);
  loop_end(e, &rl, ci(e, k->rows), row_loop_vec(e));
  LLVMBuildBr(e->b, done);
}

/* ---- the fused attention kernel (kernel.h, KAttn) ---------------------------------------- */

/* `for (iv = lo; iv < hi; iv++)`, zero trips allowed; for_end closes it. */
typedef struct For {
  Loop l;
  LLVMBasicBlockRef skip;
} For;

static For for_begin(Emit *e, LLVMValueRef lo, LLVMValueRef hi, const char *name) {
  LLVMBasicBlockRef go = new_block(e, name), skip = new_block(e, "");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, lo, hi, ""), go, skip);
  LLVMPositionBuilderAtEnd(e->b, go);
  return (For){loop_begin(e, lo, name), skip};
}

static void for_end(Emit *e, For *f, LLVMValueRef hi, LoopVec vec) {
  loop_end(e, &f->l, hi, vec);
  LLVMBuildBr(e->b, f->skip);
  LLVMPositionBuilderAtEnd(e->b, f->skip);
}

static LLVMValueRef at(Emit *e, LLVMValueRef arr, LLVMValueRef i) {
  LLVMValueRef idx[2] = {ci(e, 0), i};
  return LLVMBuildInBoundsGEP2(e->b, LLVMGetAllocatedType(arr), arr, idx, 2, "");
}
static void set(Emit *e, LLVMValueRef p, LLVMValueRef v) { LLVMBuildStore(e->b, v, p); }

/* Element (row, col) of an operand, row the element offset of its (b, s) row. */
static LLVMValueRef attn_ptr(Emit *e, const KOperand *x, LLVMValueRef row, LLVMValueRef col) {
  LLVMValueRef i = LLVMBuildNSWAdd(e->b, row, col, "");
  return LLVMBuildInBoundsGEP2(e->b, elt_type(e->m, e->k->bufs[x->buf].dtype), buf_ptr(e, x->buf), &i, 1, "");
}
static LLVMValueRef attn_load(Emit *e, const KOperand *x, LLVMValueRef row, LLVMValueRef col) {
  return load_elem(e, x->buf, attn_ptr(e, x, row, col));
}
static void attn_store(Emit *e, LLVMValueRef row, LLVMValueRef col, LLVMValueRef v) {
  const KAttn *A = e->k->attn;
  store_elem(e, A->res.buf, attn_ptr(e, &A->res, row, col), A->store, v);
}

/* The element offset of row (b, s) of x. */
static LLVMValueRef attn_row(Emit *e, const KOperand *x, LLVMValueRef b, LLVMValueRef s) {
  return iadd(e->b, iadd(e->b, imul(e, e->b, b, x->sb), imul(e, e->b, s, x->ss)), ci(e, x->offset));
}

/* The kernel takes the rows of one (batch, head) L at a time, one per lane of an L-wide vector
 * (L: the widest vector expf libmvec has here, else 8): queries of a query head by query, keys
 * of a key/value head by key. Each lane computes exactly what
 * kernel_eval's eval_attn_row computes for its row, the same operations in the same
 * order (exp libmvec's, as in every vectorised loop here): a lane's dot product over d is its own chain of adds, in
 * order of d. What the lanes share is the other side's row (a key for a block of queries, a query for a block of keys),
 * loaded once and broadcast: a vector op per d where the scalar form did one op per row and d with a chain of dependent
 * adds. G rows of the other side go through one loop over d, so that G chains are in flight. By key, the group's query
 * heads take turns, each over the union of the lanes' queries, as a lane's sum runs: head, then query. A lane whose row
 * has no such key (outside its causal mask and window, the lanes past the group) keeps its values by a select, never
 * by adding a zero, so that nothing it holds differs from the scalar form's. */

enum { ATTN_G = 4 }; /* other-side rows per loop over d, dot products in flight per lane */

typedef struct AttnV {
  int lanes;
  LLVMTypeRef vt, vi; /* <L x float>, <L x i64> */
} AttnV;

static LLVMValueRef splat(Emit *e, LLVMTypeRef vt, LLVMValueRef s) {
  unsigned n = LLVMGetVectorSize(vt);
  LLVMValueRef v = LLVMBuildInsertElement(e->b, LLVMGetUndef(vt), s, LLVMConstInt(e->m->i32, 0, 0), "");
  return LLVMBuildShuffleVector(e->b, v, LLVMGetUndef(vt), LLVMConstNull(LLVMVectorType(e->m->i32, n)), "");
}
static LLVMValueRef vlocal(Emit *e, const AttnV *V, int64_t n, const char *name) {
  return LLVMBuildAlloca(e->entry_b, n ? LLVMArrayType(V->vt, (unsigned)n) : V->vt, name);
}
static LLVMValueRef vget(Emit *e, const AttnV *V, LLVMValueRef p) { return LLVMBuildLoad2(e->b, V->vt, p, ""); }
static LLVMValueRef fmax_(Emit *e, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef a[2] = {x, y};
  return call_intrinsic(e, "llvm.maxnum", a, 2);
}
static LLVMValueRef vsel(Emit *e, LLVMValueRef mask, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(e->b, mask, x, y, "");
}

static LLVMValueRef imin(Emit *e, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, x, y, ""), x, y, "");
}
static LLVMValueRef imax(Emit *e, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSGT, x, y, ""), x, y, "");
}

/* One group: rows r0 .. r0+nl-1 of one (batch, head), nl <= L. */
typedef struct AttnGroup {
  LLVMValueRef bb, h, x0, nl;
  LLVMValueRef own, other;    /* column offsets: the row's own operands' (head h) and the other side's */
  LLVMValueRef qh;            /* the query head: the column of its log-sum-exp (after F) and its delta */
  LLVMValueRef lo, hi;        /* <L x i64>: a lane's other-side rows lo <= y < hi (none past the group) */
  LLVMValueRef fix[2];        /* the lane's own rows of its fixed operands, [hd] vectors each */
  LLVMValueRef lse, delta;    /* by query, backward: the lane's log-sum-exp and delta */
  LLVMValueRef acc, sc, m, l; /* [hd] accumulators; forward: block scores, running max and sum */
} AttnGroup;

/* The other side's operands of a pass: what its rows are dotted with fix[0], fix[1], and
 * the row weighted into the accumulator. */
typedef struct AttnSide {
  const KOperand *dot[2], *row;
  int ndots;
} AttnSide;

static AttnSide attn_side(const KAttn *A) {
  switch (A->pass) {
  case KA_FWD: return (AttnSide){{&A->k, NULL}, &A->v, 1};
  case KA_DQ: return (AttnSide){{&A->k, &A->v}, &A->k, 2};
  case KA_DK: return (AttnSide){{&A->q, &A->g}, &A->q, 2};
  case KA_DV: break;
  }
  return (AttnSide){{&A->q, NULL}, &A->g, 1};
}

/* The lane's row of x (clamped to the group's last, whose values a lane past it never
 * uses) into fix[hd] vectors; the per-row scalars of a backward pass by query too. */
static void attn_gather(Emit *e, const AttnV *V, AttnGroup *g) {
  const KAttn *A = e->k->attn;
  bool by_query = A->pass == KA_FWD || A->pass == KA_DQ;
  const KOperand *fx[2] = {by_query ? &A->q : &A->k, A->pass == KA_DQ ? &A->g : A->pass == KA_DK ? &A->v : NULL};
  For ln = for_begin(e, ci(e, 0), ci(e, V->lanes), "lane");
  LLVMValueRef x = LLVMBuildNSWAdd(e->b, g->x0, imin(e, ln.l.iv, LLVMBuildNSWSub(e->b, g->nl, ci(e, 1), "")), "");
  for (int f = 0; f < 2 && fx[f]; f++) {
    LLVMValueRef row = attn_row(e, fx[f], g->bb, x);
    For d = for_begin(e, ci(e, 0), ci(e, A->hd), "gather");
    LLVMValueRef p = at(e, g->fix[f], d.l.iv);
    LLVMValueRef v = attn_load(e, fx[f], row, LLVMBuildNSWAdd(e->b, g->own, d.l.iv, ""));
    set(e, p, LLVMBuildInsertElement(e->b, vget(e, V, p), v, ln.l.iv, ""));
    for_end(e, &d, ci(e, A->hd), LV_NEVER);
  }
  if (A->pass == KA_DQ) {
    LLVMValueRef o = attn_load(e, &A->out, attn_row(e, &A->out, g->bb, x),
                               LLVMBuildNSWAdd(e->b, g->qh, ci(e, A->heads * A->hd), ""));
    LLVMValueRef dl = attn_load(e, &A->delta, attn_row(e, &A->delta, g->bb, x), g->qh);
    set(e, g->lse, LLVMBuildInsertElement(e->b, vget(e, V, g->lse), o, ln.l.iv, ""));
    set(e, g->delta, LLVMBuildInsertElement(e->b, vget(e, V, g->delta), dl, ln.l.iv, ""));
  }
  for_end(e, &ln, ci(e, V->lanes), LV_NEVER);
}

/* The lanes whose range holds other-side row y. */
static LLVMValueRef attn_valid(Emit *e, const AttnV *V, const AttnGroup *g, LLVMValueRef y) {
  LLVMValueRef yv = splat(e, V->vi, y);
  return LLVMBuildAnd(e->b, LLVMBuildICmp(e->b, LLVMIntSGE, yv, g->lo, ""),
                      LLVMBuildICmp(e->b, LLVMIntSLT, yv, g->hi, ""), "");
}

/* Rows y[0..ATTN_G) of the other side (in bounds), the lane masks of the unclamped ys,
 * and their dot products with fix[0] and fix[1]: ATTN_G * ndots chains in one loop. */
static void attn_dots(Emit *e, const AttnV *V, const AttnGroup *g, const AttnSide *s, LLVMValueRef y0,
                      LLVMValueRef ylast, LLVMValueRef rows[][ATTN_G], LLVMValueRef valid[ATTN_G],
                      LLVMValueRef dots[2][ATTN_G], LLVMValueRef sums) {
  const KAttn *A = e->k->attn;
  const KOperand *ops[3] = {s->dot[0], s->dot[1], s->row};
  for (int t = 0; t < ATTN_G; t++) {
    LLVMValueRef y = LLVMBuildNSWAdd(e->b, y0, ci(e, t), ""), yc = imin(e, y, ylast);
    valid[t] = attn_valid(e, V, g, y);
    for (int o = 0; o < 3; o++) rows[o][t] = ops[o] ? attn_row(e, ops[o], g->bb, yc) : NULL;
  }
  for (int i = 0; i < s->ndots * ATTN_G; i++) set(e, at(e, sums, ci(e, i)), fconst(e, V->vt, 0.0f));
  For d = for_begin(e, ci(e, 0), ci(e, A->hd), "dots");
  LLVMValueRef c = LLVMBuildNSWAdd(e->b, g->other, d.l.iv, "");
  for (int f = 0; f < s->ndots; f++) {
    LLVMValueRef xf = vget(e, V, at(e, g->fix[f], d.l.iv));
    for (int t = 0; t < ATTN_G; t++) {
      LLVMValueRef p = at(e, sums, ci(e, f * ATTN_G + t));
      LLVMValueRef yv = splat(e, V->vt, attn_load(e, s->dot[f], rows[f][t], c));
      set(e, p, LLVMBuildFAdd(e->b, vget(e, V, p), LLVMBuildFMul(e->b, xf, yv, ""), ""));
    }
  }
  for_end(e, &d, ci(e, A->hd), LV_NEVER);
  for (int f = 0; f < s->ndots; f++)
    for (int t = 0; t < ATTN_G; t++) dots[f][t] = vget(e, V, at(e, sums, ci(e, f * ATTN_G + t)));
}

/* acc[d] += w[t] * row_t[d] for the valid lanes of t = 0..ATTN_G-1, in that order. */
static void attn_rows(Emit *e, const AttnV *V, const AttnGroup *g, const KOperand *op, LLVMValueRef rows[ATTN_G],
                      LLVMValueRef valid[ATTN_G], LLVMValueRef w[ATTN_G]) {
  const KAttn *A = e->k->attn;
  For d = for_begin(e, ci(e, 0), ci(e, A->hd), "rows");
  LLVMValueRef c = LLVMBuildNSWAdd(e->b, g->other, d.l.iv, ""), p = at(e, g->acc, d.l.iv), a = vget(e, V, p);
  for (int t = 0; t < ATTN_G; t++) {
    LLVMValueRef yv = splat(e, V->vt, attn_load(e, op, rows[t], c));
    a = vsel(e, valid[t], LLVMBuildFAdd(e->b, a, LLVMBuildFMul(e->b, w[t], yv, ""), ""), a);
  }
  set(e, p, a);
  for_end(e, &d, ci(e, A->hd), LV_NEVER);
}

/* Forward: the keys ylo..yhi-1 in blocks of KA_BLOCK aligned at multiples of KA_BLOCK (as
 * every lane's are), each block's scores, the running max and sum and the output rescaled,
 * then its rows of v. */
static void attn_forward(Emit *e, const AttnV *V, AttnGroup *g, LLVMValueRef ylo, LLVMValueRef yhi, LLVMValueRef sums) {
  const KAttn *A = e->k->attn;
  AttnSide s = attn_side(A);
  LLVMValueRef rows[3][ATTN_G], valid[ATTN_G], dots[2][ATTN_G], ylast = LLVMBuildNSWSub(e->b, yhi, ci(e, 1), "");
  LLVMValueRef blo = LLVMBuildSDiv(e->b, ylo, ci(e, KA_BLOCK), "");
  LLVMValueRef nblk = LLVMBuildSDiv(e->b, LLVMBuildNSWAdd(e->b, yhi, ci(e, KA_BLOCK - 1), ""), ci(e, KA_BLOCK), "");
  For blk = for_begin(e, blo, nblk, "block");
  LLVMValueRef y0 = LLVMBuildNSWMul(e->b, blk.l.iv, ci(e, KA_BLOCK), "");
  LLVMValueRef yn = imin(e, ci(e, KA_BLOCK), LLVMBuildNSWSub(e->b, yhi, y0, ""));
  LLVMValueRef ng = LLVMBuildSDiv(e->b, LLVMBuildNSWAdd(e->b, yn, ci(e, ATTN_G - 1), ""), ci(e, ATTN_G), "");
  /* the keys below ylo (the first block's) no lane sees: the whole steps of ATTN_G of them never scored */
  LLVMValueRef t0 = LLVMBuildSDiv(e->b, imax(e, LLVMBuildNSWSub(e->b, ylo, y0, ""), ci(e, 0)), ci(e, ATTN_G), "");
  LLVMValueRef mbp = vlocal(e, V, 0, "mb");
  set(e, mbp, fconst(e, V->vt, -INFINITY));
  For t = for_begin(e, t0, ng, "scores");
  LLVMValueRef yt = LLVMBuildNSWAdd(e->b, y0, LLVMBuildNSWMul(e->b, t.l.iv, ci(e, ATTN_G), ""), "");
  attn_dots(e, V, g, &s, yt, ylast, rows, valid, dots, sums);
  LLVMValueRef mb = vget(e, V, mbp);
  for (int i = 0; i < ATTN_G; i++) {
    LLVMValueRef sv = LLVMBuildFMul(e->b, dots[0][i], fconst(e, V->vt, A->scale), "");
    sv = vsel(e, valid[i], sv, fconst(e, V->vt, -INFINITY));
    set(e, at(e, g->sc, LLVMBuildNSWAdd(e->b, LLVMBuildNSWMul(e->b, t.l.iv, ci(e, ATTN_G), ""), ci(e, i), "")), sv);
    mb = fmax_(e, mb, sv);
  }
  set(e, mbp, mb);
  for_end(e, &t, ng, LV_NEVER);
  /* lanes whose keys end before the block or start after it skip it */
  LLVMValueRef act = LLVMBuildAnd(
      e->b, LLVMBuildICmp(e->b, LLVMIntSLT, splat(e, V->vi, y0), g->hi, ""),
      LLVMBuildICmp(e->b, LLVMIntSGT, splat(e, V->vi, LLVMBuildNSWAdd(e->b, y0, ci(e, KA_BLOCK), "")), g->lo, ""), "");
  LLVMValueRef m = vget(e, V, g->m), mn = fmax_(e, m, vget(e, V, mbp)), c = emit_exp(e, LLVMBuildFSub(e->b, m, mn, ""));
  set(e, g->l, vsel(e, act, LLVMBuildFMul(e->b, vget(e, V, g->l), c, ""), vget(e, V, g->l)));
  For d = for_begin(e, ci(e, 0), ci(e, A->hd), "rescale");
  LLVMValueRef p = at(e, g->acc, d.l.iv), a = vget(e, V, p);
  set(e, p, vsel(e, act, LLVMBuildFMul(e->b, a, c, ""), a));
  for_end(e, &d, ci(e, A->hd), LV_NEVER);
  set(e, g->m, vsel(e, act, mn, m));
  For t2 = for_begin(e, t0, ng, "weights");
  LLVMValueRef yt2 = LLVMBuildNSWAdd(e->b, y0, LLVMBuildNSWMul(e->b, t2.l.iv, ci(e, ATTN_G), ""), "");
  LLVMValueRef w[ATTN_G], vrows[ATTN_G];
  for (int i = 0; i < ATTN_G; i++) {
    LLVMValueRef y = LLVMBuildNSWAdd(e->b, yt2, ci(e, i), "");
    LLVMValueRef ps =
        at(e, g->sc, LLVMBuildNSWAdd(e->b, LLVMBuildNSWMul(e->b, t2.l.iv, ci(e, ATTN_G), ""), ci(e, i), ""));
    valid[i] = attn_valid(e, V, g, y);
    w[i] = emit_exp(e, LLVMBuildFSub(e->b, vget(e, V, ps), mn, ""));
    LLVMValueRef l = vget(e, V, g->l);
    set(e, g->l, vsel(e, valid[i], LLVMBuildFAdd(e->b, l, w[i], ""), l));
    vrows[i] = attn_row(e, s.row, g->bb, imin(e, y, ylast));
  }
  attn_rows(e, V, g, s.row, vrows, valid, w);
  for_end(e, &t2, ng, LV_NEVER);
  for_end(e, &blk, nblk, LV_NEVER);
}

/* Backward: the other side's rows ylo..yhi-1 in order, ATTN_G at a time: p = exp(scale
 * q·k - lse), times dP - delta (dq, dk), weighting k (dq), q (dk) or dO (dv). By key, query
 * head g->qh's queries. */
static void attn_backward(Emit *e, const AttnV *V, AttnGroup *g, LLVMValueRef ylo, LLVMValueRef yhi,
                          LLVMValueRef sums) {
  const KAttn *A = e->k->attn;
  AttnSide s = attn_side(A);
  bool by_query = A->pass == KA_DQ;
  int64_t F = A->heads * A->hd;
  LLVMValueRef rows[3][ATTN_G], valid[ATTN_G], dots[2][ATTN_G], ylast = LLVMBuildNSWSub(e->b, yhi, ci(e, 1), "");
  LLVMValueRef ng = LLVMBuildSDiv(
      e->b, LLVMBuildNSWAdd(e->b, LLVMBuildNSWSub(e->b, yhi, ylo, ""), ci(e, ATTN_G - 1), ""), ci(e, ATTN_G), "");
  For t = for_begin(e, ci(e, 0), ng, "keys");
  LLVMValueRef yt = LLVMBuildNSWAdd(e->b, ylo, LLVMBuildNSWMul(e->b, t.l.iv, ci(e, ATTN_G), ""), "");
  attn_dots(e, V, g, &s, yt, ylast, rows, valid, dots, sums);
  LLVMValueRef w[ATTN_G];
  for (int i = 0; i < ATTN_G; i++) {
    LLVMValueRef yc = imin(e, LLVMBuildNSWAdd(e->b, yt, ci(e, i), ""), ylast), lse = g->lse ? vget(e, V, g->lse) : NULL;
    if (!by_query)
      lse = splat(e, V->vt,
                  attn_load(e, &A->out, attn_row(e, &A->out, g->bb, yc), LLVMBuildNSWAdd(e->b, g->qh, ci(e, F), "")));
    LLVMValueRef sv = LLVMBuildFSub(e->b, LLVMBuildFMul(e->b, dots[0][i], fconst(e, V->vt, A->scale), ""), lse, "");
    w[i] = emit_exp(e, sv);
    if (A->pass != KA_DV) {
      LLVMValueRef dl = by_query ? vget(e, V, g->delta)
                                 : splat(e, V->vt, attn_load(e, &A->delta, attn_row(e, &A->delta, g->bb, yc), g->qh));
      w[i] = LLVMBuildFMul(e->b, w[i], LLVMBuildFSub(e->b, dots[1][i], dl, ""), "");
    }
  }
  attn_rows(e, V, g, s.row, rows[2], valid, w);
  for_end(e, &t, ng, LV_NEVER);
}

/* The group's results, lane by lane: the row of out (and its log-sum-exp) or the gradient. */
static void attn_results(Emit *e, const AttnV *V, const AttnGroup *g) {
  const KAttn *A = e->k->attn;
  For ln = for_begin(e, ci(e, 0), g->nl, "result");
  LLVMValueRef rrow = attn_row(e, &A->res, g->bb, LLVMBuildNSWAdd(e->b, g->x0, ln.l.iv, ""));
  LLVMValueRef lv = A->pass == KA_FWD ? LLVMBuildExtractElement(e->b, vget(e, V, g->l), ln.l.iv, "") : NULL;
  LLVMValueRef scale = cf(e, A->pass == KA_DV ? 1.0f : A->scale);
  For o = for_begin(e, ci(e, 0), ci(e, A->hd), "out");
  LLVMValueRef a = LLVMBuildExtractElement(e->b, vget(e, V, at(e, g->acc, o.l.iv)), ln.l.iv, "");
  attn_store(e, rrow, LLVMBuildNSWAdd(e->b, g->own, o.l.iv, ""),
             lv ? LLVMBuildFDiv(e->b, a, lv, "") : LLVMBuildFMul(e->b, a, scale, ""));
  for_end(e, &o, ci(e, A->hd), LV_NEVER);
  if (lv) {
    LLVMValueRef m = LLVMBuildExtractElement(e->b, vget(e, V, g->m), ln.l.iv, "");
    attn_store(e, rrow, LLVMBuildNSWAdd(e->b, g->qh, ci(e, A->heads * A->hd), ""),
               LLVMBuildFAdd(e->b, m, emit_unary(e, KU_LOG, lv), ""));
  }
  for_end(e, &ln, g->nl, LV_NEVER);
}

/* Rows r0 .. r0+nl-1, one (batch, head)'s: a query head's by query, a key/value head's by key. */
static void attn_group(Emit *e, const AttnV *V, AttnGroup *g, LLVMValueRef r0, LLVMValueRef sums) {
  const KAttn *A = e->k->attn;
  LLVMBuilderRef b = e->b;
  bool by_query = A->pass == KA_FWD || A->pass == KA_DQ;
  int64_t len = by_query ? A->sq : A->sk, nh = by_query ? A->heads : A->kv_heads, grp = kattn_group(A);
  int64_t other = by_query ? A->sk : A->sq, shift = A->sk - A->sq;
  LLVMValueRef bh = LLVMBuildSDiv(b, r0, ci(e, len), "");
  g->x0 = LLVMBuildSRem(b, r0, ci(e, len), "");
  g->bb = LLVMBuildSDiv(b, bh, ci(e, nh), ""), g->h = LLVMBuildSRem(b, bh, ci(e, nh), "");
  g->own = LLVMBuildNSWMul(b, g->h, ci(e, A->hd), "");
  if (by_query) /* the query head's key/value head; by key, each query head's below */
    g->qh = g->h, g->other = LLVMBuildNSWMul(b, LLVMBuildSDiv(b, g->h, ci(e, grp), ""), ci(e, A->hd), "");
  /* lane i's row x = x0 + i sees the other side's rows [lo, hi) of kattn_keys (by query) or
   * kattn_queries (by key), xs its row shifted to the other side's frame; a lane past the
   * group none */
  LLVMValueRef lane[16];
  for (int i = 0; i < V->lanes; i++) lane[i] = ci(e, i);
  LLVMValueRef lanes = LLVMConstVector(lane, (unsigned)V->lanes), z = LLVMConstNull(V->vi);
  LLVMValueRef x = LLVMBuildNSWAdd(b, splat(e, V->vi, g->x0), lanes, ""), lo = z, hi = splat(e, V->vi, ci(e, other));
  LLVMValueRef xs = LLVMBuildNSWAdd(b, x, splat(e, V->vi, ci(e, by_query ? shift : -shift)), "");
  if (by_query && A->causal) hi = imin(e, LLVMBuildNSWAdd(b, xs, splat(e, V->vi, ci(e, 1)), ""), hi);
  if (by_query && A->window) lo = imax(e, LLVMBuildNSWSub(b, xs, splat(e, V->vi, ci(e, A->window - 1)), ""), z);
  if (!by_query && A->causal) lo = imax(e, xs, z);
  if (!by_query && A->window) hi = imin(e, LLVMBuildNSWAdd(b, xs, splat(e, V->vi, ci(e, A->window)), ""), hi);
  LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLT, lanes, splat(e, V->vi, g->nl), "");
  g->lo = vsel(e, in, lo, z), g->hi = vsel(e, in, hi, z);
  attn_gather(e, V, g);
  For zd = for_begin(e, ci(e, 0), ci(e, A->hd), "zero");
  set(e, at(e, g->acc, zd.l.iv), fconst(e, V->vt, 0.0f));
  for_end(e, &zd, ci(e, A->hd), LV_NEVER);
  /* the other side's rows any lane reads: lo and hi grow with the row, so from the first
   * lane's lo to the last lane's hi */
  LLVMValueRef ylo = LLVMBuildExtractElement(b, g->lo, ci(e, 0), "");
  LLVMValueRef yhi = LLVMBuildExtractElement(b, g->hi, LLVMBuildNSWSub(b, g->nl, ci(e, 1), ""), "");
  if (A->pass == KA_FWD) {
    set(e, g->m, fconst(e, V->vt, -INFINITY)), set(e, g->l, fconst(e, V->vt, 0.0f));
    attn_forward(e, V, g, ylo, yhi, sums);
  } else if (by_query) {
    attn_backward(e, V, g, ylo, yhi, sums);
  } else { /* the group's query heads in order, each over its queries: the order of a lane's sum */
    LLVMValueRef h0 = LLVMBuildNSWMul(b, g->h, ci(e, grp), ""), h1 = LLVMBuildNSWAdd(b, h0, ci(e, grp), "");
    For qh = for_begin(e, h0, h1, "qhead");
    g->qh = qh.l.iv, g->other = LLVMBuildNSWMul(b, qh.l.iv, ci(e, A->hd), "");
    attn_backward(e, V, g, ylo, yhi, sums);
    for_end(e, &qh, h1, LV_NEVER);
  }
  attn_results(e, V, g);
}

/* The work items [lo, hi) in groups: up to L consecutive rows of one (batch, head), a query
 * head by query, a key/value head by key (kattn_rows). */
static void emit_attn_kernel(Emit *e, LLVMBasicBlockRef done) {
  const KAttn *A = e->k->attn;
  AttnV V = {.lanes = 8};
  for (int i = 0; i < VEC_ISAS; i++)
    if (e->m->vec_mask[MF_EXP] & 1 << i && vec_isas[i].lanes > V.lanes) V.lanes = vec_isas[i].lanes;
  V.vt = LLVMVectorType(e->m->f32, (unsigned)V.lanes), V.vi = LLVMVectorType(e->m->i64, (unsigned)V.lanes);
  AttnSide s = attn_side(A);
  bool fwd = A->pass == KA_FWD;
  AttnGroup g = {.acc = vlocal(e, &V, A->hd, "acc"),
                 .fix = {vlocal(e, &V, A->hd, "fix0"), s.ndots > 1 ? vlocal(e, &V, A->hd, "fix1") : NULL},
                 .lse = A->pass == KA_DQ ? vlocal(e, &V, 0, "lse") : NULL,
                 .delta = A->pass == KA_DQ ? vlocal(e, &V, 0, "delta") : NULL,
                 .sc = fwd ? vlocal(e, &V, KA_BLOCK + ATTN_G, "scores") : NULL,
                 .m = fwd ? vlocal(e, &V, 0, "m") : NULL,
                 .l = fwd ? vlocal(e, &V, 0, "l") : NULL};
  LLVMValueRef sums = vlocal(e, &V, 2 * ATTN_G, "sums");
  int64_t len = A->pass == KA_FWD || A->pass == KA_DQ ? A->sq : A->sk;
  /* for (r = lo; r < hi; r = end of the group) */
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(e->b), head = new_block(e, "group"), body = new_block(e, "");
  LLVMBuildBr(e->b, head);
  LLVMPositionBuilderAtEnd(e->b, head);
  LLVMValueRef r = LLVMBuildPhi(e->b, e->m->i64, "r");
  LLVMAddIncoming(r, &e->lo, &pre, 1);
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, r, e->hi, ""), body, done);
  LLVMPositionBuilderAtEnd(e->b, body);
  LLVMValueRef seg = LLVMBuildNSWMul(e->b, LLVMBuildNSWAdd(e->b, LLVMBuildSDiv(e->b, r, ci(e, len), ""), ci(e, 1), ""),
                                     ci(e, len), "");
  LLVMValueRef end = imin(e, imin(e, e->hi, LLVMBuildNSWAdd(e->b, r, ci(e, V.lanes), "")), seg);
  g.nl = LLVMBuildNSWSub(e->b, end, r, "");
  attn_group(e, &V, &g, r, sums);
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(e->b);
  LLVMAddIncoming(r, &end, &latch, 1);
  LLVMBuildBr(e->b, head);
}

/* ---- one kernel: set-up, alias scopes, verification ----------------------------------- */

/* One alias scope per class of overlapping buffers; none when there is one class. */
static void alias_scopes(Emit *e) {
  const Kernel *k = e->k;
  LLVMContextRef ctx = e->m->ctx;
  const int *cls = e->cls, ncls = e->ncls;
  if (ncls < 2) return;
  char name[256];
  snprintf(name, sizeof name, "colossalc.%s", k->name);
  LLVMMetadataRef dname = LLVMMDStringInContext2(ctx, name, strlen(name));
  LLVMMetadataRef domain = LLVMMDNodeInContext2(ctx, &dname, 1), scopes[K_MAX_BUFS], others[K_MAX_BUFS];
  for (int c = 0; c < ncls; c++) {
    snprintf(name, sizeof name, "colossalc.%s.%d", k->name, c);
    LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(ctx, name, strlen(name)), domain};
    scopes[c] = LLVMMDNodeInContext2(ctx, ops, 2);
  }
  for (int i = 0; i < k->nbufs; i++) {
    int n = 0;
    for (int c = 0; c < ncls; c++)
      if (c != cls[i]) others[n++] = scopes[c];
    e->scope[i] = LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, &scopes[cls[i]], 1));
    e->noalias[i] = LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, others, (size_t)n));
  }
}

/* The symbol of kernel k in m's build: its name and the build's suffix. */
static void kernel_symbol(const LlvmModule *m, const Kernel *k, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", k->name, m->suffix);
}

static LLVMValueRef kernel_function(LlvmModule *m, const Kernel *k) {
  char sym[256];
  kernel_symbol(m, k, sym, sizeof sym);
  if (LLVMGetNamedFunction(m->mod, sym)) {
    char msg[300];
    snprintf(msg, sizeof msg, "kernel %s emitted twice", sym);
    diag_internal(__FILE__, __LINE__, msg);
  }
  LLVMValueRef fn = LLVMAddFunction(m->mod, sym, m->kfn);
  add_fn_attr(m->ctx, fn, "nounwind");
  const char *attrs[][2] = {{"target-cpu", m->cpu},
                            {"target-features", m->features},
                            {"tune-cpu", m->tune},
                            {"no-nans-fp-math", "true"},
                            {"no-signed-zeros-fp-math", "true"}};
  bool fmax = false;
  for (int i = 0; i < k->nphases; i++) fmax |= k->phases[i].kind == KPH_REDUCE && k->phases[i].reduce == KR_MAX;
  for (int i = 0; i < (fmax ? 5 : 3); i++)
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(m->ctx, attrs[i][0], (unsigned)strlen(attrs[i][0]), attrs[i][1],
                                                      (unsigned)strlen(attrs[i][1])));
  const char *names[4] = {"bufs", "lo", "hi", "scalars"};
  for (unsigned i = 0; i < 4; i++) LLVMSetValueName2(LLVMGetParam(fn, i), names[i], strlen(names[i]));
  return fn;
}

static void verify_kernel(LlvmModule *m, const Kernel *k, LLVMValueRef fn) {
  if (!LLVMVerifyFunction(fn, LLVMReturnStatusAction)) return;
  char *ir = LLVMPrintValueToString(fn), *msg = NULL;
  fprintf(stderr, "%s\n", ir);
  LLVMDisposeMessage(ir);
  LLVMVerifyModule(m->mod, LLVMReturnStatusAction, &msg);
  fprintf(stderr, "%s\n", msg ? msg : "");
  LLVMDisposeMessage(msg);
  char buf[256];
  snprintf(buf, sizeof buf, "LLVM verifier rejected kernel %s", k->name);
  diag_internal(__FILE__, __LINE__, buf);
}

void llvm_emit_kernel(LlvmModule *m, const Kernel *k) {
  kernel_check(k);
  size_t nval = (size_t)k->nexprs + K_MAX_DIMS, nviews = (size_t)k->nexprs + K_MAX_PHASES;
  Emit e = {.m = m, .k = k, .fn = kernel_function(m, k)};
  e.val = calloc(nval, sizeof *e.val);
  e.stack = calloc(nval, sizeof *e.stack);
  e.spec = malloc((size_t)k->nexprs + 1);
  e.rowview = calloc(nviews, sizeof *e.rowview);
  e.rowoff = calloc(nviews, sizeof *e.rowoff);
  ir_assert(e.val && e.stack && e.spec && e.rowview && e.rowoff);
  memset(e.spec, -1, (size_t)k->nexprs + 1);
  e.bufs = LLVMGetParam(e.fn, 0);
  e.lo = LLVMGetParam(e.fn, 1);
  e.hi = LLVMGetParam(e.fn, 2);
  e.scalars = LLVMGetParam(e.fn, 3);
  e.b = LLVMCreateBuilderInContext(m->ctx);
  e.entry_b = LLVMCreateBuilderInContext(m->ctx);
  e.row_b = LLVMCreateBuilderInContext(m->ctx);
  e.ncls = kernel_alias_classes(k, e.cls);
  alias_scopes(&e);

  LLVMBasicBlockRef entry = new_block(&e, "entry"), start = new_block(&e, "start");
  LLVMPositionBuilderAtEnd(e.b, entry);
  LLVMPositionBuilderBefore(e.entry_b, LLVMBuildBr(e.b, start));
  LLVMPositionBuilderAtEnd(e.b, start);
  LLVMBasicBlockRef done = new_block(&e, "done");
  if (k->attn) emit_attn_kernel(&e, done);
  else if (k->par == KP_ROWS) emit_rows_kernel(&e, done);
  else emit_cols_kernel(&e, done);
  LLVMMoveBasicBlockAfter(done, LLVMGetLastBasicBlock(e.fn));
  LLVMPositionBuilderAtEnd(e.b, done);
  LLVMBuildRetVoid(e.b);

  LLVMDisposeBuilder(e.b);
  LLVMDisposeBuilder(e.entry_b);
  LLVMDisposeBuilder(e.row_b);
  free(e.val);
  free(e.stack);
  free(e.spec);
  free(e.rowview);
  free(e.rowoff);
  free(e.scal);
  verify_kernel(m, k, e.fn);
}

/* ---- the program, optimisation, output --------------------------------------------------- */

static LLVMValueRef add_constant(LlvmModule *m, const char *name, LLVMValueRef init) {
  LLVMValueRef g = LLVMAddGlobal(m->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  return g;
}

/* A NUL-terminated string constant, as an i8 pointer. */
static LLVMValueRef string_constant(LlvmModule *m, const char *name, const char *text) {
  LLVMValueRef g = add_constant(m, name, LLVMConstStringInContext(m->ctx, text, (unsigned)strlen(text), 0));
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  return LLVMConstBitCast(g, LLVMPointerType(m->i8, 0));
}

/* The builds' kernel tables (fns: nb tables of n, best build first) with their names
 * and features (program/program.h's ProgCpuBuild), the kernel count, the program (its
 * bytes, 64-byte aligned, and their count) and, when given, the CUDA C of the same
 * kernels. */
static void emit_table(LlvmModule *m, LLVMValueRef *fns, int n, const LlvmCpu *cpus, int nb, const void *prog,
                       int64_t prog_bytes, const char *cuda) {
  LLVMTypeRef fp = LLVMPointerType(m->kfn, 0), i8p = LLVMPointerType(m->i8, 0);
  LLVMTypeRef fields[3] = {i8p, i8p, LLVMPointerType(fp, 0)};
  LLVMTypeRef build = LLVMStructTypeInContext(m->ctx, fields, 3, 0);
  LLVMValueRef *rows = calloc((size_t)nb + 1, sizeof *rows);
  ir_assert(rows);
  for (int b = 0; b < nb; b++) {
    char name[64];
    snprintf(name, sizeof name, "colossalc_kernels.%d", b);
    LLVMValueRef table = add_constant(m, name, LLVMConstArray(fp, fns + (size_t)b * n, (unsigned)n));
    LLVMSetAlignment(table, 8);
    LLVMSetLinkage(table, LLVMPrivateLinkage);
    snprintf(name, sizeof name, "colossalc_cpu_name.%d", b);
    LLVMValueRef v[3] = {string_constant(m, name, cpus[b].name), NULL, LLVMConstBitCast(table, fields[2])};
    snprintf(name, sizeof name, "colossalc_cpu_features.%d", b);
    v[1] = string_constant(m, name, cpus[b].features ? cpus[b].features : "");
    rows[b] = LLVMConstNamedStruct(build, v, 3);
  }
  LLVMSetAlignment(add_constant(m, "colossalc_cpu_builds", LLVMConstArray(build, rows, (unsigned)nb)), 8);
  free(rows);
  add_constant(m, "colossalc_ncpu_builds", LLVMConstInt(m->i32, (unsigned long long)nb, 1));
  add_constant(m, "colossalc_nkernels", LLVMConstInt(m->i32, (unsigned long long)n, 1));
  LLVMValueRef blob = LLVMConstStringInContext(m->ctx, prog, (unsigned)prog_bytes, 1);
  LLVMSetAlignment(add_constant(m, "colossalc_program", blob), 64);
  add_constant(m, "colossalc_program_bytes", LLVMConstInt(m->i64, (unsigned long long)prog_bytes, 1));
  if (cuda) add_constant(m, "colossalc_cuda_source", LLVMConstStringInContext(m->ctx, cuda, (unsigned)strlen(cuda), 0));
}

void llvm_emit_program(LlvmModule *m, const Kernel *const *kernels, int n, const void *prog, int64_t prog_bytes) {
  ir_assert(n >= 0 && prog);
  LLVMValueRef *fns = calloc((size_t)n + 1, sizeof *fns);
  ir_assert(fns);
  for (int i = 0; i < n; i++) {
    llvm_emit_kernel(m, kernels[i]);
    char sym[256];
    kernel_symbol(m, kernels[i], sym, sizeof sym);
    fns[i] = LLVMGetNamedFunction(m->mod, sym);
  }
  char features[CPU_FEATURES_MAX];
  cpu_from_llvm(m->features, features, sizeof features);
  LlvmCpu host = {.name = m->tune, .features = features};
  emit_table(m, fns, n, &host, 1, prog, prog_bytes, NULL);
  free(fns);
  char *msg = NULL;
  if (LLVMVerifyModule(m->mod, LLVMReturnStatusAction, &msg)) llvm_fail("module verifier", msg);
  LLVMDisposeMessage(msg);
}

/* @llvm.compiler.used for the libmvec declarations, so the pipeline's dead-global
 * elimination keeps them until the vectorizer has had its chance. */
static void keep_vector_decls(LlvmModule *m) {
  if (!m->nvec_decls) return;
  LLVMTypeRef i8p = LLVMPointerType(m->i8, 0);
  LLVMValueRef ptrs[MF_COUNT * VEC_ISAS];
  for (int i = 0; i < m->nvec_decls; i++) ptrs[i] = LLVMConstBitCast(m->vec_decls[i], i8p);
  LLVMValueRef init = LLVMConstArray(i8p, ptrs, (unsigned)m->nvec_decls);
  LLVMValueRef g = LLVMAddGlobal(m->mod, LLVMTypeOf(init), "llvm.compiler.used");
  LLVMSetInitializer(g, init);
  LLVMSetLinkage(g, LLVMAppendingLinkage);
  LLVMSetSection(g, "llvm.metadata");
}

int llvm_optimize(LlvmModule *m, int opt_level) {
  char passes[32];
  snprintf(passes, sizeof passes, "default<O%d>", opt_level < 0 ? 0 : opt_level > 3 ? 3 : opt_level);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
  LLVMPassBuilderOptionsSetLoopInterleaving(opts, 1);
  LLVMPassBuilderOptionsSetLoopUnrolling(opts, 1);
  keep_vector_decls(m);
  LLVMErrorRef err = LLVMRunPasses(m->mod, passes, m->tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  LLVMValueRef used = LLVMGetNamedGlobal(m->mod, "llvm.compiler.used"); /* the pipeline may have rebuilt it */
  if (used) LLVMDeleteGlobal(used);
  if (err) {
    char *msg = LLVMGetErrorMessage(err);
    fprintf(stderr, "colossalc: LLVM %s: %s\n", passes, msg);
    LLVMDisposeErrorMessage(msg);
    return -1;
  }
  char *msg = NULL;
  if (LLVMVerifyModule(m->mod, LLVMReturnStatusAction, &msg)) llvm_fail("module verifier after optimisation", msg);
  LLVMDisposeMessage(msg);
  return 0;
}

static int report(const char *path, char *msg, char *err, size_t errlen) {
  /* a path too long for err is cut (the return value used: no -Wformat-truncation) */
  if (err && errlen && snprintf(err, errlen, "cannot write %s: %s", path, msg ? msg : "unknown LLVM error") < 0)
    err[0] = 0;
  LLVMDisposeMessage(msg);
  return -1;
}

int llvm_write_object(LlvmModule *m, const char *path, char *err, size_t errlen) {
  char *msg = NULL;
  if (LLVMTargetMachineEmitToFile(m->tm, m->mod, (char *)path, LLVMObjectFile, &msg))
    return report(path, msg, err, errlen);
  return 0;
}

int llvm_write_ir(LlvmModule *m, const char *path, char *err, size_t errlen) {
  char *msg = NULL;
  if (LLVMPrintModuleToFile(m->mod, path, &msg)) return report(path, msg, err, errlen);
  return 0;
}

/* ---- the whole program on several threads --------------------------------------------- */

/* Kernels whose loops are long enough for the loop vectorizer to pay get O3; the rest
 * (a row of a handful of elements, one value per row) O2, which is the same code
 * without the vectorizer's and unroller's search. */
int llvm_kernel_opt_level(const Kernel *k) { return k->attn || k->cols >= 8 || (k->par == KP_COLS) ? 3 : 2; }

typedef struct Part {
  int level, first, n, cpu;
  char path[4200];
} Part;

typedef struct Build {
  const Kernel *const *kernels;
  const LlvmCpu *cpus;
  int *order; /* kernel indices grouped by level */
  Part *parts;
  int nparts, next, done, total, failed;
  LlvmProgress progress;
  void *ctx;
  char err[512];
  pthread_mutex_t lock;
} Build;

static int compile_part(Build *b, Part *p) {
  LlvmModule *m = llvm_module_new_for("colossalc_kernels", &b->cpus[p->cpu]);
  for (int i = 0; i < p->n; i++) llvm_emit_kernel(m, b->kernels[b->order[p->first + i]]);
  char err[512] = "";
  int rc = llvm_optimize(m, p->level) || llvm_write_object(m, p->path, err, sizeof err);
  if (rc) {
    pthread_mutex_lock(&b->lock);
    if (!b->failed) snprintf(b->err, sizeof b->err, "%s", err[0] ? err : "LLVM optimisation failed");
    b->failed = 1;
    pthread_mutex_unlock(&b->lock);
  }
  llvm_module_free(m);
  return rc;
}

static void *build_worker(void *arg) {
  Build *b = arg;
  for (;;) {
    pthread_mutex_lock(&b->lock);
    int i = b->failed ? b->nparts : b->next++;
    pthread_mutex_unlock(&b->lock);
    if (i >= b->nparts || compile_part(b, &b->parts[i])) return NULL;
    pthread_mutex_lock(&b->lock);
    b->done += b->parts[i].n;
    if (b->progress) b->progress(b->done, b->total, b->ctx);
    pthread_mutex_unlock(&b->lock);
  }
}

/* The parts: kernels of one level and one build, at most 8 in a part (small parts
 * keep every thread busy to the end and the progress fine-grained). */
static void plan_parts(Build *b, int n, int nb, const char *prefix) {
  b->order = calloc((size_t)n + 1, sizeof *b->order);
  b->parts = calloc((size_t)n * nb + 1, sizeof *b->parts);
  ir_assert(b->order && b->parts);
  int k = 0;
  for (int level = 3; level >= 0; level--) {
    int first = k;
    for (int i = 0; i < n; i++)
      if (llvm_kernel_opt_level(b->kernels[i]) == level) b->order[k++] = i;
    for (int cpu = 0; cpu < nb; cpu++)
      for (int at = first; at < k; at += 8) {
        Part *p = &b->parts[b->nparts];
        *p = (Part){.level = level, .first = at, .n = k - at < 8 ? k - at : 8, .cpu = cpu};
        snprintf(p->path, sizeof p->path, "%s.%d.o", prefix, b->nparts);
        b->nparts++;
      }
  }
}

/* The module with the builds' kernel tables (declarations of every kernel of every
 * build) and the program; libs: what any build's kernels need at link time. */
static int compile_table(const Kernel *const *kernels, int n, const LlvmCpu *cpus, int nb, const void *prog,
                         int64_t prog_bytes, const char *cuda, const char *path, char *libs, size_t libslen, char *err,
                         size_t errlen) {
  LlvmModule *m = llvm_module_new("colossalc_program");
  LLVMValueRef *fns = calloc((size_t)n * nb + 1, sizeof *fns);
  ir_assert(fns);
  libs[0] = 0;
  for (int b = 0; b < nb; b++) {
    LlvmModule *mb = llvm_module_new_for("colossalc_build", &cpus[b]);
    for (int i = 0; i < n; i++) {
      char sym[256];
      kernel_symbol(mb, kernels[i], sym, sizeof sym);
      fns[(size_t)b * n + i] = LLVMAddFunction(m->mod, sym, m->kfn);
    }
    if (strlen(llvm_link_libs(mb)) > strlen(libs)) snprintf(libs, libslen, "%s", llvm_link_libs(mb));
    llvm_module_free(mb);
  }
  emit_table(m, fns, n, cpus, nb, prog, prog_bytes, cuda);
  free(fns);
  int rc = llvm_write_object(m, path, err, errlen);
  llvm_module_free(m);
  return rc;
}

int llvm_compile_program(const Kernel *const *kernels, int n, const LlvmCpu *cpus, int ncpus, const void *prog,
                         int64_t prog_bytes, const char *cuda, int threads, const char *prefix, LlvmProgress progress,
                         void *ctx, char ***objs, char *libs, size_t libslen, char *err, size_t errlen) {
  Build b = {.kernels = kernels, .cpus = cpus, .total = n * ncpus, .progress = progress, .ctx = ctx};
  pthread_mutex_init(&b.lock, NULL);
  plan_parts(&b, n, ncpus, prefix);
  char **paths = calloc((size_t)b.nparts + 2, sizeof *paths);
  ir_assert(paths);
  snprintf(b.parts[b.nparts].path, sizeof b.parts[b.nparts].path, "%s.table.o", prefix);
  int rc = compile_table(kernels, n, cpus, ncpus, prog, prog_bytes, cuda, b.parts[b.nparts].path, libs, libslen, err,
                         errlen); /* initialises LLVM */
  if (threads < 1) threads = 1;
  if (threads > b.nparts) threads = b.nparts;
  pthread_t *tid = calloc((size_t)threads + 1, sizeof *tid);
  ir_assert(tid);
  int started = 0;
  for (int t = 1; !rc && t < threads; t++) started += !pthread_create(&tid[started], NULL, build_worker, &b);
  if (!rc) build_worker(&b);
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  free(tid);
  if (!rc && b.failed) rc = -1, snprintf(err, errlen, "%s", b.err);
  for (int i = 0; i <= b.nparts; i++) paths[i] = strdup(b.parts[i].path);
  *objs = paths;
  pthread_mutex_destroy(&b.lock);
  free(b.order);
  free(b.parts);
  return rc;
}
