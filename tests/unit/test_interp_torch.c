/* The reference interpreter (ir/interp.c) against PyTorch, the outside reference
 * (STYLE.md habit 7), on the ops whose numerics are easy to get subtly wrong: gelu
 * (tanh form), silu, layernorm, rmsnorm, softmax (an inner axis, causal),
 * cross_entropy (ignore_index, none counted), attention (causal; cross with a
 * scale), rotary (Hugging Face's rotate_half, and inverse), broadcast batched
 * matmul with transposes, embedding, casts to bf16/f16/i32, and the gradient ops
 * gelu_grad, gelu_erf and its gradient, silu_grad, layernorm_grad, rmsnorm_grad, softmax_grad and
 * cross_entropy_grad (against torch autograd).
 *
 * test_interp_torch.py (run by Debian's /usr/bin/python3 with python3-torch, or
 * $COLOSSALC_TORCH_PYTHON) writes each case's inputs and torch's output to a file;
 * this test runs the same op, written as IR text, in the interpreter and requires
 * max |interp - torch| <= 1e-9 max |torch|. Without torch the script fails and so
 * does the test: it never skips.
 *
 *   test_interp_torch [SCRIPT.py]   (default: the .py beside this source file) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir/interp.h"
#include "ir/ir.h"

static const double TOL = 1e-9;

typedef struct TCase {
  const char *name, *ir;
} TCase;

#define IN(n, name, t) "%" #n " = input " name " : " t "\n"

static const TCase cases[] = {
    {"gelu", IN(0, "a", "f32[4, 7]") "%1 = gelu %0 : f32[4, 7]\n"},
    {"silu", IN(0, "a", "f32[4, 7]") "%1 = silu %0 : f32[4, 7]\n"},
    {"layernorm", IN(0, "x", "f32[3, 5, 16]") IN(1, "w", "f32[16]")
                      IN(2, "b", "f32[16]") "%3 = layernorm %0, %1, %2 : f32[3, 5, 16]\n"},
    {"layernorm_eps", IN(0, "x", "f32[4, 6]") IN(1, "w", "f32[6]")
                          IN(2, "b", "f32[6]") "%3 = layernorm %0, %1, %2 eps=0.1 : f32[4, 6]\n"},
    {"rmsnorm", IN(0, "x", "f32[3, 16]") IN(1, "w", "f32[16]") "%2 = rmsnorm %0, %1 : f32[3, 16]\n"},
    {"softmax", IN(0, "a", "f32[3, 7]") "%1 = softmax %0 : f32[3, 7]\n"},
    {"softmax_axis1", IN(0, "a", "f32[2, 5, 3]") "%1 = softmax %0 axis=1 : f32[2, 5, 3]\n"},
    {"softmax_causal", IN(0, "a", "f32[2, 4, 6]") "%1 = softmax %0 causal=1 : f32[2, 4, 6]\n"},
    {"cross_entropy", IN(0, "x", "f32[2, 5, 7]") IN(1, "t", "i32[2, 5]") "%2 = cross_entropy %0, %1 : f32[]\n"},
    {"cross_entropy_ignore2",
     IN(0, "x", "f32[6, 4]") IN(1, "t", "i32[6]") "%2 = cross_entropy %0, %1 ignore_index=2 : f32[]\n"},
    {"cross_entropy_none", IN(0, "x", "f32[3, 4]") IN(1, "t", "i32[3]") "%2 = cross_entropy %0, %1 : f32[]\n"},
    {"attention_causal", IN(0, "q", "f32[2, 5, 16]") IN(1, "k", "f32[2, 5, 16]") IN(
                             2, "v", "f32[2, 5, 16]") "%3 = attention %0, %1, %2 heads=4 causal=1 : f32[2, 5, 16]\n"},
    {"attention_cross", IN(0, "q", "f32[2, 3, 8]") IN(1, "k", "f32[2, 6, 8]")
                            IN(2, "v", "f32[2, 6, 8]") "%3 = attention %0, %1, %2 heads=2 scale=0.3 : f32[2, 3, 8]\n"},
    {"rotary", IN(0, "x", "f32[2, 6, 16]") "%1 = rotary %0 heads=2 : f32[2, 6, 16]\n"},
    {"rotary_inverse", IN(0, "x", "f32[5, 8]") "%1 = rotary %0 heads=1 theta=500 inverse=1 : f32[5, 8]\n"},
    {"matmul_bcast_tt",
     IN(0, "a", "f32[2, 1, 4, 3]")
         IN(1, "b", "f32[3, 5, 4]") "%2 = matmul %0, %1 transpose_a=1 transpose_b=1 : f32[2, 3, 3, 5]\n"},
    {"matmul_batched_2d", IN(0, "a", "f32[2, 3, 4]") IN(1, "b", "f32[4, 5]") "%2 = matmul %0, %1 : f32[2, 3, 5]\n"},
    {"embedding", IN(0, "tab", "f32[7, 5]") IN(1, "idx", "i32[2, 4]") "%2 = embedding %0, %1 : f32[2, 4, 5]\n"},
    {"cast_bf16", IN(0, "x", "f32[20]") "%1 = cast %0 dtype=bf16 : bf16[20]\n"},
    {"cast_f16", IN(0, "x", "f32[19]") "%1 = cast %0 dtype=f16 : f16[19]\n"},
    {"cast_i32", IN(0, "x", "f32[8]") "%1 = cast %0 dtype=i32 : i32[8]\n"},
    {"sum_keepdim", IN(0, "x", "f32[3, 8]") "%1 = sum %0 axis=1 keepdim=1 : f32[3, 1]\n"},
    {"gelu_grad", IN(0, "x", "f32[4, 7]") IN(1, "g", "f32[4, 7]") "%2 = gelu_grad %0, %1 : f32[4, 7]\n"},
    {"silu_grad", IN(0, "x", "f32[4, 7]") IN(1, "g", "f32[4, 7]") "%2 = silu_grad %0, %1 : f32[4, 7]\n"},
    {"layernorm_grad0", IN(0, "x", "f32[3, 8]") IN(1, "w", "f32[8]")
                            IN(2, "g", "f32[3, 8]") "%3 = layernorm_grad %0, %1, %2 which=0 : f32[3, 8]\n"},
    {"layernorm_grad1", IN(0, "x", "f32[3, 8]") IN(1, "w", "f32[8]")
                            IN(2, "g", "f32[3, 8]") "%3 = layernorm_grad %0, %1, %2 which=1 : f32[8]\n"},
    {"layernorm_grad2", IN(0, "x", "f32[3, 8]") IN(1, "w", "f32[8]")
                            IN(2, "g", "f32[3, 8]") "%3 = layernorm_grad %0, %1, %2 which=2 : f32[8]\n"},
    {"rmsnorm_grad0", IN(0, "x", "f32[3, 8]") IN(1, "w", "f32[8]")
                          IN(2, "g", "f32[3, 8]") "%3 = rmsnorm_grad %0, %1, %2 which=0 : f32[3, 8]\n"},
    {"rmsnorm_grad1", IN(0, "x", "f32[3, 8]") IN(1, "w", "f32[8]")
                          IN(2, "g", "f32[3, 8]") "%3 = rmsnorm_grad %0, %1, %2 which=1 : f32[8]\n"},
    {"softmax_grad",
     IN(0, "y", "f32[2, 3, 5]") IN(1, "g", "f32[2, 3, 5]") "%2 = softmax_grad %0, %1 axis=1 : f32[2, 3, 5]\n"},
    {"cross_entropy_grad", IN(0, "x", "f32[2, 5, 7]") IN(1, "t", "i32[2, 5]")
                               IN(2, "g", "f32[]") "%3 = cross_entropy_grad %0, %1, %2 : f32[2, 5, 7]\n"},
    {"gelu_erf", IN(0, "a", "f32[4, 7]") "%1 = gelu_erf %0 : f32[4, 7]\n"},
    {"gelu_erf_grad", IN(0, "x", "f32[4, 7]") IN(1, "g", "f32[4, 7]") "%2 = gelu_erf_grad %0, %1 : f32[4, 7]\n"},
};
enum { NCASES = sizeof cases / sizeof *cases };

/* ---- the reference file ------------------------------------------------------------ */

