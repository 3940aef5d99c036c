/* comm/nccl: the NCCL backend of Comm (nccl.h). */
#include "runtime/comm/nccl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tagged messages with one peer: a communicator per direction, each of two ranks
 * (the sender is its rank 0), and the stream this rank's sends to the peer go on. */
typedef struct NcclChannel {
  int peer;
  ncclComm_t to, from;
  CUstream stream;
  CUevent sent; /* recorded after the last send queued on stream */
  int pending;  /* a send since the last wait_sends */
} NcclChannel;

/* A pooled send buffer; reusable once `done` (its send) has completed. */
typedef struct NcclSend {
  CUdeviceptr buf;
  int64_t cap; /* bytes */
  CUevent done;
  int used;
} NcclSend;

typedef struct NcclComm {
  Comm c;
  Comm *host;
  int own_host;
  const CudaApi *api;
  CUstream stream;
  ncclComm_t nccl;
  NcclChannel *ch; /* [nch] after connect */
  int nch;
  NcclSend *pool; /* [npool] */
  int npool;
  CUevent copied; /* isend: the copy into the pool buffer is done */
} NcclComm;

static _Noreturn void nccl_fatal(NcclComm *n, const char *call, const char *why, const char *file, int line) {
  fflush(stdout);
  fprintf(stderr, "train: NCCL error at %s:%d: %s: %s\n", file, line, call, why);
  n->host->abort(n->host, 1);
}

#define NCCL_CHECK(n, call)                                                                              \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) nccl_fatal((n), #call, (n)->api->ncclGetErrorString(r_), __FILE__, __LINE__); \
  } while (0)

#define CU_CHECK(n, call)                                                 \
  do {                                                                    \
    CUresult r_ = (call);                                                 \
    const char *s_ = NULL;                                                \
    if (r_ != CUDA_SUCCESS) {                                             \
      (n)->api->GetErrorString(r_, &s_);                                  \
      nccl_fatal((n), #call, s_ ? s_ : "CUDA error", __FILE__, __LINE__); \
    }                                                                     \
  } while (0)

static NcclComm *nc(Comm *c) { return (NcclComm *)c; }

/* A unique id as the floats a host Comm carries (send, recv, broadcast). */
typedef union NcclId {
  ncclUniqueId id;
  float f[(sizeof(ncclUniqueId) + sizeof(float) - 1) / sizeof(float)];
} NcclId;
enum { NCCL_ID_FLOATS = sizeof(NcclId) / sizeof(float) };

static ncclRedOp_t nccl_op(CommRed op) { return op == COMM_MAX ? ncclMax : op == COMM_MIN ? ncclMin : ncclSum; }

/* ---- collectives: NCCL on the compute stream -------------------------------------- */

static void nccl_all_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op) {
  NcclComm *n = nc(c);
  if (count > 0)
    NCCL_CHECK(n, n->api->ncclAllReduce(send, recv, (size_t)count, ncclFloat32, nccl_op(op), n->nccl, n->stream));
}

static void nccl_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op, int root) {
  NcclComm *n = nc(c);
  if (count > 0)
    NCCL_CHECK(n, n->api->ncclReduce(send, recv, (size_t)count, ncclFloat32, nccl_op(op), root, n->nccl, n->stream));
}

static void nccl_reduce_scatter(Comm *c, const float *send, float *recv, int64_t count, CommRed op) {
  NcclComm *n = nc(c);
  if (count > 0)
    NCCL_CHECK(n, n->api->ncclReduceScatter(send, recv, (size_t)count, ncclFloat32, nccl_op(op), n->nccl, n->stream));
}

static void nccl_all_gather(Comm *c, const float *send, float *recv, int64_t count) {
  NcclComm *n = nc(c);
  if (count > 0) NCCL_CHECK(n, n->api->ncclAllGather(send, recv, (size_t)count, ncclFloat32, n->nccl, n->stream));
}

/* NCCL has no all-to-all: a send and a receive with every other rank, in one group,
 * and the own block copied on the same stream. */
