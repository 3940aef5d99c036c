/* test_reserve: the reserved tiers of the executor (runtime/executor.h), which hold
 * ZeRO shards, on the CPU device. A reserved tier has no memory until committed;
 * commitment is counted per granule (the page), so two ranges that share a granule
 * keep it until both are decommitted, data in a granule still held survives the
 * other range's decommit, a granule committed again reads zero, touching a
 * decommitted granule faults, and a device that cannot reserve gets the whole tier.
 * Prints "N passed, M failed"; exit status 1 when any check failed.
 */
#include "runtime/executor.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (cond) {                                                        \
      passed++;                                                        \
    } else {                                                           \
      failed++;                                                        \
      fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                  \
  } while (0)

/* A child process writing to base[at] dies (by a signal, or ASan's report). */
static int write_faults(char *base, int64_t at) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    ((volatile char *)base)[at] = 1;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

static void test_counts(Device *dev, Prog *prog) {
  char err[256];
  Executor ex;
  int64_t g = dev->granule;
  CHECK(exec_init_reserved(&ex, prog, dev, 1u << TIER_OPT, err, sizeof err) == 0);
  CHECK(exec_reserved(&ex, TIER_OPT) && !exec_reserved(&ex, TIER_PARAMS));
  CHECK(ex.committed[TIER_OPT] == 0 && ex.committed[TIER_PARAMS] == prog->s->tiers[0]);
  char *opt = ex.tiers[TIER_OPT];
  CHECK(exec_commit(&ex, TIER_OPT, 100, g, err, sizeof err) == 0); /* granules 0, 1 */
  CHECK(ex.committed[TIER_OPT] == 2 * g);
  memset(opt + 100, 7, (size_t)g);
  CHECK(exec_commit(&ex, TIER_OPT, g + 200, 100, err, sizeof err) == 0); /* granule 1 */
  CHECK(ex.committed[TIER_OPT] == 2 * g);
  opt[g + 200] = 9;
  exec_decommit(&ex, TIER_OPT, 100, g);
  CHECK(ex.committed[TIER_OPT] == g);
  CHECK(opt[g + 200] == 9 && opt[g + 99] == 7); /* granule 1 kept its bytes */
  CHECK(write_faults(opt, 50));                 /* granule 0 is gone */
  CHECK(exec_commit(&ex, TIER_OPT, 0, 10, err, sizeof err) == 0);
  CHECK(opt[50] == 0 && ex.committed[TIER_OPT] == 2 * g); /* zero again */
  int64_t end = prog->s->tiers[TIER_OPT];
  CHECK(exec_commit(&ex, TIER_OPT, end - 4, 4, err, sizeof err) == 0); /* last, partial */
  CHECK(ex.committed[TIER_OPT] == 3 * g);
  opt[end - 1] = 3;
  exec_decommit(&ex, TIER_OPT, end - 4, 4);
  exec_decommit(&ex, TIER_OPT, 0, 10);
  exec_decommit(&ex, TIER_OPT, g + 200, 100);
  CHECK(ex.committed[TIER_OPT] == 0);
  exec_free(&ex);
}

/* Without reserve the tier is allocated whole and commits change nothing. */
static void test_no_reserve(Device *dev, Prog *prog) {
  char err[256];
  Executor ex;
  char *(*reserve)(Device *, int64_t) = dev->reserve;
  dev->reserve = NULL;
  CHECK(exec_init_reserved(&ex, prog, dev, 1u << TIER_OPT, err, sizeof err) == 0);
  CHECK(!exec_reserved(&ex, TIER_OPT));
  CHECK(ex.committed[TIER_OPT] == prog->s->tiers[TIER_OPT]);
  CHECK(exec_commit(&ex, TIER_OPT, 0, 10, err, sizeof err) == 0);
  exec_decommit(&ex, TIER_OPT, 0, 10);
  ex.tiers[TIER_OPT][prog->s->tiers[TIER_OPT] - 1] = 1;
  CHECK(ex.committed[TIER_OPT] == prog->s->tiers[TIER_OPT]);
  exec_free(&ex);
  dev->reserve = reserve;
}

int main(void) {
  char err[256];
  Device *dev = device_cpu_new(NULL, 0, 1, err, sizeof err);
  if (!dev) {
    fprintf(stderr, "device_cpu_new: %s\n", err);
    return 1;
  }
  CHECK(dev->granule > 0 && dev->reserve && dev->commit && dev->decommit);
  ProgStage st = {.slots = 1}; /* a stage's view with its tiers alone */
  Prog prog = {.s = &st};
  st.tiers[TIER_PARAMS] = st.tiers[TIER_GRADS] = 4096;
  st.tiers[TIER_OPT] = 10 * dev->granule + 100;
  st.tiers[TIER_WORK] = 64;
  test_counts(dev, &prog);
  test_no_reserve(dev, &prog);
  dev->destroy(dev);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
