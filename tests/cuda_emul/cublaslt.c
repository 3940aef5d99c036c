/* A host emulation of cuBLASLt (libcublasLt.so.13), for tests only: the descriptors
 * the CUDA device uses (transposes; f32 layouts with a strided batch) kept in the
 * opaque structs, and cublasLtMatmul as OpenBLAS's column-major sgemm over the batch,
 * D = alpha op(A) op(B) + beta C on host memory (the emulated driver's device memory),
 * queued on the emulated driver's stream; with the BIAS epilogue, bias[row] added to
 * every column of D (the bias pointer read at the call, as cuBLASLt does); GELU_BIAS
 * then applies GELU (the tanh form, in f32), and GELU_AUX_BIAS first keeps its input
 * in the aux matrix (ld divisible by 8 and at least D's rows, as cuBLASLt requires);
 * DGELU multiplies the product by GELU's derivative at the aux matrix (GELU's input, of
 * D's type) and DGELU_BGRAD also writes the sum of each of D's rows (the f32 values before
 * D's rounding) to the bias pointer, in BIAS_DATA_TYPE (D's type unless set); BGRADA
 * writes there the sum over k of each row of op(A) (A's values, widened to f32).
 * COLOSSALC_EMUL_LT_EPILOGUES=bias: the heuristic has algorithms for the DEFAULT and BIAS
 * epilogues only (a cuBLASLt without the others for these types), for tests of the
 * CUDA device's fallback to the epilogue kernels.
 * Pointer alignment as cuBLASLt's: the heuristic's algorithm needs A, B, C and D (and
 * each matrix of a strided batch) aligned to the preference's MIN_ALIGNMENT_*_BYTES
 * (256 unless set), and cublasLtMatmul refuses pointers that are not.
 * COLOSSALC_EMUL_GEMM_SPLITK=S sums each product's k range in S pieces, the last piece
 * first, as a GPU's split-K or tensor-core order would: another order than the CPU
 * device's sgemm, for tests of the tolerances between the two. */
#include <cblas.h>
#include <cublasLt.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/isa.h"
#include "tests/cuda_emul/emul.h"

static float gelu(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * (x * (x * x)));
  return 0.5f * x * (1.0f + tanhf(u));
}

static float gelu_grad(float x) {
  float x2 = x * x, t = tanhf(0.7978845608028654f * (x + 0.044715f * (x * x2)));
  float du = 0.7978845608028654f * (1.0f + 3 * 0.044715f * x2);
  return 0.5f * (1.0f + t) + 0.5f * x * ((1.0f - t * t) * du);
}

/* What the emulation keeps in the opaque descriptors' storage. */
typedef struct Desc {
  int ta, tb, bias, gelu, aux, dgelu, bgrad, bgrada;
  int32_t bias_type; /* -1: D's */
  int64_t aux_ld;
  void *bias_ptr;
  void *aux_ptr;
} Desc;
typedef struct Layout {
  uint64_t rows, cols;
  int64_t ld, stride;
  int32_t batch;
  IsaDtype type;
} Layout;

_Static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t), "Desc fits the opaque descriptor");
_Static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "Layout fits the opaque layout");

