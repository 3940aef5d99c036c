/* comm/mpi: the MPI backend of Comm (comm.h) over MPI_COMM_WORLD.
 *
 * Every call but isend blocks until its buffers may be reused; isend copies into a
 * pooled buffer and MPI_Isend's from it (wait_sends completes them). A Comm from
 * split wraps its own MPI communicator, so groups never see each other's messages. Counts above the chunk (2^20
 * elements, 4 MiB; COLOSSALC_MPI_CHUNK=N in the environment sets it up to 2^30, so tests
 * reach the split paths with small buffers) are split into several calls: MPI counts
 * are int, and Open MPI's reductions over shared memory slow down 3 to 5 times a byte
 * past 16 MiB a call (colossalc --calibrate: a 128 MiB reduce among 2 ranks takes 141 ms
 * whole, 42 ms in 4 MiB calls).
 * Reductions map to MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter_block and
 * MPI_Allgather, broadcasts to MPI_Bcast, point to point to MPI_Send/MPI_Recv; the in-place
 * forms of comm.h that MPI lays out differently (reduce_scatter in place, whose MPI
 * result lands at the start of the buffer) and calls too large for one MPI call are
 * done as one MPI_Reduce or MPI_Bcast per rank's block.
 *
 * Errors: MPI_COMM_WORLD returns errors (MPI_ERRORS_RETURN) to MPI_CHECK, which
 * prints the call, file, line and MPI's message, then aborts every rank.
 */
#include "runtime/comm/comm.h"
#include "runtime/comm/watchdog.h"

#include "runtime/io/fileio.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMM_MPI_CHUNK_MAX ((int64_t)1 << 30)     /* elements per MPI call, at most */
#define COMM_MPI_CHUNK_DEFAULT ((int64_t)1 << 20) /* ... unless COLOSSALC_MPI_CHUNK says */

/* One pooled send buffer and the request of the message it carries. */
typedef struct MpiSend {
  float *buf; /* [cap] */
  int64_t cap;
  MPI_Request req; /* MPI_REQUEST_NULL: free */
} MpiSend;

typedef struct MpiComm {
  Comm c;
  MPI_Comm comm;  /* MPI_COMM_WORLD, or a group from split */
  int finalize;   /* this process called MPI_Init (the world Comm only) */
  MpiSend *sends; /* [nsends] the isend pool */
  int nsends;
} MpiComm;

static int64_t mpi_chunk = COMM_MPI_CHUNK_DEFAULT; /* elements per call; set by comm_mpi_new */

static void mpi_fail(int rc, const char *call, const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error code %d", rc);
  watchdog_grace(3.0); /* often a peer died: the watchdog's verdict names it */
  watchdog_quit();
  fflush(stdout);
  fprintf(stderr, "train: MPI error at %s:%d: %s: %s\n", file, line, call, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

#define MPI_CHECK(call)                                                       \
  do {                                                                        \
    int mpi_rc_ = (call);                                                     \
    if (mpi_rc_ != MPI_SUCCESS) mpi_fail(mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

static MPI_Comm mpi_comm(Comm *c) { return ((MpiComm *)c)->comm; }

static MPI_Op mpi_op(CommRed op) {
  switch (op) {
  case COMM_SUM: return MPI_SUM;
  case COMM_MAX: return MPI_MAX;
  case COMM_MIN: return MPI_MIN;
  }
  return MPI_SUM;
}

/* Elements in the chunk that starts at done of count. */
static int chunk(int64_t done, int64_t count) { return (int)(count - done < mpi_chunk ? count - done : mpi_chunk); }

static void mpi_all_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op) {
  for (int64_t at = 0; at < count; at += mpi_chunk)
    MPI_CHECK(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send + at, recv + at, chunk(at, count), MPI_FLOAT, mpi_op(op),
                            mpi_comm(c)));
}

static void mpi_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op, int root) {
  int in_place = c->rank == root && send == recv;
  for (int64_t at = 0; at < count; at += mpi_chunk)
    MPI_CHECK(MPI_Reduce(in_place ? MPI_IN_PLACE : send + at, c->rank == root ? recv + at : NULL, chunk(at, count),
                         MPI_FLOAT, mpi_op(op), root, mpi_comm(c)));
}

static void mpi_reduce_scatter(Comm *c, const float *send, float *recv, int64_t count, CommRed op) {
  if (send + (int64_t)c->rank * count != recv && count <= mpi_chunk) {
    MPI_CHECK(MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, mpi_op(op), mpi_comm(c)));
    return;
  }
  for (int r = 0; r < c->size; r++) mpi_reduce(c, send + (int64_t)r * count, recv, count, op, r);
}

static void mpi_broadcast(Comm *c, float *buf, int64_t count, int root) {
  for (int64_t at = 0; at < count; at += mpi_chunk)
    MPI_CHECK(MPI_Bcast(buf + at, chunk(at, count), MPI_FLOAT, root, mpi_comm(c)));
}

