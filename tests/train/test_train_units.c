/* test_train_units: the pieces of the train runtime without a child process.
 *
 *   program   the bigram test program loads with the expected fields; mutated
 *             copies (missing, ill-typed, out-of-range, out-of-bounds fields) are
 *             refused with a message naming the field
 *   init      every init rule: Philox normal/uniform keyed by (seed, name), zeros,
 *             ones, constant
 *   schedule  warm-up, cosine to min_lr at the last step, constant; the scalars
 *   overrides --beta2/--weight-decay reach a program that reads them ("scalars":
 *             10) and are refused for one that bakes them in, unless unchanged
 *   pool      every index of [0, n) runs exactly once, in the static chunks, for
 *             several thread counts and sizes
 *   gemm      the CPU device's GEMM (transposes, batch strides, alpha, beta) equals
 *             a naive loop
 *   forward   the executor runs the program's `forward`: logits = W[token] + b
 */
#include "runtime/executor.h"
#include "runtime/philox.h"
#include "runtime/threadpool.h"
#include "runtime/train_ckpt.h"
#include "runtime/train_loop.h"
#include "runtime/train_program.h"

#include "rt_test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>

static char err[4096];

/* ---- program loading ----------------------------------------------------------- */

static void test_program_ok(void) {
  RtProgram p;
  int rc = program_load(colossalc_program_json, colossalc_nkernels, &p, err, sizeof err);
  if (rc != 0) fprintf(stderr, "program_load: %s\n", err);
  CHECK(rc == 0);
  if (rc != 0) return;
  CHECK(p.batch == 4 && p.seq == 16 && p.vocab == 256 && strcmp(p.model, "bigram-test") == 0);
  CHECK(p.nparams == 2 && p.param_elems == 65792 && p.params[0].ndim == 2);
  CHECK(p.params[1].init == RT_INIT_ZEROS && !p.params[1].decay && p.params[0].decay);
  CHECK(p.step.n == 8 && p.gradnorm.n == 1 && p.update.n == 2 && p.forward.n == 4);
  const RtGemm *g = &p.step.instr[6].gemm;
  CHECK(p.step.instr[6].op == ISA_GEMM && g->ta == 1 && g->m == 256 && g->k == 64);
  CHECK(p.train.optimizer == RT_OPT_ADAMW && p.train.warmup == 2 && p.train.clip == 1.0);
  CHECK(program_find_param(&p, "bias") == &p.params[1] && !program_find_param(&p, "nope"));
  program_free(&p);
}

/* The program with one edit: at path (object keys and array indices, "" ends the
 * list) set to `value` (JSON text; a key the object lacks is added), or deleted when
 * value is NULL. */
static char *program_edit(const char *const *path, const char *value) {
  cJSON *root = cJSON_Parse(colossalc_program_json), *parent = root;
  int i = 0;
  for (; path[i + 1][0]; i++)
    parent = cJSON_IsArray(parent) ? cJSON_GetArrayItem(parent, atoi(path[i]))
                                   : cJSON_GetObjectItemCaseSensitive(parent, path[i]);
  int is_arr = cJSON_IsArray(parent);
  if (!value && is_arr) cJSON_DeleteItemFromArray(parent, atoi(path[i]));
  else if (!value) cJSON_DeleteItemFromObjectCaseSensitive(parent, path[i]);
  else if (is_arr) cJSON_ReplaceItemInArray(parent, atoi(path[i]), cJSON_Parse(value));
  else if (!cJSON_GetObjectItemCaseSensitive(parent, path[i]))
    cJSON_AddItemToObject(parent, path[i], cJSON_Parse(value));
  else cJSON_ReplaceItemInObjectCaseSensitive(parent, path[i], cJSON_Parse(value));
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return text;
}

static void expect_program_error(const char *const *path, const char *value, const char *want) {
  char *json = program_edit(path, value);
  RtProgram p;
  int rc = program_load(json, colossalc_nkernels, &p, err, sizeof err);
  CHECK(rc == -1);
  if (rc == 0) program_free(&p);
  else CHECK_ERR(err, want);
  free(json);
}

#define PATH(...) ((const char *const[]){__VA_ARGS__, ""})