static int handle_dummy;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = (cublasLtHandle_t)&handle_dummy;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  (void)h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t scale) {
  if ((c != CUBLAS_COMPUTE_32F && c != CUBLAS_COMPUTE_32F_FAST_TF32) || scale != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = calloc(1, sizeof **d);
  if (*d) ((Desc *)*d)->bias_type = -1;
  return *d ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n) {
  Desc *x = (Desc *)d;
  int32_t op;
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE && n == sizeof(cublasLtEpilogue_t)) {
    cublasLtEpilogue_t e;
    memcpy(&e, buf, sizeof e);
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_BIAS &&
        e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && e != CUBLASLT_EPILOGUE_DGELU && e != CUBLASLT_EPILOGUE_DGELU_BGRAD &&
        e != CUBLASLT_EPILOGUE_BGRADA)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    x->bgrada = e == CUBLASLT_EPILOGUE_BGRADA;
    x->dgelu = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    x->bgrad = e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    x->bias = e != CUBLASLT_EPILOGUE_DEFAULT && !x->dgelu && !x->bgrada;
    x->gelu = e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    x->aux = e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE && n == sizeof x->bias_type) {
    int32_t t;
    memcpy(&t, buf, sizeof t);
    if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F) return CUBLAS_STATUS_INVALID_VALUE;
    x->bias_type = t;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a == CUBLASLT_MATMUL_DESC_BIAS_POINTER && n == sizeof x->bias_ptr) {
    memcpy(&x->bias_ptr, buf, sizeof x->bias_ptr);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER && n == sizeof x->aux_ptr) {
    memcpy(&x->aux_ptr, buf, sizeof x->aux_ptr);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD && n == sizeof x->aux_ld) {
    memcpy(&x->aux_ld, buf, sizeof x->aux_ld);
    return CUBLAS_STATUS_SUCCESS;
  }
  if ((a != CUBLASLT_MATMUL_DESC_TRANSA && a != CUBLASLT_MATMUL_DESC_TRANSB) || n != sizeof op)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  memcpy(&op, buf, sizeof op);
  *(a == CUBLASLT_MATMUL_DESC_TRANSA ? &x->ta : &x->tb) = op == CUBLAS_OP_T;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F && t != CUDA_R_8F_E4M3 && t != CUDA_R_8F_E5M2)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  *l = calloc(1, sizeof **l);
  if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
  IsaDtype type = t == CUDA_R_16BF      ? ISA_BF16
                  : t == CUDA_R_16F     ? ISA_F16
                  : t == CUDA_R_8F_E4M3 ? ISA_E4M3
                  : t == CUDA_R_8F_E5M2 ? ISA_E5M2
                                        : ISA_F32;
  *(Layout *)*l = (Layout){rows, cols, ld, 0, 1, type};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  free(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t n) {
  Layout *x = (Layout *)l;
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == sizeof x->batch) memcpy(&x->batch, buf, n);
  else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == sizeof x->stride) memcpy(&x->stride, buf, n);
  else return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = calloc(1, sizeof **p);
  return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  free(p);
  return CUBLAS_STATUS_SUCCESS;
}

/* What the emulation keeps in a preference: the operands' alignments (0: 256). */
typedef struct Pref {
  uint32_t align[4]; /* A, B, C, D */
} Pref;
_Static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "Pref fits the opaque preference");

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n) {
  Pref *x = (Pref *)p;
  if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
    uint32_t v;
    if (n != sizeof v) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&v, buf, sizeof v);
    if (!v || (v & (v - 1))) return CUBLAS_STATUS_INVALID_VALUE;
    x->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* cuBLASLt's rule for fp8 operands (its documentation, "FP8 data types"): A transposed
 * and B not ("TN"), not both e5m2, and the same for 16- and 32-bit operands alike. */
