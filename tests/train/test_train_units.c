/* test_train_units: the pieces of the train runtime without a child process.
 *
 *   program   the bigram test program opens and reads as written (damaged and
 *             mismatched programs: tests/unit/test_program.c)
 *   init      every init rule: Philox normal/uniform keyed by (seed, name), zeros,
 *             ones, constant
 *   schedule  warm-up, cosine to min_lr at the last step, constant; the scalars
 *   overrides --beta2/--weight-decay/--lr reach the settings the kernels read;
 *             --loss-scale is refused for a program without loss scaling
 *   pool      every index of [0, n) runs exactly once, in the static chunks, for
 *             several thread counts and sizes
 *   gemm      the CPU device's GEMM (transposes, batch strides, alpha, beta) equals
 *             a naive loop
 *   forward   the executor runs the program's `forward`: logits = W[token] + b
 *   pieces    a checkpoint's boxes of a parameter that ZeRO holds in pieces
 *             (ProgParam.start), split over tp along its rows in two blocks: over
 *             the 2 x 2 ranks every element of the global tensor written once, from
 *             where the rank's layout holds it
 */
#include "runtime/executor.h"
#include "runtime/philox.h"
#include "runtime/device/threadpool.h"
#include "runtime/io/ckpt.h"
#include "runtime/train_loop.h"
#include "runtime/train_mesh.h"

#include "rt_test.h"

#include <math.h>
#include <stdint.h>

static char err[4096];

/* ---- the program -------------------------------------------------------------- */

/* The bigram program opens, and reads as it was written (test_program.h). */
static void test_program_ok(void) {
  Prog all;
  int rc = prog_open(colossalc_program, colossalc_program_bytes, &all, err, sizeof err);
  CHECK(rc == 0);
  if (rc != 0) return fprintf(stderr, "prog_open: %s\n", err), (void)0;
  Prog p = prog_stage(&all, 0);
  const ProgStage *s = p.s;
  CHECK(all.nstages == 2 && all.s->stage == -1 && s->stage == 0 && all.count[PROG_SEC_CODES] == colossalc_nkernels);
  CHECK(s->batch == 4 && s->seq == 16 && s->vocab == 256 && strcmp(prog_str(&p, s->model), "bigram-test") == 0);
  CHECK(s->nparams == 2 && s->param_elems == 65792 && p.params[0].ndim == 2);
  CHECK(p.params[1].init == PROG_INIT_ZEROS && !p.params[1].decay && p.params[0].decay);
  const ProgList *train = prog_list(&p, PROG_LIST_TRAIN), *fwd = prog_list(&p, PROG_LIST_FORWARD);
  CHECK(train && train->n == 10 && fwd && fwd->n == 5 && p.lists[0].n == 8);
  const IsaGemm *g = &p.instrs[p.lists[0].first + 6].gemm;
  CHECK(p.instrs[p.lists[0].first + 6].op == ISA_GEMM && g->ta == 1 && g->m == 256 && g->k == 64);
  CHECK(s->optimizer == PROG_OPT_ADAMW && s->warmup == 2 && s->clip == 1.0);
  CHECK(prog_find_param(&p, "bias") == &p.params[1] && !prog_find_param(&p, "nope"));
  CHECK(all.s->nparams == 2 && all.params[0].global == 0 && all.s->tiers[TIER_PARAMS] == 65792 * 4);
}

/* ---- init ---------------------------------------------------------------------- */