static void test_program_errors(void) {
  expect_program_error(PATH("batch"), NULL, "program: batch: missing");
  expect_program_error(PATH("seq"), "\"16\"", "program: seq: expected an integer");
  expect_program_error(PATH("vocab"), "2.5", "program: vocab: out of range");
  expect_program_error(PATH("params", "0", "shape"), NULL, "program: params[0].shape: missing");
  expect_program_error(PATH("params", "0", "shape", "1"), "0", "params[0].shape[1]: out of range");
  expect_program_error(PATH("params", "1", "init"), "\"xavier\"", "params[1].init: unknown value \"xavier\"");
  expect_program_error(PATH("params", "0", "a"), NULL, "params[0].a: missing");
  expect_program_error(PATH("params", "0", "decay"), "1", "params[0].decay: expected true or false");
  expect_program_error(PATH("params", "1", "name"), "\"wte.weight\"", "params[1].name: duplicate parameter name");
  expect_program_error(PATH("params", "0", "offset"), "8192",
                       "params[0].offset: bytes [8192, 8192+262144) outside the params tier");
  expect_program_error(PATH("step", "2", "c"), "[3, 190000]", "program: step[2].c: bytes");
  expect_program_error(PATH("step", "2", "lda"), "100", "step[2].a: leading dimension");
  expect_program_error(PATH("step", "2", "batch"), "[4]", "step[2].batch: wrong length");
  expect_program_error(PATH("step", "0", "kernel"), "8", "program: step[0].kernel: out of range");
  expect_program_error(PATH("step", "1", "op"), "\"copy\"", "step[1].op: unknown value \"copy\"");
  expect_program_error(PATH("step", "1", "bytes"), "1000000", "step[1].offset: bytes");
  expect_program_error(PATH("forward"), "{}", "program: forward: not an array");
  expect_program_error(PATH("train", "schedule"), "\"linear\"", "train.schedule: unknown value");
  expect_program_error(PATH("train", "lr"), NULL, "program: train.lr: missing");
  expect_program_error(PATH("kernels", "7"), NULL, "program: kernels: wrong length");
  expect_program_error(PATH("inputs", "1", "shape"), "[4, 15]",
                       "inputs[1].shape: tokens and targets must be i32 [batch, seq]");
  expect_program_error(PATH("inputs", "1", "shape"), "[3, 16]", "inputs[1].shape: must start with batch");
  expect_program_error(PATH("inputs", "1", "dtype"), "\"f16\"", "inputs[1].dtype: unknown value");
  expect_program_error(PATH("inputs", "1", "range"), "[5, 5]", "inputs[1].range: empty");
  expect_program_error(PATH("inputs", "1", "name"), "\"tokens\"", "inputs[1].name: a second input of this name");
  expect_program_error(PATH("inputs", "1", "role"), "\"tokens\"", "inputs[1].role: a second input with this role");
  expect_program_error(PATH("gradnorm_parts"), "100000", "program: gradnorm_offset: bytes");
  expect_program_error(PATH("scalars"), "7", "program: scalars: must be 5 or 12");
  RtProgram p;
  CHECK(program_load("{\"version\": 1,", 8, &p, err, sizeof err) == -1);
  CHECK_ERR(err, "program: not valid JSON");
  CHECK(program_load("[]", 8, &p, err, sizeof err) == -1);
  CHECK_ERR(err, "program: not a JSON object");
}

/* The program with "zero_stage": stage (when >= 0), "zero_scheduled": sched (when
 * not NULL), "scheduled": true (when scheduled) and instr inserted at list[0]. */
static char *zero_program(int stage, const char *sched, int scheduled, const char *list, const char *instr) {
  cJSON *root = cJSON_Parse(colossalc_program_json);
  if (stage >= 0) cJSON_AddNumberToObject(root, "zero_stage", stage);
  if (stage > 0) { /* the plan's dp and owners: parameter i to rank i % 2 */
    cJSON_AddNumberToObject(root, "dp", 2);
    const cJSON *q;
    int i = 0;
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(root, "params"))
        cJSON_AddNumberToObject((cJSON *)q, "owner", i++ % 2);
  }
  if (sched) cJSON_AddItemToObject(root, "zero_scheduled", cJSON_Parse(sched));
  if (scheduled) cJSON_AddTrueToObject(root, "scheduled");
  if (instr) cJSON_InsertItemInArray(cJSON_GetObjectItemCaseSensitive(root, list), 0, cJSON_Parse(instr));
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return text;
}

