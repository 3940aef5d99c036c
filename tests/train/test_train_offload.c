/* test_train_offload: the offload runtime (runtime/offload.h) end to end, with the
 * hand-written program of offload_program.c and no compiler. This binary links the
 * plan variant's program (for the load checks); the scenarios run the train
 * executables as child processes in a scratch directory:
 *
 *   test_train_offload SCENARIO TOKENS REF PLAN BUG
 *
 *   equal      6 steps with --val every 3 steps, --save and --sample: the plan's losses,
 *              grad norms, validation losses, saved parameters and sample are the
 *              reference's bit for bit; the offload record reports a device peak within
 *              the capacity and every measured figure equal to the program's
 *              "predicted"; the NVMe files are gone after the run
 *   ckpt       checkpoints of the plan (parts read from their homes, NVMe included)
 *              are byte-identical to the reference's; a --resume from the middle
 *              (parts written back to their homes) rewrites the last one identically
 *   nvme_full  a full NVMe location in the middle of a step (a file-size limit, and
 *              a tiny tmpfs when it can mount one): exit 1 with the file, the offset and
 *              the error; the previous checkpoint and `latest` are untouched
 *   bug        the variant whose capacity is too small: the internal error naming the
 *              instruction; no --nvme-dir: a clear error
 *   load       the plan's program opens and reads as written (its chunks, homes, moves)
 */
#include "runtime/io/fileio.h"
#include "program/program.h"

#include "rt_test.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>

static const char *tokens_path, *ref_bin, *plan_bin, *bug_bin;
static char err[4096];

/* ---- running train ------------------------------------------------------------- */

enum { ARGV_MAX = 64 };

typedef struct Run {
  int status;      /* exit status, 128+signal, or -1 */
  char *out, *err; /* whole stdout and stderr */
} Run;

static void run_free(Run *r) { free(r->out), free(r->err); }

/* argv[0] with stdout and stderr captured; fsize > 0: files limited to fsize bytes
 * with SIGXFSZ ignored (a write beyond fails with EFBIG). */
static Run run_argv(char **argv, long fsize) {
  Run r = {-1, NULL, NULL};
  char out_path[512], err_path[512];
  size_t len;
  snprintf(out_path, sizeof out_path, "%s", rt_path("stdout.txt"));
  snprintf(err_path, sizeof err_path, "%s", rt_path("stderr.txt"));
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
    if (fsize > 0) {
      struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
      signal(SIGXFSZ, SIG_IGN);
      if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(126);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  int ws;
  if (pid > 0 && waitpid(pid, &ws, 0) == pid)
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : -1;
  r.out = file_read_all(out_path, &len, err, sizeof err);
  r.err = file_read_all(err_path, &len, err, sizeof err);
  if (!r.out || !r.err) {
    fprintf(stderr, "cannot read the output of %s\n", argv[0]);
    exit(2);
  }
  return r;
}

/* bin ARGS... (NULL-terminated), with a file-size limit when fsize > 0. */
static Run run_limited(long fsize, const char *bin, ...) {
  char *argv[ARGV_MAX];
  int n = 0;
  argv[n++] = (char *)bin;
  va_list ap;
  va_start(ap, bin);
  for (const char *a = va_arg(ap, const char *); a && n < ARGV_MAX - 1; a = va_arg(ap, const char *))
    argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  return run_argv(argv, fsize);
}

#define run(...) run_limited(0, __VA_ARGS__)

static int expect_ok(const Run *r, const char *what) {
  if (r->status == 0) return 1;
  fprintf(stderr, "%s: train exited with %d:\n%s", what, r->status, r->err);
  rt_failures++;
  return 0;
}

/* Exit 1 and "train: " with every one of the NULL-terminated substrings. */
static void expect_fail(const Run *r, const char *what, ...) {
  int ok = r->status == 1 && strncmp(r->err, "train: ", 7) == 0;
  va_list ap;
  va_start(ap, what);
  for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *)) ok &= strstr(r->err, w) != NULL;
  va_end(ap);
  if (!ok) {
    fprintf(stderr, "%s: expected exit 1 and a message, got %d and:\n%s", what, r->status, r->err);
    rt_failures++;
  }
}

static char *slurp(const char *path, size_t *len) {
  char *b = file_read_all(path, len, err, sizeof err);
  if (!b) {
    fprintf(stderr, "%s\n", err);
    rt_failures++;
  }
  return b;
}

/* The two files hold the same bytes. */
static int same_file(const char *a, const char *b) {
  size_t la, lb;
  char *x = slurp(a, &la), *y = slurp(b, &lb);
  int same = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x), free(y);
  return same;
}

/* ---- logs ---------------------------------------------------------------------- */

