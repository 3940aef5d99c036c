/* Pipeline schedules (codegen/pipeline.h): for 1F1B, interleaved and ZB-H1 schedules
 * over 1-8 stages, 1-4 chunks a stage and several micro-batch counts, every stage's
 * schedule runs each chunk's forward and backward (ZB-H1: B and W) of every
 * micro-batch exactly once, the forward first (and B before W), and pipe_check proves
 * the stages together run to the end over a chain of chunks. 1F1B keeps at most
 * pp - s micro-batches in flight on stage s (what the slots hold), ZB-H1 at most
 * min(pp, m), 1F1B's stage 0. Passes of equal time simulated through the stages:
 * ZB-H1's step is (3m + pp - 1) units, 1F1B's (3m + 3(pp - 1)) (Qi et al. 2024). A
 * chain that runs backwards (chunk 1 feeding chunk 0) must be reported as a deadlock. */
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

/* The step of pp stages, each pass one unit (1F1B's backward two: B and W), every pass
 * after its stage's previous one and its input (the forward before, the backward after,
 * a W its B). */
static int simulate(int pp, int m, PipeSchedule kind) {
  int per = pipe_actions(1, m, kind), *next = calloc(pp, sizeof(int)), *free_at = calloc(pp, sizeof(int)), span = 0;
  int *fend = malloc(sizeof(int) * pp * m), *bend = malloc(sizeof(int) * pp * m);
  PipeAction *a = malloc(sizeof *a * per * pp);
  for (int s = 0; s < pp; s++) pipe_schedule(pp, 1, m, kind, s, a + s * per);
  for (int i = 0; i < pp * m; i++) fend[i] = bend[i] = -1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; s++)
      for (; next[s] < per; next[s]++) {
        PipeAction x = a[s * per + next[s]];
        int dep = x.fwd ? (s ? fend[(s - 1) * m + x.mb] : 0)
                  : x.w ? bend[s * m + x.mb]
                        : (s + 1 < pp ? bend[(s + 1) * m + x.mb] : fend[s * m + x.mb]);
        if (dep < 0) break;
        int end = (free_at[s] > dep ? free_at[s] : dep) + (!x.fwd && !x.w && kind != PS_ZBH1 ? 2 : 1);
        if (!x.w) (x.fwd ? fend : bend)[s * m + x.mb] = end;
        free_at[s] = end, progress = true;
        if (end > span) span = end;
      }
  }
  free(next), free(free_at), free(fend), free(bend), free(a);
  return span;
}

static void one(int pp, int v, int m, PipeSchedule kind) {
  int per = pipe_actions(v, m, kind);
  PipeAction *a = malloc(sizeof *a * per);
  char *seen = calloc((size_t)pp * v * m * 3, 1);
  for (int s = 0; s < pp; s++) {
    int n = pipe_schedule(pp, v, m, kind, s, a), inflight = 0, most = 0;
    CHECK(n == per, "pp %d v %d m %d stage %d: %d actions, not %d", pp, v, m, s, n, per);
    memset(seen, 0, (size_t)pp * v * m * 3);
    for (int i = 0; i < n; i++) {
      PipeAction x = a[i];
      CHECK(x.chunk % pp == s && x.mb >= 0 && x.mb < m, "pp %d v %d m %d stage %d: action of chunk %d mb %d", pp, v, m,
            s, x.chunk, x.mb);
      CHECK(!x.w || kind == PS_ZBH1, "pp %d v %d m %d: a W pass outside ZB-H1", pp, v, m);
      char *f = &seen[(x.chunk * m + x.mb) * 3];
      int pass = x.fwd ? 0 : x.w ? 2 : 1;
      CHECK(!f[pass], "pp %d v %d m %d: chunk %d mb %d pass %d twice", pp, v, m, x.chunk, x.mb, pass);
      CHECK(pass == 0 || f[pass - 1], "pp %d v %d m %d: chunk %d mb %d pass %d before pass %d", pp, v, m, x.chunk, x.mb,
            pass, pass - 1);
      f[pass] = 1;
      if (v == 1) {
        inflight += x.fwd ? 1 : (x.w || kind != PS_ZBH1) ? -1 : 0;
        if (inflight > most) most = inflight;
      }
    }
    if (kind == PS_ZBH1)
      CHECK(most <= (pp < m ? pp : m), "ZB-H1 pp %d m %d stage %d: %d micro-batches in flight", pp, m, s, most);
    else if (v == 1)
      CHECK(most <= (pp - s < m ? pp - s : m), "1F1B pp %d m %d stage %d: %d micro-batches in flight", pp, m, s, most);
    CHECK(pipe_slots(pp, v, m, kind, s) == (v == 1 ? most : pipe_slots(pp, v, m, kind, s)),
          "pp %d m %d stage %d: %d slots for %d in flight", pp, m, s, pipe_slots(pp, v, m, kind, s), most);
  }
  Boundary b[64];
  Partition p = chain(pp, v, b);
  char err[256] = "";
  CHECK(pipe_check(&p, m, kind, err, sizeof err) == 0, "pp %d v %d m %d: %s", pp, v, m, err);
  if (kind == PS_ZBH1 && m >= pp) {
    int zb = simulate(pp, m, PS_ZBH1), f1b1 = simulate(pp, m, PS_1F1B);
    CHECK(zb == 3 * m + pp - 1 && f1b1 == 3 * m + 3 * (pp - 1), "pp %d m %d: ZB-H1 %d units, 1F1B %d", pp, m, zb, f1b1);
  }
  free(a), free(seen);
}

int main(void) {
  int runs = 0;
  for (int pp = 1; pp <= 8; pp++)
    for (int v = 1; v <= 4; v++)
      for (int k = 1; k <= 3; k++) {
        int m = v == 1 ? k * 2 - 1 + (pp > 1) : k * pp; /* interleaved needs m a multiple of pp */
        one(pp, v, m, v > 1 ? PS_INTERLEAVED : PS_1F1B);
        if (v == 1) one(pp, 1, pp + k, PS_1F1B), one(pp, 1, m, PS_ZBH1), one(pp, 1, pp + k, PS_ZBH1), runs += 3;
        runs++;
      }
  Boundary b[1] = {{1, 0, 0, 0, 0, 16}};
  Partition back = {.tp = 1, .pp = 2, .v = 1, .nchunks = 2, .nbound = 1, .bound = b};
  char err[256] = "";
  CHECK(pipe_check(&back, 2, PS_1F1B, err, sizeof err) != 0 && strstr(err, "deadlock"), "a backwards chain: '%s'", err);
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