static void expect_zero_error(int stage, const char *sched, int scheduled, const char *list, const char *instr,
                              const char *want) {
  char *json = zero_program(stage, sched, scheduled, list, instr);
  RtProgram p;
  int rc = program_load(json, colossalc_nkernels, &p, err, sizeof err);
  CHECK(rc == -1);
  if (rc == 0) program_free(&p);
  else CHECK_ERR(err, want);
  free(json);
}

/* "zero_scheduled" and the ZeRO instructions of program.h ("ZeRO inside the step"). */
static void test_program_zero(void) {
  const char *gather = "{\"op\": \"zero_gather\", \"param\": 1}";
  char *json = zero_program(3, "true", 0, "step", gather);
  RtProgram p;
  int rc = program_load(json, colossalc_nkernels, &p, err, sizeof err);
  free(json);
  CHECK(rc == 0);
  if (rc == 0) {
    CHECK(p.zero_scheduled && p.zero_stage == 3 && p.step.n == 9);
    CHECK(p.step.instr[0].op == ISA_ZERO_GATHER && p.step.instr[0].param == 1);
    program_free(&p);
  }
  expect_zero_error(3, "true", 0, "step", "{\"op\": \"zero_reduce\", \"param\": 2}",
                    "program: step[0].param: out of range");
  expect_zero_error(3, "true", 0, "forward", gather, "program: forward[0].op: ZeRO instructions only in `step`");
  expect_zero_error(3, NULL, 0, "step", gather,
                    "program: step[0].op: ZeRO instructions only in `step` of a program with");
  expect_zero_error(2, "true", 0, "step", gather,
                    "step[0].op: \"zero_gather\" and \"zero_release\" only at zero_stage 3");
  expect_zero_error(1, "true", 0, "step", NULL, "program: zero_scheduled: needs zero_stage 2 or 3");
  expect_zero_error(2, "true", 1, "step", NULL, "program: zero_scheduled: needs an unscheduled one-stage program");
  expect_zero_error(2, "1", 0, "step", NULL, "program: zero_scheduled: expected true or false");
  /* the plan's ZeRO: stages 2 and 3 are compiled into the step; owners in the dp group */
  expect_zero_error(2, NULL, 0, "step", NULL, "program: zero_stage: ZeRO stages 2 and 3 are compiled into the step");
  json = zero_program(1, NULL, 0, "step", NULL);
  cJSON *root = cJSON_Parse(json);
  free(json);
  cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "params"), 1), "owner",
                            cJSON_CreateNumber(2));
  json = cJSON_PrintUnformatted(root);
  CHECK(program_load(json, colossalc_nkernels, &p, err, sizeof err) == -1);
  CHECK_ERR(err, "program: params[1].owner: not a rank of the dp group");
  free(json);
  cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "params"), 1), "owner");
  json = cJSON_PrintUnformatted(root);
  CHECK(program_load(json, colossalc_nkernels, &p, err, sizeof err) == -1);
  CHECK_ERR(err, "program: params[1].owner: missing (zero_stage is above 0)");
  free(json);
  cJSON_Delete(root);
  json = zero_program(1, NULL, 0, "step", NULL); /* a valid ZeRO-1 program: the owners kept */
  rc = program_load(json, colossalc_nkernels, &p, err, sizeof err);
  free(json);
  CHECK(rc == 0);
  if (rc == 0) {
    CHECK(p.zero_stage == 1 && p.params[0].owner == 0 && p.params[1].owner == 1);
    program_free(&p);
  }
}

/* ---- init ---------------------------------------------------------------------- */

static void test_init(void) {
  static const RtInit kinds[5] = {RT_INIT_NORMAL, RT_INIT_UNIFORM, RT_INIT_ZEROS, RT_INIT_ONES, RT_INIT_CONSTANT};
  static char *names[5] = {"n", "u", "z", "o", "c"};
  RtParam params[5];
  float buf[5 * 100], want[100];
  RtProgram p = {.params = params, .nparams = 5};
  for (int i = 0; i < 5; i++)
    params[i] = (RtParam){.name = names[i],
                          .ndim = 1,
                          .shape = {100},
                          .numel = 100,
                          .offset = i * 400,
                          .init = kinds[i],
                          .a = 0.5,
                          .b = 2.0};
  ckpt_init_params(&p, (char *)buf, 42, NULL);
  philox_fill_normal(want, 100, 0, 42, "n", 2.0f, 0.5f);
  CHECK(memcmp(buf, want, sizeof want) == 0);
  philox_fill_uniform(want, 100, 0, 42, "u", 0.5f, 2.0f);
  CHECK(memcmp(buf + 100, want, sizeof want) == 0);
  for (int i = 0; i < 100; i++) CHECK(buf[200 + i] == 0.0f && buf[300 + i] == 1.0f && buf[400 + i] == 0.5f);
  philox_fill_normal(want, 100, 0, 43, "n", 2.0f, 0.5f);
  CHECK(memcmp(buf, want, sizeof want) != 0);
}