static int fp8_supported(const Desc *x, const Layout *A, const Layout *B) {
  int fa = isa_dtype_bytes(A->type) == 1, fb = isa_dtype_bytes(B->type) == 1;
  if (!fa && !fb) return A->type == B->type;
  return fa && fb && x->ta && !x->tb && !(A->type == ISA_E5M2 && B->type == ISA_E5M2);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *returned) {
  (void)h, (void)c, (void)dl;
  const Desc *x = (const Desc *)d;
  const char *only = getenv("COLOSSALC_EMUL_LT_EPILOGUES");
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (!fp8_supported(x, (const Layout *)a, (const Layout *)b) ||
      (only && !strcmp(only, "bias") && (x->gelu || x->dgelu || x->bgrada))) {
    *returned = 0; /* as cuBLASLt: no algorithm */
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  memset(results, 0, sizeof *results);
  for (int i = 0; i < 4; i++) /* the algorithm needs what the preference promised */
    results->algo.data[i] = ((const Pref *)p)->align[i] ? ((const Pref *)p)->align[i] : 256;
  results->state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* The emulated driver's stream queue (emul.h). */
static EmulEnqueueFn *driver_enqueue(void) {
  static EmulEnqueueFn *fn;
  if (!fn) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    *(void **)&fn = lib ? dlsym(lib, "colossalc_emul_enqueue") : NULL;
  }
  return fn;
}

typedef struct MatmulOp {
  Desc x;
  Layout A, B, C, D;
  float alpha, beta;
  const char *a, *b, *c;
  char *d;
} MatmulOp;

static size_t esize(const Layout *l) { return (size_t)isa_dtype_bytes(l->type); }

/* Every matrix of l's batch at p is aligned to `align` bytes. */
static int aligned(const Layout *l, const void *p, uint64_t align) {
  for (int32_t i = 0; i < l->batch; i++)
    if (((uintptr_t)p + (size_t)i * (size_t)l->stride * esize(l)) % align) return 0;
  return 1;
}

/* Matrix i of a batch as f32, column-major with leading dimension ld (a 16-bit one
 * widened into a malloc'd copy with its rows as ld; *own set then). */
static float *as_f32(const Layout *l, const char *p, int32_t i, int64_t *ld, float **own) {
  const char *base = p + (size_t)i * (size_t)l->stride * esize(l);
  *own = NULL, *ld = l->ld;
  if (l->type == ISA_F32) return (float *)base;
  float *f = malloc(l->rows * l->cols * sizeof *f + 1);
  for (uint64_t c = 0; f && c < l->cols; c++)
    for (uint64_t r = 0; r < l->rows; r++)
      f[c * l->rows + r] = esize(l) == 1 ? isa_fp8_to_f32(l->type, ((const unsigned char *)base)[c * l->ld + r])
                                         : isa_to_f32(l->type, ((const unsigned short *)base)[c * l->ld + r]);
  *own = f, *ld = (int64_t)l->rows;
  return f;
}

static int splitk(void) {
  static int s = -1;
  if (s < 0) {
    const char *v = getenv("COLOSSALC_EMUL_GEMM_SPLITK");
    s = v ? atoi(v) : 1;
    s = s > 1 ? s : 1;
  }
  return s;
}

/* d (m x n, ldd) = alpha op(A) op(B) + beta d, op(A)'s columns and op(B)'s rows taken in
 * `pieces` ranges, each a product of its own, added last range first. */
static void sgemm_split(int ta, int tb, uint64_t m, uint64_t n, uint64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *d, int64_t ldd, int pieces) {
  float *sum = calloc(m * n + 1, sizeof *sum), *part = malloc((m * n + 1) * sizeof *part);
  if (!sum || !part) abort();
  for (int p = pieces - 1; p >= 0; p--) {
    uint64_t k0 = k * (uint64_t)p / (uint64_t)pieces, k1 = k * (uint64_t)(p + 1) / (uint64_t)pieces;
    if (k1 == k0) continue;
    const float *ap = ta ? a + k0 : a + k0 * (uint64_t)lda, *bp = tb ? b + k0 * (uint64_t)ldb : b + k0;
    cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)(k1 - k0), 1.0f, ap, (int)lda, bp, (int)ldb, 0.0f, part, (int)m);
    for (uint64_t i = 0; i < m * n; i++) sum[i] += part[i];
  }
  for (uint64_t col = 0; col < n; col++)
    for (uint64_t row = 0; row < m; row++) {
      float *v = &d[col * (uint64_t)ldd + row];
      *v = alpha * sum[col * m + row] + (beta != 0 ? beta * *v : 0.0f);
    }
  free(sum), free(part);
}

/* D = alpha op(A) op(B) + beta C in f32 (16-bit operands widened), the epilogue on the
 * f32 result, then D rounded once when it is 16-bit. */