static void mpi_all_gather(Comm *c, const float *send, float *recv, int64_t count) {
  float *mine = recv + (int64_t)c->rank * count;
  if (count <= mpi_chunk && (int64_t)c->size * count <= INT_MAX) {
    if (send == mine)
      MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)count, MPI_FLOAT, mpi_comm(c)));
    else MPI_CHECK(MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, mpi_comm(c)));
    return;
  }
  for (int64_t at = 0; send != mine && at < count; at += mpi_chunk) /* own block */
    MPI_CHECK(MPI_Sendrecv(send + at, chunk(at, count), MPI_FLOAT, c->rank, 1, mine + at, chunk(at, count), MPI_FLOAT,
                           c->rank, 1, mpi_comm(c), MPI_STATUS_IGNORE));
  for (int r = 0; r < c->size; r++) mpi_broadcast(c, recv + (int64_t)r * count, count, r);
}

/* Blocks above mpi_chunk go in pieces: each exchange moves the piece at one offset of
 * every block (a type of the piece's floats whose extent is a block). */
static void mpi_all_to_all(Comm *c, const float *send, float *recv, int64_t count) {
  if (count <= mpi_chunk && (int64_t)c->size * count <= INT_MAX) {
    MPI_CHECK(MPI_Alltoall(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, mpi_comm(c)));
    return;
  }
  for (int64_t at = 0; at < count; at += mpi_chunk) {
    MPI_Datatype piece, block;
    MPI_CHECK(MPI_Type_contiguous(chunk(at, count), MPI_FLOAT, &piece));
    MPI_CHECK(MPI_Type_create_resized(piece, 0, (MPI_Aint)(count * (int64_t)sizeof(float)), &block));
    MPI_CHECK(MPI_Type_commit(&block));
    MPI_CHECK(MPI_Type_free(&piece));
    MPI_CHECK(MPI_Alltoall(send + at, 1, block, recv + at, 1, block, mpi_comm(c)));
    MPI_CHECK(MPI_Type_free(&block));
  }
}

static void mpi_send(Comm *c, const float *buf, int64_t count, int peer) {
  for (int64_t at = 0; at < count; at += mpi_chunk)
    MPI_CHECK(MPI_Send(buf + at, chunk(at, count), MPI_FLOAT, peer, 0, mpi_comm(c)));
}

static void mpi_recv(Comm *c, float *buf, int64_t count, int peer) {
  for (int64_t at = 0; at < count; at += mpi_chunk)
    MPI_CHECK(MPI_Recv(buf + at, chunk(at, count), MPI_FLOAT, peer, 0, mpi_comm(c), MPI_STATUS_IGNORE));
}

/* A free pooled buffer for count floats: the first free one large enough, else the
 * first free one grown, else a new one. A repeated pattern of sends finds its
 * buffers again (nothing allocated after the first round). */
static MpiSend *mpi_send_slot(MpiComm *m, int64_t count) {
  MpiSend *fit = NULL, *any = NULL;
  for (int i = 0; i < m->nsends && !fit; i++)
    if (m->sends[i].req == MPI_REQUEST_NULL) {
      fit = m->sends[i].cap >= count ? &m->sends[i] : NULL;
      any = any ? any : &m->sends[i];
    }
  if (fit) return fit;
  if (!any) {
    MpiSend *s = realloc(m->sends, (size_t)(m->nsends + 1) * sizeof *s);
    if (!s) mpi_fail(MPI_ERR_NO_MEM, "isend (pooling a send buffer)", __FILE__, __LINE__);
    m->sends = s;
    any = &m->sends[m->nsends++];
    *any = (MpiSend){NULL, 0, MPI_REQUEST_NULL};
  }
  float *buf = realloc(any->buf, (size_t)(count > 0 ? count : 1) * sizeof *buf);
  if (!buf) mpi_fail(MPI_ERR_NO_MEM, "isend (pooling a send buffer)", __FILE__, __LINE__);
  any->buf = buf, any->cap = count;
  return any;
}

/* One MPI_Isend per chunk, each from its own pooled copy; same tag, so in order. */
static void mpi_isend(Comm *c, const float *buf, int64_t count, int peer, int tag) {
  MpiComm *m = (MpiComm *)c;
  int64_t at = 0;
  do {
    int n = chunk(at, count);
    MpiSend *s = mpi_send_slot(m, n);
    memcpy(s->buf, buf + at, (size_t)n * sizeof *buf);
    MPI_CHECK(MPI_Isend(s->buf, n, MPI_FLOAT, peer, tag, m->comm, &s->req));
    at += n;
  } while (at < count);
}