/* ---- schedule and scalars ------------------------------------------------------ */

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fabs(b)); }

static void test_schedule(void) {
  RtTrain hp = {.lr = 1.0,
                .min_lr = 0.1,
                .warmup = 10,
                .schedule = RT_SCHED_COSINE,
                .beta1 = 0.9,
                .beta2 = 0.99,
                .eps = 1e-8,
                .weight_decay = 0.1};
  CHECK(near(train_lr(&hp, 1, 110), 0.1) && near(train_lr(&hp, 10, 110), 1.0));
  CHECK(near(train_lr(&hp, 60, 110), 0.55) && near(train_lr(&hp, 110, 110), 0.1));
  CHECK(train_lr(&hp, 11, 110) < 1.0 && train_lr(&hp, 11, 110) > 0.99);
  hp.schedule = RT_SCHED_CONSTANT;
  CHECK(near(train_lr(&hp, 5, 110), 0.5) && near(train_lr(&hp, 100, 110), 1.0));
  hp.warmup = 0, hp.schedule = RT_SCHED_COSINE;
  CHECK(near(train_lr(&hp, 100, 100), 0.1) && train_lr(&hp, 1, 100) > 0.99);
  float sc[TRAIN_SCALARS];
  train_scalars(&hp, 0.25, 1, 0.5, sc);
  CHECK(sc[RT_SC_LR] == 0.25f && fabsf(sc[RT_SC_BC1] - 10.0f) < 1e-5f);
  CHECK(fabsf(sc[RT_SC_BC2] - 100.0f) < 1e-3f && sc[RT_SC_GSCALE] == 0.5f);
  CHECK(sc[RT_SC_STEP] == 1.0f && sc[TRAIN_SC_BETA2] == 0.99f && sc[TRAIN_SC_WD] == 0.1f);
}

/* ---- hyperparameter overrides ------------------------------------------------- */

/* trainer_init with `train --steps 0 FLAG VALUE` on the program (optionally without
 * its "scalars": 12); 0 or -1 with the message in err; *beta2 gets the value used. */
static int init_with(const char *flag, const char *value, int drop_scalars, double *beta2) {
  char *argv[] = {"train", "--steps", "0", (char *)flag, (char *)value, NULL};
  char *json = drop_scalars ? program_edit(PATH("scalars"), NULL) : NULL;
  TrainOpts o;
  RtProgram p;
  Trainer t;
  int rc = train_opts_parse(5, argv, &o, err, sizeof err);
  CHECK(rc == 0);
  if (program_load(json ? json : colossalc_program_json, colossalc_nkernels, &p, err, sizeof err) != 0) {
    fprintf(stderr, "program_load: %s\n", err);
    rt_failures++;
    free(json);
    return 0;
  }
  rc = trainer_init(&t, &p, colossalc_kernels, &o, err, sizeof err);
  *beta2 = t.hp.beta2;
  trainer_free(&t);
  program_free(&p);
  free(json);
  return rc;
}

static void test_overrides(void) {
  double b2 = 0;
  CHECK(init_with("--beta2", "0.99", 0, &b2) == 0 && b2 == 0.99);
  CHECK(init_with("--beta2", "0.95", 1, &b2) == 0 && b2 == 0.95);
  CHECK(init_with("--beta2", "0.99", 1, &b2) == -1);
  CHECK_ERR(err, "--beta2 0.99: this program's update kernels were compiled with 0.95");
  CHECK(init_with("--weight-decay", "0", 1, &b2) == -1);
  CHECK_ERR(err, "--weight-decay 0: ");
  CHECK(init_with("--lr", "0.5", 1, &b2) == 0);
}

/* ---- thread pool --------------------------------------------------------------- */

