/* test_train_check: end-to-end checks of a `train` executable (the bigram test
 * program of linreg_program.c linked with colossalc_train). Each scenario runs
 * train as a child process in a scratch directory and checks its exit status,
 * output, JSON log and files.
 *
 *   test_train_check SCENARIO TRAIN TOKENS [DIR]
 *
 *   help              --help exits 0 and lists every flag
 *   loss_falls        40 steps: the log has steps 1..40 with every field, and the
 *                     mean loss of the last 5 steps is 0.5 below that of the first 5
 *   init_philox       --steps 0 --save: wte.weight is Philox normal(0, 0.02) keyed by
 *                     (seed, name), bit for bit; bias is zeros; seeds differ
 *   resume            6 steps with --ckpt-every 3; latest pointed back at ckpt-3; a
 *                     --resume run logs steps 4-6 with the same losses and grad norms
 *                     bit for bit, and rewrites a byte-identical ckpt-6
 *   deterministic     two identical runs log identical losses
 *   save_roundtrip    --save, then --init-from + --save gives a byte-identical file;
 *                     the trained parameters lower batch 0's loss
 *   sample            --sample 200 prints the marker line, 200 bytes and a newline,
 *                     the same for the same seed
 *   val               --val/--val-every: val_loss lines at steps 2 and 4; --steps 0
 *                     --val evaluates once
 *   bad_*             exit status 1 and a "train: ..." message naming the problem;
 *                     bad_program: a copy of train with its embedded program of
 *                     another format version or struct layout, damaged, or of another
 *                     size, refused in one line
 *   pyref DIR         train with DIR/args.txt (bigram_ref.py): losses within 1e-5
 *                     relative of DIR/ref_losses.txt, parameters after the last
 *                     update within 1e-5 of DIR/final.safetensors
 */
#include "program/program.h"
#include "runtime/io/fileio.h"
#include "runtime/philox.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/shards.h"
#include "runtime/io/tokens.h"

#include "rt_test.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/wait.h>

extern char **environ;

static const char *train_bin, *tokens_path;
static char err[4096];

/* ---- running train ------------------------------------------------------------- */

enum { ARGV_MAX = 64 };

typedef struct Run {
  int status;      /* exit status, 128+signal, or -1 */
  char *out, *err; /* whole stdout and stderr (NUL-terminated) */
  size_t out_len;
} Run;

static void run_free(Run *r) { free(r->out), free(r->err); }

static Run run_argv(char **argv) {
  Run r = {-1, NULL, NULL, 0};
  char out_path[512], err_path[512];
  snprintf(out_path, sizeof out_path, "%s", rt_path("stdout.txt"));
  snprintf(err_path, sizeof err_path, "%s", rt_path("stderr.txt"));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int ws;
  if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0 && waitpid(pid, &ws, 0) == pid)
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : -1;
  posix_spawn_file_actions_destroy(&fa);
  size_t len = 0;
  r.out = file_read_all(out_path, &r.out_len, err, sizeof err);
  r.err = file_read_all(err_path, &len, err, sizeof err);
  if (!r.out || !r.err) {
    fprintf(stderr, "cannot read the output of %s\n", argv[0]);
    exit(2);
  }
  return r;
}

/* train ARGS... (a NULL-terminated list) with stdout and stderr captured. */
static Run run_train(const char *first, ...) {
  char *argv[ARGV_MAX];
  int n = 0;
  argv[n++] = (char *)train_bin;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && n < ARGV_MAX - 1; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  return run_argv(argv);
}

/* The run succeeded (status 0); prints its stderr otherwise. */
static int expect_ok(const Run *r, const char *what) {
  if (r->status == 0) return 1;
  fprintf(stderr, "%s: train exited with %d:\n%s", what, r->status, r->err);
  rt_failures++;
  return 0;
}