static void run_matmul(void *arg) {
  const MatmulOp *o = arg;
  const Layout *A = &o->A, *B = &o->B, *C = &o->C, *D = &o->D;
  uint64_t m = o->x.ta ? A->cols : A->rows, k = o->x.ta ? A->rows : A->cols, n = o->x.tb ? B->rows : B->cols;
  for (int32_t i = 0; i < C->batch; i++) {
    int64_t lda, ldb, ldc, ldd;
    float *fa, *fb, *fc, *fd;
    const float *ai = as_f32(A, o->a, i, &lda, &fa), *bi = as_f32(B, o->b, i, &ldb, &fb);
    const float *ci = as_f32(C, o->c, i, &ldc, &fc);
    float *di = as_f32(D, o->d, i, &ldd, &fd);
    if (!ai || !bi || !ci || !di) {
      fprintf(stderr, "cublasLt emulation: out of memory\n");
      abort();
    }
    if (ci != di)
      for (uint64_t col = 0; col < n; col++) memcpy(di + col * ldd, ci + col * ldc, m * sizeof(float));
    if (splitk() > 1 && k >= (uint64_t)splitk())
      sgemm_split(o->x.ta, o->x.tb, m, n, k, o->alpha, ai, lda, bi, ldb, o->beta, di, ldd, splitk());
    else
      cblas_sgemm(CblasColMajor, o->x.ta ? CblasTrans : CblasNoTrans, o->x.tb ? CblasTrans : CblasNoTrans, (int)m,
                  (int)n, (int)k, o->alpha, ai, (int)lda, bi, (int)ldb, o->beta, di, (int)ldd);
    for (uint64_t col = 0; o->x.bias && col < n; col++)
      for (uint64_t row = 0; row < m; row++) {
        float *v = &di[col * ldd + row];
        *v += ((const float *)o->x.bias_ptr)[row];
        if (o->x.aux) ((float *)o->x.aux_ptr)[col * o->x.aux_ld + row] = *v;
        if (o->x.gelu) *v = gelu(*v);
      }
    for (uint64_t col = 0; o->x.dgelu && col < n; col++) /* GELU's input: D's type */
      for (uint64_t row = 0; row < m; row++) {
        uint64_t at = col * (uint64_t)o->x.aux_ld + row;
        float in = D->type == ISA_F32 ? ((const float *)o->x.aux_ptr)[at]
                                      : isa_to_f32(D->type, ((const unsigned short *)o->x.aux_ptr)[at]);
        di[col * ldd + row] *= gelu_grad(in);
      }
    IsaDtype bt = o->x.bias_type == CUDA_R_32F    ? ISA_F32
                  : o->x.bias_type == CUDA_R_16BF ? ISA_BF16
                  : o->x.bias_type == CUDA_R_16F  ? ISA_F16
                                                  : D->type;
    for (uint64_t row = 0; (o->x.bgrad || o->x.bgrada) && row < m; row++) {
      float s = 0; /* a sum per row of D over its columns, or of op(A) over k */
      for (uint64_t q = 0; q < (o->x.bgrad ? n : k); q++)
        s += o->x.bgrad ? di[q * ldd + row] : o->x.ta ? ai[row * lda + q] : ai[q * lda + row];
      if (bt == ISA_F32) ((float *)o->x.bias_ptr)[row] = s;
      else ((unsigned short *)o->x.bias_ptr)[row] = isa_from_f32(bt, s);
    }
    for (uint64_t col = 0; fd && col < n; col++) /* a 16-bit D: rounded once */
      for (uint64_t row = 0; row < m; row++)
        ((unsigned short *)(o->d + (size_t)i * (size_t)D->stride * 2))[col * D->ld + row] =
            isa_from_f32(D->type, di[col * ldd + row]);
    free(fa), free(fb), free(fc), free(fd);
  }
}

/* Checked at the call, run on the stream with alpha and beta read at the call (host
 * pointer mode), as cuBLASLt does. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t la, const void *b, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *c, cublasLtMatrixLayout_t lc, void *dst, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t s) {
  (void)h, (void)workspace, (void)workspace_bytes;
  const Desc *x = (const Desc *)d;
  const Layout *A = (const Layout *)la, *B = (const Layout *)lb, *C = (const Layout *)lc, *D = (const Layout *)ld;
  uint64_t m = x->ta ? A->cols : A->rows, k = x->ta ? A->rows : A->cols, kb = x->tb ? B->cols : B->rows;
  uint64_t n = x->tb ? B->rows : B->cols;
  if (k != kb || C->rows != m || C->cols != n || D->rows != m || D->cols != n || A->batch != C->batch ||
      B->batch != C->batch || D->batch != C->batch || (x->bias && !x->bias_ptr) || !fp8_supported(x, A, B) ||
      C->type != D->type || esize(D) == 1 || (x->aux && D->type != ISA_F32) ||
      (x->aux && (!x->aux_ptr || x->aux_ld % 8 || x->aux_ld < (int64_t)m || C->batch != 1)) ||
      (x->dgelu && (!x->aux_ptr || x->aux_ld % 8 || x->aux_ld < (int64_t)m || C->batch != 1 || esize(D) == 1)) ||
      ((x->bgrad || x->bgrada) && (!x->bias_ptr || C->batch != 1)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!algo || !aligned(A, a, algo->data[0]) || !aligned(B, b, algo->data[1]) || !aligned(C, c, algo->data[2]) ||
      !aligned(D, dst, algo->data[3])) {
    fprintf(stderr, "cublasLt emulation: an operand less aligned than the algorithm needs (%llu, %llu, %llu, %llu)\n",
            (unsigned long long)algo->data[0], (unsigned long long)algo->data[1], (unsigned long long)algo->data[2],
            (unsigned long long)algo->data[3]);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  MatmulOp *o = malloc(sizeof *o);
  EmulEnqueueFn *enqueue = driver_enqueue();
  if (!o || !enqueue) {
    free(o);
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *o = (MatmulOp){*x, *A, *B, *C, *D, *(const float *)alpha, *(const float *)beta, a, b, c, dst};
  if (enqueue(s, run_matmul, o) != 0) {
    free(o);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