typedef struct PoolProbe {
  int *count; /* [n] */
  int64_t n;
  int threads;
  int bad_chunk;
} PoolProbe;

static void pool_probe(void *ctx, int64_t lo, int64_t hi) {
  PoolProbe *pr = ctx;
  int found = 0;
  for (int i = 0; i < pr->threads; i++) {
    int64_t a, b;
    pool_chunk(pr->n, pr->threads, i, &a, &b);
    found |= a == lo && b == hi;
  }
  if (!found) __atomic_add_fetch(&pr->bad_chunk, 1, __ATOMIC_RELAXED);
  for (int64_t i = lo; i < hi; i++) pr->count[i]++;
}

static void test_pool(void) {
  static const int threads[] = {1, 2, 3, 8};
  static const int64_t sizes[] = {0, 1, 2, 7, 1000, 4099};
  static int count[4099];
  for (int t = 0; t < 4; t++) {
    ThreadPool *pool = pool_new(threads[t], err, sizeof err);
    CHECK(pool && pool_threads(pool) == threads[t]);
    for (int s = 0; pool && s < 6; s++)
      for (int rep = 0; rep < 50; rep++) {
        PoolProbe pr = {count, sizes[s], threads[t], 0};
        memset(count, 0, sizeof count);
        pool_run(pool, sizes[s], pool_probe, &pr);
        int ok = pr.bad_chunk == 0;
        for (int64_t i = 0; i < sizes[s]; i++) ok &= count[i] == 1;
        CHECK(ok);
      }
    pool_free(pool);
  }
  CHECK(pool_new(0, err, sizeof err) == NULL);
  CHECK_ERR(err, "0 threads");
}

/* ---- GEMM ---------------------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C for one batch pair, naively, in double. */
static void gemm_naive(const RtGemm *g, const float *a, const float *b, float *c, const float *bias) {
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = 0; j < g->n; j++) {
      double s = 0;
      for (int64_t k = 0; k < g->k; k++)
        s += (double)(g->ta ? a[k * g->lda + i] : a[i * g->lda + k]) * (g->tb ? b[j * g->ldb + k] : b[k * g->ldb + j]);
      c[i * g->ldc + j] = (float)(g->alpha * s + g->beta * c[i * g->ldc + j] + (bias ? bias[j] : 0));
    }
}

/* With bias, the epilogue C[i][j] = alpha op(A) op(B) + bias[j] (beta 0), the bias after
 * the three operands' slabs. */
static void gemm_case(Device *dev, int ta, int tb, int bias) {
  enum { M = 5, N = 6, K = 7, LD = 9, SLAB = 100, WORK = 3 * 600 + 8 }; /* A, B, C: 6 slabs each */
  static float work[WORK], want[WORK];
  RtGemm g = {ta,        tb,
              M,         N,
              K,         LD,
              LD,        LD,
              0.5f,      bias ? 0.0f : 2.0f,
              {3, 3, 3}, {0, 4 * 600, 4 * 1200},
              {2, 3},    {{3 * SLAB, SLAB}, {3 * SLAB, SLAB}, {3 * SLAB, SLAB}},
              bias,      3,
              4 * 1800,  0,
              0,         0,
              0,         {ISA_F32, ISA_F32, ISA_F32}};
  for (int i = 0; i < WORK; i++) work[i] = want[i] = (float)((i * 37 % 101) - 50) / 25.0f;
  char *tiers[RT_TIERS] = {NULL, NULL, NULL, (char *)work};
  dev->gemm(dev, &g, tiers);
  double worst = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      int64_t o = (i * 3 + j) * SLAB;
      gemm_naive(&g, want + o, want + 600 + o, want + 1200 + o, bias ? want + 1800 : NULL);
    }
  for (int i = 0; i < WORK; i++) worst = fmax(worst, fabs((double)work[i] - want[i]));
  CHECK(worst < 1e-4);
  if (worst >= 1e-4) fprintf(stderr, "gemm ta=%d tb=%d bias=%d: max difference %g\n", ta, tb, bias, worst);
}

/* A "gelu" GEMM on the CPU device (ldc a multiple of 8) leaves GELU's input for its
 * epilogue kernel: op(A) op(B) + bias in aux, C untouched. */