/* Exit status 1, stderr starts with "train: " and contains want. */
static void expect_fail(Run r, const char *want) {
  if (r.status != 1 || strncmp(r.err, "train: ", 7) != 0 || !strstr(r.err, want)) {
    fprintf(stderr, "expected exit 1 and \"train: ...%s...\", got %d and:\n%s", want, r.status, r.err);
    rt_failures++;
  }
  run_free(&r);
}

/* ---- logs ---------------------------------------------------------------------- */

enum { LOG_MAX = 256 };

typedef struct LogLine {
  long step;
  double loss, lr, grad_norm, ms, tps, val_loss;
  int has_all, is_val;
} LogLine;

static double json_get(const cJSON *o, const char *key, int *ok) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  *ok &= cJSON_IsNumber(it);
  return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static int log_parse_line(const char *line, LogLine *l) {
  cJSON *o = cJSON_Parse(line);
  int ok = 1, vok = 1, sok = 1;
  memset(l, 0, sizeof *l);
  l->step = (long)json_get(o, "step", &sok);
  l->val_loss = json_get(o, "val_loss", &vok);
  l->is_val = vok;
  l->loss = json_get(o, "loss", &ok);
  l->lr = json_get(o, "lr", &ok);
  l->grad_norm = json_get(o, "grad_norm", &ok);
  l->ms = json_get(o, "ms", &ok);
  l->tps = json_get(o, "tokens_per_s", &ok);
  l->has_all = ok;
  cJSON_Delete(o);
  return o && sok ? 0 : -1;
}

/* Lines of a JSON-lines log; returns the count (or -1). Validation lines are kept
 * apart from step lines when steps_only. */
static int log_read(const char *path, LogLine *lines, int steps_only) {
  size_t len;
  char *text = file_read_all(path, &len, err, sizeof err), *save = NULL;
  int n = 0;
  if (!text) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  for (char *line = strtok_r(text, "\n", &save); line && n < LOG_MAX; line = strtok_r(NULL, "\n", &save)) {
    if (log_parse_line(line, &lines[n]) != 0) {
      fprintf(stderr, "%s: bad log line: %s\n", path, line);
      n = -1;
      break;
    }
    n += !(steps_only && lines[n].is_val);
  }
  free(text);
  return n;
}

/* ---- scenarios ----------------------------------------------------------------- */

static void test_help(void) {
  static const char *const flags[] = {
      "--data", "--val ",         "--val-every",  "--steps",  "--lr ", "--warmup", "--min-lr",  "--lr-schedule",
      "--seed", "--weight-decay", "--beta1",      "--beta2",  "--eps", "--clip",   "--threads", "--init-from",
      "--save", "--ckpt-dir",     "--ckpt-every", "--resume", "--log", "--sample", "--help"};
  Run r = run_train("--help", NULL);
  CHECK(r.status == 0);
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) CHECK_ERR(r.out, flags[i]);
  run_free(&r);
}

static void test_loss_falls(void) {
  static LogLine l[LOG_MAX];
  Run r = run_train("--data", tokens_path, "--steps", "40", "--log", rt_path("log.jsonl"), NULL);
  int ok = expect_ok(&r, "loss_falls");
  if (ok) CHECK_ERR(r.out, "step 40/40 | loss ");
  run_free(&r);
  int n = ok ? log_read(rt_path("log.jsonl"), l, 1) : -1;
  CHECK(n == 40);
  double first = 0, last = 0;
  for (int i = 0; i < n; i++) {
    CHECK(l[i].step == i + 1 && l[i].has_all && isfinite(l[i].loss) && l[i].ms >= 0);
    first += i < 5 ? l[i].loss / 5 : 0;
    last += i >= n - 5 ? l[i].loss / 5 : 0;
  }
  printf("loss_falls: mean loss of steps 1-5 %.4f, of steps 36-40 %.4f\n", first, last);
  CHECK(n == 40 && last < first - 0.5);
}

static SafeTensors *open_st(const char *path) {
  SafeTensors *st = safetensors_open(path, err, sizeof err);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    rt_failures++;
  }
  return st;
}

