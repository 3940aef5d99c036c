/* test_comm: every function of the Comm interface (runtime/comm/comm.h) on the backend
 * comm_open picks: self when run alone, MPI under mpirun (any number of ranks; the
 * tests run 3, so blocks and roots are not symmetric). Rank r contributes
 * f(r, i) = 1000 r + i, so every sum, maximum and minimum is an exact float and each
 * result is checked element by element, in place and out of place, for every root.
 * Sub-groups from split and tagged non-blocking sends (order per tag, pooled
 * buffers, sends to oneself) are checked too. With COLOSSALC_MPI_CHUNK=3 the MPI backend splits each call into chunks
 * of three elements, which reaches its split paths. Each rank counts its failures; rank 0 prints "N passed, M failed"
 * for all ranks together, and the exit status is 1 on every rank when any check failed anywhere.
 */
#include "runtime/comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 10 }; /* elements per block */

static Comm *c;
static int passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  fprintf(stderr, "rank %d: FAIL: %s\n", c->rank, what);
}

static float f(int r, int i) { return 1000.0f * (float)r + (float)i; }

/* op over ranks of f(r, i). */
static float want(CommRed op, int i) {
  float acc = op == COMM_SUM ? 0 : f(0, i);
  for (int r = 0; r < c->size; r++)
    acc = op == COMM_SUM   ? acc + f(r, i)
          : op == COMM_MAX ? (f(r, i) > acc ? f(r, i) : acc)
                           : (f(r, i) < acc ? f(r, i) : acc);
  return acc;
}

static int equal_to(const float *x, CommRed op, int first, int n) {
  for (int i = 0; i < n; i++)
    if (x[i] != want(op, first + i)) return 0;
  return 1;
}

static void fill(float *x, int first, int n) {
  for (int i = 0; i < n; i++) x[i] = f(c->rank, first + i);
}

static void test_all_reduce(void) {
  static const CommRed ops[3] = {COMM_SUM, COMM_MAX, COMM_MIN};
  float a[N], b[N];
  for (int k = 0; k < 3; k++) {
    fill(a, 0, N);
    c->all_reduce(c, a, b, N, ops[k]);
    check(equal_to(b, ops[k], 0, N), "all_reduce out of place");
    c->all_reduce(c, a, a, N, ops[k]);
    check(equal_to(a, ops[k], 0, N), "all_reduce in place");
  }
}

static void test_reduce(void) {
  float a[N], b[N];
  for (int root = 0; root < c->size; root++) {
    fill(a, 0, N);
    memset(b, 0, sizeof b);
    c->reduce(c, a, b, N, COMM_SUM, root);
    check(c->rank != root || equal_to(b, COMM_SUM, 0, N), "reduce out of place at the root");
    check(c->rank == root || b[0] == 0, "reduce wrote a non-root's recv");
    c->reduce(c, a, a, N, COMM_MAX, root);
    check(c->rank != root || equal_to(a, COMM_MAX, 0, N), "reduce in place at the root");
  }
}

/* Block r of send is f(rank, r*N + i): rank r gets op over ranks of its block. */
static void test_reduce_scatter(void) {
  float *a = calloc((size_t)c->size * N, sizeof *a), b[N];
  fill(a, 0, c->size * N);
  c->reduce_scatter(c, a, b, N, COMM_SUM);
  check(equal_to(b, COMM_SUM, c->rank * N, N), "reduce_scatter out of place");
  float *mine = a + c->rank * N;
  c->reduce_scatter(c, a, mine, N, COMM_SUM);
  check(equal_to(mine, COMM_SUM, c->rank * N, N), "reduce_scatter in place");
  free(a);
}

static int gathered_ok(const float *x) {
  for (int r = 0; r < c->size; r++)
    for (int i = 0; i < N; i++)
      if (x[r * N + i] != f(r, i)) return 0;
  return 1;
}

static void test_all_gather(void) {
  float *x = calloc((size_t)c->size * N, sizeof *x), a[N];
  fill(a, 0, N);
  c->all_gather(c, a, x, N);
  check(gathered_ok(x), "all_gather out of place");
  memset(x, 0, (size_t)c->size * N * sizeof *x);
  fill(x + c->rank * N, 0, N);
  c->all_gather(c, x + c->rank * N, x, N);
  check(gathered_ok(x), "all_gather in place");
  free(x);
}

/* Block r of send is f(rank, r*N + i): block q of recv is rank q's block for this rank. */
static void test_all_to_all(void) {
  float *a = calloc((size_t)c->size * N, sizeof *a), *b = calloc((size_t)c->size * N, sizeof *b);
  fill(a, 0, c->size * N);
  c->all_to_all(c, a, b, N);
  int ok = 1;
  for (int q = 0; q < c->size; q++)
    for (int i = 0; i < N; i++) ok &= b[q * N + i] == f(q, c->rank * N + i);
  check(ok, "all_to_all");
  free(a), free(b);
}