static void gemm_gelu_case(Device *dev, int ta, int tb) {
  enum { M = 5, N = 6, K = 7, LD = 8, A0 = 0, B0 = 64, C0 = 128, BIAS = 192, AUX = 200, WORK = 248 };
  static float work[WORK], want[WORK];
  RtGemm g = {ta,        tb,
              M,         N,
              K,         LD,
              LD,        LD,
              1.0f,      0.0f,
              {3, 3, 3}, {4 * A0, 4 * B0, 4 * C0},
              {1, 1},    {{0}},
              1,         3,
              4 * BIAS,  1,
              1,         3,
              4 * AUX,   {ISA_F32, ISA_F32, ISA_F32}};
  for (int i = 0; i < WORK; i++) work[i] = want[i] = (float)((i * 37 % 101) - 50) / 25.0f;
  char *tiers[RT_TIERS] = {NULL, NULL, NULL, (char *)work};
  dev->gemm(dev, &g, tiers);
  gemm_naive(&g, want + A0, want + B0, want + AUX, want + BIAS);
  double worst = 0;
  for (int i = 0; i < WORK; i++) worst = fmax(worst, fabs((double)work[i] - want[i]));
  CHECK(worst < 1e-4);
  if (worst >= 1e-4) fprintf(stderr, "gemm gelu ta=%d tb=%d: max difference %g\n", ta, tb, worst);
}

static void test_gemm(void) {
  Device *dev = device_cpu_new(NULL, 0, 2, err, sizeof err);
  CHECK(dev != NULL);
  for (int ta = 0; dev && ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int bias = 0; bias < 2; bias++) gemm_case(dev, ta, tb, bias);
  for (int ta = 0; dev && ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) gemm_gelu_case(dev, ta, tb);
  if (dev) dev->destroy(dev);
}

/* ---- pinned reserved memory ------------------------------------------------------ */

/* A GPU's host_pin and host_unpin, recording each page's registration (its start). */
enum { PIN_PAGES = 3 * CPU_PIN_BLOCK / 4096 + 8 };
typedef struct FakePin {
  Device dev;
  char *base;             /* the reserved range */
  int64_t reg[PIN_PAGES]; /* per page: 1 + the page its registration starts at, or 0 */
  int bad;                /* pinned twice, across a block, or an unpin of no start */
} FakePin;

static int fake_pin(Device *dev, void *p, int64_t bytes) {
  FakePin *f = (FakePin *)dev;
  int64_t lo = ((char *)p - f->base) / 4096, hi = lo + bytes / 4096;
  f->bad |= bytes % 4096 != 0 || lo / (CPU_PIN_BLOCK / 4096) != (hi - 1) / (CPU_PIN_BLOCK / 4096);
  for (int64_t i = lo; i < hi; i++) {
    f->bad |= f->reg[i] != 0;
    f->reg[i] = lo + 1;
  }
  return 0;
}

static void fake_unpin(Device *dev, void *p) {
  FakePin *f = (FakePin *)dev;
  int64_t lo = ((char *)p - f->base) / 4096;
  f->bad |= f->reg[lo] != lo + 1;
  for (int64_t i = lo; i < PIN_PAGES && f->reg[i] == lo + 1; i++) f->reg[i] = 0;
}

/* Commits and decommits over three blocks of a CPU device pinned through a fake GPU,
 * keeping at most `keep` pages: the pinned pages are the resident ones, each
 * registration within one block, never a page twice; committed pages are pinned and
 * read zero when committed; at most max(keep, committed) pages stay pinned. */
