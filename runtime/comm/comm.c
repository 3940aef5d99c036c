/* comm: the single-rank backend, the choice of backend, and agreement on errors
 * (see the header). With one rank every reduction is the identity, so the self
 * backend copies when the call is out of place and does nothing in place. Tagged
 * sends to itself wait in a queue of pooled buffers until recv_tag takes them
 * (oldest first per tag); a recv_tag with nothing queued could never complete, so
 * it is an internal error.
 */
#include "runtime/comm/comm.h"
#include "runtime/comm/watchdog.h"

#include "runtime/io/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- self ---------------------------------------------------------------------- */

typedef struct SelfMsg {
  float *buf; /* [cap] */
  int64_t cap, count;
  int tag;
  uint64_t seq; /* order of sending; 0: the slot is free */
} SelfMsg;

typedef struct SelfComm {
  Comm c;
  SelfMsg *q; /* [n] */
  int n;
  uint64_t next_seq;
} SelfComm;

static void self_fatal(const char *what, int peer) __attribute__((noreturn));
static void self_fatal(const char *what, int peer) {
  fflush(stdout);
  fprintf(stderr, "train: internal error: comm self: %s rank %d\n", what, peer);
  abort();
}

static void self_copy(const float *send, float *recv, int64_t count) {
  if (send != recv && count > 0) memmove(recv, send, (size_t)count * sizeof *recv);
}

static void self_all_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op) {
  self_copy(send, recv, count);
}

static void self_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op, int root) {
  self_copy(send, recv, count);
}

static void self_reduce_scatter(Comm *c, const float *send, float *recv, int64_t count, CommRed op) {
  self_copy(send, recv, count);
}

static void self_all_gather(Comm *c, const float *send, float *recv, int64_t count) { self_copy(send, recv, count); }

static void self_all_to_all(Comm *c, const float *send, float *recv, int64_t count) { self_copy(send, recv, count); }

static void self_broadcast(Comm *c, float *buf, int64_t count, int root) {}

/* A rank cannot send to itself without a matching receive already posted; the
 * trainer never does, so either half alone is a bug. */
static void self_send(Comm *c, const float *buf, int64_t count, int peer) {
  fprintf(stderr, "train: internal error: comm self: send to rank %d\n", peer);
  abort();
}

static void self_recv(Comm *c, float *buf, int64_t count, int peer) {
  fprintf(stderr, "train: internal error: comm self: receive from rank %d\n", peer);
  abort();
}

static void self_barrier(Comm *c) {}

/* A free slot of the queue with room for count floats (grown or added if need be). */
static SelfMsg *self_slot(SelfComm *s, int64_t count) {
  SelfMsg *fit = NULL, *any = NULL;
  for (int i = 0; i < s->n && !fit; i++)
    if (!s->q[i].seq) {
      fit = s->q[i].cap >= count ? &s->q[i] : NULL;
      any = any ? any : &s->q[i];
    }
  if (fit) return fit;
  if (!any) {
    SelfMsg *q = realloc(s->q, (size_t)(s->n + 1) * sizeof *q);
    if (!q) self_fatal("out of memory queueing a send to", 0);
    s->q = q;
    any = &s->q[s->n++];
    *any = (SelfMsg){0};
  }
  float *buf = realloc(any->buf, (size_t)(count > 0 ? count : 1) * sizeof *buf);
  if (!buf) self_fatal("out of memory queueing a send to", 0);
  any->buf = buf, any->cap = count;
  return any;
}

static void self_isend(Comm *c, const float *buf, int64_t count, int peer, int tag) {
  SelfComm *s = (SelfComm *)c;
  if (peer != 0) self_fatal("send to", peer);
  SelfMsg *m = self_slot(s, count);
  if (count > 0) memcpy(m->buf, buf, (size_t)count * sizeof *buf);
  m->count = count, m->tag = tag, m->seq = ++s->next_seq;
}

static void self_recv_tag(Comm *c, float *buf, int64_t count, int peer, int tag) {
  SelfComm *s = (SelfComm *)c;
  SelfMsg *m = NULL;
  for (int i = 0; i < s->n && peer == 0; i++)
    if (s->q[i].seq && s->q[i].tag == tag && (!m || s->q[i].seq < m->seq)) m = &s->q[i];
  if (!m || m->count != count) self_fatal(m ? "receive of the wrong count from" : "receive with nothing sent by", peer);
  if (count > 0) memcpy(buf, m->buf, (size_t)count * sizeof *buf);
  m->seq = 0;
}

static void self_wait_sends(Comm *c) {}

static Comm *self_split(Comm *c, int color, int key) { return comm_self_new(); }

static void self_host_all_reduce(Comm *c, double *vals, int n, CommRed op) {}

static void self_abort(Comm *c, int code) __attribute__((noreturn));
static void self_abort(Comm *c, int code) {
  fflush(stdout);
  exit(code);
}

static void self_destroy(Comm *c) {
  SelfComm *s = (SelfComm *)c;
  for (int i = 0; i < s->n; i++) free(s->q[i].buf);
  free(s->q);
  free(s);
}

Comm *comm_self_new(void) {
  SelfComm *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->c = (Comm){.name = "self",
                .rank = 0,
                .size = 1,
                .local_size = 1,
                .impl = s,
                .all_reduce = self_all_reduce,
                .reduce = self_reduce,
                .reduce_scatter = self_reduce_scatter,
                .all_gather = self_all_gather,
                .all_to_all = self_all_to_all,
                .broadcast = self_broadcast,
                .send = self_send,
                .recv = self_recv,
                .barrier = self_barrier,
                .split = self_split,
                .isend = self_isend,
                .recv_tag = self_recv_tag,
                .wait_sends = self_wait_sends,
                .host_all_reduce = self_host_all_reduce,
                .host_send = self_send,
                .host_recv = self_recv,
                .abort = self_abort,
                .destroy = self_destroy};
  return &s->c;
}

/* ---- choice and agreement ------------------------------------------------------ */

static int launched_by_mpi(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

Comm *comm_open(int *argc, char ***argv, char *err, size_t errlen) {
  const char *want = getenv("COLOSSALC_COMM");
  if (want && strcmp(want, "self") != 0 && strcmp(want, "mpi") != 0) {
    file_set_error(err, errlen, "COLOSSALC_COMM=%s: expected self or mpi", want);
    return NULL;
  }
  int mpi = want ? strcmp(want, "mpi") == 0 : launched_by_mpi();
  if (mpi) return comm_mpi_new(argc, argv, err, errlen);
  Comm *c = comm_self_new();
  if (!c) file_set_error(err, errlen, "out of memory");
  return c;
}

void (*comm_fatal_hook)(int code);

void comm_fatal(int code) {
  watchdog_quit(); /* this rank's own failure, said by the caller: not a death to report */
  fflush(stdout);
  fflush(stderr);
  if (comm_fatal_hook) comm_fatal_hook(code);
  exit(code);
}

int comm_agree(Comm *c, int failed, char *err) {
  /* [any failed, size - lowest failing rank]: both maxima. */
  double v[2] = {failed ? 1 : 0, failed ? c->size - c->rank : 0};
  c->host_all_reduce(c, v, 2, COMM_MAX);
  if (v[0] > 0 && err && c->rank != c->size - (int)v[1]) err[0] = 0;
  return v[0] > 0 ? -1 : 0;
}