/* Tensor name of st as f32 into a malloc'd buffer of *n values. */
static float *st_read(const SafeTensors *st, const char *name, int64_t *n) {
  const SafeTensor *t = safetensors_find(st, name);
  float *v = t ? malloc((size_t)t->numel * sizeof *v + 1) : NULL;
  if (!v || safetensors_read_f32(st, t, v, t->numel, err, sizeof err) != 0) {
    fprintf(stderr, "tensor %s: missing or unreadable\n", name);
    rt_failures++;
    free(v);
    return NULL;
  }
  *n = t->numel;
  return v;
}

static void check_philox_init(const char *path, uint64_t seed) {
  SafeTensors *st = open_st(path);
  int64_t nw = 0, nb = 0;
  float *w = st ? st_read(st, "wte.weight", &nw) : NULL;
  float *b = st ? st_read(st, "bias", &nb) : NULL;
  float *want = calloc((size_t)nw + 1, sizeof *want);
  philox_fill_normal(want, (size_t)nw, 0, seed, "wte.weight", 0.0f, 0.02f);
  CHECK(nw == 65536 && nb == 256);
  CHECK(w && memcmp(w, want, (size_t)nw * 4) == 0);
  for (int64_t i = 0; b && i < nb; i++) CHECK(b[i] == 0.0f);
  free(w), free(b), free(want);
  if (st) safetensors_close(st);
}

static void test_init_philox(void) {
  Run r = run_train("--steps", "0", "--seed", "7", "--save", rt_path("s7.st"), NULL);
  if (expect_ok(&r, "init seed 7")) check_philox_init(rt_path("s7.st"), 7);
  run_free(&r);
  r = run_train("--steps", "0", "--save", rt_path("s1337.st"), NULL);
  if (expect_ok(&r, "init default seed")) check_philox_init(rt_path("s1337.st"), 1337);
  run_free(&r);
}

/* Steps from..to of logs a and b (indexed by step) hold the same loss and norm. */
static void check_same_steps(const LogLine *a, int na, const LogLine *b, int nb, int bfirst, int from, int to) {
  for (int s = from; s <= to; s++) {
    int i = s - 1, j = s - bfirst;
    if (i >= na || j < 0 || j >= nb) {
      fprintf(stderr, "step %d missing (%d and %d lines)\n", s, na, nb);
      rt_failures++;
      continue;
    }
    CHECK(a[i].step == s && b[j].step == s);
    CHECK(a[i].loss == b[j].loss && a[i].grad_norm == b[j].grad_norm && a[i].lr == b[j].lr);
  }
}

static char *read_or_die(const char *path, size_t *len) {
  char *t = file_read_all(path, len, err, sizeof err);
  if (!t) {
    fprintf(stderr, "%s\n", err);
    exit(2);
  }
  return t;
}

/* A checkpoint (a set of shards, runtime/io/shards.h) of the linear model at step 6. */
static void check_ckpt_meta(const char *path) {
  ShardSet *st = shards_open(path, err, sizeof err);
  CHECK(st != NULL);
  if (!st) return;
  CHECK(shards_find(st, "param/wte.weight") >= 0 && shards_find(st, "opt_m/bias") >= 0 &&
        shards_find(st, "opt_v/wte.weight") >= 0 && shards_count(st) == 6);
  const char *step = shards_meta(st, "step");
  const char *ds = shards_meta(st, "data_step");
  const char *seed = shards_meta(st, "seed");
  CHECK(step && strcmp(step, "6") == 0 && ds && strcmp(ds, "6") == 0);
  CHECK(seed && strcmp(seed, "1337") == 0);
  CHECK(shards_verify(st, err, sizeof err) == 0);
  shards_close(st);
}

static void rewrite_latest(const char *dir, const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/latest", dir);
  rt_write_raw(path, name, strlen(name));
}