static void pinned_case(int64_t keep) {
  static FakePin f;
  memset(&f, 0, sizeof f);
  Device *cpu = device_cpu_new(NULL, 0, 1, err, sizeof err);
  CHECK(cpu != NULL && cpu->granule == 4096);
  if (!cpu || cpu->granule != 4096) return;
  f.dev = (Device){.name = "fake", .host_pin = fake_pin, .host_unpin = fake_unpin};
  device_cpu_pin_through(cpu, &f.dev, keep * 4096);
  int64_t bytes = (int64_t)PIN_PAGES * 4096;
  f.base = cpu->reserve(cpu, bytes);
  CHECK(f.base != NULL);
  static unsigned char committed[PIN_PAGES], ever[PIN_PAGES];
  memset(committed, 0, sizeof committed);
  memset(ever, 0, sizeof ever);
  /* [first page, pages, commit?] (a block is 4096 pages): runs inside a block, across
   * blocks, touching others, committed again */
  static const int64_t ops[][3] = {{10, 5, 1},     {15, 1000, 1},   {0, 10, 1},     {500, 20, 0}, {4090, 20, 1},
                                   {4000, 100, 0}, {5000, 4000, 1}, {8000, 300, 0}, {500, 20, 1}, {3, 12000, 0},
                                   {0, 3, 0},      {0, 30, 1},      {5000, 4000, 1}};
  for (size_t k = 0; f.base && k < sizeof ops / sizeof *ops; k++) {
    int64_t lo = ops[k][0], n = ops[k][1], zero = 1;
    if (ops[k][2]) {
      for (int64_t i = lo; i < lo + n; i++) CHECK(!committed[i]); /* as the executor does: only uncommitted pages */
      CHECK(cpu->commit(cpu, f.base, lo * 4096, n * 4096) == 0);
      for (int64_t i = lo * 4096; i < (lo + n) * 4096; i += 512) zero &= f.base[i] == 0;
      CHECK(zero);
      memset(f.base + lo * 4096, 0x5a, (size_t)n * 4096);
    } else {
      cpu->decommit(cpu, f.base, lo * 4096, n * 4096);
    }
    memset(committed + lo, (int)ops[k][2], (size_t)n);
    memset(ever + lo, 1, ops[k][2] ? (size_t)n : 0);
    int64_t pinned = 0, used = 0, seen = 0, covered = 1;
    for (int64_t i = 0; i < PIN_PAGES; i++) {
      pinned += f.reg[i] != 0, used += committed[i], seen += ever[i];
      covered &= f.reg[i] != 0 || !committed[i];
    }
    CHECK(covered && !f.bad && pinned <= (keep > used ? keep : used));
    if (keep == 0) /* nothing kept */
      CHECK(pinned == used);
    if (keep >= PIN_PAGES) /* everything kept */
      CHECK(pinned == seen);
  }
  if (f.base) cpu->unreserve(cpu, f.base, bytes);
  int none = 1;
  for (int64_t i = 0; i < PIN_PAGES; i++) none &= f.reg[i] == 0;
  CHECK(none && !f.bad);
  cpu->destroy(cpu);
}

static void test_pinned_reserve(void) {
  pinned_case(0);
  pinned_case(3000);
  pinned_case(PIN_PAGES);
}

/* ---- the executor on the bigram program ---------------------------------------- */

static void check_forward(Executor *ex, const RtProgram *p, const int32_t *tok) {
  const float *w = (const float *)exec_host_tier(ex, RT_TIER_PARAMS);
  const float *b = w + 256 * 256;
  const float *logits = (const float *)(exec_host_tier(ex, RT_TIER_WORK) + p->logits_offset);
  int ok = 1;
  for (int r = 0; r < 64; r++)
    for (int j = 0; j < 256; j++) ok &= logits[r * 256 + j] == w[tok[r] * 256 + j] + b[j];
  CHECK(ok);
}

static void test_forward(void) {
  RtProgram p;
  Executor ex;
  int32_t tok[64];
  float sc[TRAIN_SCALARS] = {0};
  Device *dev = device_cpu_new(colossalc_kernels, colossalc_nkernels, 3, err, sizeof err);
  CHECK(dev);
  CHECK(program_load(colossalc_program_json, colossalc_nkernels, &p, err, sizeof err) == 0);
  CHECK(exec_init(&ex, &p, dev, err, sizeof err) == 0);
  float *params = (float *)exec_host_tier(&ex, RT_TIER_PARAMS);
  philox_fill_normal(params, 65792, 0, 5, "x", 0.0f, 1.0f);
  for (int i = 0; i < 64; i++) tok[i] = (i * 97 + 13) % 256;
  exec_write(&ex, RT_TIER_WORK, p.inputs[p.tokens].offset, tok, sizeof tok);
  exec_run(&ex, &p.forward, sc);
  check_forward(&ex, &p, tok);
  exec_free(&ex);
  program_free(&p);
  dev->destroy(dev);
}

int main(void) {
  rt_mkdir_scratch("units");
  test_program_ok();
  test_program_errors();
  test_program_zero();
  test_init();
  test_schedule();
  test_overrides();
  test_pool();
  test_gemm();
  test_pinned_reserve();
  test_forward();
  return rt_finish("test_train_units");
}