static void test_broadcast(void) {
  float a[N];
  for (int root = 0; root < c->size; root++) {
    fill(a, 0, N);
    c->broadcast(c, a, N, root);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= a[i] == f(root, i);
    check(ok, "broadcast");
  }
}

/* A ring: even ranks send first, odd ranks receive first (no deadlock for any size). */
static void test_send_recv(void) {
  float out[N], in[N];
  if (c->size == 1) return;
  int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
  fill(out, 0, N);
  if (c->rank % 2 == 0) {
    c->send(c, out, N, next);
    c->recv(c, in, N, prev);
  } else {
    c->recv(c, in, N, prev);
    c->send(c, out, N, next);
  }
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= in[i] == f(prev, i);
  check(ok, "send/recv ring");
}

/* Sub-groups: even and odd ranks, ranked by descending rank; a sum inside each
 * group and a split of the split. */
static void test_split(void) {
  Comm *g = c->split(c, c->rank % 2, c->size - c->rank);
  int members = (c->size + (c->rank % 2 == 0)) / 2, mine = 0;
  for (int r = c->rank % 2; r < c->size; r += 2) mine += r > c->rank;
  check(g && g->size == members && g->rank == mine, "split: group size and key order");
  double v[1] = {c->rank};
  g->host_all_reduce(g, v, 1, COMM_SUM);
  double want = 0;
  for (int r = c->rank % 2; r < c->size; r += 2) want += r;
  check(v[0] == want, "split: host_all_reduce within the group");
  float a[N], b[N];
  fill(a, 0, N);
  g->all_reduce(g, a, b, N, COMM_SUM);
  int ok = 1;
  for (int i = 0; i < N; i++) {
    float s = 0;
    for (int r = c->rank % 2; r < c->size; r += 2) s += f(r, i);
    ok &= b[i] == s;
  }
  check(ok, "split: all_reduce within the group");
  Comm *one = g->split(g, g->rank, 0);
  check(one && one->size == 1 && one->rank == 0, "split of a split: singletons");
  one->destroy(one);
  g->destroy(g);
}

/* Tagged sends: every rank sends three messages to every rank (itself included)
 * under tags 5, 9, 5 before receiving any, then receives them tag 9 first: the two
 * tag-5 messages arrive in the order sent. Then the same again, reusing the pool. */
static void test_tagged(void) {
  float out[N], in[N];
  for (int round = 0; round < 2; round++) {
    int ok = 1;
    for (int peer = 0; peer < c->size; peer++)
      for (int k = 0; k < 3; k++) {
        fill(out, 100 * k + peer, N);
        c->isend(c, out, N, peer, k == 1 ? 9 : 5);
      }
    for (int peer = 0; peer < c->size; peer++) {
      const int order[3] = {1, 0, 2};
      for (int j = 0; j < 3; j++) {
        int k = order[j];
        c->recv_tag(c, in, N, peer, k == 1 ? 9 : 5);
        for (int i = 0; i < N; i++) ok &= in[i] == f(peer, 100 * k + c->rank + i);
      }
    }
    c->wait_sends(c);
    check(ok, round ? "tagged send/recv, pooled buffers reused" : "tagged send/recv order");
  }
}

static void test_host_and_agree(void) {
  double v[3] = {c->rank + 0.5, c->rank, -c->rank};
  c->host_all_reduce(c, v, 3, COMM_SUM);
  double sum = 0;
  for (int r = 0; r < c->size; r++) sum += r + 0.5;
  check(v[0] == sum, "host_all_reduce sum");
  double w[2] = {c->rank, c->rank};
  c->host_all_reduce(c, w, 1, COMM_MAX);
  c->host_all_reduce(c, w + 1, 1, COMM_MIN);
  check(w[0] == c->size - 1 && w[1] == 0, "host_all_reduce max, min");
  char msg[8] = "failed";
  check(comm_agree(c, 0, msg) == 0 && msg[0], "agree: nobody failed");
  int fails = c->rank == c->size - 1 || (c->size > 2 && c->rank == 1);
  int lowest = c->size > 2 ? 1 : c->size - 1;
  check(comm_agree(c, fails, msg) == -1 && (msg[0] != 0) == (c->rank == lowest),
        "agree: the lowest failing rank's message kept, the others' emptied");
  c->barrier(c);
}

int main(int argc, char **argv) {
  char err[512];
  if (!(c = comm_open(&argc, &argv, err, sizeof err))) {
    fprintf(stderr, "test_comm: %s\n", err);
    return 1;
  }
  test_all_reduce();
  test_reduce();
  test_reduce_scatter();
  test_all_gather();
  test_all_to_all();
  test_broadcast();
  test_send_recv();
  test_split();
  test_tagged();
  test_host_and_agree();
  double t[2] = {passed, failed};
  c->host_all_reduce(c, t, 2, COMM_SUM);
  if (c->rank == 0) printf("comm %s, ranks %d: %.0f passed, %.0f failed\n", c->name, c->size, t[0], t[1]);
  c->destroy(c);
  return t[1] > 0 ? 1 : 0;
}