static void test_init(void) {
  static const ProgInit kinds[5] = {PROG_INIT_NORMAL, PROG_INIT_UNIFORM, PROG_INIT_ZEROS, PROG_INIT_ONES,
                                    PROG_INIT_CONSTANT};
  static const char names[] = "n\0u\0z\0o\0c"; /* a stage's view over these structs */
  ProgParam params[5];
  ProgStage st = {.nparams = 5};
  float buf[5 * 100], want[100];
  Prog p = {.s = &st, .params = params, .strings = names};
  for (int i = 0; i < 5; i++)
    params[i] = (ProgParam){.name = 2 * i,
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
  Executor ex = {0};
  ExecHp *hp = &ex.step.hp;
  *hp = (ExecHp){.lr = 1.0,
                 .min_lr = 0.1,
                 .warmup = 10,
                 .schedule = PROG_SCHED_COSINE,
                 .beta1 = 0.9,
                 .beta2 = 0.99,
                 .eps = 1e-8,
                 .weight_decay = 0.1};
  CHECK(near(exec_lr(hp, 1, 110), 0.1) && near(exec_lr(hp, 10, 110), 1.0));
  CHECK(near(exec_lr(hp, 60, 110), 0.55) && near(exec_lr(hp, 110, 110), 0.1));
  CHECK(exec_lr(hp, 11, 110) < 1.0 && exec_lr(hp, 11, 110) > 0.99);
  hp->schedule = PROG_SCHED_CONSTANT;
  CHECK(near(exec_lr(hp, 5, 110), 0.5) && near(exec_lr(hp, 100, 110), 1.0));
  hp->warmup = 0, hp->schedule = PROG_SCHED_COSINE;
  CHECK(near(exec_lr(hp, 100, 100), 0.1) && exec_lr(hp, 1, 100) > 0.99);
  const float *sc = ex.step.sc;
  exec_scalars(&ex, 0.25, 1, 0.5);
  CHECK(sc[SC_LR] == 0.25f && fabsf(sc[SC_BC1] - 10.0f) < 1e-5f);
  CHECK(fabsf(sc[SC_BC2] - 100.0f) < 1e-3f && sc[SC_GSCALE] == 0.5f);
  CHECK(sc[SC_STEP] == 1.0f && sc[SC_BETA2] == 0.99f && sc[SC_WD] == 0.1f);
  hp->loss_scaling = 1, ex.step.loss_scale = 1024, ex.step.steps = 100;
  exec_begin_step(&ex, 3); /* the step's learning rate, its loss scale the backward's seed */
  CHECK(near(ex.step.lr, exec_lr(hp, 3, 100)) && sc[SC_LOSS_SCALE] == 1024.0f && ex.step.scale == 1024);
}

/* ---- hyperparameter overrides ------------------------------------------------- */

/* trainer_init with `train --steps 0 FLAG VALUE` on the program; 0 or -1 with the
 * message in err; *value gets the settings used. */
static int init_with(const char *flag, const char *value, ExecHp *used) {
  char *argv[] = {"train", "--steps", "0", (char *)flag, (char *)value, NULL};
  TrainOpts o;
  Prog p;
  Trainer t;
  int rc = train_opts_parse(5, argv, &o, err, sizeof err);
  CHECK(rc == 0);
  CHECK(prog_open(colossalc_program, colossalc_program_bytes, &p, err, sizeof err) == 0);
  rc = trainer_init(&t, &p, &colossalc_cpu_builds[0], &o, NULL, err, sizeof err);
  *used = t.ex.step.hp;
  trainer_free(&t);
  return rc;
}

/* Every kernel reads the optimizer's settings from the scalars: the flags reach them. */
static void test_overrides(void) {
  ExecHp hp;
  CHECK(init_with("--beta2", "0.99", &hp) == 0 && hp.beta2 == 0.99 && hp.beta1 == 0.9);
  CHECK(init_with("--weight-decay", "0", &hp) == 0 && hp.weight_decay == 0);
  CHECK(init_with("--lr", "0.5", &hp) == 0 && hp.lr == 0.5 && hp.min_lr == 0.005);
  CHECK(init_with("--loss-scale", "8", &hp) == -1);
  CHECK_ERR(err, "--loss-scale: this program does not scale its loss");
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
static void gemm_naive(const IsaGemm *g, const float *a, const float *b, float *c, const float *bias) {
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
  IsaGemm g = {.ta = ta,
               .tb = tb,
               .m = M,
               .n = N,
               .k = K,
               .lda = LD,
               .ldb = LD,
               .ldc = LD,
               .alpha = 0.5f,
               .beta = bias ? 0.0f : 2.0f,
               .tier = {TIER_WORK, TIER_WORK, TIER_WORK},
               .off = {0, 4 * 600, 4 * 1200},
               .batch = {2, 3},
               .stride = {{3 * SLAB, SLAB}, {3 * SLAB, SLAB}, {3 * SLAB, SLAB}},
               .bias = (int8_t)bias,
               .bias_tier = TIER_WORK,
               .bias_off = 4 * 1800};
  for (int i = 0; i < WORK; i++) work[i] = want[i] = (float)((i * 37 % 101) - 50) / 25.0f;
  char *tiers[TIERS] = {NULL, NULL, NULL, (char *)work};
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
  IsaGemm g = {.ta = ta,
               .tb = tb,
               .m = M,
               .n = N,
               .k = K,
               .lda = LD,
               .ldb = LD,
               .ldc = LD,
               .alpha = 1.0f,
               .tier = {TIER_WORK, TIER_WORK, TIER_WORK},
               .off = {4 * A0, 4 * B0, 4 * C0},
               .batch = {1, 1},
               .bias = 1,
               .bias_tier = TIER_WORK,
               .bias_off = 4 * BIAS,
               .gelu = 1,
               .aux = 1,
               .aux_tier = TIER_WORK,
               .aux_off = 4 * AUX};
  for (int i = 0; i < WORK; i++) work[i] = want[i] = (float)((i * 37 % 101) - 50) / 25.0f;
  char *tiers[TIERS] = {NULL, NULL, NULL, (char *)work};
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

static void check_forward(Executor *ex, const Prog *p, const int32_t *tok) {
  const float *w = (const float *)exec_host_tier(ex, TIER_PARAMS);
  const float *b = w + 256 * 256;
  const float *logits = (const float *)(exec_host_tier(ex, TIER_WORK) + p->s->logits_offset);
  int ok = 1;
  for (int r = 0; r < 64; r++)
    for (int j = 0; j < 256; j++) ok &= logits[r * 256 + j] == w[tok[r] * 256 + j] + b[j];
  CHECK(ok);
}

/* The executor runs `forward`: its "input" uploads the tokens' first micro-batch. */
static void test_forward(void) {
  Prog all, p;
  Executor ex;
  int32_t tok[64];
  char *rows[2] = {(char *)tok, NULL};
  Device *dev = device_cpu_new(colossalc_cpu_builds[0].kernels, colossalc_nkernels, 3, err, sizeof err);
  CHECK(dev);
  CHECK(prog_open(colossalc_program, colossalc_program_bytes, &all, err, sizeof err) == 0);
  p = prog_stage(&all, 0);
  CHECK(exec_init(&ex, &p, dev, err, sizeof err) == 0);
  float *params = (float *)exec_host_tier(&ex, TIER_PARAMS);
  philox_fill_normal(params, 65792, 0, 5, "x", 0.0f, 1.0f);
  for (int i = 0; i < 64; i++) tok[i] = (i * 97 + 13) % 256;
  ex.ctx.inputs = rows;
  CHECK(exec_run(&ex, prog_list(&p, PROG_LIST_FORWARD)) == 0);
  check_forward(&ex, &p, tok);
  exec_free(&ex);
  dev->destroy(dev);
}

/* ---- pieces -------------------------------------------------------------------- */

typedef struct Cover {
  int *count;        /* [global elements] times written */
  const float *base; /* the rank's array */
  int bad;           /* a line whose values are not the global elements it claims */
} Cover;

/* The rank's array holds global index g's value g (see test_mesh_pieces). */
static void cover_line(void *arg, float *dst, int64_t gindex, int64_t len) {
  Cover *c = arg;
  for (int64_t i = 0; i < len; i++) c->count[gindex + i]++, c->bad |= dst[i] != (float)(gindex + i);
}

/* Global w [8, 4] split over tp 2 along dimension 0 in 2 blocks of 2 rows (tp rank t:
 * global rows 2t, 2t+1 and 4+2t, 5+2t), its local [4, 4] in two pieces, rows [0, 1)
 * (owned by dp rank 0) and [1, 4) (dp rank 1): the second crosses the blocks. */
static void test_mesh_pieces(void) {
  static const char names[] = "w";
  int64_t gshape[2] = {8, 4};
  ProgParam gp = {.ndim = 2, .numel = 32, .tp_dim = 0, .tp_blocks = 2, .owner = -1};
  gp.shape[0] = 8, gp.shape[1] = 4;
  ProgParam lp[2];
  for (int i = 0; i < 2; i++) {
    lp[i] = gp;
    lp[i].shape[0] = 4, lp[i].start = i ? 4 : 0, lp[i].numel = i ? 12 : 4, lp[i].offset = lp[i].start * 4;
    lp[i].owner = i;
  }
  ProgStage gs = {.nparams = 1, .optimizer = PROG_OPT_SGD}, ls = {.nparams = 2, .optimizer = PROG_OPT_SGD};
  int source[1] = {0}, count[32] = {0};
  Cover c = {count, NULL, 0};
  for (int t = 0; t < 2; t++)
    for (int d = 0; d < 2; d++) {
      Mesh m = {.dp = 2, .tp = 2, .pp = 1, .dp_rank = d, .tp_rank = t, .source = source};
      m.global = (Prog){.s = &gs, .params = &gp, .strings = names};
      m.prog = (Prog){.s = &ls, .params = lp, .strings = names};
      unsigned char owned[2] = {d == 0, d == 1};
      MeshPieceRule r = {.writing = 1, .params = 1, .zero_stage = 3, .params_prefix = "param/", .owned = owned};
      float local[16];
      for (int row = 0; row < 4; row++) /* local row -> global row (the block layout) */
        for (int k = 0; k < 4; k++) local[row * 4 + k] = (float)(((row / 2) * 4 + t * 2 + row % 2) * 4 + k);
      MeshPieces mp;
      CHECK(mesh_pieces(&m, &r, (char *)local, NULL, &mp) == 0);
      CHECK(mp.n == (d == 0 ? 1 : 2)); /* piece [1, 4) meets both blocks */
      for (int i = 0; i < mp.n; i++) {
        CHECK(strcmp(mp.p[i].key, "param/w") == 0 && mp.p[i].gshape[0] == gshape[0] && mp.global[i] == 0);
        shards_lines(&mp.p[i], cover_line, &c);
      }
      mesh_pieces_free(&mp);
    }
  int once = 1;
  for (int i = 0; i < 32; i++) once &= count[i] == 1;
  CHECK(once && !c.bad);
}

int main(void) {
  rt_mkdir_scratch("units");
  test_program_ok();
  test_init();
  test_schedule();
  test_overrides();
  test_pool();
  test_gemm();
  test_pinned_reserve();
  test_forward();
  test_mesh_pieces();
  return rt_finish("test_train_units");
}