static void test_resume(void) {
  static LogLine a[LOG_MAX], b[LOG_MAX];
  char dir[512], ck6[600], latest[600], shard6[700];
  snprintf(dir, sizeof dir, "%s", rt_path("ckpt"));
  snprintf(ck6, sizeof ck6, "%s/ckpt-6", dir);
  snprintf(shard6, sizeof shard6, "%s/shard-00000-of-00001.safetensors", ck6);
  snprintf(latest, sizeof latest, "%s/latest", dir);
  Run r = run_train("--data", tokens_path, "--steps", "6", "--ckpt-dir", dir, "--ckpt-every", "3", "--threads", "2",
                    "--log", rt_path("a.jsonl"), NULL);
  int ok = expect_ok(&r, "resume: full run");
  run_free(&r);
  if (!ok) return;
  size_t l6, ll, l6b;
  char *full6 = read_or_die(shard6, &l6), *lat = read_or_die(latest, &ll);
  CHECK(strcmp(lat, "ckpt-6\n") == 0);
  check_ckpt_meta(ck6);
  rewrite_latest(dir, "ckpt-3\n");
  r = run_train("--data", tokens_path, "--steps", "6", "--ckpt-dir", dir, "--ckpt-every", "3", "--threads", "2",
                "--resume", "--log", rt_path("b.jsonl"), NULL);
  if (expect_ok(&r, "resume: resumed run")) {
    CHECK_ERR(r.out, "resumed from");
    int na = log_read(rt_path("a.jsonl"), a, 1), nb = log_read(rt_path("b.jsonl"), b, 1);
    CHECK(na == 6 && nb == 3);
    check_same_steps(a, na, b, nb, 4, 4, 6);
    char *again6 = read_or_die(shard6, &l6b);
    CHECK(l6 == l6b && memcmp(full6, again6, l6) == 0);
    free(again6);
  }
  run_free(&r);
  free(full6), free(lat);
}

static void test_deterministic(void) {
  static LogLine a[LOG_MAX], b[LOG_MAX];
  Run r1 = run_train("--data", tokens_path, "--steps", "8", "--log", rt_path("1.jsonl"), NULL);
  Run r2 = run_train("--data", tokens_path, "--steps", "8", "--log", rt_path("2.jsonl"), NULL);
  if (expect_ok(&r1, "run 1") && expect_ok(&r2, "run 2")) {
    int na = log_read(rt_path("1.jsonl"), a, 1), nb = log_read(rt_path("2.jsonl"), b, 1);
    CHECK(na == 8 && nb == 8);
    check_same_steps(a, na, b, nb, 1, 1, 8);
  }
  run_free(&r1), run_free(&r2);
}

static void test_save_roundtrip(void) {
  static LogLine a[LOG_MAX], b[LOG_MAX];
  char p1[512], p2[512];
  snprintf(p1, sizeof p1, "%s", rt_path("p1.st"));
  snprintf(p2, sizeof p2, "%s", rt_path("p2.st"));
  Run r = run_train("--data", tokens_path, "--steps", "5", "--save", p1, "--log", rt_path("a.jsonl"), NULL);
  int ok = expect_ok(&r, "train and save");
  run_free(&r);
  r = run_train("--steps", "0", "--init-from", p1, "--save", p2, NULL);
  ok = ok && expect_ok(&r, "load and save");
  run_free(&r);
  r = run_train("--data", tokens_path, "--steps", "1", "--init-from", p1, "--log", rt_path("b.jsonl"), NULL);
  ok = ok && expect_ok(&r, "train from saved");
  run_free(&r);
  if (!ok) return;
  size_t l1, l2;
  char *t1 = read_or_die(p1, &l1), *t2 = read_or_die(p2, &l2);
  CHECK(l1 == l2 && memcmp(t1, t2, l1) == 0);
  free(t1), free(t2);
  int na = log_read(rt_path("a.jsonl"), a, 1), nb = log_read(rt_path("b.jsonl"), b, 1);
  CHECK(na == 5 && nb == 1 && b[0].loss < a[0].loss);
}