/* The log's step and val lines, with their "ms" and "tokens_per_s" removed (the only
 * fields that may differ between two runs), one per line; and its offload record. */
static char *log_numbers(const char *path, cJSON **offload) {
  size_t len;
  char *text = slurp(path, &len), *save = NULL;
  size_t cap = len + 1, at = 0;
  char *outb = calloc(cap, 1);
  *offload = NULL;
  for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line && outb; line = strtok_r(NULL, "\n", &save)) {
    cJSON *o = cJSON_Parse(line);
    cJSON *off = cJSON_DetachItemFromObject(o, "offload");
    cJSON_DeleteItemFromObject(o, "ms");
    cJSON_DeleteItemFromObject(o, "tokens_per_s");
    cJSON_DeleteItemFromObject(o, "device_memory_peak"); /* measurements, not numerics */
    cJSON_DeleteItemFromObject(o, "mfu");
    char *s = off ? NULL : cJSON_PrintUnformatted(o);
    if (off) {
      cJSON_Delete(*offload);
      *offload = off;
    }
    if (s && at + strlen(s) + 2 <= cap) at += (size_t)snprintf(outb + at, cap - at, "%s\n", s);
    free(s);
    cJSON_Delete(o);
  }
  free(text);
  return outb;
}

static int64_t field(const cJSON *o, const char *key) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(it)) {
    fprintf(stderr, "offload record: no \"%s\"\n", key);
    rt_failures++;
    return -1;
  }
  return (int64_t)it->valuedouble;
}

/* Device peak within the capacity; each measured figure equal to the prediction. */
static void check_offload_record(const cJSON *off) {
  static const char *const keys[4] = {"device_peak", "host_peak", "nvme_peak", "transfer_bytes"};
  CHECK(off != NULL);
  if (!off) return;
  CHECK(field(off, "device_peak") <= field(off, "device_capacity"));
  CHECK(field(off, "device_peak") > 0 && field(off, "nvme_peak") > 0);
  for (int k = 0; k < 4; k++) {
    char pk[64];
    snprintf(pk, sizeof pk, "predicted_%s", keys[k]);
    if (field(off, keys[k]) != field(off, pk)) {
      fprintf(stderr, "%s: measured %lld, predicted %lld\n", keys[k], (long long)field(off, keys[k]),
              (long long)field(off, pk));
      rt_failures++;
    }
  }
  CHECK(field(off, "steps") == 6);
}

/* ---- scenarios ----------------------------------------------------------------- */

static void test_equal(void) {
  char nv[512];
  snprintf(nv, sizeof nv, "%s", rt_path("nvme"));
  mkdir(nv, 0755);
  const char *common[] = {"--data",      tokens_path, "--steps",  "6",  "--val",     tokens_path,
                          "--val-every", "3",         "--sample", "40", "--threads", "2"};
  Run a =
      run(ref_bin, common[0], common[1], common[2], common[3], common[4], common[5], common[6], common[7], common[8],
          common[9], common[10], common[11], "--log", rt_path("ref.jsonl"), "--save", rt_path("ref.safetensors"), NULL);
  Run b = run(plan_bin, common[0], common[1], common[2], common[3], common[4], common[5], common[6], common[7],
              common[8], common[9], common[10], common[11], "--log", rt_path("off.jsonl"), "--save",
              rt_path("off.safetensors"), "--nvme-dir", nv, NULL);
  if (expect_ok(&a, "reference") && expect_ok(&b, "offload plan")) {
    cJSON *ro, *oo;
    char *rl = log_numbers(rt_path("ref.jsonl"), &ro), *ol = log_numbers(rt_path("off.jsonl"), &oo);
    CHECK(rl && ol && strcmp(rl, ol) == 0 && strstr(rl, "val_loss"));
    CHECK(ro == NULL);
    check_offload_record(oo);
    CHECK(same_file(rt_path("ref.safetensors"), rt_path("off.safetensors")));
    const char *sa = strstr(a.out, "--- sample"), *sb = strstr(b.out, "--- sample");
    CHECK(sa && sb && strncmp(sa, sb, 60) == 0);
    CHECK_ERR(b.out, "offload: device 0.56 MiB (capacity), params device 1, host 2, nvme 1; "
                     "opt device 1, host 1, nvme 2; 4 chunks");
    CHECK_ERR(b.out, "offload: device peak 0.52 MiB of 0.56 MiB capacity (predicted 0.52 MiB)");
    DIR *d = opendir(nv);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK(files == 0); /* the NVMe scratch files are removed */
    free(rl), free(ol);
    cJSON_Delete(ro), cJSON_Delete(oo);
  }
  run_free(&a), run_free(&b);
}