enum { MAX_TENSORS = 8 };
typedef struct Tensor {
  char name[32];
  long n;
  double *v;
} Tensor;
typedef struct Record {
  char name[64];
  int nt;
  Tensor t[MAX_TENSORS];
  bool used;
} Record;

static bool read_tensor(FILE *f, Tensor *t) {
  if (fscanf(f, "%31s %ld", t->name, &t->n) != 2 || t->n < 0) return false;
  t->v = malloc((t->n ? t->n : 1) * sizeof *t->v);
  for (long i = 0; i < t->n; i++)
    if (fscanf(f, "%lf", &t->v[i]) != 1) return false;
  return true;
}

/* Reads all records; returns their count, -1 on a malformed file. */
static int read_records(const char *path, Record *r, int cap) {
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("FAIL: cannot open %s\n", path);
    return -1;
  }
  char word[64];
  int n = 0;
  while (fscanf(f, "%63s", word) == 1) {
    if (strcmp(word, "case") || n == cap || fscanf(f, "%63s", r[n].name) != 1) {
      n = -1;
      break;
    }
    while (fscanf(f, "%63s", word) == 1 && strcmp(word, "end")) {
      if (strcmp(word, "tensor") || r[n].nt == MAX_TENSORS || !read_tensor(f, &r[n].t[r[n].nt++])) {
        n = -1;
        break;
      }
    }
    if (n < 0) break;
    n++;
  }
  fclose(f);
  if (n < 0) printf("FAIL: %s is malformed\n", path);
  return n;
}