/* The sample in stdout: marker, n bytes, newline at the very end. */
static void check_sample(const Run *r, int n) {
  char marker[64];
  snprintf(marker, sizeof marker, "--- sample (%d tokens) ---\n", n);
  const char *at = strstr(r->out, marker);
  CHECK(at != NULL);
  if (!at) return;
  size_t rest = r->out_len - (size_t)(at - r->out) - strlen(marker);
  CHECK(rest == (size_t)n + 1 && r->out[r->out_len - 1] == '\n');
}

static void test_sample(void) {
  Run r1 = run_train("--data", tokens_path, "--steps", "30", "--sample", "200", NULL);
  Run r2 = run_train("--data", tokens_path, "--steps", "30", "--sample", "200", NULL);
  if (expect_ok(&r1, "sample 1") && expect_ok(&r2, "sample 2")) {
    check_sample(&r1, 200);
    CHECK(r1.out_len > 201 && r2.out_len > 201 &&
          memcmp(r1.out + r1.out_len - 201, r2.out + r2.out_len - 201, 201) == 0);
  }
  run_free(&r1), run_free(&r2);
}

static void test_val(void) {
  static LogLine l[LOG_MAX];
  Run r = run_train("--data", tokens_path, "--val", tokens_path, "--val-every", "2", "--steps", "4", "--log",
                    rt_path("v.jsonl"), NULL);
  if (expect_ok(&r, "val")) {
    int n = log_read(rt_path("v.jsonl"), l, 0);
    CHECK(n == 6 && l[2].is_val && l[2].step == 2 && l[5].is_val && l[5].step == 4);
    CHECK(n == 6 && isfinite(l[5].val_loss) && l[5].val_loss < 10);
    CHECK_ERR(r.out, "val 4 | loss ");
  }
  run_free(&r);
  r = run_train("--steps", "0", "--val", tokens_path, "--log", rt_path("v0.jsonl"), NULL);
  if (expect_ok(&r, "val at step 0")) {
    int n = log_read(rt_path("v0.jsonl"), l, 0);
    CHECK(n == 1 && l[0].is_val && l[0].step == 0);
  }
  run_free(&r);
}

/* ---- bad inputs ---------------------------------------------------------------- */

static void test_bad_missing_data(void) {
  expect_fail(run_train(NULL), "--data FILE is required for training");
  expect_fail(run_train("--data", rt_path("absent.bin"), NULL), "cannot open");
}

static void test_bad_magic(void) {
  int32_t header[256] = {12345, 1, 0};
  rt_write_raw(rt_path("bad.bin"), header, sizeof header);
  expect_fail(run_train("--data", rt_path("bad.bin"), NULL), "bad magic");
  rt_write_raw(rt_path("short.bin"), header, 10);
  expect_fail(run_train("--data", rt_path("short.bin"), NULL), "short.bin");
}

/* A copy of train with its embedded program edited: `size` bytes of value at `at`
 * bytes from the program's header (program/program.h), found by its magic and format
 * version; run, it is refused in one line naming want. */
static void bad_program_case(const char *name, int64_t at, uint64_t value, size_t size, const char *want) {
  FILE *f = fopen(train_bin, "rb");
  static unsigned char bin[64 << 20];
  size_t len = f ? fread(bin, 1, sizeof bin, f) : 0;
  if (f) fclose(f);
  unsigned char magic[12] = "colossal";
  uint32_t version = PROG_VERSION;
  memcpy(magic + 8, &version, 4);
  size_t h = 0;
  while (h + sizeof magic <= len && memcmp(bin + h, magic, sizeof magic)) h += 8; /* the header is 64-aligned */
  if (h + sizeof magic > len) {
    fprintf(stderr, "%s: no program header in %s\n", name, train_bin);
    rt_failures++;
    return;
  }
  memcpy(bin + h + at, &value, size);
  const char *path = rt_path(name);
  rt_write_raw(path, bin, len);
  chmod(path, 0755);
  char *argv[] = {(char *)path, "--data", (char *)tokens_path, "--steps", "1", NULL};
  Run r = run_argv(argv);
  if (strchr(r.err, '\n') != strrchr(r.err, '\n')) {
    fprintf(stderr, "%s: the refusal takes more than one line:\n%s", name, r.err);
    rt_failures++;
  }
  expect_fail(r, want);
}