static void nccl_all_to_all(Comm *c, const float *send, float *recv, int64_t count) {
  NcclComm *n = nc(c);
  if (count <= 0) return;
  const float *own = send + (int64_t)c->rank * count;
  CU_CHECK(n, n->api->MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)(recv + (int64_t)c->rank * count),
                                      (CUdeviceptr)(uintptr_t)own, (size_t)count * sizeof(float), n->stream));
  NCCL_CHECK(n, n->api->ncclGroupStart());
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank) continue;
    NCCL_CHECK(n, n->api->ncclSend(send + (int64_t)r * count, (size_t)count, ncclFloat32, r, n->nccl, n->stream));
    NCCL_CHECK(n, n->api->ncclRecv(recv + (int64_t)r * count, (size_t)count, ncclFloat32, r, n->nccl, n->stream));
  }
  NCCL_CHECK(n, n->api->ncclGroupEnd());
}

static void nccl_broadcast(Comm *c, float *buf, int64_t count, int root) {
  NcclComm *n = nc(c);
  if (count > 0) NCCL_CHECK(n, n->api->ncclBroadcast(buf, buf, (size_t)count, ncclFloat32, root, n->nccl, n->stream));
}

static void nccl_send(Comm *c, const float *buf, int64_t count, int peer) {
  NcclComm *n = nc(c);
  if (count > 0) NCCL_CHECK(n, n->api->ncclSend(buf, (size_t)count, ncclFloat32, peer, n->nccl, n->stream));
}

static void nccl_recv(Comm *c, float *buf, int64_t count, int peer) {
  NcclComm *n = nc(c);
  if (count > 0) NCCL_CHECK(n, n->api->ncclRecv(buf, (size_t)count, ncclFloat32, peer, n->nccl, n->stream));
}

static void nccl_barrier(Comm *c) {
  NcclComm *n = nc(c);
  CU_CHECK(n, n->api->StreamSynchronize(n->stream));
  n->host->barrier(n->host);
}

static void nccl_host_all_reduce(Comm *c, double *vals, int count, CommRed op) {
  nc(c)->host->host_all_reduce(nc(c)->host, vals, count, op);
}

static void nccl_host_send(Comm *c, const float *buf, int64_t count, int peer) {
  nc(c)->host->host_send(nc(c)->host, buf, count, peer);
}

static void nccl_host_recv(Comm *c, float *buf, int64_t count, int peer) {
  nc(c)->host->host_recv(nc(c)->host, buf, count, peer);
}

static void nccl_abort(Comm *c, int code) __attribute__((noreturn));
static void nccl_abort(Comm *c, int code) { nc(c)->host->abort(nc(c)->host, code); }

/* ---- tagged point to point: a channel per peer -------------------------------------- */

/* A two-rank communicator of this rank and peer in which `sender` is rank 0; the
 * sender makes the id and hands it over the host group. */
