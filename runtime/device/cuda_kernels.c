/* cuda_kernels: NVRTC compiles of the program's kernel units, cached on disk
 * (cuda_kernels.h). */
#include "runtime/device/cuda_kernels.h"

#include "runtime/io/fileio.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define CACHE_MAGIC "CCKC"
#define CACHE_FORMAT 1u

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the cache directory ------------------------------------------------------- */

/* mkdir -p */
static int make_dirs(const char *path) {
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int cuda_cache_dir(const char *dir, char *out, size_t outlen) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (dir) n = snprintf(out, outlen, "%s", dir);
  else if (xdg && xdg[0] == '/') n = snprintf(out, outlen, "%s/colossalc", xdg);
  else if (home && home[0]) n = snprintf(out, outlen, "%s/.cache/colossalc", home);
  else n = -1;
  if (n < 0 || (size_t)n >= outlen || make_dirs(out) != 0) {
    out[0] = 0;
    return -1;
  }
  return 0;
}

/* ---- keys and entries ---------------------------------------------------------- */

static uint64_t fnv(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* 128 bits of two differently seeded FNV-1a passes, as 32 hex digits. */
static void key_name(const char *key, size_t n, char out[33]) {
  uint64_t a = fnv(key, n, 1469598103934665603ull), b = fnv(key, n, 0x84222325cbf29ce4ull ^ n);
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

typedef struct EntryHead {
  char magic[4];
  uint32_t format;
  uint64_t key_len, image_len, image_sum;
} EntryHead;

/* The cached image for key at path, or NULL (none, or one that does not match: then
 * *damaged is set when a file was there). */
static char *entry_read(const char *path, const char *key, size_t key_len, size_t *image_len, int *damaged) {
  char err[256];
  size_t n = 0;
  char *f = file_read_all(path, &n, err, sizeof err);
  *damaged = 0;
  if (!f) return NULL;
  EntryHead h;
  int ok = n >= sizeof h;
  if (ok) memcpy(&h, f, sizeof h);
  ok = ok && !memcmp(h.magic, CACHE_MAGIC, 4) && h.format == CACHE_FORMAT && h.key_len == key_len && h.image_len > 0 &&
       n == sizeof h + h.key_len + h.image_len && !memcmp(f + sizeof h, key, key_len) &&
       fnv(f + sizeof h + key_len, h.image_len, 1469598103934665603ull) == h.image_sum;
  if (!ok) {
    *damaged = 1;
    free(f);
    return NULL;
  }
  char *image = malloc(h.image_len);
  if (image) memcpy(image, f + sizeof h + key_len, h.image_len);
  *image_len = h.image_len;
  free(f);
  return image;
}

static void entry_write(const char *path, const char *key, size_t key_len, const char *image, size_t image_len) {
  EntryHead h = {.format = CACHE_FORMAT,
                 .key_len = key_len,
                 .image_len = image_len,
                 .image_sum = fnv(image, image_len, 1469598103934665603ull)};
  memcpy(h.magic, CACHE_MAGIC, 4);
  const void *chunks[3] = {&h, key, image};
  size_t lens[3] = {sizeof h, key_len, image_len};
  char err[512];
  if (file_write_atomic(path, chunks, lens, 3, err, sizeof err) != 0)
    fprintf(stderr, "train: warning: kernel cache: %s\n", err); /* the run goes on uncached */
}

/* ---- compiling ----------------------------------------------------------------- */

typedef struct Unit {
  char *text; /* the prelude and its kernels */
  char *key;  /* the cache key: header lines, then text */
  size_t key_len;
  char path[1100];
} Unit;

typedef struct Job {
  const CudaApi *api;
  const char *arch;
  Unit *units;
  CudaBuild *b;
  int next, failed, compiled;
  char err[512];
  pthread_mutex_t lock;
} Job;

static void print_numbered(FILE *f, const char *src) {
  int line = 1;
  for (const char *s = src; *s; line++) {
    const char *nl = strchr(s, '\n');
    int len = nl ? (int)(nl - s) : (int)strlen(s);
    fprintf(f, "%5d | %.*s\n", line, len, s);
    s += len + (nl != NULL);
  }
}

/* NVRTC on one unit; 0, or -1 with the log and the source on stderr. */
static int compile_unit(Job *j, int u, CudaImage *out, char *err, size_t errlen) {
  const CudaApi *api = j->api;
  char archopt[64], name[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", j->arch);
  snprintf(name, sizeof name, "colossalc_unit%d.cu", u);
  const char *opts[] = {archopt, "-std=c++17"};
  nvrtcProgram prog = NULL;
  nvrtcResult r = api->nvrtcCreateProgram(&prog, j->units[u].text, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) return file_set_error(err, errlen, "NVRTC: %s", api->nvrtcGetErrorString(r));
  r = api->nvrtcCompileProgram(prog, 2, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    char *log = NULL;
    if (api->nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && (log = calloc(n + 1, 1)))
      api->nvrtcGetProgramLog(prog, log);
    pthread_mutex_lock(&j->lock);
    fprintf(stderr, "train: NVRTC failed on %s for %s:\n%s\n%s:\n", name, j->arch, log ? log : "(no log)", name);
    print_numbered(stderr, j->units[u].text);
    pthread_mutex_unlock(&j->lock);
    free(log);
    api->nvrtcDestroyProgram(&prog);
    return file_set_error(err, errlen,
                          "NVRTC could not compile the kernels of %s for %s (%s; the log and "
                          "the source are above)",
                          name, j->arch, api->nvrtcGetErrorString(r));
  }
  size_t n = 0;
  if (api->nvrtcGetCUBINSize(prog, &n) != NVRTC_SUCCESS || n == 0 || !(out->data = malloc(n)) ||
      api->nvrtcGetCUBIN(prog, out->data) != NVRTC_SUCCESS) {
    api->nvrtcDestroyProgram(&prog);
    return file_set_error(err, errlen, "NVRTC gave no CUBIN for %s (is %s a real architecture?)", name, j->arch);
  }
  out->size = n;
  api->nvrtcDestroyProgram(&prog);
  return 0;
}

/* The unit from the cache, or compiled (and cached). */
static int build_unit(Job *j, int u, char *err, size_t errlen) {
  Unit *un = &j->units[u];
  CudaImage *out = &j->b->unit[u];
  int damaged = 0;
  if (un->path[0] && (out->data = entry_read(un->path, un->key, un->key_len, &out->size, &damaged))) {
    pthread_mutex_lock(&j->lock);
    j->b->cached++;
    pthread_mutex_unlock(&j->lock);
    return 0;
  }
  if (compile_unit(j, u, out, err, errlen) != 0) return -1;
  if (un->path[0]) entry_write(un->path, un->key, un->key_len, out->data, out->size);
  pthread_mutex_lock(&j->lock);
  j->compiled++;
  j->b->rebuilt += damaged;
  pthread_mutex_unlock(&j->lock);
  return 0;
}

static void *worker(void *arg) {
  Job *j = arg;
  char err[512];
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int u = j->failed ? j->b->nunits : j->next++;
    pthread_mutex_unlock(&j->lock);
    if (u >= j->b->nunits) return NULL;
    if (build_unit(j, u, err, sizeof err) != 0) {
      pthread_mutex_lock(&j->lock);
      if (!j->failed) snprintf(j->err, sizeof j->err, "%s", err);
      j->failed = 1;
      pthread_mutex_unlock(&j->lock);
    }
  }
}

/* ---- units of the source ------------------------------------------------------- */

/* Splits source at its form feeds: part[0] the prelude, part[1..] the kernels. */
static int split_source(const char *source, const char **part, size_t *len, int max) {
  int n = 0;
  const char *s = source;
  for (;;) {
    const char *ff = strchr(s, '\f');
    if (n == max) return -1;
    part[n] = s;
    len[n++] = ff ? (size_t)(ff - s) : strlen(s);
    if (!ff) return n;
    s = ff + 1;
  }
}

static int make_units(const CudaApi *api, const char *source, int nkernels, const char *arch, const char *cache_dir,
                      Unit **out, int *nunits, char *err, size_t errlen) {
  const char **part = calloc((size_t)nkernels + 2, sizeof *part);
  size_t *len = calloc((size_t)nkernels + 2, sizeof *len);
  int major = 0, minor = 0;
  api->nvrtcVersion(&major, &minor);
  int n = part && len ? split_source(source, part, len, nkernels + 2) : -1;
  if (n != nkernels + 1) {
    free(part);
    free(len);
    return file_set_error(err, errlen, "the program's CUDA C holds %d kernels, its table %d", n - 1, nkernels);
  }
  int nu = (nkernels + CUDA_UNIT_KERNELS - 1) / CUDA_UNIT_KERNELS;
  Unit *units = calloc((size_t)nu + 1, sizeof *units);
  int oom = !units;
  for (int u = 0; !oom && u < nu; u++) {
    size_t total = len[0] + 1;
    for (int k = u * CUDA_UNIT_KERNELS; k < nkernels && k < (u + 1) * CUDA_UNIT_KERNELS; k++) total += len[k + 1] + 1;
    char head[256];
    int hn = snprintf(head, sizeof head, "colossalc kernel unit %u\narch %s\nnvrtc %d.%d\n-std=c++17\n", CACHE_FORMAT,
                      arch, major, minor);
    Unit *un = &units[u];
    if (!(un->text = malloc(total + 1)) || !(un->key = malloc((size_t)hn + total + 1))) {
      oom = 1;
      break;
    }
    size_t at = 0;
    memcpy(un->text, part[0], len[0]), at = len[0];
    for (int k = u * CUDA_UNIT_KERNELS; k < nkernels && k < (u + 1) * CUDA_UNIT_KERNELS; k++) {
      un->text[at++] = '\n';
      memcpy(un->text + at, part[k + 1], len[k + 1]), at += len[k + 1];
    }
    un->text[at] = 0;
    memcpy(un->key, head, (size_t)hn);
    memcpy(un->key + hn, un->text, at + 1);
    un->key_len = (size_t)hn + at;
    if (cache_dir[0]) {
      char name[33];
      key_name(un->key, un->key_len, name);
      snprintf(un->path, sizeof un->path, "%s/%s.cubin", cache_dir, name);
    }
  }
  free(part);
  free(len);
  if (oom) {
    for (int u = 0; units && u < nu; u++) free(units[u].text), free(units[u].key);
    free(units);
    return file_set_error(err, errlen, "out of memory");
  }
  *out = units;
  *nunits = nu;
  return 0;
}

int cuda_kernels_build(const CudaApi *api, const char *source, int nkernels, const char *arch, const char *cache_dir,
                       int threads, CudaBuild *b, char *err, size_t errlen) {
  memset(b, 0, sizeof *b);
  snprintf(b->cache_dir, sizeof b->cache_dir, "%s", cache_dir ? cache_dir : "");
  Unit *units = NULL;
  if (make_units(api, source, nkernels, arch, b->cache_dir, &units, &b->nunits, err, errlen) != 0) return -1;
  b->unit = calloc((size_t)b->nunits + 1, sizeof *b->unit);
  Job j = {.api = api, .arch = arch, .units = units, .b = b};
  pthread_mutex_init(&j.lock, NULL);
  if (threads > b->nunits) threads = b->nunits;
  pthread_t tid[64];
  int started = 0;
  double t0 = now_s();
  for (int t = 1; b->unit && t < threads && t < 64; t++) started += !pthread_create(&tid[started], NULL, worker, &j);
  if (b->unit) worker(&j);
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  if (j.compiled) b->compile_s = now_s() - t0;
  pthread_mutex_destroy(&j.lock);
  for (int u = 0; u < b->nunits; u++) free(units[u].text), free(units[u].key);
  free(units);
  if (!b->unit) return file_set_error(err, errlen, "out of memory");
  if (j.failed) {
    cuda_build_free(b);
    return file_set_error(err, errlen, "%s", j.err);
  }
  return 0;
}

void cuda_build_free(CudaBuild *b) {
  for (int u = 0; b->unit && u < b->nunits; u++) free(b->unit[u].data);
  free(b->unit);
  memset(b, 0, sizeof *b);
}
