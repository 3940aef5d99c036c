/* rt_test: the few helpers the runtime unit tests share: CHECK macros that count
 * failures and print file:line, a scratch directory created in the current
 * working directory (the build tree under CTest) and removed at the end, and
 * small file helpers. Header-only; each test program includes it once.
 */
#ifndef COLOSSALC_TESTS_RT_TEST_H
#define COLOSSALC_TESTS_RT_TEST_H

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rt_failures;
static char rt_dir[256];

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      rt_failures++;                                                           \
    }                                                                          \
  } while (0)

/* err must contain want (a message substring). */
#define CHECK_ERR(err, want)                                                                            \
  do {                                                                                                  \
    if (!strstr((err), (want))) {                                                                       \
      fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, (err), (want)); \
      rt_failures++;                                                                                    \
    }                                                                                                   \
  } while (0)

static inline void rt_mkdir_scratch(const char *tag) {
  snprintf(rt_dir, sizeof rt_dir, "rt-%s-XXXXXX", tag);
  if (!mkdtemp(rt_dir)) {
    perror("mkdtemp");
    exit(2);
  }
}

/* rt_dir/name in a static buffer (one of four, so a few can be alive at once). */
static inline const char *rt_path(const char *name) {
  static char bufs[4][512];
  static int next;
  char *b = bufs[next++ % 4];
  snprintf(b, sizeof bufs[0], "%s/%s", rt_dir, name);
  return b;
}

static inline int rt_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static inline void rt_rm_scratch(void) {
  if (!rt_dir[0]) return;
  chmod(rt_dir, 0755);
  nftw(rt_dir, rt_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Number of entries in rt_dir (not counting . and ..). */
static inline int rt_count_entries(void) {
  DIR *d = opendir(rt_dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  if (d) closedir(d);
  return n;
}

static inline void rt_write_raw(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    exit(2);
  }
}

static inline int rt_finish(const char *name) {
  rt_rm_scratch();
  if (rt_failures) {
    fprintf(stderr, "%s: %d check(s) FAILED\n", name, rt_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

#endif