static void test_bad_program(void) {
  const ProgHeader *h = NULL;
  char newer[64];
  snprintf(newer, sizeof newer, "format version %d and this runtime reads version %d", PROG_VERSION + 1, PROG_VERSION);
  bad_program_case("version", (int64_t)sizeof h->magic, PROG_VERSION + 1, 4, newer);
  bad_program_case("layout", (int64_t)offsetof(ProgHeader, layout), 0x12345678, 4, "are not this runtime's");
  bad_program_case("damaged", (int64_t)sizeof(ProgHeader) + 40, 0x5a5a5a5a, 4, "the program is damaged");
  bad_program_case("size", (int64_t)offsetof(ProgHeader, bytes), 1 << 30, 8, "its header says");
}

/* wte.weight ([256,128] when bad_shape), then bias and junk as asked. */
static void write_params(const char *path, int with_bias, int extra, int bad_shape) {
  static float w[256 * 256], bias[256];
  int64_t ws[2] = {256, bad_shape ? 128 : 256}, bs[1] = {256};
  SafeTensorOut t[3] = {{"wte.weight", 2, ws, w}, {"bias", 1, bs, bias}, {"junk", 1, bs, bias}};
  if (safetensors_write(path, t, 1 + with_bias + extra, NULL, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(2);
  }
}

static void test_bad_init_missing(void) {
  write_params(rt_path("nobias.st"), 0, 0, 0);
  expect_fail(run_train("--steps", "0", "--init-from", rt_path("nobias.st"), NULL),
              "does not match the model; missing tensors (1): bias");
  write_params(rt_path("extra.st"), 1, 1, 1);
  expect_fail(run_train("--steps", "0", "--init-from", rt_path("extra.st"), NULL),
              "unexpected tensors (1): junk; wrong shapes (1): wte.weight (file [256,128], "
              "model [256,256])");
  rt_write_raw(rt_path("junk.st"), "not a safetensors file", 22);
  expect_fail(run_train("--steps", "0", "--init-from", rt_path("junk.st"), NULL), "junk.st");
}

static void test_bad_unknown_flag(void) {
  expect_fail(run_train("--frobnicate", NULL), "unknown flag '--frobnicate'");
  expect_fail(run_train("stray", NULL), "unexpected argument 'stray'");
  expect_fail(run_train("--steps", "abc", NULL), "--steps: expected an integer");
  expect_fail(run_train("--lr-schedule", "linear", NULL), "--lr-schedule: expected cosine or constant");
  expect_fail(run_train("--data", NULL), "--data needs a value");
  expect_fail(run_train("--resume=1", NULL), "--resume takes no value");
}

static void test_bad_ckpt_dir(void) {
  char under_file[600];
  rt_write_raw(rt_path("plain"), "x", 1);
  snprintf(under_file, sizeof under_file, "%s/ckpt", rt_path("plain"));
  expect_fail(run_train("--data", tokens_path, "--ckpt-dir", under_file, NULL), "ckpt: Not a directory");
  char deep[600], shard[700]; /* missing folders are made, as mkdir -p does */
  snprintf(deep, sizeof deep, "%s/a/b", rt_path("deep"));
  Run r = run_train("--data", tokens_path, "--steps", "1", "--ckpt-dir", deep, NULL);
  expect_ok(&r, "--ckpt-dir with missing parents");
  run_free(&r);
  snprintf(shard, sizeof shard, "%s/ckpt-1/shard-00000-of-00001.safetensors", deep);
  CHECK(access(shard, F_OK) == 0);
  expect_fail(run_train("--data", tokens_path, "--ckpt-every", "2", NULL), "--ckpt-every needs --ckpt-dir");
  expect_fail(run_train("--data", tokens_path, "--save", "/nonexistent-colossalc/p.st", NULL),
              "--save /nonexistent-colossalc/p.st: cannot write in /nonexistent-colossalc");
  expect_fail(run_train("--data", tokens_path, "--log", "/nonexistent-colossalc/l.jsonl", NULL),
              "--log /nonexistent-colossalc/l.jsonl: cannot open");
}

static void test_bad_resume_empty(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", rt_path("empty"));
  mkdir(dir, 0755);
  expect_fail(run_train("--data", tokens_path, "--ckpt-dir", dir, "--resume", NULL), "no checkpoint to resume from");
  rewrite_latest(dir, "ckpt-9.safetensors\n");
  expect_fail(run_train("--data", tokens_path, "--ckpt-dir", dir, "--resume", NULL), "ckpt-9.safetensors: cannot open");
  rewrite_latest(dir, "../../etc/passwd\n");
  expect_fail(run_train("--data", tokens_path, "--ckpt-dir", dir, "--resume", NULL),
              "does not hold a checkpoint file name");
  write_params(rt_path("empty/ckpt-1.safetensors"), 1, 0, 0);
  rewrite_latest(dir, "ckpt-1.safetensors");
  expect_fail(run_train("--data", tokens_path, "--ckpt-dir", dir, "--resume", NULL), "not a colossalc checkpoint");
}

static void test_bad_token_range(void) {
  uint16_t toks[100];
  for (int i = 0; i < 100; i++) toks[i] = (uint16_t)(i == 70 ? 300 : 65 + i % 26);
  if (tokens_write_file(rt_path("big.bin"), toks, 100, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(2);
  }
  expect_fail(run_train("--data", rt_path("big.bin"), "--steps", "3", NULL),
              "input tokens: 300 in batch 1 (row 0, position 6) is outside [0, 256)");
  expect_fail(
      run_train("--data", rt_path("big.bin"), "--steps", "1", "--sample", "0", "--val", rt_path("missing.bin"), NULL),
      "missing.bin: cannot open");
}

static void test_bad_values(void) {
  expect_fail(run_train("--threads", "0", NULL), "--threads: expected an integer in [1, 1024]");
  expect_fail(run_train("--beta1", "1.5", NULL), "--beta1: expected a number");
  expect_fail(run_train("--steps", "-1", NULL), "--steps: expected an integer");
  expect_fail(run_train("--eps", "0", NULL), "--eps: expected a number");
  expect_fail(run_train("--lr", "nan", NULL), "--lr: expected a number");
  expect_fail(run_train("--seed", "-5", NULL), "--seed: expected an unsigned");
  expect_fail(run_train("--data", tokens_path, "--val-every", "5", NULL), "--val-every needs --val");
  expect_fail(run_train("--steps", "0", "--resume", NULL), "--resume needs --ckpt-dir");
  expect_fail(run_train("--steps", "0", "--resume", "--ckpt-dir", rt_dir, "--init-from", "x", NULL),
              "--resume and --init-from exclude each other");
}

/* ---- PyTorch reference --------------------------------------------------------- */

/* DIR/args.txt → argv (train first), lines as arguments. */
static int read_args(const char *dir, char **argv, char **text) {
  char path[600];
  size_t len;
  int n = 0;
  snprintf(path, sizeof path, "%s/args.txt", dir);
  *text = read_or_die(path, &len);
  argv[n++] = (char *)train_bin;
  char *save = NULL;
  for (char *a = strtok_r(*text, "\n", &save); a && n < ARGV_MAX - 8; a = strtok_r(NULL, "\n", &save)) argv[n++] = a;
  return n;
}

static void compare_losses(const char *dir, const LogLine *l, int n) {
  char path[600];
  size_t len;
  snprintf(path, sizeof path, "%s/ref_losses.txt", dir);
  char *text = read_or_die(path, &len), *save = NULL, *line = strtok_r(text, "\n", &save);
  double worst = 0;
  int i = 0;
  for (; line; line = strtok_r(NULL, "\n", &save), i++) {
    double ref = atof(line), got = i < n ? l[i].loss : NAN, rel = fabs(got - ref) / fabs(ref);
    printf("step %d: train %.9g  torch %.9g  rel diff %.2e\n", i + 1, got, ref, rel);
    worst = rel > worst || isnan(rel) ? rel : worst;
  }
  printf("pyref: max relative loss difference %.3e over %d steps\n", worst, i);
  CHECK(i == n && i == 5 && worst <= 1e-5);
  free(text);
}

static void compare_params(const char *dir, const char *got_path) {
  char path[600];
  snprintf(path, sizeof path, "%s/final.safetensors", dir);
  SafeTensors *ref = open_st(path), *got = open_st(got_path);
  static const char *const names[2] = {"wte.weight", "bias"};
  for (int k = 0; ref && got && k < 2; k++) {
    int64_t nr = 0, ng = 0;
    float *r = st_read(ref, names[k], &nr), *g = st_read(got, names[k], &ng);
    double worst = 0;
    for (int64_t i = 0; r && g && nr == ng && i < nr; i++) worst = fmax(worst, fabs((double)r[i] - g[i]));
    printf("pyref: %s after the last update: max abs difference %.3e\n", names[k], worst);
    CHECK(r && g && nr == ng && worst <= 1e-5);
    free(r), free(g);
  }
  if (ref) safetensors_close(ref);
  if (got) safetensors_close(got);
}

static void test_pyref(const char *dir) {
  static LogLine l[LOG_MAX];
  char *argv[ARGV_MAX], *text, log[512], save[512];
  snprintf(log, sizeof log, "%s", rt_path("py.jsonl"));
  snprintf(save, sizeof save, "%s", rt_path("final.st"));
  int n = read_args(dir, argv, &text);
  const char *more[] = {"--data", tokens_path, "--log", log, "--save", save};
  for (int i = 0; i < 6; i++) argv[n++] = (char *)more[i];
  argv[n] = NULL;
  Run r = run_argv(argv);
  if (expect_ok(&r, "pyref")) {
    compare_losses(dir, l, log_read(log, l, 1));
    compare_params(dir, save);
  }
  run_free(&r);
  free(text);
}

static const struct Scenario {
  const char *name;
  void (*fn)(void);
} scenarios[] = {
    {"help", test_help},
    {"loss_falls", test_loss_falls},
    {"init_philox", test_init_philox},
    {"resume", test_resume},
    {"deterministic", test_deterministic},
    {"save_roundtrip", test_save_roundtrip},
    {"sample", test_sample},
    {"val", test_val},
    {"bad_missing_data", test_bad_missing_data},
    {"bad_magic", test_bad_magic},
    {"bad_init_missing", test_bad_init_missing},
    {"bad_unknown_flag", test_bad_unknown_flag},
    {"bad_ckpt_dir", test_bad_ckpt_dir},
    {"bad_resume_empty", test_bad_resume_empty},
    {"bad_token_range", test_bad_token_range},
    {"bad_values", test_bad_values},
    {"bad_program", test_bad_program},
};

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_train_check SCENARIO TRAIN TOKENS [DIR]\n");
    return 2;
  }
  train_bin = argv[2], tokens_path = argv[3];
  rt_mkdir_scratch(argv[1]);
  if (strcmp(argv[1], "pyref") == 0 && argc == 5) {
    test_pyref(argv[4]);
    return rt_finish("train pyref");
  }
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
    if (strcmp(argv[1], scenarios[i].name) == 0) {
      scenarios[i].fn();
      return rt_finish(argv[1]);
    }
  fprintf(stderr, "test_train_check: unknown scenario '%s'\n", argv[1]);
  rt_rm_scratch();
  return 2;
}