static const Tensor *find_tensor(const Record *r, const char *name) {
  for (int i = 0; i < r->nt; i++)
    if (!strcmp(r->t[i].name, name)) return &r->t[i];
  return NULL;
}

/* ---- one case ---------------------------------------------------------------------- */

/* max |got - want| / max |want|, with equal infinities and both-NaN counting as equal. */
static double rel_err(const double *got, const double *want, long n) {
  double err = 0, scale = 0;
  for (long i = 0; i < n; i++) {
    if (isnan(got[i]) || isnan(want[i])) {
      if (!(isnan(got[i]) && isnan(want[i]))) return INFINITY;
      continue;
    }
    if (isinf(got[i]) || isinf(want[i])) {
      if (got[i] != want[i]) return INFINITY;
      continue;
    }
    err = fmax(err, fabs(got[i] - want[i]));
    scale = fmax(scale, fabs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

/* Runs case c on the record's inputs; returns the relative error (INFINITY on failure). */
static double run_case(const TCase *c, const Record *r) {
  Arena *a = arena_new();
  SrcFile src = {c->name, arena_printf(a, "graph %s\n%s", c->name, c->ir), 0};
  src.len = strlen(src.text);
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) {
    diag_pop(&j);
    printf("FAIL %s: %s\n", c->name, diag_last);
    arena_free(a);
    return INFINITY;
  }
  Graph *g = ir_parse(a, &src);
  diag_pop(&j);
  double **vals = calloc(g->n, sizeof *vals), err = 0;
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_INPUT) continue;
    const Tensor *t = find_tensor(r, n->name);
    if (!t || t->n != shape_numel(&n->shape)) {
      printf("FAIL %s: no input %s of the right size\n", c->name, n->name);
      err = INFINITY;
    }
    vals[i] = t ? t->v : NULL;
  }
  const Node *y = g->nodes[g->n - 1];
  const Tensor *want = find_tensor(r, "out");
  if (!want || want->n != shape_numel(&y->shape)) {
    printf("FAIL %s: no output of the right size\n", c->name);
    err = INFINITY;
  }
  if (err == 0) {
    interp_run(g, vals, 0);
    err = rel_err(vals[y->id], want->v, want->n);
  }
  interp_release(g, vals);
  free(vals);
  arena_free(a);
  return err;
}

/* ---- main ---------------------------------------------------------------------------- */

static const char *default_script(void) {
  static char path[4096];
  snprintf(path, sizeof path, "%s", __FILE__);
  char *dot = strrchr(path, '.');
  if (dot) strcpy(dot, ".py");
  return path;
}

/* Runs the torch script into out; false (loudly) if it fails. */
static bool run_torch(const char *script, const char *out) {
  const char *py = getenv("COLOSSALC_TORCH_PYTHON");
  if (!py || !*py) py = "/usr/bin/python3";
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", py, script, out);
  int rc = system(cmd);
  if (rc != 0)
    printf("FAIL: the PyTorch reference failed (status %d): %s\n"
           "      it needs torch and numpy (Debian: apt-get install python3-torch python3-numpy)\n",
           rc, cmd);
  return rc == 0;
}

int main(int argc, char **argv) {
  diag_stream = stdout;
  op_table_init();
  const char *out = "interp_torch_ref.txt";
  if (!run_torch(argc > 1 ? argv[1] : default_script(), out)) return 1;
  static Record recs[64];
  int nrec = read_records(out, recs, 64), failures = nrec < 0;
  for (int i = 0; i < NCASES && nrec >= 0; i++) {
    Record *r = NULL;
    for (int k = 0; k < nrec; k++)
      if (!strcmp(recs[k].name, cases[i].name)) r = &recs[k];
    if (!r) {
      printf("FAIL %s: no PyTorch record\n", cases[i].name);
      failures++;
      continue;
    }
    r->used = true;
    double e = run_case(&cases[i], r);
    printf("%-22s max rel err %.2e%s\n", cases[i].name, e, e <= TOL ? "" : "  FAIL");
    failures += !(e <= TOL);
  }
  for (int k = 0; k < nrec; k++)
    if (!recs[k].used) {
      printf("FAIL %s: PyTorch record without a case here\n", recs[k].name);
      failures++;
    }
  for (int k = 0; k < (nrec > 0 ? nrec : 0); k++)
    for (int t = 0; t < recs[k].nt; t++) free(recs[k].t[t].v);
  printf("%d cases against PyTorch: %d failed\n", NCASES, failures);
  return failures != 0;
}