static void test_ckpt(void) {
  char rd[512], od[512], nv[512], r4[600], o4[600], latest[600];
  snprintf(rd, sizeof rd, "%s", rt_path("ref-ckpt"));
  snprintf(od, sizeof od, "%s", rt_path("off-ckpt"));
  snprintf(nv, sizeof nv, "%s", rt_path("nvme"));
  mkdir(nv, 0755);
  snprintf(r4, sizeof r4, "%s/ckpt-4/shard-00000-of-00001.safetensors", rd);
  snprintf(o4, sizeof o4, "%s/ckpt-4/shard-00000-of-00001.safetensors", od);
  snprintf(latest, sizeof latest, "%s/latest", od);
  Run a = run(ref_bin, "--data", tokens_path, "--steps", "4", "--ckpt-dir", rd, "--ckpt-every", "2", "--threads", "2",
              NULL);
  Run b = run(plan_bin, "--data", tokens_path, "--steps", "4", "--ckpt-dir", od, "--ckpt-every", "2", "--threads", "2",
              "--nvme-dir", nv, "--log", rt_path("a.jsonl"), NULL);
  if (expect_ok(&a, "reference") && expect_ok(&b, "offload plan")) {
    CHECK(same_file(r4, o4));
    size_t l4;
    char *first = slurp(o4, &l4);
    rt_write_raw(latest, "ckpt-2\n", 7);
    Run c = run(plan_bin, "--data", tokens_path, "--steps", "4", "--ckpt-dir", od, "--ckpt-every", "2", "--threads",
                "2", "--nvme-dir", nv, "--resume", "--log", rt_path("b.jsonl"), NULL);
    if (expect_ok(&c, "resumed offload plan")) {
      CHECK_ERR(c.out, "resumed from");
      CHECK(same_file(r4, o4));
      cJSON *x, *y;
      char *la = log_numbers(rt_path("a.jsonl"), &x), *lb = log_numbers(rt_path("b.jsonl"), &y);
      const char *s3 = la ? strstr(la, "{\"step\":3") : NULL;
      CHECK(s3 && lb && strcmp(s3, lb) == 0); /* steps 3 and 4 again, bit for bit */
      free(la), free(lb), cJSON_Delete(x), cJSON_Delete(y);
    }
    run_free(&c);
    free(first);
  }
  run_free(&a), run_free(&b);
}

/* A run that resumes at step 2 with nv full mid-step fails cleanly and leaves the
 * checkpoints alone. */
static void full_case(const char *dir, const char *nv, long fsize, const char *why) {
  char c2[600], latest[600], c3[600];
  snprintf(c2, sizeof c2, "%s/ckpt-2/shard-00000-of-00001.safetensors", dir);
  snprintf(c3, sizeof c3, "%s/ckpt-3", dir);
  snprintf(latest, sizeof latest, "%s/latest", dir);
  size_t l2, ll;
  char *before = slurp(c2, &l2), *lat = slurp(latest, &ll);
  Run r = run_limited(fsize, plan_bin, "--data", tokens_path, "--steps", "4", "--ckpt-dir", dir, "--ckpt-every", "1",
                      "--threads", "2", "--nvme-dir", nv, "--resume", NULL);
  expect_fail(&r, why, "--nvme-dir", "writing", "-opt.nvme at offset", why,
              "step[1] (move chunk "
              "3 opt device -> nvme)",
              NULL);
  CHECK(strstr(r.out, "step 3/4") == NULL); /* failed inside step 3 */
  size_t l2b, llb;
  char *after = slurp(c2, &l2b), *lat2 = slurp(latest, &llb);
  CHECK(before && after && l2 == l2b && memcmp(before, after, l2) == 0);
  CHECK(lat && lat2 && strcmp(lat, lat2) == 0 && strcmp(lat, "ckpt-2\n") == 0);
  CHECK(access(c3, F_OK) != 0);
  free(before), free(after), free(lat), free(lat2);
  run_free(&r);
}

static void test_nvme_full(void) {
  char dir[512], nv[512], tiny[512];
  snprintf(dir, sizeof dir, "%s", rt_path("ckpt"));
  snprintf(nv, sizeof nv, "%s", rt_path("nvme"));
  snprintf(tiny, sizeof tiny, "%s", rt_path("tiny"));
  mkdir(nv, 0755);
  mkdir(tiny, 0755);
  Run r = run(plan_bin, "--data", tokens_path, "--steps", "2", "--ckpt-dir", dir, "--ckpt-every", "1", "--threads", "2",
              "--nvme-dir", nv, NULL);
  int ok = expect_ok(&r, "two steps");
  run_free(&r);
  if (!ok) return;
  /* Start-up writes NVMe offsets below 459776 (c2's opt v); the spill of c3's opt v
   * in step 3 writes from there to 526336. */
  full_case(dir, nv, 480000, "File too large");
  /* A real full file system: start-up needs 81 pages of NVMe, the spill 33 more. */
  if (mount("tmpfs", tiny, "tmpfs", 0, "size=360k") == 0) {
    full_case(dir, tiny, 0, "No space left on device");
    if (umount(tiny) != 0) perror("umount");
  } else {
    printf("nvme_full: no tmpfs (%s): the file-size limit case only\n", strerror(errno));
  }
}

