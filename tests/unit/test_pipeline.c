/* Pipeline schedules (codegen/pipeline.h): for 1F1B and interleaved schedules over
 * 1-8 stages, 1-4 chunks a stage and several micro-batch counts, every stage's
 * schedule runs each chunk's forward and backward of every micro-batch exactly once,
 * the forward first, and pipe_check proves the stages together run to the end over a
 * chain of chunks. 1F1B keeps at most pp - s micro-batches in flight on stage s (what
 * the slots hold). A chain that runs backwards (chunk 1 feeding chunk 0) must be
 * reported as a deadlock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/pipeline.h"

static int failures;
#define CHECK(c, ...)               \
  do {                              \
    if (!(c)) {                     \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
      failures++;                   \
    }                               \
  } while (0)

static Partition chain(int pp, int v, Boundary *b) {
  Partition p = {.tp = 1, .pp = pp, .v = v, .nchunks = pp * v, .bound = b};
  for (int k = 0; k + 1 < pp * v; k++) b[p.nbound++] = (Boundary){k, k + 1, 0, 0, 0, 16};
  return p;
}

static void one(int pp, int v, int m) {
  bool inter = v > 1;
  int per = 2 * m * v;
  PipeAction *a = malloc(sizeof *a * per);
  char *seen = calloc((size_t)pp * v * m * 2, 1);
  for (int s = 0; s < pp; s++) {
    int n = pipe_schedule(pp, v, m, inter, s, a), inflight = 0, most = 0;
    CHECK(n == per, "pp %d v %d m %d stage %d: %d actions, not %d", pp, v, m, s, n, per);
    memset(seen, 0, (size_t)pp * v * m * 2);
    for (int i = 0; i < n; i++) {
      PipeAction x = a[i];
      CHECK(x.chunk % pp == s && x.mb >= 0 && x.mb < m, "pp %d v %d m %d stage %d: action of chunk %d mb %d", pp, v, m,
            s, x.chunk, x.mb);
      char *f = &seen[(x.chunk * m + x.mb) * 2];
      CHECK(!f[!x.fwd], "pp %d v %d m %d: chunk %d mb %d %s twice", pp, v, m, x.chunk, x.mb,
            x.fwd ? "forward" : "backward");
      CHECK(x.fwd || f[0], "pp %d v %d m %d: chunk %d mb %d backward before forward", pp, v, m, x.chunk, x.mb);
      f[!x.fwd] = 1;
      if (v == 1) {
        inflight += x.fwd ? 1 : -1;
        if (inflight > most) most = inflight;
      }
    }
    if (v == 1)
      CHECK(most <= (pp - s < m ? pp - s : m), "1F1B pp %d m %d stage %d: %d micro-batches in flight", pp, m, s, most);
  }
  Boundary b[64];
  Partition p = chain(pp, v, b);
  char err[256] = "";
  CHECK(pipe_check(&p, m, inter, err, sizeof err) == 0, "pp %d v %d m %d: %s", pp, v, m, err);
  free(a), free(seen);
}

int main(void) {
  int runs = 0;
  for (int pp = 1; pp <= 8; pp++)
    for (int v = 1; v <= 4; v++)
      for (int k = 1; k <= 3; k++) {
        int m = v == 1 ? k * 2 - 1 + (pp > 1) : k * pp; /* interleaved needs m a multiple of pp */
        one(pp, v, m);
        if (v == 1) one(pp, 1, pp + k), runs++;
        runs++;
      }
  Boundary b[1] = {{1, 0, 0, 0, 0, 16}};
  Partition back = {.tp = 1, .pp = 2, .v = 1, .nchunks = 2, .nbound = 1, .bound = b};
  char err[256] = "";
  CHECK(pipe_check(&back, 2, false, err, sizeof err) != 0 && strstr(err, "deadlock"), "a backwards chain: '%s'", err);
  printf("%d schedules checked, backwards chain: %s\n", runs, err);

  /* Message order (pipe_check_order): stage 0 sends tags 1 then 2 to stage 1, which
   * receives them in that order, then the other way round, then one is missing. */
  Arena *a = arena_new();
  Program p0 = {.arena = a}, p1 = {.arena = a};
  Program *ps[2] = {&p0, &p1};
  int order[3][2] = {{1, 2}, {2, 1}, {1, -1}};
  const char *want[3] = {NULL, "received out of the order sent", "sent but never received"};
  for (int c = 0; c < 3; c++) {
    p0.step = p1.step = (PSeq){0};
    for (int t = 0; t < 2; t++) {
      IsaInstr *snd = pseq_push(a, &p0.step, ISA_SEND);
      snd->p2p = (IsaP2P){.peer = 1, .tag = t + 1, .count = 16};
      pseq_push(a, &p0.step, ISA_KERNEL);
      if (order[c][t] < 0) continue;
      IsaInstr *rcv = pseq_push(a, &p1.step, ISA_RECV);
      rcv->p2p = (IsaP2P){.peer = 0, .tag = order[c][t], .count = 16};
    }
    err[0] = 0;
    int rc = pipe_check_order(ps, 2, err, sizeof err);
    CHECK(want[c] ? rc != 0 && strstr(err, want[c]) : rc == 0, "message order case %d: rc %d '%s'", c, rc, err);
    printf("message order case %d: %s\n", c, rc ? err : "in order");
  }
  arena_free(a);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
