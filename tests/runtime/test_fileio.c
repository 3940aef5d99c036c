/* test_fileio: file_write_atomic writes the chunks in order, replaces an existing
 * file and a stale temporary file, and leaves no temporary file; failures (missing
 * directory, an unwritable temporary path, a write cut short by RLIMIT_FSIZE, a
 * read-only directory when not root) return -1 with a message, leave nothing
 * behind and keep an existing file intact; file_read_all reads exactly and
 * reports missing files and directories.
 */
#include "runtime/io/fileio.h"

#include "rt_test.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>

static char err[1024];

/* path holds exactly the bytes want[0..len). */
static int holds(const char *path, const char *want, size_t len) {
  size_t n = 0;
  char e[256];
  char *got = file_read_all(path, &n, e, sizeof e);
  int ok = got && n == len && memcmp(got, want, len) == 0 && got[n] == '\0';
  free(got);
  return ok;
}

static int write_str(const char *path, const char *s) {
  const void *chunks[1] = {s};
  size_t lens[1] = {strlen(s)};
  return file_write_atomic(path, chunks, lens, 1, err, sizeof err);
}

static void test_write_chunks(void) {
  const void *chunks[3] = {"abc", "", "defg"};
  size_t lens[3] = {3, 0, 4};
  CHECK(file_write_atomic(rt_path("a.bin"), chunks, lens, 3, err, sizeof err) == 0);
  CHECK(holds(rt_path("a.bin"), "abcdefg", 7));
  CHECK(file_write_atomic(rt_path("empty.bin"), NULL, NULL, 0, err, sizeof err) == 0);
  CHECK(holds(rt_path("empty.bin"), "", 0));
  CHECK(write_str(rt_path("a.bin"), "replaced") == 0); /* rename over an existing file */
  CHECK(holds(rt_path("a.bin"), "replaced", 8));
  CHECK(rt_count_entries() == 2); /* no temporary files left */
}

static void test_missing_directory(void) {
  int before = rt_count_entries();
  CHECK(write_str(rt_path("no/such/dir/x.bin"), "x") == -1);
  CHECK_ERR(err, "no/such/dir/x.bin");
  CHECK_ERR(err, strerror(ENOENT));
  CHECK(rt_count_entries() == before);
}

/* A stale temporary file (a crashed earlier run with the same pid) longer than the
 * new content is truncated, not partly overwritten. */
static void test_stale_temp(void) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", rt_path("stale.bin"), (long)getpid());
  rt_write_raw(tmp, "stale stale stale stale", 23);
  CHECK(write_str(rt_path("stale.bin"), "fresh") == 0);
  CHECK(holds(rt_path("stale.bin"), "fresh", 5));
  CHECK(access(tmp, F_OK) != 0);
}

/* The temporary name is taken by a directory: the write fails before the rename
 * and the existing file keeps its old content. */
static void test_blocked_temp(void) {
  CHECK(write_str(rt_path("keep.bin"), "old content") == 0);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", rt_path("keep.bin"), (long)getpid());
  CHECK(mkdir(tmp, 0755) == 0);
  int before = rt_count_entries();
  CHECK(write_str(rt_path("keep.bin"), "new content") == -1);
  CHECK_ERR(err, "cannot create temporary file");
  CHECK(holds(rt_path("keep.bin"), "old content", 11));
  CHECK(rt_count_entries() == before);
  rmdir(tmp);
}

/* A write that fails half way (file size limit: EFBIG, as a full disk gives
 * ENOSPC) removes the temporary file and keeps the old content. Works as root. */
static void test_failed_write(void) {
  CHECK(write_str(rt_path("big.bin"), "old big") == 0);
  int before = rt_count_entries();
  static char payload[1 << 16];
  memset(payload, 'z', sizeof payload);
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 4096;
  signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  const void *chunks[2] = {"head", payload};
  size_t lens[2] = {4, sizeof payload};
  int rc = file_write_atomic(rt_path("big.bin"), chunks, lens, 2, err, sizeof err);
  setrlimit(RLIMIT_FSIZE, &old);
  CHECK(rc == -1);
  CHECK_ERR(err, "write failed");
  CHECK_ERR(err, strerror(EFBIG));
  CHECK(holds(rt_path("big.bin"), "old big", 7));
  CHECK(rt_count_entries() == before);
}

static void test_readonly_directory(void) {
  if (geteuid() == 0) {
    printf("read-only directory case skipped: root ignores directory permissions\n");
    return;
  }
  CHECK(mkdir(rt_path("ro"), 0555) == 0);
  CHECK(write_str(rt_path("ro/x.bin"), "x") == -1);
  CHECK_ERR(err, strerror(EACCES));
  chmod(rt_path("ro"), 0755);
  CHECK(rmdir(rt_path("ro")) == 0); /* empty: nothing was left behind */
}

static void test_read_errors(void) {
  size_t n = 123;
  CHECK(file_read_all(rt_path("missing.bin"), &n, err, sizeof err) == NULL);
  CHECK_ERR(err, "missing.bin: cannot open");
  CHECK_ERR(err, strerror(ENOENT));
  CHECK(file_read_all(rt_dir, &n, err, sizeof err) == NULL);
  CHECK_ERR(err, "not a regular file");
  CHECK(n == 123);
}

int main(void) {
  rt_mkdir_scratch("fileio");
  test_write_chunks();
  test_missing_directory();
  test_stale_temp();
  test_blocked_temp();
  test_failed_write();
  test_readonly_directory();
  test_read_errors();
  return rt_finish("test_fileio");
}
