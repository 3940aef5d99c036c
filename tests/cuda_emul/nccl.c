/* A host emulation of NCCL (libnccl.so.2), for tests only: the entry points
 * runtime/device/cuda_api.c opens, so that `train --device cuda` under mpirun runs its NCCL
 * communication on a machine without GPUs (tests/cuda_emul/tests.cmake).
 *
 * Device memory is host memory in this emulation (driver.c), so each call is the MPI
 * call on the buffers, made once the stream's earlier work is done (drain). A
 * communicator is an MPI communicator of its ranks, ordered by NCCL rank: the unique
 * id names the world rank of the rank that made it and a sequence number; at
 * ncclCommInitRank every other rank tells that root its world rank, the root answers
 * with all of them, and the members make the group (MPI_Comm_create_group, a
 * collective of the members only, as NCCL's initialisation is). Sends are buffered
 * (a private copy, MPI_Isend), as a send on its own stream does not hold up the
 * sender's compute on a GPU; receives block. Messages between two ranks of a
 * communicator match in the order they were sent, as NCCL's do (one MPI tag), so a
 * schedule that receives in another order gets another message: a count that differs
 * is an error here, and equal counts give the wrong data, which the equality tests
 * see. The application's own MPI traffic is on other communicators or tags below
 * EMUL_TAG. */
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cuda_emul/emul.h"

enum { EMUL_TAG = 1 << 20 }; /* the handshake's tags: EMUL_TAG + 2 * (seq mod 4096) (+1 the answer) */

typedef struct EmulId {
  char magic[8];
  int root; /* world rank */
  int seq;
} EmulId;

typedef struct Pending {
  MPI_Request req;
  void *buf;
} Pending;

struct ncclComm {
  MPI_Comm comm;
  int rank, size;
  Pending *sends; /* [nsends] buffered sends not yet known complete */
  int nsends;
};

static int next_seq;

/* Every call first lets its stream finish what was queued before it (the emulated
 * driver's streams are threads, driver.c), then makes its MPI call on the calling
 * thread, the one MPI was initialised for; so it comes after the stream's earlier
 * work and before its later work, as on a GPU. */
static void drain(cudaStream_t s) {
  static EmulSyncFn *sync;
  if (!sync) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    *(void **)&sync = lib ? dlsym(lib, "colossalc_emul_sync") : NULL;
  }
  if (sync && s) sync(s);
}

static int world_rank(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

static ncclResult_t fail(const char *what) {
  fprintf(stderr, "nccl emulation: %s\n", what);
  return ncclInternalError;
}

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  EmulId e = {"ccemul", world_rank(), next_seq++};
  memset(id, 0, sizeof *id);
  memcpy(id, &e, sizeof e);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  EmulId e;
  memcpy(&e, &id, sizeof e);
  if (memcmp(e.magic, "ccemul", 7) || rank < 0 || rank >= nranks)
    return fail("ncclCommInitRank: not an id of this emulation, or a rank out of range");
  int tag = EMUL_TAG + 2 * (e.seq % 4096), me[2] = {rank, world_rank()};
  int *worlds = calloc((size_t)nranks, sizeof *worlds);
  ncclComm_t c = calloc(1, sizeof *c);
  if (!worlds || !c) return ncclSystemError;
  if (rank == 0) {
    worlds[0] = me[1];
    for (int i = 1; i < nranks; i++) {
      int got[2];
      MPI_Recv(got, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (got[0] <= 0 || got[0] >= nranks) return fail("ncclCommInitRank: a rank out of range joined");
      worlds[got[0]] = got[1];
    }
    for (int i = 1; i < nranks; i++) MPI_Send(worlds, nranks, MPI_INT, worlds[i], tag + 1, MPI_COMM_WORLD);
  } else {
    MPI_Send(me, 2, MPI_INT, e.root, tag, MPI_COMM_WORLD);
    MPI_Recv(worlds, nranks, MPI_INT, e.root, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group all, group;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  MPI_Group_incl(all, nranks, worlds, &group);
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&all);
  free(worlds);
  if (rc != MPI_SUCCESS) return fail("MPI_Comm_create_group failed");
  c->rank = rank, c->size = nranks;
  *out = c;
  return ncclSuccess;
}

/* Completed buffered sends are freed; with all, every one is waited for. */
static void reap(ncclComm_t c, int all) {
  int k = 0;
  for (int i = 0; i < c->nsends; i++) {
    int done = 0;
    if (all) MPI_Wait(&c->sends[i].req, MPI_STATUS_IGNORE), done = 1;
    else MPI_Test(&c->sends[i].req, &done, MPI_STATUS_IGNORE);
    if (done) free(c->sends[i].buf);
    else c->sends[k++] = c->sends[i];
  }
  c->nsends = k;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  reap(c, 1);
  free(c->sends);
  MPI_Comm_free(&c->comm);
  free(c);
  return ncclSuccess;
}

static int mpi_type(ncclDataType_t t, MPI_Datatype *m) {
  *m = t == ncclFloat32 ? MPI_FLOAT : t == ncclFloat64 ? MPI_DOUBLE : t == ncclInt32 ? MPI_INT : MPI_DATATYPE_NULL;
  return *m == MPI_DATATYPE_NULL ? -1 : 0;
}

static size_t type_size(ncclDataType_t t) { return t == ncclFloat64 ? 8 : 4; }

static int mpi_op(ncclRedOp_t op, MPI_Op *m) {
  *m = op == ncclSum ? MPI_SUM : op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : MPI_OP_NULL;
  return *m == MPI_OP_NULL ? -1 : 0;
}

#define ARGS(t, op)                                                                           \
  MPI_Datatype dt;                                                                            \
  MPI_Op mop = MPI_SUM;                                                                       \
  if (mpi_type((t), &dt) != 0 || ((op) >= 0 && mpi_op((op), &mop) != 0) || count > INT32_MAX) \
    return fail("a type, operation or count this emulation does not take");                   \
  reap(c, 0)

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  drain(s);
  ARGS(t, op);
  return MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, dt, mop, c->comm) == MPI_SUCCESS
             ? ncclSuccess
             : fail("MPI_Allreduce");
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
  drain(s);
  ARGS(t, op);
  const void *in = send == recv && c->rank == root ? MPI_IN_PLACE : send;
  return MPI_Reduce(in, recv, (int)count, dt, mop, root, c->comm) == MPI_SUCCESS ? ncclSuccess : fail("MPI_Reduce");
}