static void mpi_recv_tag(Comm *c, float *buf, int64_t count, int peer, int tag) {
  int64_t at = 0;
  do {
    MPI_CHECK(MPI_Recv(buf + at, chunk(at, count), MPI_FLOAT, peer, tag, mpi_comm(c), MPI_STATUS_IGNORE));
    at += chunk(at, count);
  } while (at < count);
}

static void mpi_wait_sends(Comm *c) {
  MpiComm *m = (MpiComm *)c;
  for (int i = 0; i < m->nsends; i++) MPI_CHECK(MPI_Wait(&m->sends[i].req, MPI_STATUS_IGNORE));
}

static void mpi_barrier(Comm *c) { MPI_CHECK(MPI_Barrier(mpi_comm(c))); }

static void mpi_host_all_reduce(Comm *c, double *vals, int n, CommRed op) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE, mpi_op(op), mpi_comm(c)));
}

static void mpi_abort(Comm *c, int code) __attribute__((noreturn));
static void mpi_abort(Comm *c, int code) {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

/* comm_fatal under MPI: which rank failed, in train's own words (the launcher's report of
 * the abort is its own, and not always printed), then every rank ends. */
static void mpi_abort_world(int code) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  fprintf(stderr, "train: rank %d of %d failed; ending every rank\n", rank, size);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_destroy(Comm *c) {
  MpiComm *m = (MpiComm *)c;
  mpi_wait_sends(c);
  for (int i = 0; i < m->nsends; i++) free(m->sends[i].buf);
  free(m->sends);
  if (m->comm != MPI_COMM_WORLD) MPI_Comm_free(&m->comm);
  if (m->finalize) MPI_Finalize();
  free(m);
}

static Comm *mpi_split(Comm *c, int color, int key);

/* The Comm of group g (rank, size, the ranks of this machine), its errors returned. */
static MpiComm *mpi_wrap(MPI_Comm g) {
  MpiComm *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->comm = g;
  m->c = (Comm){.name = "mpi",
                .impl = m,
                .all_reduce = mpi_all_reduce,
                .reduce = mpi_reduce,
                .reduce_scatter = mpi_reduce_scatter,
                .all_gather = mpi_all_gather,
                .all_to_all = mpi_all_to_all,
                .broadcast = mpi_broadcast,
                .send = mpi_send,
                .recv = mpi_recv,
                .barrier = mpi_barrier,
                .split = mpi_split,
                .isend = mpi_isend,
                .recv_tag = mpi_recv_tag,
                .wait_sends = mpi_wait_sends,
                .host_all_reduce = mpi_host_all_reduce,
                .host_send = mpi_send,
                .host_recv = mpi_recv,
                .abort = mpi_abort, /* host memory */
                .destroy = mpi_destroy};
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(g, &m->c.rank));
  MPI_CHECK(MPI_Comm_size(g, &m->c.size));
  MPI_CHECK(MPI_Comm_split_type(g, MPI_COMM_TYPE_SHARED, m->c.rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &m->c.local_rank));
  MPI_CHECK(MPI_Comm_size(node, &m->c.local_size));
  MPI_CHECK(MPI_Comm_free(&node));
  return m;
}

static Comm *mpi_split(Comm *c, int color, int key) {
  MPI_Comm g;
  MPI_CHECK(MPI_Comm_split(mpi_comm(c), color, key, &g));
  MpiComm *m = mpi_wrap(g);
  if (!m) MPI_Comm_free(&g);
  return m ? &m->c : NULL;
}

/* MPI_Init_thread unless MPI is up already; errors returned, not fatal. */
static int mpi_start(int *argc, char ***argv, int *finalize, char *err, size_t errlen) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  *finalize = !inited;
  if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return file_set_error(err, errlen, "MPI_Init_thread failed");
  if (!inited && provided < MPI_THREAD_FUNNELED)
    return file_set_error(err, errlen, "MPI provides thread level %d, below FUNNELED", provided);
  return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) == MPI_SUCCESS
             ? 0
             : file_set_error(err, errlen, "MPI_Comm_set_errhandler failed");
}

Comm *comm_mpi_new(int *argc, char ***argv, char *err, size_t errlen) {
  int finalize;
  if (mpi_start(argc, argv, &finalize, err, errlen) != 0) return NULL;
  const char *chunk_env = getenv("COLOSSALC_MPI_CHUNK");
  long long n = chunk_env ? atoll(chunk_env) : 0;
  mpi_chunk = n <= 0 ? COMM_MPI_CHUNK_DEFAULT : n < COMM_MPI_CHUNK_MAX ? n : COMM_MPI_CHUNK_MAX;
  MpiComm *m = mpi_wrap(MPI_COMM_WORLD);
  if (!m) {
    file_set_error(err, errlen, "out of memory");
    if (finalize) MPI_Finalize();
    return NULL;
  }
  m->finalize = finalize;
  comm_fatal_hook = mpi_abort_world; /* comm_fatal ends every rank */
  return &m->c;
}