static ncclComm_t pair_comm(NcclComm *n, int peer, int sender) {
  NcclId u;
  int me = n->c.rank;
  memset(&u, 0, sizeof u);
  if (me == sender) {
    NCCL_CHECK(n, n->api->ncclGetUniqueId(&u.id));
    n->host->send(n->host, u.f, NCCL_ID_FLOATS, peer);
  } else {
    n->host->recv(n->host, u.f, NCCL_ID_FLOATS, sender);
  }
  ncclComm_t comm;
  NCCL_CHECK(n, n->api->ncclCommInitRank(&comm, 2, u.id, me == sender ? 0 : 1));
  return comm;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* One float each way over a new pair, lo -> hi first: NCCL connects a communicator's
 * point-to-point path at its first send and receive, a handshake of the two ranks' host
 * threads, done here in the same order on both rather than wherever the schedule first
 * sends (where the two ranks may each wait in another pair's handshake). */
static void warm_up(NcclComm *n, const NcclChannel *ch, int lo) {
  CUdeviceptr f;
  CU_CHECK(n, n->api->MemAlloc(&f, sizeof(float)));
  for (int dir = 0; dir < 2; dir++) { /* lo -> hi, then hi -> lo */
    int sending = (n->c.rank == lo) == (dir == 0);
    if (sending) NCCL_CHECK(n, n->api->ncclSend((const void *)(uintptr_t)f, 1, ncclFloat32, 1, ch->to, n->stream));
    else NCCL_CHECK(n, n->api->ncclRecv((void *)(uintptr_t)f, 1, ncclFloat32, 0, ch->from, n->stream));
    CU_CHECK(n, n->api->StreamSynchronize(n->stream));
  }
  CU_CHECK(n, n->api->MemFree(f));
}

/* The pairs (min, max) are made in increasing order on every rank, the direction from
 * the lower rank first: the lowest pair not yet made always has both ranks ready. This
 * rank's pairs in that order: the peers below it, then above it, each ascending. Each
 * pair is connected (warm_up) before the next is made, and destroyed in the same order
 * (nccl_destroy). */
static void nccl_connect(Comm *c, const int *peers, int npeers) {
  NcclComm *n = nc(c);
  int *p = malloc((size_t)(npeers + 1) * sizeof *p), np = 0;
  if (!p || !(n->ch = calloc((size_t)npeers + 1, sizeof *n->ch)))
    nccl_fatal(n, "connect", "out of memory", __FILE__, __LINE__);
  memcpy(p, peers, (size_t)npeers * sizeof *p);
  qsort(p, (size_t)npeers, sizeof *p, cmp_int);
  for (int i = 0; i < npeers; i++)
    if (p[i] != c->rank && p[i] >= 0 && p[i] < c->size && (np == 0 || p[np - 1] != p[i])) p[np++] = p[i];
  for (int i = 0; i < np; i++) {
    NcclChannel *ch = &n->ch[n->nch++];
    int lo = p[i] < c->rank ? p[i] : c->rank;
    int hi = p[i] < c->rank ? c->rank : p[i];
    ch->peer = p[i];
    ncclComm_t up = pair_comm(n, p[i], lo), down = pair_comm(n, p[i], hi); /* lo -> hi, hi -> lo */
    ch->to = c->rank == lo ? up : down;
    ch->from = c->rank == lo ? down : up;
    CU_CHECK(n, n->api->StreamCreate(&ch->stream, CU_STREAM_NON_BLOCKING));
    CU_CHECK(n, n->api->EventCreate(&ch->sent, CU_EVENT_DISABLE_TIMING));
    warm_up(n, ch, lo);
  }
  free(p);
}

static NcclChannel *channel(NcclComm *n, int peer) {
  for (int i = 0; i < n->nch; i++)
    if (n->ch[i].peer == peer) return &n->ch[i];
  char why[96];
  snprintf(why, sizeof why, "rank %d is not connected to rank %d (connect was not told)", n->c.rank, peer);
  nccl_fatal(n, "a tagged message", why, __FILE__, __LINE__);
}

/* A pool buffer of at least bytes whose last send has completed. */
static NcclSend *pool_buffer(NcclComm *n, int64_t bytes) {
  for (int i = 0; i < n->npool; i++) {
    NcclSend *s = &n->pool[i];
    if (s->cap >= bytes && (!s->used || n->api->EventQuery(s->done) == CUDA_SUCCESS)) return s;
  }
  NcclSend *v = realloc(n->pool, (size_t)(n->npool + 1) * sizeof *v);
  if (!v) nccl_fatal(n, "isend", "out of memory", __FILE__, __LINE__);
  n->pool = v;
  NcclSend *s = &n->pool[n->npool++];
  memset(s, 0, sizeof *s);
  s->cap = bytes;
  CU_CHECK(n, n->api->MemAlloc(&s->buf, (size_t)bytes));
  CU_CHECK(n, n->api->EventCreate(&s->done, CU_EVENT_DISABLE_TIMING));
  return s;
}

static void nccl_isend(Comm *c, const float *buf, int64_t count, int peer, int tag) {
  NcclComm *n = nc(c);
  NcclChannel *ch = channel(n, peer);
  int64_t bytes = count * (int64_t)sizeof(float);
  (void)tag;
  if (count <= 0) return;
  NcclSend *s = pool_buffer(n, bytes);
  CU_CHECK(n, n->api->MemcpyDtoDAsync(s->buf, (CUdeviceptr)(uintptr_t)buf, (size_t)bytes, n->stream));
  CU_CHECK(n, n->api->EventRecord(n->copied, n->stream));
  CU_CHECK(n, n->api->StreamWaitEvent(ch->stream, n->copied, 0));
  NCCL_CHECK(n, n->api->ncclSend((const void *)(uintptr_t)s->buf, (size_t)count, ncclFloat32, 1, ch->to, ch->stream));
  CU_CHECK(n, n->api->EventRecord(s->done, ch->stream));
  CU_CHECK(n, n->api->EventRecord(ch->sent, ch->stream));
  s->used = 1, ch->pending = 1;
}

static void nccl_recv_tag(Comm *c, float *buf, int64_t count, int peer, int tag) {
  NcclComm *n = nc(c);
  NcclChannel *ch = channel(n, peer);
  (void)tag;
  if (count > 0) NCCL_CHECK(n, n->api->ncclRecv(buf, (size_t)count, ncclFloat32, 0, ch->from, n->stream));
}

static void nccl_wait_sends(Comm *c) {
  NcclComm *n = nc(c);
  for (int i = 0; i < n->nch; i++)
    if (n->ch[i].pending) {
      CU_CHECK(n, n->api->StreamWaitEvent(n->stream, n->ch[i].sent, 0));
      n->ch[i].pending = 0;
    }
}

/* ---- groups and the end ------------------------------------------------------------ */

static Comm *nccl_split(Comm *c, int color, int key) {
  NcclComm *n = nc(c);
  Comm *h = n->host->split(n->host, color, key);
  return h ? comm_nccl_new(h, 1, n->api, n->stream) : NULL;
}

Comm *comm_nccl_dup_on(Comm *c, CUstream stream) {
  NcclComm *n = nc(c);
  Comm *h = n->host->split(n->host, 0, n->host->rank);
  return h ? comm_nccl_new(h, 1, n->api, stream) : NULL;
}

static void nccl_destroy(Comm *c) {
  NcclComm *n = nc(c);
  const CudaApi *api = n->api;
  api->StreamSynchronize(n->stream);
  for (int i = 0; i < n->nch; i++) {
    NcclChannel *ch = &n->ch[i];
    api->StreamSynchronize(ch->stream);
    int lower = n->c.rank < ch->peer; /* the pair's lo -> hi communicator first on both ranks */
    api->ncclCommDestroy(lower ? ch->to : ch->from);
    api->ncclCommDestroy(lower ? ch->from : ch->to);
    api->EventDestroy(ch->sent);
    api->StreamDestroy(ch->stream);
  }
  for (int i = 0; i < n->npool; i++) {
    api->MemFree(n->pool[i].buf);
    api->EventDestroy(n->pool[i].done);
  }
  if (n->copied) api->EventDestroy(n->copied);
  if (n->nccl) api->ncclCommDestroy(n->nccl);
  if (n->own_host) n->host->destroy(n->host);
  free(n->ch);
  free(n->pool);
  free(n);
}

Comm *comm_nccl_new(Comm *host, int own_host, const CudaApi *api, CUstream stream) {
  NcclComm *n = calloc(1, sizeof *n);
  if (!n) {
    fflush(stdout);
    fprintf(stderr, "train: out of memory making a NCCL communicator\n");
    host->abort(host, 1);
  }
  n->host = host, n->own_host = own_host, n->api = api, n->stream = stream;
  n->c = (Comm){.name = "nccl",
                .rank = host->rank,
                .size = host->size,
                .local_rank = host->local_rank,
                .local_size = host->local_size,
                .impl = n,
                .all_reduce = nccl_all_reduce,
                .reduce = nccl_reduce,
                .reduce_scatter = nccl_reduce_scatter,
                .all_gather = nccl_all_gather,
                .all_to_all = nccl_all_to_all,
                .broadcast = nccl_broadcast,
                .send = nccl_send,
                .recv = nccl_recv,
                .barrier = nccl_barrier,
                .split = nccl_split,
                .isend = nccl_isend,
                .recv_tag = nccl_recv_tag,
                .wait_sends = nccl_wait_sends,
                .connect = nccl_connect,
                .host_all_reduce = nccl_host_all_reduce,
                .host_send = nccl_host_send,
                .host_recv = nccl_host_recv,
                .abort = nccl_abort,
                .destroy = nccl_destroy};
  NcclId u;
  memset(&u, 0, sizeof u);
  if (host->rank == 0) NCCL_CHECK(n, api->ncclGetUniqueId(&u.id));
  host->broadcast(host, u.f, NCCL_ID_FLOATS, 0); /* host memory: an MPI group */
  NCCL_CHECK(n, api->ncclCommInitRank(&n->nccl, host->size, u.id, host->rank));
  CU_CHECK(n, api->EventCreate(&n->copied, CU_EVENT_DISABLE_TIMING));
  return &n->c;
}