/* In place (recv inside send) the input is copied first: MPI lays its in-place forms
 * out differently. */
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s) {
  drain(s);
  ARGS(t, op);
  size_t bytes = count * type_size(t) * (size_t)c->size;
  void *in = malloc(bytes ? bytes : 1);
  if (!in) return ncclSystemError;
  memcpy(in, send, bytes);
  int rc = MPI_Reduce_scatter_block(in, recv, (int)count, dt, mop, c->comm);
  free(in);
  return rc == MPI_SUCCESS ? ncclSuccess : fail("MPI_Reduce_scatter_block");
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  drain(s);
  ARGS(t, -1);
  size_t bytes = count * type_size(t);
  void *in = malloc(bytes ? bytes : 1);
  if (!in) return ncclSystemError;
  memcpy(in, send, bytes);
  int rc = MPI_Allgather(in, (int)count, dt, recv, (int)count, dt, c->comm);
  free(in);
  return rc == MPI_SUCCESS ? ncclSuccess : fail("MPI_Allgather");
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
  drain(s);
  ARGS(t, -1);
  if (c->rank == root && send != recv) memmove(recv, send, count * type_size(t));
  return MPI_Bcast(recv, (int)count, dt, root, c->comm) == MPI_SUCCESS ? ncclSuccess : fail("MPI_Bcast");
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  drain(s);
  ARGS(t, -1);
  size_t bytes = count * type_size(t);
  Pending *v = realloc(c->sends, (size_t)(c->nsends + 1) * sizeof *v);
  void *copy = malloc(bytes ? bytes : 1);
  if (!v || !copy) return ncclSystemError;
  c->sends = v;
  memcpy(copy, buf, bytes);
  Pending *p = &c->sends[c->nsends++];
  p->buf = copy;
  return MPI_Isend(copy, (int)count, dt, peer, 0, c->comm, &p->req) == MPI_SUCCESS ? ncclSuccess : fail("MPI_Isend");
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  drain(s);
  ARGS(t, -1);
  MPI_Status st;
  int got = -1;
  if (MPI_Recv(buf, (int)count, dt, peer, 0, c->comm, &st) != MPI_SUCCESS)
    return fail("MPI_Recv: a message of another size came first (received out of the order sent)");
  MPI_Get_count(&st, dt, &got);
  if (got != (int)count) return fail("ncclRecv: a message of another size came first (received out of the order sent)");
  return ncclSuccess;
}