static void test_bug(void) {
  char nv[512];
  snprintf(nv, sizeof nv, "%s", rt_path("nvme"));
  mkdir(nv, 0755);
  Run r = run(bug_bin, "--data", tokens_path, "--steps", "2", "--nvme-dir", nv, NULL);
  expect_fail(&r, "capacity",
              "train: internal error: offload: train[16] (move chunk 2 opt nvme "
              "-> device): the device would hold 471040 bytes",
              "device_capacity of 450000", NULL);
  run_free(&r);
  r = run(plan_bin, "--data", tokens_path, "--steps", "2", NULL);
  expect_fail(&r, "no --nvme-dir", "give --nvme-dir DIR", NULL);
  run_free(&r);
  /* a --nvme-dir that does not exist yet is made, parents too; under a file it cannot be */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/a/b", rt_path("nothere"));
  char parent[600];
  snprintf(parent, sizeof parent, "%s/a", rt_path("nothere"));
  rmdir(missing), rmdir(parent), rmdir(rt_path("nothere")); /* left by an earlier run */
  r = run(plan_bin, "--data", tokens_path, "--steps", "2", "--nvme-dir", missing, NULL);
  struct stat sb;
  if (expect_ok(&r, "missing --nvme-dir")) CHECK(stat(missing, &sb) == 0 && S_ISDIR(sb.st_mode));
  run_free(&r);
  FILE *f = fopen(rt_path("afile"), "w");
  CHECK(f && fclose(f) == 0);
  snprintf(missing, sizeof missing, "%s/sub", rt_path("afile"));
  r = run(plan_bin, "--data", tokens_path, "--steps", "2", "--nvme-dir", missing, NULL);
  expect_fail(&r, "--nvme-dir under a file", "train: --nvme-dir: cannot create", "afile/sub: Not a directory", NULL);
  run_free(&r);
}

/* ---- the program as the runtime reads it ----------------------------------------- */

/* The plan's program opens, and reads as written: its chunks, homes and instructions
 * (what the compiler's verifier checks of a plan, codegen/verify.c, is tests/unit's). */
static void test_load(void) {
  Prog all;
  char msg[1024];
  CHECK(prog_open(colossalc_program, colossalc_program_bytes, &all, msg, sizeof msg) == 0);
  Prog p = prog_stage(&all, 0);
  CHECK(p.s->offload && p.s->nchunks == 4 && p.chunks[3].lo == 3 && p.chunks[3].end == 263168 &&
        p.chunks[2].start == 131072 && p.s->capacity == 589824 && p.s->nvme);
  CHECK(p.chunks[1].home[PART_OPT] == LOC_NVME && p.chunks[1].home[PART_GRADS] == LOC_NONE);
  const ProgList *step = &p.lists[0], *train = prog_list(&p, PROG_LIST_TRAIN);
  const IsaInstr *first = &p.instrs[step->first];
  CHECK(first->op == ISA_MOVE && first->move.keep && first->move.from == LOC_HOST && first->move.to == LOC_DEVICE);
  int on_host = 0;
  for (int64_t i = 0; train && i < train->n; i++)
    on_host += p.instrs[train->first + i].kernel.on_host && p.instrs[train->first + i].op == ISA_KERNEL;
  CHECK(on_host == 4); /* c0's and c1's norm and update */
  int64_t off[2];
  CHECK(prog_part_ranges(&p, &p.chunks[3], PART_OPT, off) == 2 && off[1] == 263168 + 196608);
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*fn)(void);
  } scenarios[] = {{"equal", test_equal},
                   {"ckpt", test_ckpt},
                   {"nvme_full", test_nvme_full},
                   {"bug", test_bug},
                   {"load", test_load}};
  if (argc != 6) {
    fprintf(stderr, "usage: test_train_offload SCENARIO TOKENS REF PLAN BUG\n");
    return 2;
  }
  tokens_path = argv[2], ref_bin = argv[3], plan_bin = argv[4], bug_bin = argv[5];
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
    if (strcmp(argv[1], scenarios[i].name) == 0) {
      rt_mkdir_scratch(scenarios[i].name);
      scenarios[i].fn();
      rt_rm_scratch();
      if (rt_failures) fprintf(stderr, "%d check(s) failed\n", rt_failures);
      return rt_failures ? 1 : 0;
    }
  fprintf(stderr, "test_train_offload: unknown scenario '%s'\n", argv[1]);
  return 2;
}
